// test_forced_string.cpp — drafts for forced strings: byte-exact canonical tokenization in
// mid-text on the three tokenizer families (BPE llama-3, SentencePiece, qwen2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode/forced_string.h"
#include "generator_fixtures.h"

namespace lacuna {
namespace {

class ForcedString : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::quiet_llama();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    const std::string path =
        std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-" + GetParam() + ".gguf";
    model_.reset(llama_model_load_from_file(path.c_str(), mp));
    ASSERT_NE(model_, nullptr) << path;
    vocab_ = llama_model_get_vocab(model_.get());
  }
  testing::ModelHandle model_;
  const llama_vocab* vocab_ = nullptr;
};

TEST_P(ForcedString, TokensSpellTheStringExactly) {
  decode::ForcedStringScratch scratch;
  std::vector<Token> out;
  const std::vector<std::string> strings = {
      "{\"name\": \"",
      "\", \"arguments\": {\"",
      "\"}}",
      " \"unit\": \"celsius\"",
      "\n  \"city\": ",
      "true",
      "}",
      "  leading spaces",
      "tab\there",
      "\xc3\xa9t\xc3\xa9",
      "\"",
      "0123456789",
  };
  for (const auto& s : strings) {
    SCOPED_TRACE(s);
    const size_t n = decode::tokenize_forced_string(vocab_, s, out, scratch);
    ASSERT_EQ(n, out.size());
    ASSERT_GT(n, 0u);
    // Byte-exact: no space prefix, no BOS, nothing dropped.
    EXPECT_EQ(testing::detokenize(vocab_, out), s);
    for (Token t : out) EXPECT_FALSE(llama_vocab_is_control(vocab_, t));
  }
}

TEST_P(ForcedString, MatchesTheTokenizerInMidText) {
  // The draft of a string is what the tokenizer itself produces when that string follows a
  // newline in a longer text: the split the model saw in training.
  decode::ForcedStringScratch scratch;
  std::vector<Token> out;
  const std::string s = "{\"name\": \"get_weather\"";
  decode::tokenize_forced_string(vocab_, s, out, scratch);
  const auto whole = testing::tokenize(vocab_, "x\n" + s, false);
  ASSERT_GE(whole.size(), out.size());
  const std::vector<Token> tail(whole.end() - static_cast<std::ptrdiff_t>(out.size()), whole.end());
  EXPECT_EQ(tail, out);
}

TEST_P(ForcedString, EmptyStringGivesNoTokens) {
  decode::ForcedStringScratch scratch;
  std::vector<Token> out = {1, 2};
  EXPECT_EQ(decode::tokenize_forced_string(vocab_, "", out, scratch), 0u);
  EXPECT_TRUE(out.empty());
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, ForcedString,
                         ::testing::Values("llama-bpe", "llama-spm", "qwen2"));

}  // namespace
}  // namespace lacuna
