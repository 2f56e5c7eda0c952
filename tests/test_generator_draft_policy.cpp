// test_generator_draft_policy.cpp — the draft-length decision of verified forced strings: the
// cost model's arithmetic, its measurement, and that no policy changes the output (greedy
// tokens identical with drafting off, always on and adaptive; a declined draft costs no draw).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "decode/constraint_factory.h"
#include "generator_fixtures.h"
#include "lacuna/generator.h"
#include "lacuna/json_schema.h"

namespace lacuna {
namespace {

using testing::ContextHandle;
using testing::ModelHandle;

// Batches of up to 32 tokens cost what one token costs.
DecodeCost flat_cost() {
  DecodeCost c;
  c.relative.assign(32, 1.0);
  return c;
}

// A batch of two costs as much as two batches of one: drafting can never gain.
DecodeCost linear_cost() {
  DecodeCost c;
  c.relative = {1.0, 2.0, 3.0, 4.0};
  return c;
}

TEST(DecodeCost, InterpolatesAndStaysMonotone) {
  const std::vector<size_t> sizes = {1, 2, 4, 8};
  const std::vector<double> ms = {10.0, 18.0, 22.0, 26.0};
  const DecodeCost c = DecodeCost::from_ms(sizes, ms);
  ASSERT_EQ(c.relative.size(), 8u);
  EXPECT_DOUBLE_EQ(c.of(1), 1.0);
  EXPECT_DOUBLE_EQ(c.of(2), 1.8);
  EXPECT_DOUBLE_EQ(c.of(3), 2.0);  // halfway between 1.8 and 2.2
  EXPECT_DOUBLE_EQ(c.of(4), 2.2);
  EXPECT_DOUBLE_EQ(c.of(6), 2.4);
  EXPECT_DOUBLE_EQ(c.of(8), 2.6);
  EXPECT_DOUBLE_EQ(c.of(0), 0.0);
  EXPECT_GT(c.of(9), c.of(8));  // past the table: extrapolated, still growing
  EXPECT_GT(c.of(64), c.of(9));
}

TEST(DecodeCost, NoisyTablesAreAveragedNotRaised) {
  // The f32 run of docs/generator.md: a noisy 3 above 4. Out-of-order neighbours are
  // averaged (isotonic regression) instead of the larger one raising what follows.
  const std::vector<size_t> sizes = {1, 2, 3, 4, 6, 8};
  const std::vector<double> ms = {100.0, 103.0, 133.0, 112.0, 130.0, 164.0};
  const DecodeCost c = DecodeCost::from_ms(sizes, ms);
  ASSERT_EQ(c.relative.size(), 8u);
  EXPECT_DOUBLE_EQ(c.of(2), 1.03);
  EXPECT_NEAR(c.of(3), 1.225, 1e-12);
  EXPECT_GT(c.of(4), c.of(3));  // the average, plus the least slope (no free token)
  EXPECT_LT(c.of(4), 1.33);
  // A faster larger batch is not believed either, and no plateau is left: every token past
  // 2 costs at least half the table's average slope.
  const std::vector<double> flat = {10.0, 18.0, 20.0, 19.0};
  const std::vector<size_t> s4 = {1, 2, 4, 8};
  const DecodeCost f = DecodeCost::from_ms(s4, flat);
  const double least = 0.5 * (1.95 - 1.8) / 6.0;  // half the slope of the averaged table
  for (size_t n = 3; n <= 8; ++n) EXPECT_GE(f.of(n) - f.of(n - 1), least - 1e-12) << n;
  EXPECT_LT(f.of(4), 2.0);  // 20 and 19 averaged: 1.95
}

TEST(DecodeCost, SplitsPendingTokensWhereASingleWithoutLogitsIsCheaper) {
  DecodeCost c;
  c.relative = {1.0, 2.3, 2.4, 2.6};
  c.relative_last = {1.0, 1.9, 2.0, 2.1};
  // Unknown cost of a token without logits: never split.
  EXPECT_FALSE(c.split_pending(2, 0));
  EXPECT_DOUBLE_EQ(c.of_plan(2, 0), 1.9);
  c.set_no_logits_ms(7.2, 10.0);
  EXPECT_DOUBLE_EQ(c.one_no_logits, 0.72);
  // One pending token: 0.72 + 1 < 1.9, split; two: 1.44 + 1 > 2.0, one batch.
  EXPECT_TRUE(c.split_pending(2, 0));
  EXPECT_DOUBLE_EQ(c.of_plan(2, 0), 1.72);
  EXPECT_FALSE(c.split_pending(3, 0));
  EXPECT_DOUBLE_EQ(c.of_plan(3, 0), 2.0);
  EXPECT_FALSE(c.split_pending(1, 0));  // nothing to split
  // With a draft: 0.72 + of_pass(1, 1) = 3.02 vs of_pass(2, 1) = 2.0 + 0.4 / 2 = 2.2: one
  // batch.
  EXPECT_FALSE(c.split_pending(2, 1));
  EXPECT_DOUBLE_EQ(c.of_plan(2, 1), 2.2);
  // best_draft compares against the plan that runs without drafts (1.72, split): the draft
  // adds 2.2 - 1.72 = 0.48 and pays iff a > 0.48 (against the batch, 1.9, it would be 0.3).
  EXPECT_EQ(c.best_draft(2, 1, 0.45), 0u);
  EXPECT_EQ(c.best_draft(2, 1, 0.52), 1u);
  // A measurement of more than one token with logits is taken as 1 (never above).
  c.set_no_logits_ms(12.0, 10.0);
  EXPECT_DOUBLE_EQ(c.one_no_logits, 1.0);
  EXPECT_FALSE(c.split_pending(2, 0));
  EXPECT_THROW(c.set_no_logits_ms(0.0, 10.0), std::invalid_argument);
  EXPECT_THROW(c.set_no_logits_ms(5.0, -1.0), std::invalid_argument);
  EXPECT_THROW(c.set_no_logits_ms(std::nan(""), 10.0), std::invalid_argument);
}

TEST(DecodeCost, RejectsBadMeasurements) {
  const std::vector<size_t> sizes = {1, 2};
  const std::vector<size_t> no_one = {2, 4};
  const std::vector<size_t> unsorted = {1, 4, 2};
  const std::vector<double> two = {1.0, 2.0};
  const std::vector<double> three = {1.0, 2.0, 3.0};
  const std::vector<double> bad = {1.0, -2.0};
  EXPECT_THROW(DecodeCost::from_ms(sizes, three), std::invalid_argument);
  EXPECT_THROW(DecodeCost::from_ms(no_one, two), std::invalid_argument);
  EXPECT_THROW(DecodeCost::from_ms(unsorted, three), std::invalid_argument);
  EXPECT_THROW(DecodeCost::from_ms(sizes, bad), std::invalid_argument);
  EXPECT_THROW(DecodeCost::from_ms({}, {}), std::invalid_argument);
}

TEST(DecodeCost, BestDraftFollowsCostAndAcceptance) {
  // Nothing to draft, or nothing ever kept: no draft.
  EXPECT_EQ(flat_cost().best_draft(1, 0, 0.9), 0u);
  EXPECT_EQ(flat_cost().best_draft(1, 4, 0.0), 0u);
  // Batches cost nothing extra: draft everything that is available.
  EXPECT_EQ(flat_cost().best_draft(1, 3, 0.3), 3u);
  EXPECT_EQ(flat_cost().best_draft(1, 6, 0.5), 6u);
  // Linear cost: a pass of k drafts yields at most k + 1 tokens for k + 1 units: never a gain.
  EXPECT_EQ(linear_cost().best_draft(1, 8, 0.99), 0u);
  // A batch of 2 at 1.5: one draft pays iff 1 + a > 1.5.
  DecodeCost c;
  c.relative = {1.0, 1.5, 1.6, 1.7};
  EXPECT_EQ(c.best_draft(1, 1, 0.4), 0u);
  EXPECT_EQ(c.best_draft(1, 1, 0.6), 1u);
  // A high acceptance makes the longer (flatter) batches worth it.
  EXPECT_EQ(c.best_draft(1, 3, 0.95), 3u);
  // Pending tokens are paid for anyway: with 3 pending, a draft adds 1.7 - 1.6 = 0.1.
  EXPECT_EQ(c.best_draft(3, 1, 0.05), 0u);
  EXPECT_EQ(c.best_draft(3, 1, 0.2), 1u);
  // A long pending run on the linear model: still never a gain.
  EXPECT_EQ(linear_cost().best_draft(5, 3, 0.99), 0u);
  // Out-of-range rates are clamped, not trusted.
  EXPECT_EQ(c.best_draft(1, 2, -1.0), 0u);
  EXPECT_EQ(c.best_draft(1, 2, 7.0), 2u);
}

TEST(DecodeCost, PassCostChargesLogitsRowsToDraftsOnly) {
  DecodeCost c;
  c.relative = {1.0, 2.0, 2.1, 2.2};
  c.relative_last = {1.0, 1.5, 1.6, 1.7};
  EXPECT_DOUBLE_EQ(c.of_pass(1, 0), 1.0);
  EXPECT_DOUBLE_EQ(c.of_pass(1, 1), 2.0);   // two tokens, both with logits
  EXPECT_DOUBLE_EQ(c.of_pass(2, 0), 1.5);   // a pending token batch-filled
  EXPECT_DOUBLE_EQ(c.of_pass(2, 1), 1.85);  // 1.6 + one of the two extra logits rows (0.5 / 2)
  EXPECT_DOUBLE_EQ(c.of_pass(3, 0), 1.6);
  // After a pending token, a draft adds 0.35: it pays iff a > 0.35.
  EXPECT_EQ(c.best_draft(2, 1, 0.3), 0u);
  EXPECT_EQ(c.best_draft(2, 1, 0.4), 1u);
  const std::vector<size_t> sizes = {1, 2, 4};
  const std::vector<double> all = {10.0, 20.0, 22.0};
  const std::vector<double> last = {11.0, 15.0, 23.0};  // noise: above `all` at 1 and 4
  const DecodeCost m = DecodeCost::from_ms(sizes, all, last);
  ASSERT_EQ(m.relative_last.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_LE(m.relative_last[i], m.relative[i]);
  EXPECT_DOUBLE_EQ(m.relative_last[1], 1.5);
}

TEST(DecodeCost, DefaultIsATableStartingAtOne) {
  const DecodeCost c = DecodeCost::cpu_default();
  ASSERT_GE(c.relative.size(), 2u);
  EXPECT_DOUBLE_EQ(c.relative[0], 1.0);
  for (size_t i = 1; i < c.relative.size(); ++i) EXPECT_GE(c.relative[i], c.relative[i - 1]);
  ASSERT_EQ(c.relative_last.size(), c.relative.size());
  for (size_t i = 0; i < c.relative.size(); ++i) EXPECT_LE(c.relative_last[i], c.relative[i]);
  // On the measured machine a pending token is cheaper alone, without logits.
  EXPECT_GT(c.one_no_logits, 0.0);
  EXPECT_LT(c.one_no_logits, 1.0);
  EXPECT_TRUE(c.split_pending(2, 0));
}

TEST(DecodeOptions, DraftPolicyFromEnvironment) {
  ::setenv("LACUNA_DRAFT", "always", 1);
  EXPECT_EQ(decode_options_from_env().draft_policy, DraftPolicy::always);
  ::setenv("LACUNA_DRAFT", "adaptive", 1);
  EXPECT_EQ(decode_options_from_env().draft_policy, DraftPolicy::adaptive);
  ::setenv("LACUNA_DRAFT", "sometimes", 1);
  EXPECT_THROW(decode_options_from_env(), std::invalid_argument);
  ::unsetenv("LACUNA_DRAFT");
  EXPECT_EQ(decode_options_from_env().draft_policy, DraftPolicy::adaptive);
}

// tiny-llama3 with a short prompt decoded into sequence 0 (n_ctx 128, n_batch 32), and the
// sequence's last position after it (measuring must leave it there).
struct Prefilled {
  ModelHandle model;
  ContextHandle ctx;
  std::vector<Token> prompt;
  llama_memory_t mem = nullptr;
  llama_pos before = -1;
};

void prefill(Prefilled& p) {
  p.model = testing::load_model("tiny-llama3");
  ASSERT_NE(p.model, nullptr);
  p.ctx = testing::make_context(p.model.get(), 128, 32);
  ASSERT_NE(p.ctx, nullptr);
  p.prompt = testing::tokenize(llama_model_get_vocab(p.model.get()), "Hello there", true);
  llama_batch b = llama_batch_get_one(p.prompt.data(), static_cast<int32_t>(p.prompt.size()));
  ASSERT_EQ(llama_decode(p.ctx.get(), b), 0);
  p.mem = llama_get_memory(p.ctx.get());
  p.before = llama_memory_seq_pos_max(p.mem, 0);
}

TEST(MeasureDecodeCost, MeasuresAndLeavesTheCacheAsItWas) {
  Prefilled p;
  ASSERT_NO_FATAL_FAILURE(prefill(p));
  const std::vector<size_t> sizes = {1, 2, 4};
  std::vector<double> ms;
  const DecodeCost c = measure_decode_cost(p.ctx.get(), 0, sizes, 2, &ms);
  ASSERT_EQ(ms.size(), 3u);
  for (double v : ms) EXPECT_GT(v, 0.0);
  ASSERT_EQ(c.relative.size(), 4u);
  EXPECT_DOUBLE_EQ(c.relative[0], 1.0);
  EXPECT_EQ(llama_memory_seq_pos_max(p.mem, 0), p.before);
  std::vector<double> fill;
  measure_decode_cost(p.ctx.get(), 0, sizes, 1, &fill, false);
  EXPECT_EQ(fill.size(), 3u);
  EXPECT_EQ(llama_memory_seq_pos_max(p.mem, 0), p.before);
  EXPECT_GT(measure_decode_no_logits_ms(p.ctx.get(), 0, 2), 0.0);
  EXPECT_EQ(llama_memory_seq_pos_max(p.mem, 0), p.before);
  EXPECT_THROW(measure_decode_no_logits_ms(p.ctx.get(), 0, 0), std::invalid_argument);
  EXPECT_THROW(measure_decode_no_logits_ms(nullptr, 0, 1), std::invalid_argument);

  const std::vector<size_t> too_big = {1, 64};  // n_batch is 32
  const std::vector<size_t> no_one = {2};
  EXPECT_THROW(measure_decode_cost(p.ctx.get(), 0, too_big, 1), std::invalid_argument);
  EXPECT_THROW(measure_decode_cost(p.ctx.get(), 0, no_one, 1), std::invalid_argument);
  EXPECT_THROW(measure_decode_cost(p.ctx.get(), 0, sizes, 0), std::invalid_argument);
  EXPECT_THROW(measure_decode_cost(nullptr, 0, sizes, 1), std::invalid_argument);
}

TEST(CachedDecodeCost, MeasuresOncePerModelAndThreadsAndLeavesTheCache) {
  clear_decode_cost_cache();
  Prefilled p;
  ASSERT_NO_FATAL_FAILURE(prefill(p));
  const DecodeCost c = cached_decode_cost(p.ctx.get(), 0, 2);
  ASSERT_EQ(c.relative.size(), 8u);  // sizes up to 8
  ASSERT_EQ(c.relative_last.size(), 8u);
  EXPECT_DOUBLE_EQ(c.relative[0], 1.0);
  for (size_t i = 1; i < c.relative.size(); ++i) EXPECT_GE(c.relative[i], c.relative[i - 1]);
  for (size_t i = 0; i < c.relative.size(); ++i) EXPECT_LE(c.relative_last[i], c.relative[i]);
  EXPECT_GT(c.one_no_logits, 0.0);
  EXPECT_LE(c.one_no_logits, 1.0);
  EXPECT_EQ(llama_memory_seq_pos_max(p.mem, 0), p.before);
  // Cached: a second context of the same model and threads gets the same table, decoding
  // nothing (its empty sequence stays empty and its size does not matter).
  ContextHandle small = testing::make_context(p.model.get(), 128, 32);
  const DecodeCost again = cached_decode_cost(small.get(), 0, 2);
  EXPECT_EQ(again.relative, c.relative);
  EXPECT_EQ(again.relative_last, c.relative_last);
  EXPECT_EQ(llama_memory_seq_pos_max(llama_get_memory(small.get()), 0), -1);
  // No room for the batches: the default, not cached.
  clear_decode_cost_cache();
  ContextHandle tiny = testing::make_context(p.model.get(), 64, 32);
  ASSERT_NE(tiny, nullptr);
  const size_t n_fill = llama_n_ctx(tiny.get()) - 4;
  std::vector<Token> fill(n_fill);
  for (size_t i = 0; i < n_fill; ++i) fill[i] = p.prompt[i % p.prompt.size()];
  for (size_t at = 0; at < n_fill; at += 32) {
    const size_t n = std::min<size_t>(32, n_fill - at);
    llama_batch bf = llama_batch_get_one(fill.data() + at, static_cast<int32_t>(n));
    ASSERT_EQ(llama_decode(tiny.get(), bf), 0);
  }
  EXPECT_EQ(cached_decode_cost(tiny.get(), 0, 1).relative, DecodeCost::cpu_default().relative);
  EXPECT_THROW(cached_decode_cost(nullptr, 0, 1), std::invalid_argument);
  EXPECT_THROW(cached_decode_cost(p.ctx.get(), 0, 0), std::invalid_argument);
  clear_decode_cost_cache();
}

TEST(DecodeOptions, MeasureCostFromEnvironment) {
  ::setenv("LACUNA_MEASURE_COST", "1", 1);
  EXPECT_TRUE(decode_options_from_env().measure_cost);
  ::setenv("LACUNA_MEASURE_COST", "maybe", 1);
  EXPECT_THROW(decode_options_from_env(), std::invalid_argument);
  ::unsetenv("LACUNA_MEASURE_COST");
  EXPECT_FALSE(decode_options_from_env().measure_cost);
}

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"const": "get_weather"},
    "arguments": {
      "type": "object",
      "properties": {
        "location": {"enum": ["Lisbon", "Paris", "Oslo"]},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}
      },
      "required": ["location", "unit", "days"],
      "additionalProperties": false
    }
  },
  "required": ["name", "arguments"],
  "additionalProperties": false
})";

