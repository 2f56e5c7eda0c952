// fuzz_matcher.cpp — libFuzzer target: random token streams and operations (mask, accept,
// rollback, fork, reset) into a matcher over a small fixed grammar and a synthetic
// vocabulary. Invariant: accept_token succeeds exactly for the tokens the mask allows.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/token_index.h"

namespace {

std::shared_ptr<const lacuna::CompiledGrammar> grammar() {
  static auto cg = [] {
    std::vector<std::string> pieces = {"</s>",     "{",    "}",
                                       "[",        "]",    ",",
                                       ":",        " ",    "\"",
                                       "\"a",      "a\"",  "\":",
                                       "\",",      "ab",   "1",
                                       "23",       "-",    ".",
                                       "e",        "+",    "true",
                                       "false",    "null", "\\",
                                       "\\n",      "u",    "00e9",
                                       "\xC3",     "\xA9", "\xC3\xA9",
                                       "\xE6\x97", "\xA5", "\xE6\x97\xA5",
                                       "\n",       "  ",   "{\"",
                                       "\"}",      "],",   "x",
                                       "\x80",     "",     "<|tool|>"};
    auto idx = lacuna::TokenIndex::from_pieces(pieces, {0}, {41});
    const char* gbnf = R"(root ::= value
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [1-9] [0-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";
    return lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf), idx);
  }();
  return cg;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto cg = grammar();
  const size_t n = cg->n_vocab();
  lacuna::GrammarMatcher m(cg);
  std::unique_ptr<lacuna::Constraint> other;
  std::vector<uint32_t> words(lacuna::bitmask_words(n));
  for (size_t i = 0; i < size; ++i) {
    const uint8_t b = data[i];
    switch (b >> 6) {
      case 0:
      case 1: {
        auto t = static_cast<lacuna::Token>(b % (n + 2)) - 1;  // includes -1 and n
        m.fill_next_token_bitmask(words.data());
        const bool allowed =
            t >= 0 && static_cast<size_t>(t) < n && lacuna::bitmask_test(words.data(), t);
        const size_t before = m.history_size();
        const bool ok = m.accept_token(t);
        if (ok != allowed) std::abort();
        if (!ok && m.history_size() != before) std::abort();
        break;
      }
      case 2:
        if (!m.rollback(b & 3) && (b & 3) <= m.history_size()) std::abort();
        break;
      default:
        if (b & 1) {
          other = m.fork();
          std::vector<uint32_t> w2(words.size());
          other->fill_next_token_bitmask(w2.data());
          m.fill_next_token_bitmask(words.data());
          if (w2 != words) std::abort();
        } else if (b & 2) {
          std::vector<lacuna::Token> forced;
          m.forced_tokens(forced, 8);
          (void)m.jump_forward_string();
        } else {
          m.reset();
        }
    }
  }
  return 0;
}
