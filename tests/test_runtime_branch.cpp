// test_runtime_branch.cpp — the runtime's exactness (tier 1) on the three tiny models: forks
// against cold prefills, batched steps against sequential ones, Blink KV reseeds against cold
// prefills of sinks + tail, constrained fork trees, prefill through reuse against a cold
// context; and bad input: clear errors, every other branch still usable.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "decode/constraint_factory.h"
#include "kv_test_util.h"
#include "lacuna/runtime.h"

namespace {

using lacuna::Token;
using lacuna::runtime::Branch;
using lacuna::runtime::BranchParams;
using lacuna::runtime::Context;
using lacuna::runtime::ContextParams;

ContextParams params(uint32_t n_ctx = 1024, uint32_t n_branches = 8, bool prefix_cache = false) {
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = 256;
  p.n_ubatch = 256;
  p.n_branches = n_branches;
  p.n_threads = 1;
  p.n_threads_batch = 1;
  p.kv = lacuna::kv::KvConfig{};
  p.kv.prefix_cache = prefix_cache;
  p.kv.block_size = 16;
  p.decode = lacuna::DecodeOptions{};
  return p;
}

BranchParams greedy(size_t max_tokens) {
  BranchParams b;
  b.max_tokens = max_tokens;
  return b;
}

std::vector<Token> run(Branch b) {
  b.generate();
  return b.generator().tokens();
}

class Runtime : public ::testing::TestWithParam<std::string> {
 protected:
  lacuna::Model model() { return kvtest::load(GetParam()); }
  int32_t n_vocab() { return model().vocab().n_vocab(); }
  std::vector<Token> prompt(size_t n, uint32_t seed) {
    return kvtest::random_tokens(n, seed, n_vocab());
  }
};

// A forked branch continues with the same greedy tokens as a fresh branch prefilled cold
// with the same tokens (in another context).
TEST_P(Runtime, ForkMatchesColdContext) {
  std::vector<Token> seq;
  std::vector<Token> child_out;
  {
    Context ctx(model(), params());
    Branch root = ctx.create_branch(greedy(5));
    root.prefill(prompt(40, 2));
    run(root);
    seq.assign(root.tokens().begin(), root.tokens().end());
    Branch child = root.fork();
    const Token extra[1] = {static_cast<Token>(300 + 7)};
    child.prefill(extra);
    child_out = run(child);
    // The parent is untouched by the child's work.
    root.prefill(extra);
    EXPECT_EQ(run(root), child_out);
  }
  seq.push_back(300 + 7);
  Context cold(model(), params());
  Branch b = cold.create_branch(greedy(5));
  b.prefill(seq);
  EXPECT_EQ(run(b), child_out);
}

// N branches in one step give each branch the tokens it gets alone.
TEST_P(Runtime, BatchedStepMatchesSequential) {
  constexpr int kN = 6;
  std::vector<std::vector<Token>> alone(kN);
  {
    Context ctx(model(), params());
    for (int i = 0; i < kN; ++i) {
      Branch b = ctx.create_branch(greedy(12));
      b.prefill(prompt(10 + 7 * static_cast<size_t>(i), 100 + static_cast<uint32_t>(i)));
      alone[static_cast<size_t>(i)] = run(b);
      b.prune();
    }
  }
  Context ctx(model(), params());
  std::vector<Branch> bs;
  std::vector<std::pair<Branch, std::vector<Token>>> pre;
  for (int i = 0; i < kN; ++i) {
    bs.push_back(ctx.create_branch(greedy(12)));
    pre.emplace_back(bs.back(),
                     prompt(10 + 7 * static_cast<size_t>(i), 100 + static_cast<uint32_t>(i)));
  }
  ctx.store().prefill(pre);
  for (int step = 0; step < 40; ++step) {
    std::vector<Branch> live;
    for (const Branch& b : bs) {
      if (!b.generator().done()) live.push_back(b);
    }
    if (live.empty()) break;
    ctx.store().step(live);
  }
  for (int i = 0; i < kN; ++i) {
    EXPECT_TRUE(bs[static_cast<size_t>(i)].generator().done());
    EXPECT_EQ(bs[static_cast<size_t>(i)].generator().tokens(), alone[static_cast<size_t>(i)])
        << "branch " << i;
  }
}

// Constrained branches (forced tokens skipped, drafts verified) in one batch: same tokens as
// alone, and every output is complete JSON of the schema.
TEST_P(Runtime, ConstrainedBatchMatchesSequentialAndForksStayValid) {
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer","minimum":0,"maximum":999}},"required":["name","n"],"additionalProperties":false})";
  auto make = [&](Context& ctx, uint32_t seed) {
    BranchParams p = greedy(64);
    p.temp = 0.8f;
    p.seed = seed;
    Branch b = ctx.create_branch(p);
    b.set_json_schema(schema, true);
    return b;
  };
  constexpr int kN = 4;
  std::vector<std::vector<Token>> alone(kN);
  {
    Context ctx(model(), params());
    for (int i = 0; i < kN; ++i) {
      Branch b = make(ctx, 7 + static_cast<uint32_t>(i));
      b.prefill(prompt(12, 50));
      alone[static_cast<size_t>(i)] = run(b);
      EXPECT_EQ(b.generator().stats().stop, lacuna::StopReason::constraint_completed);
      b.prune();
    }
  }
  Context ctx(model(), params());
  std::vector<Branch> bs;
  for (int i = 0; i < kN; ++i) {
    bs.push_back(make(ctx, 7 + static_cast<uint32_t>(i)));
    bs.back().prefill(prompt(12, 50));
  }
  for (int step = 0; step < 60; ++step) ctx.store().step(bs);
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(bs[static_cast<size_t>(i)].generator().tokens(), alone[static_cast<size_t>(i)]);
  }
  // A fork tree from mid-object: every leaf completes the object.
  for (Branch& b : bs) b.prune();
  Branch root = make(ctx, 99);
  root.prefill(prompt(12, 51));
  for (int i = 0; i < 3; ++i) root.next();
  std::vector<Branch> leaves;
  for (int i = 0; i < 3; ++i) {
    Branch c = root.fork();
    c.reseed(1000 + static_cast<uint32_t>(i));
    Branch g = c.fork();
    g.reseed(2000 + static_cast<uint32_t>(i));
    leaves.push_back(c);
    leaves.push_back(g);
  }
  for (int step = 0; step < 60; ++step) {
    std::vector<Branch> live;
    for (const Branch& b : leaves) {
      if (!b.generator().done()) live.push_back(b);
    }
    if (live.empty()) break;
    ctx.store().step(live);
  }
  const std::string head = root.generator().text();
  for (const Branch& b : leaves) {
    EXPECT_EQ(b.generator().stats().stop, lacuna::StopReason::constraint_completed);
    const std::string text = b.generator().text();
    ASSERT_GE(text.size(), head.size());
    EXPECT_EQ(text.substr(0, head.size()), head);
    const auto j = nlohmann::json::parse(text);
    ASSERT_TRUE(j.contains("name") && j["name"].is_string());
    size_t code_points = 0;  // maxLength counts code points
    for (unsigned char ch : j["name"].get<std::string>()) code_points += (ch & 0xC0) != 0x80;
    EXPECT_LE(code_points, 6u);
    EXPECT_TRUE(j.contains("n") && j["n"].is_number_integer());
  }
}

