// regex_convert.h — internal entry of the regex front end: parses an ECMAScript pattern and
// writes its language into a gbnf::RuleSet, over raw text or inside a JSON string.
#pragma once

#include <string>
#include <string_view>

#include "grammar/regex_gbnf.h"
#include "lacuna/regex.h"

namespace lacuna::regex_detail {

// How the matched characters are written in the output.
enum class Encoding {
  Raw,         // each code point as itself
  JsonString,  // each code point as it may appear between the quotes of a JSON string
};

// A GBNF expression (a sequence, safe to wrap in parentheses) for the pattern's language.
// Adds helper rules to `rules`. Throws RegexError.
std::string regex_expression(std::string_view pattern, gbnf::RuleSet& rules, Encoding encoding,
                             const RegexOptions& options);

// A GBNF expression matching one code point of `set` in the given encoding.
std::string char_expression(const gbnf::CharSet& set, gbnf::RuleSet& rules, Encoding encoding);

// If the pattern is a single character class under one quantifier, fully anchored
// (like ^[a-z0-9]{2,8}$), returns true and fills the class and the bounds
// (max = -1: unbounded). Used to intersect with minLength/maxLength exactly.
bool simple_repeat(std::string_view pattern, gbnf::CharSet& set, long& min, long& max);

}  // namespace lacuna::regex_detail
