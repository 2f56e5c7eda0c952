// regex.h — converts an ECMAScript regular expression (the dialect JSON Schema's `pattern`
// uses) into a GBNF grammar in llama.cpp's dialect.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lacuna {

// A pattern that cannot be parsed or converted. `position` is the byte offset in the
// pattern where the problem was found.
struct RegexError : std::runtime_error {
  RegexError(const std::string& message, size_t position)
      : std::runtime_error(message + " at offset " + std::to_string(position)),
        position(position) {}
  size_t position;
};

struct RegexOptions {
  // false (default): the grammar matches exactly the strings the whole pattern matches,
  // as if it were written ^(?:pattern)$. true: search semantics, as for JSON Schema's
  // `pattern`: the grammar matches every string containing a match, unless anchored.
  bool search = false;
  // Quantifier bounds above this are rejected (minimum) or dropped (maximum, with a
  // warning): {m,n} with n > max_repeat becomes {m,}.
  int max_repeat = 1000;
  // Limit on the size of the generated grammar text, in bytes.
  size_t max_grammar_bytes = 4u << 20;
  // Called with a message whenever the conversion widens the language.
  std::function<void(const std::string&)> on_warning;
};

// The grammar (root rule "root") for the pattern. Throws RegexError.
std::string regex_to_gbnf(std::string_view pattern, const RegexOptions& options = {});

}  // namespace lacuna