struct Policy {
  const char* name;
  bool verify;
  DraftPolicy policy;
  DecodeCost cost;
  bool measure = false;
  bool split = false;  // split_pending
};

// A pending token alone without logits (0.5) is always cheaper than batch-filling it.
DecodeCost split_cost() {
  DecodeCost c = linear_cost();
  c.relative_last = {1.0, 2.0, 3.0, 4.0};
  c.one_no_logits = 0.5;
  return c;
}

std::vector<Policy> policies() {
  return {
      {"off", false, DraftPolicy::adaptive, DecodeCost::cpu_default()},
      {"always", true, DraftPolicy::always, DecodeCost::cpu_default()},
      {"adaptive/flat", true, DraftPolicy::adaptive, flat_cost()},
      {"adaptive/linear", true, DraftPolicy::adaptive, linear_cost()},
      {"adaptive/default", true, DraftPolicy::adaptive, DecodeCost::cpu_default()},
      // The table measured on this context (cached_decode_cost) replaces the linear one.
      {"adaptive/measured", true, DraftPolicy::adaptive, linear_cost(), true},
      // Pending tokens decoded alone without logits, with and without drafts.
      {"split", false, DraftPolicy::adaptive, split_cost(), false, true},
      {"split/default", true, DraftPolicy::adaptive, DecodeCost::cpu_default(), false, true},
      {"split/measured", true, DraftPolicy::adaptive, split_cost(), true, true},
  };
}

