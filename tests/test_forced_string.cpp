// test_forced_string.cpp — drafts for forced strings: byte-exact canonical tokenization in
// mid-text on the three tokenizer families (BPE llama-3, SentencePiece, qwen2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode/constraint_factory.h"
#include "decode/forced_string.h"
#include "generator_fixtures.h"
#include "lacuna/json_schema.h"

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

// What the generator drafts from: the grammar's forced string in a compact tool-call schema
// runs across keys, punctuation and the const value up to the first free choice, and each
// draft token is one the constraint accepts.
TEST_P(ForcedString, SchemaForcesTheWholeStructureUpToAChoice) {
  SchemaOptions so;
  so.whitespace = SchemaOptions::Whitespace::Compact;
  const std::string gbnf = json_schema_to_gbnf(R"({"type": "object",
    "properties": {"name": {"const": "get_weather"},
      "arguments": {"type": "object", "properties": {"unit": {"enum": ["celsius", "kelvin"]}},
                    "required": ["unit"], "additionalProperties": false}},
    "required": ["name", "arguments"], "additionalProperties": false})",
                                               so);
  auto c = decode::make_grammar_constraint(vocab_, gbnf);
  const std::string forced = c->jump_forward_string();
  EXPECT_EQ(forced, "{\"name\":\"get_weather\",\"arguments\":{\"unit\":\"");
  decode::ForcedStringScratch scratch;
  std::vector<Token> drafts;
  ASSERT_GT(decode::tokenize_forced_string(vocab_, forced, drafts, scratch), 0u);
  for (Token t : drafts) EXPECT_TRUE(c->accept_token(t)) << t;
  // After the forced part, the enum's first letter is the choice: nothing is forced.
  EXPECT_EQ(c->jump_forward_string(), "");
  // One letter later the rest of the value and the closing brackets are forced.
  std::vector<Token> k;
  ASSERT_GT(decode::tokenize_forced_string(vocab_, "k", k, scratch), 0u);
  ASSERT_TRUE(c->accept_token(k[0]));
  EXPECT_EQ(c->jump_forward_string(), "elvin\"}}");
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, ForcedString,
                         ::testing::Values("llama-bpe", "llama-spm", "qwen2"));

}  // namespace
}  // namespace lacuna
