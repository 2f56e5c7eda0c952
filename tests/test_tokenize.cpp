// test_tokenize.cpp — tokenize/detokenize round trips and vocabulary facts on real tokenizers
// (llama-bpe, llama-spm, qwen2 from llama.cpp's models/ggml-vocab-*.gguf, vocab-only loads).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "lacuna/model.h"

namespace {

std::string vocab_file(const std::string& name) {
  return std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-" + name + ".gguf";
}

// Vocab-only loads, cached: a BPE vocabulary with its merges takes about a second to load.
lacuna::Model load_vocab(const std::string& name) {
  static std::map<std::string, lacuna::Model> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    lacuna::ModelParams params;
    params.vocab_only = true;
    it = cache.emplace(name, lacuna::Model::load(vocab_file(name), params)).first;
  }
  return it->second;
}

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      "  leading spaces, trailing spaces  ",
      "tabs\tand\nnewlines\n\n and {\"json\": [1, 2.5, true, null]}",
      "héllo wörld — naïve café",
      "日本語のテキスト、中文文本",
      "Привет, мир! Ελληνικά",
      "emoji 🙂🚀 and math ∑ x² ≤ ∞",
      "mixed: fn main() { println!(\"{}\", 42); } // ok",
  };
  return texts;
}

struct VocabCase {
  const char* name;
  int32_t n_vocab;
  enum llama_vocab_type type;
};

class TokenizeTest : public ::testing::TestWithParam<VocabCase> {};

TEST_P(TokenizeTest, VocabularyFacts) {
  const VocabCase& c = GetParam();
  const lacuna::Model model = load_vocab(c.name);
  EXPECT_TRUE(model.vocab_only());
  const lacuna::Vocab vocab = model.vocab();
  EXPECT_EQ(vocab.n_vocab(), c.n_vocab);
  EXPECT_EQ(vocab.type(), c.type);
  EXPECT_TRUE(vocab.valid(0));
  EXPECT_FALSE(vocab.valid(-1));
  EXPECT_FALSE(vocab.valid(c.n_vocab));
  // Every vocabulary here has an end-of-sequence token that ends generation.
  ASSERT_TRUE(vocab.valid(vocab.eos()));
  EXPECT_TRUE(vocab.is_eog(vocab.eos()));
  EXPECT_FALSE(vocab.is_eog(c.n_vocab + 5));
  EXPECT_FALSE(vocab.is_control(-3));
  EXPECT_THROW(vocab.text(c.n_vocab), std::out_of_range);
  EXPECT_THROW(lacuna::token_to_piece(vocab, -1), std::out_of_range);
  EXPECT_THROW(lacuna::token_to_piece(vocab, c.n_vocab), std::out_of_range);
  const std::vector<lacuna::Token> bad = {0, c.n_vocab};
  EXPECT_THROW(lacuna::detokenize(vocab, bad), std::out_of_range);
}

TEST_P(TokenizeTest, RoundTripsAsciiAndNonAscii) {
  const lacuna::Model model = load_vocab(GetParam().name);
  const lacuna::Vocab vocab = model.vocab();
  for (const std::string& text : sample_texts()) {
    const std::vector<lacuna::Token> tokens = lacuna::tokenize(vocab, text, false, false);
    ASSERT_FALSE(tokens.empty()) << text;
    for (lacuna::Token t : tokens) ASSERT_TRUE(vocab.valid(t));
    EXPECT_EQ(lacuna::detokenize(vocab, tokens), text) << GetParam().name;

    // With BOS/EOS added as the vocabulary asks, remove_special drops them again. For SPM
    // (which tokenizes with a space prefix) llama.cpp keeps that space when it drops the BOS.
    const std::vector<lacuna::Token> with_special = lacuna::tokenize(vocab, text, true, false);
    if (vocab.add_bos()) {
      ASSERT_EQ(with_special.size(), tokens.size() + 1);
      EXPECT_EQ(with_special.front(), vocab.bos());
    }
    const std::string expected = vocab.type() == LLAMA_VOCAB_TYPE_SPM ? " " + text : text;
    EXPECT_EQ(lacuna::detokenize(vocab, with_special, /*remove_special=*/true), expected);
  }
}