struct Out {
  std::vector<Token> tokens;
  GenerationStats stats;
};

Out run(llama_context* ctx, const llama_vocab* vocab, const std::string& gbnf,
        const std::vector<Token>& prompt, const Policy& p, float temp, uint32_t seed) {
  llama_memory_clear(llama_get_memory(ctx), true);
  GeneratorConfig cfg;
  cfg.max_tokens = 64;
  cfg.temp = temp;
  cfg.seed = seed;
  cfg.decode.skip_forced = true;
  cfg.decode.verify_strings = p.verify;
  cfg.decode.draft_policy = p.policy;
  cfg.decode.cost = p.cost;
  cfg.decode.measure_cost = p.measure;
  cfg.decode.split_pending = p.split;
  Generator gen(ctx, cfg, decode::make_grammar_constraint(vocab, gbnf));
  gen.prefill(prompt);
  if (p.measure) {
    // The generator's table is the measured one, not the one it was given.
    EXPECT_EQ(gen.config().decode.cost.relative, cached_decode_cost(ctx, cfg.seq).relative);
    EXPECT_NE(gen.config().decode.cost.relative, p.cost.relative);
  }
  gen.generate();
  // A measurement, when there was one, is inside both the prefill and the total time.
  EXPECT_LE(gen.stats().prefill_ms, gen.stats().total_ms);
  return {gen.tokens(), gen.stats()};
}

