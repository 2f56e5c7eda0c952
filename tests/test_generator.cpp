// test_generator.cpp — the generator's decode loop: stop conditions, stats, errors, and its
// free (unconstrained) output against llama.cpp's plain loop.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "generator_fixtures.h"
#include "lacuna/generator.h"

namespace lacuna {
namespace {

using testing::ContextHandle;
using testing::ModelHandle;
using testing::SamplerHandle;

class GeneratorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::load_model("tiny-llama3").release();
    ASSERT_NE(model_, nullptr) << "missing " << testing::model_path("tiny-llama3");
    table_ = std::make_shared<testing::PieceTable>(llama_model_get_vocab(model_));
  }
  static void TearDownTestSuite() {
    table_.reset();
    llama_model_free(model_);
    model_ = nullptr;
  }
  void SetUp() override {
    ctx_ = testing::make_context(model_, 256, 64);
    ASSERT_NE(ctx_, nullptr);
    vocab_ = llama_model_get_vocab(model_);
    prompt_ = testing::tokenize(vocab_, "Tell me about the weather:", true);
  }

  static llama_model* model_;
  static std::shared_ptr<testing::PieceTable> table_;
  ContextHandle ctx_;
  const llama_vocab* vocab_ = nullptr;
  std::vector<Token> prompt_;
};

llama_model* GeneratorTest::model_ = nullptr;
std::shared_ptr<testing::PieceTable> GeneratorTest::table_;

TEST_F(GeneratorTest, FreeGreedyMatchesLlamaLoop) {
  SamplerHandle chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
  llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
  const auto ref = reference_generate(ctx_.get(), chain.get(), prompt_, 24);
  ASSERT_EQ(ref.tokens.size(), 24u);

  llama_memory_clear(llama_get_memory(ctx_.get()), true);
  GeneratorConfig cfg;
  cfg.max_tokens = 24;
  Generator gen(ctx_.get(), cfg);
  gen.prefill(prompt_);
  std::string streamed;
  size_t steps = 0;
  const StopReason why = gen.generate([&](const Step& s) {
    streamed.append(s.text);
    ++steps;
    return true;
  });
  EXPECT_EQ(why, StopReason::max_tokens);
  EXPECT_EQ(gen.tokens(), ref.tokens);
  EXPECT_EQ(streamed, gen.text());
  EXPECT_EQ(gen.text(), testing::detokenize(vocab_, ref.tokens));
  const auto& st = gen.stats();
  EXPECT_EQ(st.tokens_emitted, 24u);
  EXPECT_EQ(st.prompt_tokens, prompt_.size());
  // One pass per token after the first (the prompt's pass gives the first token).
  EXPECT_EQ(st.forward_passes, 23u);
  EXPECT_EQ(st.tokens_skipped, 0u);
  EXPECT_EQ(st.stop, StopReason::max_tokens);
  EXPECT_EQ(steps, 24u);
  EXPECT_EQ(gen.n_past(), static_cast<llama_pos>(prompt_.size() + 23));
  EXPECT_EQ(gen.n_pending(), 1u);
}

TEST_F(GeneratorTest, PullApiReportsDoneOnceAndStaysDone) {
  GeneratorConfig cfg;
  cfg.max_tokens = 3;
  Generator gen(ctx_.get(), cfg);
  gen.prefill(prompt_);
  size_t n = 0;
  Step s;
  do {
    s = gen.next();
    n += s.tokens.size();
  } while (!s.done);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(s.reason, StopReason::max_tokens);
  const Step again = gen.next();
  EXPECT_TRUE(again.done);
  EXPECT_TRUE(again.tokens.empty());
}

TEST_F(GeneratorTest, StopStringCutsTheText) {
  // Find a stop string that free generation reaches: the text of the 5th token onwards.
  GeneratorConfig cfg;
  cfg.max_tokens = 12;
  std::string full;
  {
    Generator gen(ctx_.get(), cfg);
    gen.prefill(prompt_);
    gen.generate();
    full = gen.text();
  }
  ASSERT_GT(full.size(), 8u);
  const std::string stop = full.substr(full.size() / 2, 3);
  const size_t at = full.find(stop);
  llama_memory_clear(llama_get_memory(ctx_.get()), true);
  cfg.stop_strings = {stop};
  Generator gen(ctx_.get(), cfg);
  gen.prefill(prompt_);
  EXPECT_EQ(gen.generate(), StopReason::stop_string);
  EXPECT_EQ(gen.text(), full.substr(0, at));
}

TEST_F(GeneratorTest, ConstraintCompletesAndOutputIsInTheSet) {
  auto c = std::make_unique<testing::StringSetConstraint>(
      table_, std::vector<std::string>{"{\"name\": \"get_weather\"}", "{\"name\": \"search\"}"});
  auto* raw = c.get();
  GeneratorConfig cfg;
  cfg.max_tokens = 64;
  Generator gen(ctx_.get(), cfg, std::move(c));
  gen.prefill(prompt_);
  const StopReason why = gen.generate();
  EXPECT_TRUE(why == StopReason::constraint_completed || why == StopReason::eog)
      << stop_reason_name(why);
  EXPECT_TRUE(gen.text() == "{\"name\": \"get_weather\"}" || gen.text() == "{\"name\": \"search\"}")
      << gen.text();
  EXPECT_EQ(raw->output(), gen.text());
  const auto& st = gen.stats();
  EXPECT_GT(st.tokens_skipped + st.draft_accepted, 0u);
  EXPECT_LT(st.forward_passes, st.tokens_emitted);
  EXPECT_EQ(st.tokens_emitted, gen.tokens().size());
  EXPECT_GE(st.mask_ms, 0.0);
  EXPECT_NE(st.to_json().find("\"tokens_skipped\":"), std::string::npos);
}

