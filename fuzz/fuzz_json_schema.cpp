// fuzz_json_schema.cpp — libFuzzer target: arbitrary text as a JSON Schema. The converter
// must end with a grammar that our GBNF parser accepts, or with SchemaError; never a crash,
// a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  lacuna::SchemaOptions opt;
  opt.max_grammar_bytes = 1u << 20;
  opt.max_repeat = 200;
  opt.whitespace = (size % 2) ? lacuna::SchemaOptions::Whitespace::Compact
                              : lacuna::SchemaOptions::Whitespace::Flexible;
  std::string gbnf;
  try {
    gbnf = lacuna::json_schema_to_gbnf(text, opt);
  } catch (const lacuna::SchemaError&) {
    return 0;
  }
  // A grammar we produce must parse (a GrammarError here is a converter bug: let it crash).
  lacuna::parse_gbnf(gbnf);
  return 0;
}
