// scheduler.h — the one thread that owns the runtime::Context: a bounded queue of Jobs,
// continuous batching over BranchStore (jobs join and leave between steps, prefill chunks
// interleaved with decode steps), text deltas handed back to each Job's HTTP thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "lacuna/generator.h"
#include "lacuna/kv.h"
#include "lacuna/runtime.h"
#include "server/metrics.h"

namespace lacuna::server {

using Clock = std::chrono::steady_clock;

// What a finished generation reports.
struct JobResult {
  StopReason stop = StopReason::none;
  GenerationStats stats;
  size_t prompt_tokens = 0;
  size_t cached_tokens = 0;  // prompt tokens not decoded (KV from the prefix cache or disk)
  size_t completion_tokens = 0;
  double queue_ms = 0;     // arrival to admission
  double prefill_ms = 0;   // admission to the prompt's logits (chunks and others' steps included)
  double ttft_ms = 0;      // arrival to the first generated text
  double generate_ms = 0;  // first token to the last
};

// One request on its way through the scheduler. The HTTP thread fills the inputs, submits
// it, then waits for updates; the scheduler thread writes the outputs. Shared by both.
class Job {
 public:
  // Inputs (set before submit, then read by the scheduler only).
  std::vector<Token> prompt;
  runtime::BranchParams params;
  std::unique_ptr<Constraint> constraint;
  bool keep = true;  // may take over a kept branch, and be kept (SchedulerOptions::retain)
  Clock::time_point arrival = Clock::now();

  // Either thread: the client is gone or the server stops. Seen at the next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Scheduler side.
  // New text, and the log-probabilities of the tokens that made it (when asked for).
  void push_text(std::string_view text, std::span<const TokenLogprob> logprobs = {});
  void finish(const JobResult& result);
  void fail(int status, const std::string& message);

  // HTTP side: waits up to `timeout` for news; moves new text into `text` (appended) and
  // returns true once the job has ended (then `result` or `error` is final).
  struct Update {
    std::string text;
    std::vector<TokenLogprob> logprobs;  // appended like text (params.logprobs >= 0)
    bool ended = false;
    bool failed = false;
    int error_status = 0;
    std::string error;
    JobResult result;
  };
  void wait(Update& update, std::chrono::milliseconds timeout);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  std::vector<TokenLogprob> pending_logprobs_;
  bool ended_ = false;
  bool failed_ = false;
  int error_status_ = 0;
  std::string error_;
  JobResult result_;
};

struct SchedulerOptions {
  size_t parallel = 4;         // branches decoding at once (slots)
  size_t queue = 64;           // jobs waiting for a slot
  size_t prefill_chunk = 512;  // new prompt tokens decoded per loop iteration
  // With a persistent store: a finished request whose prompt has at least this many tokens,
  // not all read from disk, writes its KV there (a restart then reuses it). 0: never.
  size_t persist_min_prompt = 256;
  // A finished request's branch (prompt and answer, token for token) stays in its slot until
  // the slot is needed: the next request sharing a prefix with it (an agent's next turn, the
  // same system prompt) takes it over and decodes only what differs, below the prefix
  // cache's block granularity and including the answer. Kept only while the context has
  // more than `retain_headroom` of its cells free.
  bool retain = true;
  double retain_headroom = 0.25;
};

// What a slot is doing (GET /slots).
struct SlotInfo {
  size_t id = 0;
  bool busy = false;
  uint64_t job = 0;
  size_t prompt_tokens = 0;
  size_t prefilled = 0;
  size_t generated = 0;
};

class Scheduler {
 public:
  // `ctx` must outlive the scheduler; from start() to stop() only the scheduler thread uses
  // it. Its n_branches must be at least options.parallel.
  Scheduler(runtime::Context& ctx, SchedulerOptions options, Metrics& metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void start();
  // Ends the loop: queued and running jobs fail with 503 ("the server is shutting down"),
  // then the thread is joined. Idempotent.
  void stop();

  enum class Submit { ok, queue_full, stopping };
  Submit submit(const std::shared_ptr<Job>& job);

  std::vector<SlotInfo> slots() const;
  size_t queue_depth() const;

 private:
  struct Active {
    std::shared_ptr<Job> job;
    runtime::Branch branch;
    size_t slot = 0;
    uint64_t id = 0;
    size_t prefilled = 0;      // prompt tokens the branch holds
    size_t logprobs_sent = 0;  // the generator's log-probability records pushed so far
    bool running = false;      // the prompt is in, generating
    kv::KvStats kv_before;
    Clock::time_point admitted;
    Clock::time_point first_text;
    bool got_text = false;
  };
  void loop();
  void admit();
  void drop_cancelled();
  void prefill_chunk();
  void step();
  void end(Active& a, bool ok, int status = 0, const std::string& error = {});
  void publish_slots();
  // The slot for a new job: free, and of those the one whose kept branch shares the longest
  // prefix with the prompt (then one without a kept branch, then the least recently kept).
  size_t choose_slot(const Job& job, size_t* shared);
  // The slot of the least recently kept branch; kept_.size() when none is kept.
  size_t oldest_kept() const;
  // Prunes kept branches, least recently kept first, until the context has the headroom
  // (all of them when `all`).
  void drop_kept(bool all);

  runtime::Context& ctx_;
  SchedulerOptions options_;
  Metrics& metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::vector<SlotInfo> slots_;  // published copy for readers

  // Scheduler thread only.
  std::vector<Active> active_;
  std::vector<bool> slot_busy_;
  struct Kept {
    runtime::Branch branch;  // invalid: none
    uint64_t tick = 0;       // when it was kept
  };
  std::vector<Kept> kept_;  // per slot
  uint64_t tick_ = 0;
  uint64_t next_id_ = 1;
  std::thread thread_;
};

}  // namespace lacuna::server