TEST_F(GeneratorTest, PrefillContinuesAfterAGeneration) {
  GeneratorConfig cfg;
  cfg.max_tokens = 4;
  Generator gen(ctx_.get(), cfg);
  gen.prefill(prompt_);
  gen.generate();
  const llama_pos before = gen.n_past() + static_cast<llama_pos>(gen.n_pending());
  const auto more = testing::tokenize(vocab_, " and then", false);
  gen.prefill(more);
  EXPECT_EQ(gen.n_past(), before + static_cast<llama_pos>(more.size()));
  EXPECT_EQ(gen.n_pending(), 0u);
  EXPECT_TRUE(gen.tokens().empty());
  gen.generate();
  EXPECT_EQ(gen.tokens().size(), 4u);
}

TEST_F(GeneratorTest, ContextFullStopsCleanly) {
  ContextHandle small = testing::make_context(model_, 32, 16);
  ASSERT_NE(small, nullptr);
  GeneratorConfig cfg;
  cfg.max_tokens = 0;  // unlimited: only the context stops it
  Generator gen(small.get(), cfg);
  gen.prefill(prompt_);
  EXPECT_EQ(gen.generate(), StopReason::context_full);
  EXPECT_LE(static_cast<size_t>(gen.n_past()) + gen.n_pending(), llama_n_ctx(small.get()));
}

TEST_F(GeneratorTest, BadInputGetsClearErrors) {
  GeneratorConfig cfg;
  EXPECT_THROW(Generator(nullptr, cfg), std::invalid_argument);
  GeneratorConfig nan_cfg;
  nan_cfg.temp = std::nanf("");
  EXPECT_THROW(Generator(ctx_.get(), nan_cfg), std::invalid_argument);
  GeneratorConfig seq_cfg;
  seq_cfg.seq = 7;
  EXPECT_THROW(Generator(ctx_.get(), seq_cfg), std::invalid_argument);
  GeneratorConfig stop_cfg;
  stop_cfg.stop_strings = {""};
  EXPECT_THROW(Generator(ctx_.get(), stop_cfg), std::invalid_argument);

  Generator gen(ctx_.get(), cfg);
  EXPECT_THROW(gen.next(), std::logic_error);
  const std::vector<Token> bad = {1, -5};
  EXPECT_THROW(gen.prefill(bad), std::invalid_argument);
  const std::vector<Token> too_big = {llama_vocab_n_tokens(vocab_)};
  EXPECT_THROW(gen.prefill(too_big), std::invalid_argument);
  EXPECT_THROW(gen.prefill(std::vector<Token>{}), std::invalid_argument);
  const std::vector<Token> huge(300, 1);
  EXPECT_THROW(gen.prefill(huge), std::runtime_error);

  // A constraint built for another vocabulary.
  ModelHandle spm = testing::load_model("tiny-spm");
  ASSERT_NE(spm, nullptr);
  auto other = std::make_shared<testing::PieceTable>(llama_model_get_vocab(spm.get()));
  EXPECT_THROW(Generator(ctx_.get(), cfg,
                         std::make_unique<testing::StringSetConstraint>(
                             other, std::vector<std::string>{"a"})),
               std::invalid_argument);
}

TEST(DecodeOptions, EnvironmentSwitches) {
  ::setenv("LACUNA_SKIP", "0", 1);
  ::setenv("LACUNA_VERIFY", "1", 1);
  ::setenv("LACUNA_JUMP", "1", 1);
  ::setenv("LACUNA_MAX_DRAFT", "5", 1);
  DecodeOptions o = decode_options_from_env();
  EXPECT_FALSE(o.skip_forced);
  EXPECT_TRUE(o.verify_strings);
  EXPECT_TRUE(o.jump_forward);
  EXPECT_EQ(o.max_draft, 5u);
  ::setenv("LACUNA_SKIP", "maybe", 1);
  EXPECT_THROW(decode_options_from_env(), std::invalid_argument);
  ::setenv("LACUNA_SKIP", "1", 1);
  ::setenv("LACUNA_MAX_DRAFT", "-3", 1);
  EXPECT_THROW(decode_options_from_env(), std::invalid_argument);
  ::setenv("LACUNA_MAX_DRAFT", "12x", 1);
  EXPECT_THROW(decode_options_from_env(), std::invalid_argument);
  ::unsetenv("LACUNA_SKIP");
  ::unsetenv("LACUNA_VERIFY");
  ::unsetenv("LACUNA_JUMP");
  ::unsetenv("LACUNA_MAX_DRAFT");
  o = decode_options_from_env();
  EXPECT_TRUE(o.skip_forced);
  EXPECT_TRUE(o.verify_strings);
  EXPECT_FALSE(o.jump_forward);
  ::setenv("LACUNA_STATS", "1", 1);
  EXPECT_TRUE(stats_enabled_from_env());
  ::setenv("LACUNA_STATS", "0", 1);
  EXPECT_FALSE(stats_enabled_from_env());
  ::unsetenv("LACUNA_STATS");
}

}  // namespace
}  // namespace lacuna