TEST_P(TokenizeTest, PiecesConcatenateToTheText) {
  const lacuna::Model model = load_vocab(GetParam().name);
  const lacuna::Vocab vocab = model.vocab();
  for (const std::string& text : sample_texts()) {
    const std::vector<lacuna::Token> tokens = lacuna::tokenize(vocab, text, false, false);
    std::string joined;
    for (lacuna::Token t : tokens) {
      const size_t before = joined.size();
      const size_t n = lacuna::append_token_piece(vocab, t, joined);
      EXPECT_EQ(joined.size(), before + n);
      EXPECT_EQ(joined.substr(before), lacuna::token_to_piece(vocab, t));
    }
    // SPM vocabularies add a leading space when tokenizing; detokenize removes it.
    if (vocab.type() == LLAMA_VOCAB_TYPE_SPM) {
      ASSERT_EQ(joined[0], ' ');
      joined.erase(0, 1);
    }
    EXPECT_EQ(joined, text) << GetParam().name;
  }
}

TEST_P(TokenizeTest, LongTextAndEmptyText) {
  const lacuna::Model model = load_vocab(GetParam().name);
  const lacuna::Vocab vocab = model.vocab();
  std::string text;
  for (int i = 0; i < 400; ++i) text += "word" + std::to_string(i) + " ünïcødé ";
  const std::vector<lacuna::Token> tokens = lacuna::tokenize(vocab, text, false, false);
  EXPECT_GT(tokens.size(), 800u);
  EXPECT_EQ(lacuna::detokenize(vocab, tokens), text);

  EXPECT_TRUE(lacuna::tokenize(vocab, "", false, false).empty());
  EXPECT_EQ(lacuna::detokenize(vocab, std::vector<lacuna::Token>{}), "");
}

INSTANTIATE_TEST_SUITE_P(RealVocabs, TokenizeTest,
                         ::testing::Values(VocabCase{"llama-bpe", 128256, LLAMA_VOCAB_TYPE_BPE},
                                           VocabCase{"llama-spm", 32000, LLAMA_VOCAB_TYPE_SPM},
                                           VocabCase{"qwen2", 151936, LLAMA_VOCAB_TYPE_BPE}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

TEST(Tokenize, SpecialTokensParseOnlyWhenAsked) {
  const lacuna::Model model = load_vocab("llama-bpe");
  const lacuna::Vocab vocab = model.vocab();
  const std::string text = "hi<|eot_id|>";
  const std::vector<lacuna::Token> parsed = lacuna::tokenize(vocab, text, false, true);
  ASSERT_GE(parsed.size(), 2u);
  const lacuna::Token eot = parsed.back();
  EXPECT_TRUE(vocab.is_eog(eot));
  EXPECT_TRUE(vocab.is_control(eot));
  EXPECT_EQ(vocab.text(eot), "<|eot_id|>");
  // A control token renders only with special = true / unparse_special = true.
  EXPECT_EQ(lacuna::token_to_piece(vocab, eot, false), "");
  EXPECT_EQ(lacuna::token_to_piece(vocab, eot, true), "<|eot_id|>");
  EXPECT_EQ(lacuna::detokenize(vocab, parsed, false, true), text);
  EXPECT_EQ(lacuna::detokenize(vocab, parsed, false, false), "hi");

  // As plain text the same characters are several ordinary tokens.
  const std::vector<lacuna::Token> plain = lacuna::tokenize(vocab, text, false, false);
  EXPECT_GT(plain.size(), parsed.size());
  for (lacuna::Token t : plain) EXPECT_FALSE(vocab.is_control(t));
  EXPECT_EQ(lacuna::detokenize(vocab, plain), text);
}

TEST(Tokenize, SpmByteFallbackCoversRareCharacters) {
  const lacuna::Model model = load_vocab("llama-spm");
  const lacuna::Vocab vocab = model.vocab();
  // A character absent from the 32k SPM vocabulary is encoded as UTF-8 byte tokens.
  const std::string text = "𓀀";
  const std::vector<lacuna::Token> tokens = lacuna::tokenize(vocab, text, false, false);
  int byte_tokens = 0;
  for (lacuna::Token t : tokens) {
    if (vocab.attr(t) & LLAMA_TOKEN_ATTR_BYTE) ++byte_tokens;
  }
  EXPECT_EQ(byte_tokens, 4);  // the 4 UTF-8 bytes of U+13000
  EXPECT_EQ(lacuna::detokenize(vocab, tokens), text);
}

TEST(Tokenize, VocabOnlyModelCannotMakeAContext) {
  const lacuna::Model model = load_vocab("qwen2");
  EXPECT_THROW(lacuna::Context::create(model), lacuna::LlamaError);
}

}  // namespace
