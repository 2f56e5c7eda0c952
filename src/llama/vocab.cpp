// vocab.cpp — vocabulary facts and tokenize/detokenize helpers over llama.cpp's vocab API.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "lacuna/model.h"

namespace lacuna {
namespace {

void check_token(const Vocab& vocab, Token t) {
  if (!vocab.valid(t)) {
    throw std::out_of_range("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                            std::to_string(vocab.n_vocab()) + ")");
  }
}

}  // namespace

Vocab::Vocab(const llama_vocab* vocab) : vocab_(vocab), n_vocab_(0) {
  if (vocab == nullptr) throw std::invalid_argument("lacuna::Vocab: null llama_vocab");
  n_vocab_ = llama_vocab_n_tokens(vocab);
}

const char* Vocab::type_name() const {
  switch (type()) {
    case LLAMA_VOCAB_TYPE_NONE:
      return "none";
    case LLAMA_VOCAB_TYPE_SPM:
      return "SPM";
    case LLAMA_VOCAB_TYPE_BPE:
      return "BPE";
    case LLAMA_VOCAB_TYPE_WPM:
      return "WPM";
    case LLAMA_VOCAB_TYPE_UGM:
      return "UGM";
    case LLAMA_VOCAB_TYPE_RWKV:
      return "RWKV";
    case LLAMA_VOCAB_TYPE_PLAMO2:
      return "PLAMO2";
    case LLAMA_VOCAB_TYPE_TEST:
      return "TEST";
  }
  return "unknown";
}

llama_token_attr Vocab::attr(Token t) const {
  check_token(*this, t);
  return llama_vocab_get_attr(vocab_, t);
}

std::string Vocab::text(Token t) const {
  check_token(*this, t);
  const char* s = llama_vocab_get_text(vocab_, t);
  return s ? std::string(s) : std::string();
}

std::vector<Token> tokenize(const Vocab& vocab, std::string_view text, bool add_special,
                            bool parse_special) {
  if (text.size() > static_cast<size_t>(INT32_MAX)) {
    throw std::length_error("tokenize: text of " + std::to_string(text.size()) +
                            " bytes is too long for llama.cpp");
  }
  // llama.cpp asserts (aborts) when asked to add a BOS/EOS the vocabulary does not have.
  if (add_special && ((vocab.add_bos() && vocab.bos() == LLAMA_TOKEN_NULL) ||
                      (vocab.add_eos() && vocab.eos() == LLAMA_TOKEN_NULL))) {
    throw std::invalid_argument(
        "tokenize: the vocabulary asks for a BOS/EOS token it does not define; "
        "use add_special = false");
  }
  const int32_t len = static_cast<int32_t>(text.size());
  // Upper bound guess: one token per byte plus BOS/EOS; grown from llama's answer if short.
  std::vector<Token> tokens(text.size() / 2 + 8);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int32_t n =
        llama_tokenize(vocab.get(), text.data(), len, tokens.data(),
                       static_cast<int32_t>(tokens.size()), add_special, parse_special);
    if (n == INT32_MIN) throw std::length_error("tokenize: too many tokens for llama.cpp");
    if (n >= 0) {
      tokens.resize(static_cast<size_t>(n));
      return tokens;
    }
    tokens.resize(static_cast<size_t>(-static_cast<int64_t>(n)));
  }
  throw std::runtime_error("tokenize: llama.cpp gave inconsistent token counts");
}

std::string detokenize(const Vocab& vocab, std::span<const Token> tokens, bool remove_special,
                       bool unparse_special) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    throw std::length_error("detokenize: too many tokens");
  }
  for (Token t : tokens) check_token(vocab, t);
  std::string text(tokens.size() * 4 + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int32_t n = llama_detokenize(
        vocab.get(), tokens.data(), static_cast<int32_t>(tokens.size()), text.data(),
        static_cast<int32_t>(std::min<size_t>(text.size(), INT32_MAX)), remove_special,
        unparse_special);
    if (n >= 0) {
      text.resize(static_cast<size_t>(n));
      return text;
    }
    if (n == INT32_MIN) throw std::length_error("detokenize: text too long for llama.cpp");
    text.resize(static_cast<size_t>(-static_cast<int64_t>(n)));
  }
  throw std::runtime_error("detokenize: llama.cpp gave inconsistent lengths");
}

size_t append_token_piece(const Vocab& vocab, Token token, std::string& out, bool special) {
  check_token(vocab, token);
  const size_t old = out.size();
  size_t room = 32;
  for (int attempt = 0; attempt < 2; ++attempt) {
    out.resize(old + room);
    const int32_t n = llama_token_to_piece(vocab.get(), token, out.data() + old,
                                           static_cast<int32_t>(room), 0, special);
    if (n >= 0) {
      out.resize(old + static_cast<size_t>(n));
      return static_cast<size_t>(n);
    }
    room = static_cast<size_t>(-static_cast<int64_t>(n));
  }
  out.resize(old);
  throw std::runtime_error("token_to_piece: llama.cpp gave inconsistent lengths");
}

std::string token_to_piece(const Vocab& vocab, Token token, bool special) {
  std::string out;
  append_token_piece(vocab, token, out, special);
  return out;
}

}  // namespace lacuna
