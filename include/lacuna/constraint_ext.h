// constraint_ext.h — optional capabilities a Constraint may add (sparse allowed set, raw bytes).
//
// Adapters discover them once with dynamic_cast; a constraint that implements none of them
// still works everywhere through the plain bitmask interface of constraint.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "lacuna/constraint.h"

namespace lacuna {

// Writes the bytes of one token (as the model emits them, special tokens rendered) into `out`
// (replacing its contents). Built from a llama_vocab by lacuna::vocab_piece_fn (sampler.h).
using TokenPieceFn = std::function<void(Token token, std::string& out)>;

// How a constraint describes the tokens it allows next, without a full bitmask when cheap.
struct AllowedTokens {
  enum class Kind {
    kBitmask,  // call fill_next_token_bitmask(); nothing cheaper is known
    kAll,      // every token of the vocabulary is allowed (the constraint is not active)
    kList,     // exactly tokens[0..size), sorted ascending, no duplicates (size may be 0)
  };
  Kind kind = Kind::kBitmask;
  const Token* tokens = nullptr;
  size_t size = 0;
};

// A constraint that can often name its allowed set as a short sorted list (token trie), or
// say that it allows everything (an inactive lazy constraint). The returned pointer stays
// valid until the next non-const call on the constraint.
class SparseAllowed {
 public:
  virtual ~SparseAllowed() = default;
  virtual AllowedTokens allowed_tokens() = 0;
};

// A constraint that can consume raw bytes that do not start on a token boundary, e.g. the
// text after a lazy trigger inside the same token. Returns false (state unchanged) when the
// bytes cannot be a prefix of any accepted output.
class ByteAcceptor {
 public:
  virtual ~ByteAcceptor() = default;
  virtual bool accept_bytes(std::string_view bytes) = 0;
};

}  // namespace lacuna
