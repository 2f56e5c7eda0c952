// metrics.h — the server's counters, gauges and latency histograms, written by the HTTP and
// scheduler threads, read as Prometheus text (GET /metrics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lacuna::server {

// A histogram over fixed upper bounds (seconds), Prometheus' cumulative form when printed.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends NAME_bucket{le=...}, NAME_sum, NAME_count lines.
  void print(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // one per bound, then +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  Metrics();
  void count_response(int status);
  std::string prometheus() const;

  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> cached_tokens{0};  // prompt tokens whose KV was reused
  std::atomic<uint64_t> completion_tokens{0};
  std::atomic<uint64_t> forward_passes{0};
  std::atomic<uint64_t> cancelled{0};
  std::atomic<uint64_t> steps{0};  // scheduler steps (BranchStore::step calls)
  std::atomic<uint64_t> queue_depth{0};
  std::atomic<uint64_t> running{0};
  std::atomic<uint64_t> kv_cells_used{0};
  std::atomic<uint64_t> kv_cells_total{0};
  Histogram ttft;       // seconds from arrival to the first generated text
  Histogram per_token;  // seconds per generated token after the first
  Histogram queue_wait;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> responses_;  // by HTTP status
};

}  // namespace lacuna::server
