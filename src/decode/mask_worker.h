// mask_worker.h — one background thread that runs one job at a time: the generator computes
// the next position's constraint mask on it while llama_decode runs (DecodeOptions::
// overlap_mask, docs/backend_sampling.md, "The mask off the critical path").
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace lacuna::decode {

class MaskWorker {
 public:
  using Job = void (*)(void* arg);

  MaskWorker();
  ~MaskWorker();  // waits for a running job
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Starts `job(arg)` on the thread. The previous job must have been waited for.
  void submit(Job job, void* arg);
  // Blocks until the submitted job has finished (returns at once when none is running).
  // Everything the job wrote is visible to the caller afterwards.
  void wait();

 private:
  void loop();

  std::mutex m_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  Job job_ = nullptr;
  void* arg_ = nullptr;
  bool busy_ = false;  // submitted and not finished
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace lacuna::decode
