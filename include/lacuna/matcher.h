// matcher.h — compiles a Grammar against a TokenIndex (CompiledGrammar, immutable, shared)
// and matches one sequence against it (GrammarMatcher, a Constraint).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lacuna/constraint.h"
#include "lacuna/grammar.h"
#include "lacuna/token_index.h"

namespace lacuna {

// A configured limit was exceeded while compiling or matching (the grammar is too large
// or too ambiguous for the limits in CompileOptions).
struct GrammarLimitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CompileOptions {
  size_t max_positions = 1u << 20;  // grammar elements after flattening
  // Grammar contexts (stack chains). The closure costs well under a microsecond and about
  // 50 bytes per context: the bound is a fraction of a second and about 50 MB.
  size_t max_contexts = 1000000;
  size_t max_walk_states = 100000;  // parse-state sets during precomputation, and stacks in one
                                    // (64x that in all sets)
  // Stacks in one parse-state set while a context's mask is computed (at most
  // max_walk_states). Past it the context gets no mask: the matcher checks its stacks'
  // tokens against the real stack, in one walk of the vocabulary trie (exact). A context
  // whose walk reaches this many stacks (a large recursive schema's value, where every
  // rule the value may return to is followed past the context's end) spent hundreds of
  // milliseconds on the way to max_walk_states.
  size_t max_mask_set_stacks = 16384;
  double max_compile_ms = 30000;       // wall time for compile()
  size_t max_memory_bytes = 1u << 30;  // precomputed tables
  size_t max_stacks = 20000;           // parse stacks alive at once in a matcher
  // Match control/special tokens by their text like any other token (llama.cpp does).
  // When false they are allowed only where the grammar names them (<[id]>, <|...|>).
  bool special_tokens_as_text = true;
  // Precompute token classes over whole chains of non-recursive rules (more contexts,
  // far fewer tokens left to check at run time). Compile falls back to per-rule contexts
  // (small rules still inlined, then not even those) when this exceeds max_inline_contexts;
  // false starts at the per-rule contexts. Contexts cost little at compile time now that
  // their masks are computed within eager_ms or on first use, so the bound is high.
  bool inline_rules = true;
  // In per-rule contexts, still inline the rules that reach at most 32 positions (character
  // classes with their escapes, enums, integers): alone, such a rule is a context nearly
  // every token leaves, and each of its stacks then needs a whole-stack walk.
  bool inline_small_rules = true;
  size_t max_inline_contexts = 200000;
  // Token classes of grammar contexts are computed by compile() for up to this many
  // milliseconds (counted from the start of compile); the rest are computed on first use
  // by a matcher and then shared by every matcher of the grammar (thread-safe). Negative:
  // all at compile time (compile may be slow, no matcher ever waits); 0: all on first use
  // (compile is fast, a first visit of a context costs one vocabulary walk). Masks are the
  // same either way. The default leaves room under 50 ms for what a compile does around
  // the masks (flattening, the context closure, a walk abandoned at the deadline).
  double eager_ms = 45.0;
  // Reuse the token classes of common rule prefixes (a JSON string's characters, a number's
  // digits, whitespace) across every grammar compiled against the same TokenIndex, keyed by
  // the exact rules involved. Masks are the same either way; false measures a cold start.
  bool share_masks = true;
};

namespace detail {
struct CompiledData;
}

class CompiledGrammar {
 public:
  // token_index may be null: then only byte-level matching (accept_string) works, no masks.
  // Throws GrammarError (unresolvable token reference) or GrammarLimitError.
  static std::shared_ptr<const CompiledGrammar> compile(
      const Grammar& grammar, std::shared_ptr<const TokenIndex> token_index,
      const CompileOptions& options = {});
  ~CompiledGrammar();

  size_t memory_bytes() const;
  double compile_ms() const;
  size_t n_vocab() const;
  const std::shared_ptr<const TokenIndex>& token_index() const;
  const CompileOptions& options() const;
  // Number of grammar contexts that have a token mask, and how many of them have been
  // computed so far (at compile time or on first use).
  size_t n_contexts() const;
  size_t n_contexts_computed() const;

  const detail::CompiledData& data() const { return *data_; }

 private:
  CompiledGrammar() = default;
  static std::shared_ptr<const CompiledGrammar> compile_impl(
      const Grammar& grammar, std::shared_ptr<const TokenIndex> token_index,
      const CompileOptions& options, std::chrono::steady_clock::time_point t0);
  std::unique_ptr<detail::CompiledData> data_;
};

namespace detail {
class MatcherState;
}

class GrammarMatcher final : public Constraint {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  GrammarMatcher(const GrammarMatcher& other);
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;
  ~GrammarMatcher() override;

  size_t n_vocab() const override;
  void fill_next_token_bitmask(uint32_t* words) override;
  bool accept_token(Token token) override;
  // Advances by raw bytes (no token ids; token references in the grammar never match).
  // Returns false and leaves the state unchanged when the bytes are refused. Counts as
  // one step for rollback().
  bool accept_string(std::string_view bytes);
  bool rollback(size_t n) override;
  std::unique_ptr<Constraint> fork() const override;
  void reset() override;
  bool is_completed() const override;
  bool is_terminated() const override;
  size_t forced_tokens(std::vector<Token>& out, size_t max_tokens = 64) const override;
  std::string jump_forward_string() const override;

  // The last token ended inside a UTF-8 sequence (only continuation bytes may follow, and
  // no end-of-generation token: see docs/grammar.md).
  bool in_partial_utf8() const;
  // Steps that rollback() can undo.
  size_t history_size() const;
  // Parse stacks alive now (for tests and diagnostics).
  size_t n_stacks() const;
  const std::shared_ptr<const CompiledGrammar>& grammar() const { return grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<detail::MatcherState> state_;
};

}  // namespace lacuna
