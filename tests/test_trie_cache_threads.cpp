// test_trie_cache_threads.cpp — many threads share one TrieCache (hits, misses, evictions at
// once) and walk constraints over the shared tries; CI runs this under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "lacuna/token_trie.h"

namespace lacuna {
namespace {

constexpr size_t kVocab = 5000;
constexpr Token kEnd = 4999;

// "p<i>" and "p<i>_<k>", built by appending (g++ 12 -O3 warns falsely on "p" + std::string).
std::string path_name(int i) {
  std::string s("p");
  s.append(std::to_string(i));
  return s;
}
std::string leaf_name(int i, int k) {
  std::string s = path_name(i);
  s.push_back('_');
  s.append(std::to_string(k));
  return s;
}

// Payload i: 20 leaves "p<i>_<k>" with token sequences derived from i and k.
std::string payload(int i) {
  nlohmann::json leaves = nlohmann::json::array();
  for (int k = 0; k < 20; ++k) {
    leaves.push_back(
        {{"name", leaf_name(i, k)}, {"tokens", {i % 100, 100 + k, 200 + (i * 7 + k) % 50}}});
  }
  nlohmann::json j = {{"modelId", "threads"},
                      {"descriptors", {{{"path", path_name(i)}, {"leaves", leaves}}}}};
  return j.dump();
}

TEST(TrieCacheThreads, ConcurrentGetsEvictionsAndWalks) {
  constexpr int kPayloads = 48;
  constexpr int kThreads = 6;
  constexpr int kIters = 400;
  std::vector<std::string> payloads;
  for (int i = 0; i < kPayloads; ++i) payloads.push_back(payload(i));

  TrieCache cache(16);  // smaller than the working set: evictions race with hits
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      std::vector<uint32_t> words(bitmask_words(kVocab));
      for (int it = 0; it < kIters; ++it) {
        // Skewed choice: a hot set and a long tail.
        const int i =
            (rng() % 4 == 0) ? static_cast<int>(rng() % kPayloads) : static_cast<int>(rng() % 8);
        auto set = cache.get(payloads[static_cast<size_t>(i)], kVocab);
        const auto& trie = *set->tries.at(0);
        if (trie.path() != path_name(i) || trie.n_leaves() != 20) {
          ++failures;
          continue;
        }
        // Walk one leaf to its end on a private cursor over the shared trie.
        const int k = static_cast<int>(rng() % 20);
        TokenTrieConstraint c(set, TrieOptions{{kEnd}, 500, {}});
        const Token seq[3] = {i % 100, 100 + k, 200 + (i * 7 + k) % 50};
        for (Token tok : seq) {
          c.fill_next_token_bitmask(words.data());
          if (!bitmask_test(words.data(), tok) || !c.accept_token(tok)) ++failures;
        }
        if (!c.accept_token(kEnd) || c.chosen_leaf() == nullptr ||
            *c.chosen_leaf() != leaf_name(i, k)) {
          ++failures;
        }
        if (it % 50 == 0) (void)cache.stats();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const auto s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, static_cast<uint64_t>(kThreads * kIters));
  EXPECT_LE(s.entries, 16u);
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.evictions, 0u);
}

TEST(TrieCacheThreads, SamePayloadFromManyThreadsConvergesOnOneEntry) {
  TrieCache cache;
  const std::string json = payload(3);
  std::vector<std::shared_ptr<const TrieSet>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) got[t] = cache.get(json, kVocab);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.stats().entries, 1u);
  // Once the entry exists everyone gets the same set.
  auto final_set = cache.get(json, kVocab);
  for (const auto& g : got) EXPECT_EQ(g.get(), final_set.get());
  EXPECT_EQ(cache.get(json, kVocab).get(), final_set.get());
}

}  // namespace
}  // namespace lacuna
