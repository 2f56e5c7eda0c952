// sampler.h — the llama_sampler adapter over any lacuna::Constraint, and lazy activation
// (a constraint that waits for a trigger string, token or regex in the output).
//
// Where the adapter belongs in a llama.cpp sampler chain, and why, is in docs/sampler.md:
//   logit bias → penalties → [constraint sampler] → top-k/top-p/min-p/temperature → dist/greedy
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lacuna/constraint.h"
#include "lacuna/constraint_ext.h"
#include "llama.h"

namespace lacuna {

// ---- the adapter --------------------------------------------------------------------------

// What the sampler does after masking.
enum class Selector {
  kNone,    // mask only; a selector (greedy, dist) must follow in the chain
  kGreedy,  // pick the allowed candidate with the highest logit (first one on ties)
  kDist,    // temperature, then top-p, then a seeded random draw among the allowed ones
};

struct ConstraintSamplerParams {
  Selector selector = Selector::kNone;
  float temperature = 1.0f;  // kDist only; <= 0 means greedy
  float top_p = 1.0f;        // kDist only; >= 1 keeps every allowed candidate
  uint32_t seed = 0;         // kDist only
  std::string name = "lacuna-constraint";
};

// A llama_sampler over `constraint` (owned). apply() masks cur_p (sets disallowed logits to
// -inf, or, when cur_p is the full unsorted id-ordered array and the constraint names a
// short allowed list, shrinks cur_p to exactly the allowed entries); accept() advances the
// constraint; reset() resets it; clone() forks it. Free with llama_sampler_free (or let the
// chain own it). Throws std::invalid_argument for a null constraint or bad parameters.
llama_sampler* make_constraint_sampler(std::unique_ptr<Constraint> constraint,
                                       const ConstraintSamplerParams& params = {});

// True when `smpl` was made by make_constraint_sampler.
bool is_constraint_sampler(const llama_sampler* smpl);

// `smpl` itself if it is a constraint sampler, else the first constraint sampler inside it
// when it is a llama_sampler_chain (searched recursively), else nullptr.
llama_sampler* find_constraint_sampler(llama_sampler* smpl);

// The constraint behind a constraint sampler (or chain holding one), for the generator:
// query forced_tokens(), is_terminated(), ... Accepting through it directly bypasses the
// sampler's error state. nullptr when there is none.
Constraint* sampler_constraint(llama_sampler* smpl);

// Error state of a constraint sampler. accept() of a token the constraint refuses does not
// change the constraint; it counts the refusal and keeps a message. apply() with no allowed
// candidate masks every candidate to -inf and keeps a message too. Both stay until
// clear_sampler_error() or reset().
struct ConstraintSamplerStatus {
  uint64_t refused_accepts = 0;  // accept() calls the constraint refused
  uint64_t empty_masks = 0;      // apply() calls that left no candidate allowed
  Token last_refused = -1;
  std::string last_error;  // empty when no error is recorded
};
// Throws std::invalid_argument when `smpl` holds no constraint sampler.
ConstraintSamplerStatus constraint_sampler_status(llama_sampler* smpl);
void clear_sampler_error(llama_sampler* smpl);

// ---- token bytes --------------------------------------------------------------------------

// Token bytes from a vocabulary via llama_token_to_piece (special tokens rendered as text, as
// llama.cpp's grammar sees them). The vocabulary must outlive the function.
TokenPieceFn vocab_piece_fn(const llama_vocab* vocab);

// ---- lazy activation ----------------------------------------------------------------------

struct LazyTriggers {
  // Plain strings (e.g. "</think>"): the constraint starts right after the first occurrence,
  // wherever token boundaries fall; bytes after it inside the same token are fed to it.
  std::vector<std::string> words;
  // Token ids: the constraint starts right after the token (the token itself is not fed).
  std::vector<Token> tokens;
  // ECMAScript regexes over the text generated so far. Searched anywhere, except a pattern
  // of the form ^...$ which must match the whole text. The constrained text starts at the
  // first non-empty capture group if the pattern has one (llama.cpp's convention: that group
  // is fed to the constraint), else at the end of the match.
  std::vector<std::string> patterns;
  // Text kept for word and pattern matching; older bytes are dropped (patterns then see a
  // window, and rollback cannot go back past it).
  size_t max_buffer_bytes = 4096;
};

// Wraps a constraint so it is inactive (every token allowed, nothing forced) until a
// trigger appears in the output, then constrains from the trigger's end. Bytes after the
// trigger that do not start on a token boundary go to the inner constraint's ByteAcceptor;
// if it has none or refuses them, the triggering token is refused (accept_token returns
// false, state unchanged, last_error() says why).
class LazyConstraint : public Constraint, public SparseAllowed {
 public:
  // Throws std::invalid_argument on a null inner constraint, no triggers, an empty word, a
  // token id out of range, an invalid regex, or words/patterns without a piece function.
  LazyConstraint(std::unique_ptr<Constraint> inner, LazyTriggers triggers, TokenPieceFn piece);
  LazyConstraint(const LazyConstraint& other);

  bool active() const { return active_; }
  Constraint& inner() { return *inner_; }
  const Constraint& inner() const { return *inner_; }
  const std::string& last_error() const { return last_error_; }

  size_t n_vocab() const override { return inner_->n_vocab(); }
  void fill_next_token_bitmask(uint32_t* words) override;
  bool accept_token(Token token) override;
  bool rollback(size_t n) override;
  std::unique_ptr<Constraint> fork() const override;
  void reset() override;
  bool is_completed() const override;
  bool is_terminated() const override;
  size_t forced_tokens(std::vector<Token>& out, size_t max_tokens = 64) const override;
  std::string jump_forward_string() const override;
  AllowedTokens allowed_tokens() override;

 private:
  struct Shared;  // immutable trigger data (compiled regexes), shared by forks
  // Where the constrained text starts in buffer_, or npos when no word/pattern matched.
  size_t find_trigger(size_t old_size) const;
  bool activate(std::string_view residual);

  std::unique_ptr<Constraint> inner_;
  std::shared_ptr<const Shared> shared_;
  TokenPieceFn piece_;
  SparseAllowed* inner_sparse_ = nullptr;
  bool active_ = false;
  std::string buffer_;             // recent output text while inactive
  uint64_t buffer_base_ = 0;       // absolute offset of buffer_[0] in the output
  std::vector<uint64_t> history_;  // absolute buffer length before each inactive token
  size_t n_inner_ = 0;             // tokens passed to inner_ since activation
  std::string piece_buf_;
  std::string last_error_;
};

}  // namespace lacuna
