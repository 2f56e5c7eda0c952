// test_runtime_branch.cpp — the runtime's exactness (tier 1) on the three tiny models: forks
// against cold prefills, batched steps against sequential ones, Blink KV reseeds against cold
// prefills of sinks + tail, constrained fork trees, prefill through reuse against a cold
// context; and bad input: clear errors, every other branch still usable.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// Greedy tokens of each prompt decoded alone (one branch after another in a fresh context)
// and of all prompts as branches stepped together (in another fresh context).
struct StepAndAlone {
  std::vector<std::vector<Token>> alone, stepped;
  bool all_done = true;
};

StepAndAlone step_and_alone(const lacuna::Model& model,
                            const std::vector<std::vector<Token>>& prompts, size_t max_tokens) {
  const auto n = static_cast<uint32_t>(prompts.size());
  StepAndAlone r;
  {
    Context ctx(model, params(1024 + 64 * n, n));
    for (const auto& p : prompts) {
      Branch b = ctx.create_branch(greedy(max_tokens));
      b.prefill(p);
      r.alone.push_back(run(b));
      b.prune();
    }
  }
  Context ctx(model, params(1024 + 64 * n, n));
  std::vector<Branch> bs;
  std::vector<std::pair<Branch, std::vector<Token>>> pre;
  for (const auto& p : prompts) {
    bs.push_back(ctx.create_branch(greedy(max_tokens)));
    pre.emplace_back(bs.back(), p);
  }
  ctx.store().prefill(pre);
  for (size_t step = 0; step < 4 * max_tokens; ++step) {
    std::vector<Branch> live;
    for (const Branch& b : bs) {
      if (!b.generator().done()) live.push_back(b);
    }
    if (live.empty()) break;
    ctx.store().step(live);
  }
  for (const Branch& b : bs) {
    r.all_done = r.all_done && b.generator().done();
    r.stepped.push_back(b.generator().tokens());
  }
  return r;
}

// N branches in one step give each branch the tokens it gets alone.
TEST_P(Runtime, BatchedStepMatchesSequential) {
  constexpr int kN = 6;
  std::vector<std::vector<Token>> prompts;
  for (int i = 0; i < kN; ++i)
    prompts.push_back(prompt(10 + 7 * static_cast<size_t>(i), 100 + static_cast<uint32_t>(i)));
  const StepAndAlone r = step_and_alone(model(), prompts, 12);
  EXPECT_TRUE(r.all_done);
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(r.stepped[static_cast<size_t>(i)], r.alone[static_cast<size_t>(i)]) << "branch " << i;
  }
}

// ---- batch invariance over many seeds ----------------------------------------------------
// Sixteen branches decoded in one batch per token against each decoded alone, over rounds of
// new prompts of mixed lengths. llama.cpp's CPU kernels do not promise the same float
// results for a row computed in a batch of 16 and in a batch of 1 (its own batched loop
// differs from its one-at-a-time loop too; docs/runtime.md), so on random-weight models a
// near tie can flip. What must hold: at every position where the two runs chose the same
// token, the chosen token's logit differs by float noise only (a wrong position, mask or
// cell would move it by far more), and every run that parts does so at a near tie: the same
// two candidates on top in both runs, within that noise of each other. Both runs use
// produce() + commit() (the same forward passes as step() without forced tokens or drafts:
// ProduceCommitMatchesStep) so that each position's logits can be read.
// LACUNA_TEST_STEP_ROUNDS=K runs K rounds instead of the default ones and prints the counts
// (the figure in docs/runtime.md).
struct Top2 {
  Token t1 = -1, t2 = -1;
  float l1 = 0, l2 = 0;
};

Top2 top2_of(const Branch& b) {
  const std::vector<float> l = b.logits();
  Top2 r;
  for (size_t i = 0; i < l.size(); ++i) {
    const auto t = static_cast<Token>(i);
    if (r.t1 < 0 || l[i] > r.l1) {
      r.t2 = r.t1;
      r.l2 = r.l1;
      r.t1 = t;
      r.l1 = l[i];
    } else if (r.t2 < 0 || l[i] > r.l2) {
      r.t2 = t;
      r.l2 = l[i];
    }
  }
  return r;
}

struct Traced {
  std::vector<std::vector<Token>> tokens;
  std::vector<std::vector<Top2>> top;  // the two best logits each token was chosen from
};

