// test_kv_exact.cpp — tier-1 exactness: greedy outputs with KV reuse (own prefix, in-memory
// prefix cache across sequences, disk cache across contexts) equal outputs without reuse.
#include <gtest/gtest.h>

#include "kv_test_util.h"

using lacuna::Token;
using namespace lacuna::kv;

namespace {

constexpr int kGen = 8;

class KvExact : public ::testing::TestWithParam<const char*> {};

// A multi-turn chat: each turn appends the model's answer and a new user message.
TEST_P(KvExact, AppendOnlyMultiTurnChatMatchesPlain) {
  auto model = kvtest::load(GetParam());
  auto ctx = kvtest::make_ctx(model, 1024, 4);
  KvConfig cfg;
  cfg.block_size = 16;
  PrefixCache cache(ctx.get(), {2, 3}, cfg.block_size, 1024);
  Session s(ctx.get(), 0, cfg, &cache);
  const int32_t nv = kvtest::n_vocab(ctx.get());
  std::vector<Token> history = kvtest::random_tokens(150, 1, nv);
  size_t reused_total = 0;
  for (int turn = 0; turn < 3; ++turn) {
    PrefillResult r;
    const auto warm = kvtest::greedy_session(ctx.get(), s, history, kGen, &r);
    const auto cold = kvtest::greedy_plain(ctx.get(), 1, history, kGen);
    ASSERT_EQ(warm, cold) << "turn " << turn;
    if (turn > 0) {
      EXPECT_GT(r.n_reused, 0u) << "turn " << turn;
      EXPECT_EQ(r.n_reused + r.n_computed, history.size());
    }
    reused_total += r.n_reused;
    // The answer (minus its unsampled last token, which the session has not decoded) and a
    // new user message are appended.
    history.insert(history.end(), warm.begin(), warm.end());
    const auto user = kvtest::random_tokens(40, 100 + turn, nv);
    history.insert(history.end(), user.begin(), user.end());
  }
  EXPECT_GT(reused_total, 300u);
  EXPECT_EQ(s.stats().prefills, 3u);
  EXPECT_EQ(s.stats().tokens_reused, reused_total);
}

// Several sequences of one context share a long system prompt through the prefix cache.
TEST_P(KvExact, SharedPrefixParallelRequestsMatchPlain) {
  auto model = kvtest::load(GetParam());
  auto ctx = kvtest::make_ctx(model, 1024, 8);
  KvConfig cfg;
  cfg.block_size = 32;
  PrefixCache cache(ctx.get(), {6, 7}, cfg.block_size, 512);
  const int32_t nv = kvtest::n_vocab(ctx.get());
  const auto system = kvtest::random_tokens(200, 7, nv);
  std::vector<std::unique_ptr<Session>> sessions;
  for (SeqId s = 0; s < 4; ++s) {
    sessions.push_back(std::make_unique<Session>(ctx.get(), s, cfg, &cache));
  }
  std::vector<std::vector<Token>> prompts;
  for (int i = 0; i < 4; ++i) {
    auto p = system;
    const auto q = kvtest::random_tokens(20 + 7 * i, 50 + i, nv);
    p.insert(p.end(), q.begin(), q.end());
    prompts.push_back(p);
  }
  // Prefill all first (all four live in the KV cache at once, sharing cells), then generate
  // interleaved, one token per sequence per step.
  std::vector<PrefillResult> res(4);
  std::vector<std::vector<Token>> warm(4);
  for (int i = 0; i < 4; ++i) {
    res[static_cast<size_t>(i)] =
        sessions[static_cast<size_t>(i)]->prefill(prompts[static_cast<size_t>(i)]);
    warm[static_cast<size_t>(i)].push_back(kvtest::argmax(llama_get_logits_ith(ctx.get(), -1), nv));
  }
  for (int step = 1; step < kGen; ++step) {
    for (size_t i = 0; i < 4; ++i) {
      sessions[i]->decode(warm[i].back());
      warm[i].push_back(kvtest::argmax(llama_get_logits_ith(ctx.get(), -1), nv));
    }
  }
  EXPECT_EQ(res[0].source, ReuseSource::none);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(res[i].source, ReuseSource::memory) << i;
    EXPECT_EQ(res[i].n_reused, 192u) << i;  // 6 full blocks of the 200-token system prompt
  }
  for (size_t i = 0; i < 4; ++i) {
    const auto cold = kvtest::greedy_plain(ctx.get(), 5, prompts[i], kGen);
    EXPECT_EQ(warm[i], cold) << "request " << i;
  }
}

