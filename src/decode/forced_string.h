// forced_string.h — tokenizing a forced string the way the model's tokenizer would, as it
// appears in the middle of a text (drafts for verified forced strings and jump-forward).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lacuna/constraint.h"
#include "llama.h"

namespace lacuna::decode {

// Reusable buffers so that drafting allocates nothing once warmed up.
struct ForcedStringScratch {
  std::vector<Token> tokens;
  std::vector<Token> alt;
  std::string text;
  std::string piece;
};

// Writes to `out` the canonical tokenization of `forced` as a continuation of earlier text:
// the tokenizer's own split of the string, without BOS/EOS and without the leading space
// that SentencePiece-style tokenizers put in front of a text (a newline in front of the
// string takes that space, and its tokens are dropped; the split covering more of the
// string wins). Only a prefix of tokens whose pieces spell a prefix of `forced` is kept,
// so every token is byte-exact. Returns the number of tokens written (0 when no clean
// tokenization was found).
size_t tokenize_forced_string(const llama_vocab* vocab, std::string_view forced,
                              std::vector<Token>& out, ForcedStringScratch& scratch);

// The bytes of a token as generated text (control tokens render as nothing).
void token_piece(const llama_vocab* vocab, Token token, std::string& out);

}  // namespace lacuna::decode