// Greedy tokens of every prompt, produce() + commit(): each alone in a fresh context, or all
// committed together (store().commit, one batch per token) in another.
Traced traced_run(const lacuna::Model& model, const std::vector<std::vector<Token>>& prompts,
                  size_t max_tokens, bool together) {
  const auto n = static_cast<uint32_t>(prompts.size());
  const lacuna::Vocab vocab = model.vocab();
  Context ctx(model, params(1024 + 64 * n, n));
  Traced r;
  r.tokens.resize(n);
  r.top.resize(n);
  std::vector<Branch> bs;
  for (uint32_t i = 0; i < n; ++i) bs.push_back(ctx.create_branch(greedy(max_tokens)));
  // Records the position and picks its token; false when the branch is done.
  auto take = [&](size_t i, Token& t) {
    r.top[i].push_back(top2_of(bs[i]));
    t = bs[i].produce();
    if (vocab.is_eog(t)) return false;
    r.tokens[i].push_back(t);
    return r.tokens[i].size() < max_tokens;
  };
  if (!together) {
    for (size_t i = 0; i < n; ++i) {
      bs[i].prefill(prompts[i]);
      Token t = -1;
      while (take(i, t)) bs[i].commit(t);
    }
    return r;
  }
  std::vector<std::pair<Branch, std::vector<Token>>> pre;
  for (size_t i = 0; i < n; ++i) pre.emplace_back(bs[i], prompts[i]);
  ctx.store().prefill(pre);
  std::vector<size_t> live(n);
  for (size_t i = 0; i < n; ++i) live[i] = i;
  while (!live.empty()) {
    std::vector<std::pair<Branch, Token>> items;
    std::vector<size_t> still;
    for (const size_t i : live) {
      Token t = -1;
      if (take(i, t)) {
        items.emplace_back(bs[i], t);
        still.push_back(i);
      }
    }
    if (!items.empty()) ctx.store().commit(items);
    live.swap(still);
  }
  return r;
}

