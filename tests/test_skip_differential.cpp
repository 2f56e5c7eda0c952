// test_skip_differential.cpp — exactness of tier 1: llama.cpp's grammar sampler, lacuna
// without skipping, with single-token skipping and with verified forced strings give the
// same greedy tokens on the three tiny vocabularies; with a fixed seed and temperature,
// skipping consumes no draw; verified forced strings keep the output distribution. The same on
// quantized (q4_0, q8_0) variants of two tiny models, whose batched and one-token kernels differ
// most; and llama.cpp's common_sampler way (grammar-based rejection) gives the same tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "chi_square.h"
#include "generator_fixtures.h"
#include "lacuna/generator.h"
#include "lacuna/make_model.h"

namespace lacuna {
namespace {

using testing::ContextHandle;
using testing::ModelHandle;
using testing::SamplerHandle;

const std::vector<std::vector<std::string>>& string_sets() {
  static const std::vector<std::vector<std::string>> sets = {
      {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Berlin\", \"unit\": "
       "\"fahrenheit\"}}",
       "{\"name\": \"search\", \"arguments\": {\"query\": \"cheap flights to Rome\"}}"},
      {"yes", "no", "not sure, ask again later"},
      {"The quick brown fox jumps over the lazy dog. {\"done\": true}"},
  };
  return sets;
}

const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p = {"Call a tool for the user:", "Q: is it raining?\nA:"};
  return p;
}

struct Mode {
  const char* name;
  bool skip;
  bool verify;
  // Verification is tested with drafts at every forced string (`always`); the adaptive
  // policy (the default) drafts only where the cost model expects a gain.
  DraftPolicy policy = DraftPolicy::always;
};
const Mode kModes[] = {
    {"plain", false, false},
    {"skip", true, false},
    {"verify", false, true},
    {"skip+verify", true, true},
    {"skip+verify/adaptive", true, true, DraftPolicy::adaptive},
};

struct RunResult {
  std::vector<Token> tokens;
  std::string text;
  GenerationStats stats;
};

RunResult run_lacuna(llama_context* ctx, const std::shared_ptr<testing::PieceTable>& table,
                     const std::vector<std::string>& set, const std::vector<Token>& prompt,
                     const Mode& m, float temp = 0.0f, uint32_t seed = 0) {
  llama_memory_clear(llama_get_memory(ctx), true);
  GeneratorConfig cfg;
  cfg.max_tokens = 64;
  cfg.temp = temp;
  cfg.seed = seed;
  cfg.decode.skip_forced = m.skip;
  cfg.decode.verify_strings = m.verify;
  cfg.decode.jump_forward = false;
  cfg.decode.draft_policy = m.policy;
  Generator gen(ctx, cfg, std::make_unique<testing::StringSetConstraint>(table, set));
  gen.prefill(prompt);
  gen.generate();
  return {gen.tokens(), gen.text(), gen.stats()};
}

// "<preset>" (made by ctest's fixture) or "<preset>-<weight type>", a variant of a tiny preset
// written next to it on first use (make_model with skip_existing; a second of work).
ModelHandle load_test_model(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash != std::string::npos) {
    const std::string suffix = name.substr(dash + 1);
    if (suffix == "q4_0" || suffix == "q8_0" || suffix == "f16") {
      MakeModelOptions opt;
      opt.preset = name.substr(0, dash);
      opt.type = parse_weight_type(suffix);
      opt.out_path = testing::model_path(name);
      opt.skip_existing = true;
      make_model(opt);
    }
  }
  return testing::load_model(name);
}

class SkipDifferential : public ::testing::TestWithParam<std::string> {};

