// constraint.h — the one interface every token constraint implements (grammar matcher,
// token trie), so sampler adapters, the generator and the C ABI treat them alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lacuna {

using Token = int32_t;

// Number of 32-bit words in a token bitmask for a vocabulary of n_vocab tokens.
// Layout (same as XGrammar's): token t is allowed iff bit (t % 32) of word (t / 32) is set.
constexpr size_t bitmask_words(size_t n_vocab) { return (n_vocab + 31) / 32; }

inline bool bitmask_test(const uint32_t* words, Token t) {
  return (words[static_cast<size_t>(t) >> 5] >> (static_cast<uint32_t>(t) & 31u)) & 1u;
}

inline void bitmask_set(uint32_t* words, Token t) {
  words[static_cast<size_t>(t) >> 5] |= 1u << (static_cast<uint32_t>(t) & 31u);
}

// A per-sequence constraint state. Not thread-safe: one sequence, one thread at a time.
// fork() gives an independent copy that may move to another thread.
class Constraint {
 public:
  virtual ~Constraint() = default;

  // Vocabulary size the masks are built for.
  virtual size_t n_vocab() const = 0;

  // Writes bitmask_words(n_vocab()) words: bit set = token allowed next.
  // Once terminated, no token is allowed.
  virtual void fill_next_token_bitmask(uint32_t* words) = 0;

  // Advances by one token. Returns false for a token that is not allowed, and then
  // leaves the state unchanged.
  virtual bool accept_token(Token token) = 0;

  // Undoes the last n accepted tokens. Returns false (state unchanged) when fewer than
  // n tokens can be rolled back.
  virtual bool rollback(size_t n) = 0;

  // An independent copy of the current state (cheap: shares immutable data).
  virtual std::unique_ptr<Constraint> fork() const = 0;

  // Back to the initial state.
  virtual void reset() = 0;

  // The input may end here (for a grammar: the root rule can be complete).
  virtual bool is_completed() const = 0;

  // A stop token (EOS/EOT) was accepted; nothing more may follow.
  virtual bool is_terminated() const = 0;

  // Appends to `out` the tokens that are the only possible continuation from here, in
  // order, stopping at the first step where more than one token (or none) is allowed.
  // Does not change the state. Returns the number of tokens appended.
  virtual size_t forced_tokens(std::vector<Token>& out, size_t max_tokens = 64) const = 0;

  // The byte string every continuation must start with (possibly spanning several
  // tokens, whatever the tokenization). Empty when nothing is forced or unknown.
  virtual std::string jump_forward_string() const { return {}; }
};

}  // namespace lacuna