TEST_P(Runtime, BatchedDecodeDiffersFromAloneOnlyAtNearTies) {
  constexpr size_t kN = 16;
  constexpr size_t kTokens = 16;
  // Float noise between a row computed in a batch of 16 and alone: what the logits of the
  // chosen token may move by, and how close two candidates must be for a flip to be a tie
  // (over 100 rounds on the three models: drift at most 3.6e-3, mostly at the prompt's last
  // position, which a packed prefill computes among other prompts' tokens; flips at margins
  // below 1e-3).
  constexpr float kNoise = 5e-3f;
  std::vector<size_t> rounds = {0, 21, 23};  // 21, 23: rounds whose prompts flip a near tie
  if (const char* e = std::getenv("LACUNA_TEST_STEP_ROUNDS")) {
    rounds.clear();
    for (size_t k = 0; k < std::stoul(e); ++k) rounds.push_back(k);
  }
  size_t branches = 0, parted = 0, compared = 0;
  float drift = 0, widest_tie = 0;
  for (const size_t round : rounds) {
    std::vector<std::vector<Token>> prompts;
    for (size_t i = 0; i < kN; ++i) {
      const auto seed = static_cast<uint32_t>(7000 + 100 * round + i);
      prompts.push_back(prompt(4 + (seed * 37) % 60, seed));
    }
    const Traced alone = traced_run(model(), prompts, kTokens, false);
    const Traced batched = traced_run(model(), prompts, kTokens, true);
    for (size_t i = 0; i < kN; ++i) {
      ++branches;
      const auto &ta = alone.top[i], &tb = batched.top[i];
      ASSERT_FALSE(ta.empty());
      ASSERT_FALSE(tb.empty());
      for (size_t k = 0; k < std::min(ta.size(), tb.size()); ++k) {
        if (ta[k].t1 == tb[k].t1) {
          ++compared;
          drift = std::max(drift, std::fabs(ta[k].l1 - tb[k].l1));
          EXPECT_LE(std::fabs(ta[k].l1 - tb[k].l1), kNoise)
              << "round " << round << " branch " << i << " position " << k;
          continue;
        }
        ++parted;
        const float ma = ta[k].l1 - ta[k].l2, mb = tb[k].l1 - tb[k].l2;
        widest_tie = std::max({widest_tie, ma, mb});
        EXPECT_TRUE(ta[k].t1 == tb[k].t2 && ta[k].t2 == tb[k].t1)
            << "round " << round << " branch " << i << " position " << k
            << ": the two runs' best candidates are not the same pair";
        EXPECT_LE(ma, kNoise) << "round " << round << " branch " << i << " position " << k;
        EXPECT_LE(mb, kNoise) << "round " << round << " branch " << i << " position " << k;
        break;  // after a flip the two runs continue different texts
      }
    }
  }
  std::printf(
      "%s: %zu of %zu branches part from their run alone, each at a near tie (widest margin "
      "%.3g); largest logit drift %.3g over %zu equal positions\n",
      GetParam().c_str(), parted, branches, widest_tie, drift, compared);
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

// Log-probabilities: every token of a constrained greedy generation gets a record (forced
// tokens included, since the branch then samples each token from logits), the tokens equal
// those of a branch with skipping, and each record agrees with the model's own surprisal.
TEST_P(Runtime, LogprobsCoverEveryTokenAndChangeNothing) {
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false})";
  Context ctx(model(), params());
  Branch plain = ctx.create_branch(greedy(40));
  plain.set_json_schema(schema, true);
  plain.prefill(prompt(12, 60));
  const std::vector<Token> want = run(plain);
  // The plain branch skipped forced tokens or took them as drafts (not on tiny-spm, whose
  // byte-fallback pieces leave this schema's forced text more than one spelling).
  if (GetParam() != "tiny-spm") {
    ASSERT_GT(plain.generator().stats().tokens_skipped + plain.generator().stats().draft_accepted,
              0u);
  }
  BranchParams bp = greedy(40);
  bp.logprobs = 3;
  Branch lp = ctx.create_branch(bp);
  lp.set_json_schema(schema, true);
  lp.prefill(prompt(12, 60));
  // The first token's record against the model's surprisal at the prompt's position.
  const Token first = want.front();
  const double surprisal = lp.model_surprisal(first);
  EXPECT_EQ(run(lp), want);
  const auto& recs = lp.generator().logprobs();
  ASSERT_EQ(recs.size(), want.size());
  EXPECT_NEAR(recs.front().logprob, -surprisal, 1e-4);
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].token, want[i]);
    EXPECT_LE(recs[i].logprob, 0.0f);
    ASSERT_EQ(recs[i].top.size(), 3u);
    EXPECT_GE(recs[i].top[0].second, recs[i].top[1].second);
    EXPECT_GE(recs[i].top[1].second, recs[i].top[2].second);
    EXPECT_GE(recs[i].top[0].second, recs[i].logprob);  // the constraint may pick a lesser one
  }
  EXPECT_EQ(lp.generator().stats().tokens_skipped, 0u);
  EXPECT_EQ(lp.generator().stats().draft_accepted, 0u);
  BranchParams too_many = greedy(4);
  too_many.logprobs = 21;
  EXPECT_THROW(ctx.create_branch(too_many), std::invalid_argument);
  EXPECT_EQ(ctx.n_live_branches(), 2u);  // the refused branch took no sequence
}

// A branch kept from one generation takes the next one's settings (set_params) and prompt
// (set_tokens, reusing its own prefix): the same tokens as a fresh branch with those settings.
TEST_P(Runtime, KeptBranchTakesNewParams) {
  Context ctx(model(), params());
  BranchParams first = greedy(12);
  first.temp = 0.7f;
  first.seed = 3;
  first.logprobs = 2;
  Branch kept = ctx.create_branch(first);
  std::vector<Token> p1 = prompt(30, 70);
  kept.set_tokens(p1);
  run(kept);
  BranchParams second = greedy(6);
  second.temp = 0.9f;
  second.seed = 11;
  second.stop_strings = {"\n\n"};
  std::vector<Token> p2(p1.begin(), p1.begin() + 20);
  const auto more = prompt(8, 71);
  p2.insert(p2.end(), more.begin(), more.end());
  kept.set_params(second);
  kept.set_tokens(p2);
  const std::vector<Token> got = run(kept);
  EXPECT_TRUE(kept.generator().logprobs().empty());  // off again
  Branch fresh = ctx.create_branch(second);
  fresh.set_tokens(p2);
  EXPECT_EQ(run(fresh), got);
  BranchParams bad = second;
  bad.stop_strings = {""};
  EXPECT_THROW(kept.set_params(bad), std::invalid_argument);
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