TEST_P(SkipDifferential, GreedyTokensIdenticalAcrossPaths) {
  ModelHandle model = load_test_model(GetParam());
  ASSERT_NE(model, nullptr) << testing::model_path(GetParam());
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  auto table = std::make_shared<testing::PieceTable>(vocab);
  ContextHandle ctx = testing::make_context(model.get(), 512, 128);
  ASSERT_NE(ctx, nullptr);

  size_t plain_passes = 0;
  size_t fast_passes = 0;
  size_t skipped = 0;
  size_t accepted = 0;
  for (const auto& set : string_sets()) {
    const std::string gbnf = testing::string_set_gbnf(set);
    for (const auto& prompt_text : prompts()) {
      SCOPED_TRACE(prompt_text + " / " + set[0]);
      const auto prompt = testing::tokenize(vocab, prompt_text, true);
      SamplerHandle chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
      llama_sampler* grammar = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
      ASSERT_NE(grammar, nullptr) << gbnf;
      llama_sampler_chain_add(chain.get(), grammar);
      llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
      const auto ref = reference_generate(ctx.get(), chain.get(), prompt, 64);
      ASSERT_EQ(ref.stats.stop, StopReason::eog);
      const std::string ref_text = testing::detokenize(vocab, ref.tokens);
      EXPECT_NE(std::find(set.begin(), set.end(), ref_text), set.end()) << ref_text;
      {
        // common_sampler's default: greedy first, the grammar checks that token, a
        // full-vocabulary grammar pass only when it is rejected. Same tokens.
        SamplerHandle g(llama_sampler_init_grammar(vocab, gbnf.c_str(), "root"));
        SamplerHandle greedy(llama_sampler_chain_init(llama_sampler_chain_default_params()));
        llama_sampler_chain_add(greedy.get(), llama_sampler_init_greedy());
        const auto rej = reference_generate_rejection(ctx.get(), g.get(), greedy.get(), prompt, 64);
        EXPECT_EQ(rej.tokens, ref.tokens);
        EXPECT_EQ(rej.stats.stop, StopReason::eog);
        // A random-weight model's own choice rarely fits: most tokens are resampled, but
        // not more than were sampled.
        EXPECT_LE(rej.grammar_resamples, rej.tokens.size() + 1);
        EXPECT_GT(rej.grammar_resamples, 0u);
      }

      for (const Mode& m : kModes) {
        SCOPED_TRACE(m.name);
        const RunResult r = run_lacuna(ctx.get(), table, set, prompt, m);
        EXPECT_EQ(r.tokens, ref.tokens);
        EXPECT_EQ(r.text, ref_text);
        // "no" is complete and a prefix of "not sure, ...": the model may pick EOG there.
        EXPECT_TRUE(r.stats.stop == StopReason::constraint_completed ||
                    r.stats.stop == StopReason::eog)
            << stop_reason_name(r.stats.stop);
        EXPECT_EQ(r.stats.tokens_emitted, r.tokens.size());
        if (!m.skip) {
          EXPECT_EQ(r.stats.tokens_skipped, 0u);
        }
        if (!m.verify) {
          EXPECT_EQ(r.stats.draft_proposed, 0u);
        }
        EXPECT_LE(r.stats.draft_accepted, r.stats.draft_proposed);
        if (!m.skip && !m.verify) {
          plain_passes += r.stats.forward_passes;
          // Without skipping every token costs one pass (the prompt's pass gives the first
          // token, and one more pass shows that only end-of-generation may follow).
          EXPECT_EQ(r.stats.forward_passes, r.tokens.size());
        }
        if (m.skip && m.verify && m.policy == DraftPolicy::always) {
          fast_passes += r.stats.forward_passes;
          skipped += r.stats.tokens_skipped;
          accepted += r.stats.draft_accepted;
        }
      }
    }
  }
  EXPECT_GT(accepted, 0u);
  if (llama_vocab_type(vocab) == LLAMA_VOCAB_TYPE_SPM) {
    // Byte fallback: every character also has a byte token, so no single token is ever
    // forced; verified forced strings do the saving alone.
    EXPECT_EQ(skipped, 0u);
    EXPECT_LT(fast_passes * 4, plain_passes * 3)
        << "verified strings should save a quarter of the passes";
  } else {
    EXPECT_GT(skipped, 0u);
    EXPECT_LT(fast_passes * 3, plain_passes * 2)
        << "skipping should save at least a third of the passes";
  }
}