// produce + batched commit gives the tokens step gives.
TEST_P(Runtime, ProduceCommitMatchesStep) {
  Context ctx(model(), params());
  Branch a = ctx.create_branch(greedy(10));
  a.prefill(prompt(30, 3));
  const std::vector<Token> want = run(a);
  Branch b = ctx.create_branch(greedy(0));
  Branch c = ctx.create_branch(greedy(0));
  b.prefill(prompt(30, 3));
  c.prefill(prompt(30, 3));
  std::vector<Token> got_b;
  for (size_t i = 0; i < want.size(); ++i) {
    const Token tb = b.produce();
    const Token tc = c.produce();
    EXPECT_EQ(tb, tc);
    got_b.push_back(tb);
    const std::pair<Branch, Token> items[2] = {{b, tb}, {c, tc}};
    ctx.store().commit(items);
  }
  EXPECT_EQ(got_b, want);
  EXPECT_GT(b.perplexity(), 1.0);
  EXPECT_NEAR(b.perplexity(), c.perplexity(), 1e-6);
  EXPECT_GT(b.model_entropy(), 0.0);
  const Token t = b.produce();
  EXPECT_LE(b.model_surprisal(t), -std::log(1e-30));
  EXPECT_EQ(b.logits().size(), static_cast<size_t>(n_vocab()));
}

