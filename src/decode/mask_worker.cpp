// mask_worker.cpp — the generator's background mask thread: one job at a time, submit/wait.
#include "decode/mask_worker.h"

namespace lacuna::decode {

MaskWorker::MaskWorker() : thread_([this] { loop(); }) {}

MaskWorker::~MaskWorker() {
  {
    std::unique_lock<std::mutex> l(m_);
    done_cv_.wait(l, [this] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::submit(Job job, void* arg) {
  {
    std::lock_guard<std::mutex> l(m_);
    job_ = job;
    arg_ = arg;
    busy_ = true;
  }
  cv_.notify_one();
}

void MaskWorker::wait() {
  std::unique_lock<std::mutex> l(m_);
  done_cv_.wait(l, [this] { return !busy_; });
}

void MaskWorker::loop() {
  std::unique_lock<std::mutex> l(m_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || job_ != nullptr; });
    if (job_ == nullptr) return;  // stop_
    const Job job = job_;
    void* arg = arg_;
    job_ = nullptr;
    l.unlock();
    job(arg);
    l.lock();
    busy_ = false;
    done_cv_.notify_all();
  }
}

}  // namespace lacuna::decode