TEST_P(SkipDifferential, SeededSamplingSkipConsumesNoDraw) {
  ModelHandle model = load_test_model(GetParam());
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  auto table = std::make_shared<testing::PieceTable>(vocab);
  ContextHandle ctx = testing::make_context(model.get(), 512, 128);
  ASSERT_NE(ctx, nullptr);
  const auto prompt = testing::tokenize(vocab, prompts()[0], true);
  size_t differing_outputs = 0;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    for (const auto& set : string_sets()) {
      const RunResult plain = run_lacuna(ctx.get(), table, set, prompt, kModes[0], 1.5f, seed);
      const RunResult skip = run_lacuna(ctx.get(), table, set, prompt, kModes[1], 1.5f, seed);
      EXPECT_EQ(plain.tokens, skip.tokens) << "seed " << seed;
      EXPECT_NE(std::find(set.begin(), set.end(), plain.text), set.end()) << plain.text;
      // Verified strings use the speculative rule: a different draw order, the same
      // distribution; every output must still be in the language.
      const RunResult verify = run_lacuna(ctx.get(), table, set, prompt, kModes[3], 1.5f, seed);
      EXPECT_NE(std::find(set.begin(), set.end(), verify.text), set.end()) << verify.text;
      if (set.size() == 1) {
        // Same text, but the tokenization is sampled: seeds must not all agree.
        differing_outputs +=
            plain.tokens !=
            run_lacuna(ctx.get(), table, set, prompt, kModes[0], 1.5f, seed + 100).tokens;
      }
    }
  }
  EXPECT_GT(differing_outputs, 0u) << "sampling should vary the tokenization across seeds";
}

INSTANTIATE_TEST_SUITE_P(TinyModels, SkipDifferential,
                         ::testing::Values("tiny-llama3", "tiny-spm", "tiny-qwen2"));
// Quantized weights: llama.cpp multiplies one-token and batched inputs with different kernels
// (and may repack q4_0 for the batched one), the case where batch-filling could differ.
INSTANTIATE_TEST_SUITE_P(QuantizedTinyModels, SkipDifferential,
                         ::testing::Values("tiny-qwen2-q4_0", "tiny-llama3-q8_0"));

using lacuna::testing::chi_square;
using lacuna::testing::chi_square_critical_999;

TEST(SkipDistribution, VerifiedForcedStringsKeepTheDistribution) {
  ModelHandle model = testing::load_model("tiny-spm");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  auto table = std::make_shared<testing::PieceTable>(vocab);
  ContextHandle ctx = testing::make_context(model.get(), 256, 64);
  ASSERT_NE(ctx, nullptr);
  // One string: everything is forced as a string, only the tokenization is sampled, so the
  // verified path drafts at every step. A second string gives a real choice as well.
  const std::vector<std::string> set = {"{\"city\": \"Paris\"}", "{\"city\": \"Rome\"}"};
  const auto prompt = testing::tokenize(vocab, "Weather:", true);
  auto category = [&](const std::vector<Token>& toks) {
    std::string key;
    for (size_t i = 0; i < toks.size() && i < 3; ++i) key += std::to_string(toks[i]) + ",";
    return key;
  };
  std::map<std::string, int> plain;
  std::map<std::string, int> verified;
  std::map<std::string, int> jumped;
  const int n = 400;
  size_t proposed = 0;
  for (int seed = 0; seed < n; ++seed) {
    const RunResult a = run_lacuna(ctx.get(), table, set, prompt, kModes[0], 1.0f, 1000u + seed);
    const RunResult b = run_lacuna(ctx.get(), table, set, prompt, kModes[3], 1.0f, 5000u + seed);
    plain[category(a.tokens)]++;
    verified[category(b.tokens)]++;
    proposed += b.stats.draft_proposed;
    // Tier 2 (unverified jump-forward) always takes the canonical split: the test must see it.
    llama_memory_clear(llama_get_memory(ctx.get()), true);
    GeneratorConfig cfg;
    cfg.max_tokens = 64;
    cfg.temp = 1.0f;
    cfg.seed = 9000u + seed;
    cfg.decode.jump_forward = true;
    Generator gen(ctx.get(), cfg, std::make_unique<testing::StringSetConstraint>(table, set));
    gen.prefill(prompt);
    gen.generate();
    jumped[category(gen.tokens())]++;
    EXPECT_NE(std::find(set.begin(), set.end(), gen.text()), set.end()) << gen.text();
  }
  EXPECT_GT(proposed, static_cast<size_t>(n));
  const auto [stat, df] = chi_square(plain, verified, 10);
  ASSERT_GE(df, 3) << "too few categories for a meaningful test";
  EXPECT_LT(stat, chi_square_critical_999(df)) << "df " << df;
  const auto [jstat, jdf] = chi_square(plain, jumped, 10);
  EXPECT_GT(jstat, chi_square_critical_999(jdf))
      << "the test cannot tell a changed distribution apart";
}

}  // namespace
}  // namespace lacuna