// Blink KV: after clear_and_reseed(sinks, tail) the logits equal a cold prefill of
// sinks + tail and the greedy continuation is the same.
TEST_P(Runtime, ClearAndReseedMatchesColdPrefill) {
  const auto p = prompt(80, 4);
  std::vector<Token> sinks(p.begin(), p.begin() + 8);
  std::vector<Token> tail(p.end() - 20, p.end());
  std::vector<float> logits_reseed;
  std::vector<Token> out_reseed;
  {
    Context ctx(model(), params());
    Branch b = ctx.create_branch(greedy(8));
    b.prefill(p);
    b.clear_and_reseed(sinks, tail);
    EXPECT_EQ(b.tokens().size(), sinks.size() + tail.size());
    logits_reseed = b.logits();
    out_reseed = run(b);
  }
  std::vector<Token> cold_seq = sinks;
  cold_seq.insert(cold_seq.end(), tail.begin(), tail.end());
  Context cold(model(), params());
  Branch c = cold.create_branch(greedy(8));
  c.prefill(cold_seq);
  const std::vector<float> logits_cold = c.logits();
  ASSERT_EQ(logits_cold.size(), logits_reseed.size());
  float max_diff = 0;
  for (size_t i = 0; i < logits_cold.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(logits_cold[i] - logits_reseed[i]));
  }
  EXPECT_LT(max_diff, 1e-3f);
  EXPECT_EQ(run(c), out_reseed);
}

// Automatic Blink KV: a generation longer than the context goes on.
TEST_P(Runtime, BlinkAutoKeepsGenerating) {
  Context ctx(model(), params(256));
  BranchParams bp = greedy(400);
  bp.blink_sinks = 4;
  bp.blink_tail = 64;
  Branch b = ctx.create_branch(bp);
  b.prefill(prompt(20, 5));
  run(b);
  EXPECT_EQ(b.generator().tokens().size(), 400u);
  EXPECT_EQ(b.generator().stats().stop, lacuna::StopReason::max_tokens);
  EXPECT_LT(b.generator().n_past(), 256);
  // Without it the same branch stops at the context's end.
  b.prune();
  Branch plain = ctx.create_branch(greedy(400));
  plain.prefill(prompt(20, 5));
  run(plain);
  EXPECT_EQ(plain.generator().stats().stop, lacuna::StopReason::context_full);
}

