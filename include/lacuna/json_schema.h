// json_schema.h — converts a JSON Schema into a GBNF grammar (llama.cpp's dialect) whose
// language is the set of JSON texts the schema accepts; docs/json_schema.md has the exact
// semantics, keyword by keyword.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lacuna {

struct SchemaOptions {
  enum class Whitespace {
    Compact,   // no whitespace anywhere: {"a":1,"b":[1,2]}
    Flexible,  // optional whitespace around ':' ',' and brackets, at most max_whitespace in a run
  };
  Whitespace whitespace = Whitespace::Flexible;
  int max_whitespace = 20;
  // Strict: a keyword that cannot be honoured exactly throws SchemaError naming it.
  // Lenient (default): such a keyword is reported through on_warning and the language is
  // widened (the keyword ignored, or approximated from above).
  bool strict = false;
  // Objects without `additionalProperties` accept extra properties (the JSON Schema
  // default). false: they do not (often what one wants for generation).
  bool additional_properties_default = true;

  // Limits. Exceeding one throws SchemaError.
  int max_depth = 128;        // nesting of sub-schemas
  int max_inline_depth = 32;  // $ref/allOf expansions inside one schema (cycles)
  size_t max_grammar_bytes = 4u << 20;
  size_t max_enum = 10000;        // enum values
  int max_repeat = 1000;          // bounds (minItems, maxLength, regex {m,n}) above this: a
                                  // minimum is rejected, a maximum dropped with a warning
  size_t max_alternatives = 256;  // branches after distributing allOf over anyOf/oneOf
  size_t max_properties = 1000;   // named properties in one object

  // Called for each keyword ignored or approximated in lenient mode.
  std::function<void(const std::string& keyword, const std::string& pointer,
                     const std::string& message)>
      on_warning;
};

struct SchemaError : std::runtime_error {
  SchemaError(const std::string& message, std::string pointer, std::string keyword = {})
      : std::runtime_error(
            message + (pointer.empty() ? std::string(" (at the root)") : " (at " + pointer + ")")),
        pointer(std::move(pointer)),
        keyword(std::move(keyword)) {}
  std::string pointer;  // JSON pointer of the offending schema or keyword
  std::string keyword;  // the keyword at fault, when one is
};

// The grammar, root rule "root". Throws SchemaError (also for malformed JSON text).
std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaOptions& options = {});

}  // namespace lacuna
