// json_schema_parts.h — internal pieces of the JSON Schema front end: numeric-range and
// string-format grammars.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "grammar/regex_gbnf.h"
#include "lacuna/json_schema.h"

namespace lacuna::schema_detail {

// A bound on a number: value and whether it is exclusive.
struct Bound {
  double value = 0;
  bool exclusive = false;
  std::string text;  // the number as written in the schema (JSON), for exact decimals
};

// GBNF expression for the decimal integers n with lo <= n <= hi (either side optional).
// `hi_big`, when not empty and hi is absent: an upper bound above INT64_MAX as decimal digits.
// Returns "" when no integer fits.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi,
                          gbnf::RuleSet& rules, const std::string& hi_big = "");

// GBNF expression for JSON numbers within the bounds, exact for decimal bounds (bounds with
// more than 15 integer digits are dropped; `widened` is set when that widens the language).
// Numbers are written without exponent when bounded. Returns "" when nothing fits.
std::string number_range(std::optional<Bound> lo, std::optional<Bound> hi, gbnf::RuleSet& rules,
                         bool& widened);

// GBNF expression for the content (between the quotes) of a string in the given format,
// or "" for a format without a grammar.
std::string format_content(const std::string& format, gbnf::RuleSet& rules);

// The instance (JSON text) re-serialized with its object keys in the order the grammar for
// the schema lists them: named properties in schema order, other keys after them. Compact,
// or with ", " and ": " separators when `spaced`. Throws on malformed JSON.
std::string canonical_instance(std::string_view schema_json, std::string_view instance_json,
                               bool spaced, const SchemaOptions& options = {});

}  // namespace lacuna::schema_detail