// Prefill through the prefix cache gives the tokens of a cold context.
TEST_P(Runtime, PrefillThroughReuseMatchesCold) {
  const auto sys = prompt(100, 6);
  auto with_q = [&](uint32_t seed) {
    auto v = sys;
    const auto q = prompt(9, seed);
    v.insert(v.end(), q.begin(), q.end());
    return v;
  };
  std::vector<std::vector<Token>> cold(3);
  for (int i = 0; i < 3; ++i) {
    Context c(model(), params());
    Branch b = c.create_branch(greedy(8));
    b.prefill(with_q(60 + static_cast<uint32_t>(i)));
    cold[static_cast<size_t>(i)] = run(b);
  }
  Context ctx(model(), params(1024, 4, /*prefix_cache=*/true));
  for (int i = 0; i < 3; ++i) {
    Branch b = ctx.create_branch(greedy(8));
    b.prefill(with_q(60 + static_cast<uint32_t>(i)));
    EXPECT_EQ(run(b), cold[static_cast<size_t>(i)]) << i;
    b.prune();
  }
  EXPECT_GE(ctx.kv_stats().tokens_reused_memory, 2u * 96u);  // 6 blocks of 16, twice
  // Warm multi-turn: set_tokens keeps the common prefix.
  Branch t = ctx.create_branch(greedy(8));
  t.set_tokens(with_q(60));
  run(t);
  auto longer = std::vector<Token>(t.tokens().begin(), t.tokens().end());
  const auto more = prompt(5, 77);
  longer.insert(longer.end(), more.begin(), more.end());
  const uint64_t own_before = t.kv_stats().tokens_reused_own;
  t.set_tokens(longer);
  EXPECT_GE(t.kv_stats().tokens_reused_own - own_before, with_q(60).size());
  const auto warm = run(t);
  Context c(model(), params());
  Branch b = c.create_branch(greedy(8));
  b.prefill(longer);
  EXPECT_EQ(run(b), warm);
}

TEST_P(Runtime, StateFileRoundTrip) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("lacuna-branch-" + GetParam() + ".lkv")).string();
  ContextParams p = params();
  p.model_path = kvtest::model_path(GetParam());
  Context ctx(model(), p);
  Branch a = ctx.create_branch(greedy(6));
  a.prefill(prompt(50, 8));
  a.save_state(path);
  const auto want = run(a);
  Branch b = ctx.create_branch(greedy(6));
  b.load_state(path);
  EXPECT_EQ(std::vector<Token>(b.tokens().begin(), b.tokens().end()), prompt(50, 8));
  EXPECT_EQ(run(b), want);
  // A corrupt file is refused and the branch stays as it was.
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 100, SEEK_SET);
    std::fputc(0x5a, f);
    std::fclose(f);
  }
  const size_t before = b.tokens().size();
  EXPECT_THROW(b.load_state(path), lacuna::runtime::StateFileError);
  EXPECT_EQ(b.tokens().size(), before);
  EXPECT_THROW(b.load_state(path + ".missing"), lacuna::runtime::StateFileError);
  std::filesystem::remove(path);
}

TEST_P(Runtime, TreeBookkeepingAndKvPressure) {
  Context ctx(model(), params(1024, 4));
  EXPECT_EQ(ctx.store().available(), 4u);
  Branch root = ctx.create_branch(greedy(4));
  root.prefill(prompt(200, 9));
  const auto before = ctx.store().kv_pressure();
  EXPECT_EQ(before.cells_used, 200u);
  Branch a = root.fork();
  Branch b = root.fork();
  Branch a1 = a.fork();
  EXPECT_EQ(ctx.store().kv_pressure().cells_used, 200u);  // forks copy no cells
  EXPECT_EQ(ctx.store().available(), 0u);
  EXPECT_THROW(root.fork(), std::length_error);
  EXPECT_EQ(root.children().size(), 2u);
  EXPECT_EQ(a1.parent(), a);
  EXPECT_THROW(a.prune(), std::logic_error);
  a.prune_subtree();
  EXPECT_FALSE(a.valid());
  EXPECT_FALSE(a1.valid());
  EXPECT_THROW(a.next(), std::invalid_argument);
  EXPECT_THROW(a1.commit(5), std::invalid_argument);
  EXPECT_EQ(ctx.store().available(), 2u);
  ctx.store().retain_only(b);
  EXPECT_FALSE(root.valid());
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(b.parent().valid());
  EXPECT_EQ(ctx.store().available(), 3u);
  EXPECT_EQ(run(b).size(), 4u);
}

