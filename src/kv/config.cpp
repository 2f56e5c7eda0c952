// config.cpp — KvConfig from LACUNA_* environment variables, KvStats arithmetic and JSON.
#include <cerrno>
#include <cstdlib>
#include <string>

#include "lacuna/kv.h"

namespace lacuna::kv {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool parse_bool(const char* name, const std::string& v) {
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  throw KvError(std::string(name) + "='" + v + "': expected 0/1, on/off, true/false or yes/no");
}

uint64_t parse_u64(const char* name, const std::string& v) {
  if (v.empty() || v[0] == '-' || v[0] == '+') {
    throw KvError(std::string(name) + "='" + v + "': expected a non-negative integer");
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') {
    throw KvError(std::string(name) + "='" + v + "': expected a non-negative integer");
  }
  return x;
}

}  // namespace

KvConfig KvConfig::from_env(KvConfig c) {
  if (const char* v = env("LACUNA_PREFIX_CACHE"))
    c.prefix_cache = parse_bool("LACUNA_PREFIX_CACHE", v);
  if (const char* v = env("LACUNA_KV_BLOCK")) {
    const uint64_t b = parse_u64("LACUNA_KV_BLOCK", v);
    if (b == 0 || b > 65536)
      throw KvError("LACUNA_KV_BLOCK='" + std::string(v) + "': must be 1..65536");
    c.block_size = static_cast<uint32_t>(b);
  }
  if (const char* v = env("LACUNA_PREFIX_CACHE_TOKENS")) {
    c.max_cached_tokens = parse_u64("LACUNA_PREFIX_CACHE_TOKENS", v);
  }
  if (const char* v = env("LACUNA_PERSIST_DIR")) c.persist_dir = v;
  if (const char* v = env("LACUNA_PERSIST_MAX_BYTES")) {
    c.persist_max_bytes = parse_u64("LACUNA_PERSIST_MAX_BYTES", v);
  }
  if (const char* v = env("LACUNA_PERSIST_MAX_AGE")) {
    const uint64_t a = parse_u64("LACUNA_PERSIST_MAX_AGE", v);
    if (a > (1ull << 40))
      throw KvError("LACUNA_PERSIST_MAX_AGE='" + std::string(v) + "': too large");
    c.persist_max_age_s = static_cast<int64_t>(a);
  }
  if (const char* v = env("LACUNA_EDIT_REUSE")) c.edit_reuse = parse_bool("LACUNA_EDIT_REUSE", v);
  c.validate();
  return c;
}

void KvConfig::validate() const {
  if (block_size == 0 || block_size > 65536) {
    throw KvError("KvConfig: block_size " + std::to_string(block_size) + " is not in 1..65536");
  }
  if (persist_max_age_s < 0) throw KvError("KvConfig: persist_max_age_s must be >= 0");
  if (edit_min_span == 0) throw KvError("KvConfig: edit_min_span must be >= 1");
}

KvStats& KvStats::operator+=(const KvStats& o) {
  prefills += o.prefills;
  blocks_hit += o.blocks_hit;
  blocks_missed += o.blocks_missed;
  tokens_reused += o.tokens_reused;
  tokens_reused_own += o.tokens_reused_own;
  tokens_reused_memory += o.tokens_reused_memory;
  tokens_reused_disk += o.tokens_reused_disk;
  tokens_reused_edit += o.tokens_reused_edit;
  tokens_recomputed += o.tokens_recomputed;
  bytes_saved += o.bytes_saved;
  bytes_loaded += o.bytes_loaded;
  bytes_written += o.bytes_written;
  disk_rejected += o.disk_rejected;
  return *this;
}

std::string KvStats::to_json() const {
  std::string s = "{";
  auto add = [&s](const char* k, uint64_t v) {
    if (s.size() > 1) s += ",";
    s += "\"";
    s += k;
    s += "\":";
    s += std::to_string(v);
  };
  add("prefills", prefills);
  add("blocks_hit", blocks_hit);
  add("blocks_missed", blocks_missed);
  add("tokens_reused", tokens_reused);
  add("tokens_reused_own", tokens_reused_own);
  add("tokens_reused_memory", tokens_reused_memory);
  add("tokens_reused_disk", tokens_reused_disk);
  add("tokens_reused_edit", tokens_reused_edit);
  add("tokens_recomputed", tokens_recomputed);
  add("bytes_saved", bytes_saved);
  add("bytes_loaded", bytes_loaded);
  add("bytes_written", bytes_written);
  add("disk_rejected", disk_rejected);
  return s + "}";
}

}  // namespace lacuna::kv
