// forced_string.cpp — canonical tokenization of a forced string in mid-text (see header).
#include "decode/forced_string.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace lacuna::decode {

void token_piece(const llama_vocab* vocab, Token token, std::string& out) {
  out.resize(out.capacity() < 64 ? 64 : out.capacity());
  int32_t n =
      llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0, false);
  if (n < 0) {
    out.resize(static_cast<size_t>(-n));
    n = llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0, false);
    if (n < 0)
      throw std::runtime_error("llama_token_to_piece failed for token " + std::to_string(token));
  }
  out.resize(static_cast<size_t>(n));
}

namespace {

void tokenize_into(const llama_vocab* vocab, const std::string& text, std::vector<Token>& out) {
  if (text.size() > static_cast<size_t>(INT32_MAX / 2))
    throw std::length_error("forced string too long");
  out.resize(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                             static_cast<int32_t>(out.size()), false, false);
  if (n < 0) {
    if (n == INT32_MIN) throw std::length_error("forced string tokenization overflow");
    out.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                       static_cast<int32_t>(out.size()), false, false);
    if (n < 0) throw std::runtime_error("llama_tokenize failed on a forced string");
  }
  out.resize(static_cast<size_t>(n));
}

// Walks tokens[first..] and appends to out those whose pieces spell a prefix of `target`.
size_t take_matching(const llama_vocab* vocab, const std::vector<Token>& tokens, size_t first,
                     std::string_view target, std::vector<Token>& out, std::string& piece) {
  size_t at = 0;
  size_t n = 0;
  for (size_t i = first; i < tokens.size(); ++i) {
    token_piece(vocab, tokens[i], piece);
    if (piece.empty() || target.substr(at, piece.size()) != piece) break;
    out.push_back(tokens[i]);
    at += piece.size();
    ++n;
  }
  return n;
}

}  // namespace

size_t tokenize_forced_string(const llama_vocab* vocab, std::string_view forced,
                              std::vector<Token>& out, ForcedStringScratch& scratch) {
  out.clear();
  if (forced.empty()) return 0;
  scratch.text.assign(forced);
  tokenize_into(vocab, scratch.text, scratch.tokens);
  const size_t n = take_matching(vocab, scratch.tokens, 0, forced, out, scratch.piece);
  if (n == scratch.tokens.size()) return n;
  size_t covered = 0;
  for (Token t : out) {
    token_piece(vocab, t, scratch.piece);
    covered += scratch.piece.size();
  }
  if (covered == forced.size()) return n;

  // A tokenizer that puts a space in front of the text (SentencePiece's add_space_prefix)
  // spoils the first token. Put a newline in front: it takes the space, and the string after
  // it is split as it would be in mid-text. Drop the tokens that spell " \n" or "\n".
  scratch.text.resize(forced.size() + 1);
  scratch.text[0] = '\n';
  std::copy(forced.begin(), forced.end(), scratch.text.begin() + 1);
  tokenize_into(vocab, scratch.text, scratch.tokens);
  // The prefix spelled so far: at most " \n" (3 bytes kept, a longer one is a failure).
  char spelled[4] = {0, 0, 0, 0};
  size_t n_spelled = 0;
  size_t i = 0;
  bool found = false;
  while (i < scratch.tokens.size() && !found) {
    token_piece(vocab, scratch.tokens[i], scratch.piece);
    if (n_spelled + scratch.piece.size() > 2) return n;  // a token straddles the newline
    for (char c : scratch.piece) spelled[n_spelled++] = c;
    ++i;
    const std::string_view so_far(spelled, n_spelled);
    found = so_far == "\n" || so_far == " \n";
    if (!found && so_far != " ") return n;
  }
  if (!found) return n;
  // Keep the split that covers more of the string.
  scratch.alt.clear();
  const size_t m = take_matching(vocab, scratch.tokens, i, forced, scratch.alt, scratch.piece);
  size_t alt_covered = 0;
  for (Token t : scratch.alt) {
    token_piece(vocab, t, scratch.piece);
    alt_covered += scratch.piece.size();
  }
  if (alt_covered <= covered) return n;
  out.swap(scratch.alt);
  return m;
}

}  // namespace lacuna::decode
