// metrics.cpp — counters, histograms and their Prometheus text (metrics.h).
#include "server/metrics.h"

#include <cstdio>

namespace lacuna::server {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void line(std::string& out, const std::string& name, const std::string& type,
          const std::string& help, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + " " + num(value) + "\n";
}

std::vector<double> latency_bounds() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::print(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft(latency_bounds()), per_token(latency_bounds()), queue_wait(latency_bounds()) {}

void Metrics::count_response(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[status];
}

std::string Metrics::prometheus() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out += "# HELP lacuna_requests_total HTTP responses by status\n";
    out += "# TYPE lacuna_requests_total counter\n";
    for (const auto& [status, n] : responses_) {
      out += "lacuna_requests_total{status=\"" + std::to_string(status) + "\"} " +
             std::to_string(n) + "\n";
    }
  }
  const double prompt = static_cast<double>(prompt_tokens.load());
  const double cached = static_cast<double>(cached_tokens.load());
  line(out, "lacuna_prompt_tokens_total", "counter", "prompt tokens of finished requests", prompt);
  line(out, "lacuna_cached_tokens_total", "counter", "prompt tokens whose KV was reused", cached);
  line(out, "lacuna_completion_tokens_total", "counter", "generated tokens",
       static_cast<double>(completion_tokens.load()));
  line(out, "lacuna_forward_passes_total", "counter", "llama_decode calls after the prompts",
       static_cast<double>(forward_passes.load()));
  line(out, "lacuna_cancelled_total", "counter", "requests cancelled by their client",
       static_cast<double>(cancelled.load()));
  line(out, "lacuna_steps_total", "counter", "scheduler steps (one shared batch each)",
       static_cast<double>(steps.load()));
  line(out, "lacuna_prefix_cache_hit_ratio", "gauge", "cached / prompt tokens so far",
       prompt > 0 ? cached / prompt : 0.0);
  line(out, "lacuna_queue_depth", "gauge", "requests waiting for a slot",
       static_cast<double>(queue_depth.load()));
  line(out, "lacuna_running", "gauge", "requests holding a slot",
       static_cast<double>(running.load()));
  line(out, "lacuna_kv_cells_used", "gauge", "KV cells held by branches",
       static_cast<double>(kv_cells_used.load()));
  line(out, "lacuna_kv_cells_total", "gauge", "KV cells of the context",
       static_cast<double>(kv_cells_total.load()));
  ttft.print(out, "lacuna_time_to_first_token_seconds", "arrival to the first generated text");
  per_token.print(out, "lacuna_time_per_output_token_seconds",
                  "mean seconds per generated token after the first, per request");
  queue_wait.print(out, "lacuna_queue_wait_seconds", "arrival to admission into a slot");
  return out;
}

}  // namespace lacuna::server