// A second context (a "new process") restores the longest stored prefix from disk.
TEST_P(KvExact, RestartWithWarmDiskCacheMatchesPlain) {
  kvtest::TempDir dir;
  const std::string path = kvtest::model_path(GetParam());
  KvConfig cfg;
  cfg.block_size = 16;
  const int32_t nv = [&] {
    auto m = kvtest::load(GetParam());
    return llama_vocab_n_tokens(m.vocab_ptr());
  }();
  const auto prompt = kvtest::random_tokens(180, 3, nv);
  auto longer = prompt;
  const auto more = kvtest::random_tokens(30, 4, nv);
  longer.insert(longer.end(), more.begin(), more.end());
  auto shorter = std::vector<Token>(prompt.begin(), prompt.begin() + 100);
  const auto tail = kvtest::random_tokens(25, 5, nv);
  shorter.insert(shorter.end(), tail.begin(), tail.end());
  {
    auto model = kvtest::load(GetParam());
    auto ctx = kvtest::make_ctx(model, 1024, 1);
    PersistentStore store(dir.path.string(),
                          PersistentStore::model_fingerprint(dir.path.string(), path),
                          cfg.block_size);
    Session s(ctx.get(), 0, cfg, nullptr, &store);
    kvtest::greedy_session(ctx.get(), s, prompt, 1);
    EXPECT_GT(s.persist(), 0u);
    EXPECT_EQ(store.n_entries(), 1u);
  }
  auto model = kvtest::load(GetParam());
  auto ctx = kvtest::make_ctx(model, 1024, 2);
  PersistentStore store(dir.path.string(),
                        PersistentStore::model_fingerprint(dir.path.string(), path),
                        cfg.block_size);
  const std::vector<const std::vector<Token>*> cases = {&prompt, &longer, &shorter};
  for (const std::vector<Token>* p : cases) {
    Session s(ctx.get(), 0, cfg, nullptr, &store);
    PrefillResult r;
    const auto warm = kvtest::greedy_session(ctx.get(), s, *p, kGen, &r);
    EXPECT_EQ(r.source, ReuseSource::disk);
    const size_t expect = p == &prompt ? prompt.size() - 1 : p == &longer ? prompt.size() : 100;
    EXPECT_EQ(r.n_reused, expect);
    EXPECT_GT(s.stats().bytes_loaded, 0u);
    const auto cold = kvtest::greedy_plain(ctx.get(), 1, *p, kGen);
    EXPECT_EQ(warm, cold);
  }
}

// The prefix cache off (LACUNA_PREFIX_CACHE=0 in config) still gives the same outputs.
TEST_P(KvExact, DisabledCacheIsPlain) {
  auto model = kvtest::load(GetParam());
  auto ctx = kvtest::make_ctx(model, 1024, 3);
  KvConfig cfg;
  cfg.block_size = 16;
  cfg.prefix_cache = false;
  PrefixCache cache(ctx.get(), {2}, cfg.block_size, 512);
  Session a(ctx.get(), 0, cfg, &cache);
  const auto p = kvtest::random_tokens(70, 9, kvtest::n_vocab(ctx.get()));
  PrefillResult r;
  const auto warm = kvtest::greedy_session(ctx.get(), a, p, kGen, &r);
  EXPECT_EQ(r.n_reused, 0u);
  EXPECT_EQ(cache.n_nodes(), 0u);
  EXPECT_EQ(warm, kvtest::greedy_plain(ctx.get(), 1, p, kGen));
}

INSTANTIATE_TEST_SUITE_P(TinyModels, KvExact,
                         ::testing::Values("tiny-llama3", "tiny-spm", "tiny-qwen2"));

}  // namespace