class DraftPolicyOutput : public ::testing::TestWithParam<std::string> {};

TEST_P(DraftPolicyOutput, GreedyTokensIdenticalUnderEveryPolicy) {
  ModelHandle model = testing::load_model(GetParam());
  ASSERT_NE(model, nullptr) << testing::model_path(GetParam());
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = testing::make_context(model.get(), 512, 128);
  ASSERT_NE(ctx, nullptr);
  SchemaOptions so;
  so.whitespace = SchemaOptions::Whitespace::Compact;
  const std::string gbnf = json_schema_to_gbnf(kSchema, so);
  size_t flat_proposed = 0;
  for (const char* prompt_text : {"Call a tool:", "Weather in Oslo?\n"}) {
    SCOPED_TRACE(prompt_text);
    const auto prompt = testing::tokenize(vocab, prompt_text, true);
    const auto ps = policies();
    const Out ref = run(ctx.get(), vocab, gbnf, prompt, ps[0], 0.0f, 0);
    ASSERT_FALSE(ref.tokens.empty());
    EXPECT_EQ(ref.stats.draft_proposed, 0u);
    for (const Policy& p : ps) {
      SCOPED_TRACE(p.name);
      const Out o = run(ctx.get(), vocab, gbnf, prompt, p, 0.0f, 0);
      EXPECT_EQ(o.tokens, ref.tokens);
      EXPECT_EQ(o.stats.stop, ref.stats.stop);
      EXPECT_LE(o.stats.draft_accepted, o.stats.draft_proposed);
      if (std::string(p.name) == "adaptive/linear") {
        // Drafting can never gain: the forced strings were there, nothing was drafted.
        EXPECT_EQ(o.stats.draft_proposed, 0u);
        EXPECT_GT(o.stats.draft_declined, 0u);
        EXPECT_EQ(o.stats.forward_passes, ref.stats.forward_passes);
      }
      if (std::string(p.name) == "adaptive/flat") {
        EXPECT_EQ(o.stats.draft_declined, 0u);
        flat_proposed += o.stats.draft_proposed;
      }
      if (std::string(p.name) == "always") {
        EXPECT_EQ(o.stats.draft_declined, 0u);
      }
      if (!p.split) {
        EXPECT_EQ(o.stats.tokens_filled_alone, 0u);
      }
      if (std::string(p.name) == "split") {
        // Every pending token went alone: one more pass each, no batch-filled batch.
        EXPECT_EQ(o.stats.tokens_filled_alone, ref.stats.tokens_batch_filled);
        EXPECT_EQ(o.stats.forward_passes, ref.stats.forward_passes + ref.stats.tokens_batch_filled);
      }
    }
  }
  EXPECT_GT(flat_proposed, 0u) << "free batches must make the adaptive policy draft";
}

