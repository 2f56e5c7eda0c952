// test_kv_prefix_cache.cpp — the in-memory prefix cache on a real context: longest-prefix
// lookup, LRU eviction of unpinned leaves under the token budget, holder reuse, and errors.
#include <gtest/gtest.h>

#include "kv_test_util.h"

using lacuna::Token;
using namespace lacuna::kv;

namespace {

class KvPrefixCache : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = std::make_unique<lacuna::Model>(kvtest::load("tiny-spm"));
    ctx_ = std::make_unique<lacuna::Context>(kvtest::make_ctx(*model_, 1024, 6));
    nv_ = kvtest::n_vocab(ctx_->get());
  }
  std::unique_ptr<lacuna::Model> model_;
  std::unique_ptr<lacuna::Context> ctx_;
  int32_t nv_ = 0;
};

TEST_F(KvPrefixCache, LookupVerifiesAndCapsTheMatch) {
  KvConfig cfg;
  cfg.block_size = 16;
  PrefixCache cache(ctx_->get(), {4, 5}, 16, 512);
  Session s(ctx_->get(), 0, cfg, &cache);
  const auto p = kvtest::random_tokens(70, 1, nv_);
  s.prefill(p);
  EXPECT_EQ(cache.n_nodes(), 4u);  // 70 tokens = 4 full blocks
  EXPECT_EQ(cache.cached_tokens(), 64u);
  auto m = cache.lookup(p, 1000);
  EXPECT_EQ(m.n_tokens, 64u);
  EXPECT_EQ(cache.lookup(p, 63).n_tokens, 48u) << "capped to whole blocks under the limit";
  auto q = p;
  q[40] = q[40] == 500 ? 501 : 500;  // differs in block 2
  EXPECT_EQ(cache.lookup(q, 1000).n_tokens, 32u);
  // The holder really holds those positions.
  llama_memory_t mem = llama_get_memory(ctx_->get());
  EXPECT_EQ(llama_memory_seq_pos_max(mem, m.holder), 63);
  EXPECT_GT(cache.index_bytes(), 0u);
}

TEST_F(KvPrefixCache, EvictsLeastRecentlyUsedUnpinnedLeaves) {
  KvConfig cfg;
  cfg.block_size = 16;
  PrefixCache cache(ctx_->get(), {3, 4, 5}, 16, 96);  // room for 6 blocks
  Session s(ctx_->get(), 0, cfg, &cache);
  const auto a = kvtest::random_tokens(64, 1, nv_);
  const auto b = kvtest::random_tokens(64, 2, nv_);
  const auto c = kvtest::random_tokens(64, 3, nv_);
  s.prefill(a);  // 4 blocks
  s.prefill(b);  // 4 more: over budget, a's oldest leaves go (a is unpinned now)
  EXPECT_LE(cache.cached_tokens(), 96u);
  EXPECT_EQ(cache.lookup(b, 1000).n_tokens, 64u);
  EXPECT_LT(cache.lookup(a, 1000).n_tokens, 64u);
  // b is pinned by the session: a new prompt cannot evict it below b's path.
  s.reset();
  Session t(ctx_->get(), 1, cfg, &cache);
  t.prefill(b);  // pins b (memory hit)
  Session u(ctx_->get(), 2, cfg, &cache);
  u.prefill(c);
  EXPECT_EQ(cache.lookup(b, 1000).n_tokens, 64u) << "pinned path survives";
  EXPECT_LE(cache.cached_tokens(), 96u);
  cache.clear();
  EXPECT_EQ(cache.lookup(b, 1000).n_tokens, 64u) << "clear() keeps pinned paths";
  t.reset();
  u.reset();
  cache.clear();
  EXPECT_EQ(cache.n_nodes(), 0u);
  llama_memory_t mem = llama_get_memory(ctx_->get());
  for (SeqId h : {3, 4, 5}) EXPECT_EQ(llama_memory_seq_pos_max(mem, h), -1) << h;
}

TEST_F(KvPrefixCache, BranchesShareTheirCommonPath) {
  KvConfig cfg;
  cfg.block_size = 16;
  PrefixCache cache(ctx_->get(), {3, 4, 5}, 16, 512);
  Session s(ctx_->get(), 0, cfg, &cache);
  const auto sys = kvtest::random_tokens(48, 1, nv_);
  auto a = sys, b = sys;
  const auto qa = kvtest::random_tokens(40, 2, nv_), qb = kvtest::random_tokens(40, 3, nv_);
  a.insert(a.end(), qa.begin(), qa.end());
  b.insert(b.end(), qb.begin(), qb.end());
  s.prefill(a);
  const auto r = s.prefill(b);
  EXPECT_EQ(r.n_reused, 48u);
  EXPECT_EQ(cache.n_nodes(), 3u + 2u + 2u) << "the shared 3 blocks are stored once";
  EXPECT_EQ(cache.lookup(a, 1000).n_tokens, 80u);
  EXPECT_EQ(cache.lookup(b, 1000).n_tokens, 80u);
}

TEST_F(KvPrefixCache, BadArgumentsAreClearErrors) {
  EXPECT_THROW(PrefixCache(ctx_->get(), {}, 16, 10), KvError);
  EXPECT_THROW(PrefixCache(ctx_->get(), {9}, 16, 10), KvError);
  EXPECT_THROW(PrefixCache(ctx_->get(), {2, 2}, 16, 10), KvError);
  EXPECT_THROW(PrefixCache(ctx_->get(), {2}, 0, 10), KvError);
  EXPECT_THROW(PrefixCache(nullptr, {2}, 16, 10), KvError);
  PrefixCache cache(ctx_->get(), {5}, 16, 512);
  KvConfig cfg;
  cfg.block_size = 16;
  EXPECT_THROW(Session(ctx_->get(), 5, cfg, &cache), KvError) << "a holder is not a session";
  EXPECT_THROW(Session(ctx_->get(), 6, cfg, &cache), KvError);
  EXPECT_THROW(cache.pin(12345), KvError);
  Session s(ctx_->get(), 0, cfg, &cache);
  EXPECT_THROW(s.prefill({}), std::invalid_argument);
  EXPECT_THROW(s.prefill(std::vector<Token>{1, -3}), std::invalid_argument);
  EXPECT_THROW(s.prefill(std::vector<Token>{1, nv_}), std::invalid_argument);
  EXPECT_THROW(s.prefill(std::vector<Token>(2000, 5)), KvError);
  // A non-unified context cannot share cells.
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_seq_max = 2;
  cp.n_threads = 1;
  cp.kv_unified = false;
  auto ctx2 = lacuna::Context::create(*model_, cp);
  EXPECT_THROW(PrefixCache(ctx2.get(), {1}, 16, 10), KvError);
}

}  // namespace
