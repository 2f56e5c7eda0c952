// options.cpp — decode options from CMake defaults and the environment, stop reason names,
// and the stats' JSON rendering.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "lacuna/generator.h"

#ifndef LACUNA_DECODE_SKIP_DEFAULT
#define LACUNA_DECODE_SKIP_DEFAULT 1
#endif
#ifndef LACUNA_DECODE_VERIFY_DEFAULT
#define LACUNA_DECODE_VERIFY_DEFAULT 1
#endif
#ifndef LACUNA_DECODE_JUMP_DEFAULT
#define LACUNA_DECODE_JUMP_DEFAULT 0
#endif

namespace lacuna {

namespace {

// Reads a 0/1 switch; absent or empty leaves `value` as it is.
void read_switch(const char* name, bool& value) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || raw[0] == '\0') return;
  std::string v = raw;
  if (v == "1" || v == "on" || v == "true") {
    value = true;
  } else if (v == "0" || v == "off" || v == "false") {
    value = false;
  } else {
    throw std::invalid_argument(std::string(name) + "='" + v + "': expected 0 or 1");
  }
}

void read_count(const char* name, size_t& value, size_t lo, size_t hi) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || raw[0] == '\0') return;
  std::string v = raw;
  size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v[0] == '-' || n < lo || n > hi) {
    throw std::invalid_argument(std::string(name) + "='" + v + "': expected an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  value = static_cast<size_t>(n);
}

}  // namespace

DecodeOptions decode_options_from_env() {
  DecodeOptions base;
  base.skip_forced = LACUNA_DECODE_SKIP_DEFAULT != 0;
  base.verify_strings = LACUNA_DECODE_VERIFY_DEFAULT != 0;
  base.jump_forward = LACUNA_DECODE_JUMP_DEFAULT != 0;
  return decode_options_from_env(base);
}

DecodeOptions decode_options_from_env(DecodeOptions base) {
  read_switch("LACUNA_SKIP", base.skip_forced);
  read_switch("LACUNA_VERIFY", base.verify_strings);
  read_switch("LACUNA_JUMP", base.jump_forward);
  read_count("LACUNA_MAX_DRAFT", base.max_draft, 0, 4096);
  read_switch("LACUNA_MEASURE_COST", base.measure_cost);
  read_switch("LACUNA_SPLIT", base.split_pending);
  read_switch("LACUNA_BACKEND_SAMPLING", base.backend_sampling);
  read_switch("LACUNA_OVERLAP_MASK", base.overlap_mask);
  if (const char* raw = std::getenv("LACUNA_DRAFT"); raw != nullptr && raw[0] != '\0') {
    const std::string v = raw;
    if (v == "adaptive") {
      base.draft_policy = DraftPolicy::adaptive;
    } else if (v == "always") {
      base.draft_policy = DraftPolicy::always;
    } else {
      throw std::invalid_argument("LACUNA_DRAFT='" + v + "': expected adaptive or always");
    }
  }
  return base;
}

bool stats_enabled_from_env() {
  bool on = false;
  read_switch("LACUNA_STATS", on);
  return on;
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::none:
      return "none";
    case StopReason::eog:
      return "eog";
    case StopReason::constraint_completed:
      return "constraint_completed";
    case StopReason::constraint_dead_end:
      return "constraint_dead_end";
    case StopReason::max_tokens:
      return "max_tokens";
    case StopReason::stop_string:
      return "stop_string";
    case StopReason::context_full:
      return "context_full";
  }
  return "unknown";
}

double GenerationStats::tokens_per_pass() const {
  return forward_passes == 0
             ? 0.0
             : static_cast<double>(tokens_emitted) / static_cast<double>(forward_passes);
}

std::string GenerationStats::to_json() const {
  char buf[768];
  std::snprintf(
      buf, sizeof(buf),
      "{\"prompt_tokens\":%zu,\"tokens_emitted\":%zu,\"forward_passes\":%zu,"
      "\"tokens_skipped\":%zu,\"tokens_batch_filled\":%zu,\"tokens_filled_alone\":%zu,"
      "\"draft_proposed\":%zu,"
      "\"draft_accepted\":%zu,\"draft_declined\":%zu,\"jump_tokens\":%zu,\"tokens_per_pass\":%.4f,"
      "\"prefill_ms\":%.3f,\"decode_ms\":%.3f,\"mask_ms\":%.3f,\"sample_ms\":%.3f,"
      "\"mask_overlapped_ms\":%.3f,"
      "\"total_ms\":%.3f,\"stop\":\"%s\"}",
      prompt_tokens, tokens_emitted, forward_passes, tokens_skipped, tokens_batch_filled,
      tokens_filled_alone, draft_proposed, draft_accepted, draft_declined, jump_tokens,
      tokens_per_pass(), prefill_ms, decode_ms, mask_ms, sample_ms, mask_overlapped_ms, total_ms,
      stop_reason_name(stop));
  return buf;
}

}  // namespace lacuna