TEST_P(DraftPolicyOutput, DeclinedDraftsConsumeNoRandomDraw) {
  ModelHandle model = testing::load_model(GetParam());
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = testing::make_context(model.get(), 512, 128);
  ASSERT_NE(ctx, nullptr);
  SchemaOptions so;
  so.whitespace = SchemaOptions::Whitespace::Compact;
  const std::string gbnf = json_schema_to_gbnf(kSchema, so);
  const auto prompt = testing::tokenize(vocab, "Call a tool:", true);
  const auto ps = policies();
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    // Sampling with temperature: where the cost model declines every draft, the generator
    // takes exactly the draws of the path without verification.
    const Out off = run(ctx.get(), vocab, gbnf, prompt, ps[0], 1.2f, seed);
    const Out declined = run(ctx.get(), vocab, gbnf, prompt, ps[3], 1.2f, seed);
    EXPECT_EQ(declined.tokens, off.tokens) << "seed " << seed;
    EXPECT_EQ(declined.stats.draft_proposed, 0u);
    // With drafts, the draws differ but the output stays in the language.
    const Out flat = run(ctx.get(), vocab, gbnf, prompt, ps[2], 1.2f, seed);
    std::string text = testing::detokenize(vocab, flat.tokens);
    if (flat.stats.stop != StopReason::max_tokens) {
      EXPECT_NO_THROW({
        const auto j = nlohmann::json::parse(text);
        EXPECT_EQ(j.at("name"), "get_weather");
      }) << text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, DraftPolicyOutput,
                         ::testing::Values("tiny-llama3", "tiny-spm", "tiny-qwen2"));

}  // namespace
}  // namespace lacuna
