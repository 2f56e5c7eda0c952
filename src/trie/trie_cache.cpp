// trie_cache.cpp — the thread-safe LRU cache of built trie sets, keyed by payload hash.
#include <xxhash.h>

#include "lacuna/token_trie.h"

namespace lacuna {
namespace {

// The hit path is this hash and one byte comparison, nothing parsed: XXH3 runs at memory
// speed (std::hash<string_view> was most of a hit's time on a 3,000-leaf payload); a
// matching hash is confirmed by comparing the stored payload's bytes.
uint64_t payload_key(std::string_view json, size_t n_vocab) {
  return XXH3_64bits_withSeed(json.data(), json.size(), static_cast<uint64_t>(n_vocab));
}

}  // namespace

TrieCache::TrieCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

TrieCache& TrieCache::global() {
  static TrieCache cache;
  return cache;
}

std::shared_ptr<const TrieSet> TrieCache::get(std::string_view json, size_t n_vocab,
                                              const TriePayloadLimits& limits) {
  if (json.size() > limits.max_payload_bytes) {
    throw TrieError(TrieErrc::kTooLarge, "payload is " + std::to_string(json.size()) +
                                             " bytes, over the limit of " +
                                             std::to_string(limits.max_payload_bytes));
  }
  const uint64_t key = payload_key(json, n_vocab);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [lo, hi] = index_.equal_range(key);
    for (auto it = lo; it != hi; ++it) {
      const Entry& e = *it->second;
      if (e.n_vocab == n_vocab && e.payload == json) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++stats_.hits;
        return e.set;
      }
    }
    ++stats_.misses;
    ++stats_.parses;
  }

  // Build outside the lock: other threads keep hitting the cache meanwhile. Two threads
  // missing on the same payload both build; the second insert finds the first and uses it.
  std::shared_ptr<const TrieSet> built = build_trie_set(json, n_vocab, limits);

  std::lock_guard<std::mutex> lock(mutex_);
  auto [lo, hi] = index_.equal_range(key);
  for (auto it = lo; it != hi; ++it) {
    const Entry& e = *it->second;
    if (e.n_vocab == n_vocab && e.payload == json) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return e.set;
    }
  }
  lru_.push_front(Entry{std::string(json), n_vocab, built});
  index_.emplace(key, lru_.begin());
  while (lru_.size() > capacity_) {
    auto victim = std::prev(lru_.end());
    const uint64_t vkey = payload_key(victim->payload, victim->n_vocab);
    auto [vlo, vhi] = index_.equal_range(vkey);
    for (auto it = vlo; it != vhi; ++it) {
      if (it->second == victim) {
        index_.erase(it);
        break;
      }
    }
    lru_.erase(victim);
    ++stats_.evictions;
  }
  return built;
}

TrieCache::Stats TrieCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.entries = lru_.size();
  return s;
}

void TrieCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  lru_.clear();
}

}  // namespace lacuna