TEST_P(Runtime, BadInputLeavesEverythingUsable) {
  Context ctx(model(), params(256, 3));
  Context other(model(), params(256, 1));
  Branch a = ctx.create_branch(greedy(4));
  Branch b = ctx.create_branch(greedy(4));
  a.prefill(prompt(20, 10));
  b.prefill(prompt(20, 11));
  const Token bad[2] = {5, n_vocab() + 3};
  EXPECT_THROW(a.prefill(bad), std::invalid_argument);
  EXPECT_THROW(a.commit(-1), std::invalid_argument);
  EXPECT_THROW(a.commit(n_vocab()), std::invalid_argument);
  Branch foreign = other.create_branch();
  EXPECT_THROW(ctx.store().step(std::vector<Branch>{a, foreign}), std::invalid_argument);
  EXPECT_THROW(a.prefill(prompt(300, 12)), std::runtime_error);
  EXPECT_THROW(a.clear_and_reseed(prompt(200, 13), prompt(100, 14)), std::invalid_argument);
  EXPECT_THROW(a.clear_and_reseed({}, {}), std::invalid_argument);
  Branch c = ctx.create_branch();
  EXPECT_THROW(c.produce(), std::invalid_argument);  // no logits yet
  EXPECT_THROW(ctx.create_branch(), std::length_error);
  EXPECT_THROW(a.set_grammar("root ::= ("), std::exception);
  EXPECT_THROW(Branch().next(), std::invalid_argument);
  // Still usable, and equal to a clean context's tokens.
  const auto got_a = run(a);
  Context clean(model(), params(256, 1));
  Branch ca = clean.create_branch(greedy(4));
  ca.prefill(prompt(20, 10));
  EXPECT_EQ(got_a, run(ca));
  EXPECT_EQ(run(b).size(), 4u);
}

// Stop strings set on a live branch end its next generation at the string.
TEST_P(Runtime, StopStringsSetLater) {
  Context ctx(model(), params());
  Branch free = ctx.create_branch(greedy(24));
  free.prefill(prompt(20, 15));
  run(free);
  const std::string full = free.generator().text();
  ASSERT_GT(full.size(), 12u);
  const std::string stop = full.substr(8, 4);
  Branch b = ctx.create_branch(greedy(24));
  b.set_stop_strings({stop});
  b.prefill(prompt(20, 15));
  run(b);
  EXPECT_EQ(b.generator().stats().stop, lacuna::StopReason::stop_string);
  EXPECT_EQ(b.generator().text(), full.substr(0, full.find(stop)));
  EXPECT_THROW(b.set_stop_strings({""}), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, Runtime,
                         ::testing::Values("tiny-llama3", "tiny-spm", "tiny-qwen2"));

}  // namespace

namespace {

// Embeddings: pooled (mean), L2-normalized, deterministic, and a context made without
// embeddings refuses.
TEST(RuntimeEmbeddings, EncodeIsNormalizedAndDeterministic) {
  const lacuna::Model m = kvtest::load("tiny-llama3");
  ContextParams p = params(256, 2);
  p.embeddings = true;
  Context ctx(m, p);
  const auto a = kvtest::random_tokens(20, 1, m.vocab().n_vocab());
  const auto b = kvtest::random_tokens(20, 2, m.vocab().n_vocab());
  const std::vector<float> ea = ctx.encode(a);
  ASSERT_EQ(ea.size(), static_cast<size_t>(m.n_embd()));
  double norm = 0;
  for (float v : ea) norm += static_cast<double>(v) * v;
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_EQ(ctx.encode(a), ea);
  const std::vector<float> eb = ctx.encode(b);
  double dot = 0;
  for (size_t i = 0; i < ea.size(); ++i) dot += static_cast<double>(ea[i]) * eb[i];
  EXPECT_LT(dot, 0.9999);
  EXPECT_EQ(ctx.store().available(), 2u);  // the sequence went back
  EXPECT_THROW(ctx.encode({}), std::invalid_argument);
  Context plain(m, params(256, 1));
  EXPECT_THROW(plain.encode(a), std::logic_error);
}

}  // namespace
