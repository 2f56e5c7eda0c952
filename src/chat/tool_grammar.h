// tool_grammar.h — the GBNF of a chat format's output syntax (llama.cpp's PEG parser for the
// template), with every JSON Schema in it compiled by lacuna's converter instead of
// llama.cpp's.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace lacuna::chat::detail {

// The grammar of a serialized llama.cpp PEG arena (common_peg_arena::save()). lazy: only
// the rules marked as triggers (the tool-call syntax, starting at its trigger text) under
// "root"; otherwise the whole parser. `schemas` maps the names the parser gives its schema
// nodes ("tool-NAME-schema", "tool-NAME-arg-PARAM-schema", "response-format-schema") to
// JSON Schema text. Throws ChatError for a schema node without an entry, and lacuna's
// SchemaError (with its JSON pointer) for a schema lacuna refuses. single_call: where the
// format repeats call sections ("tool-calls ::= (tool-call? space)+"), the root is one
// "tool-call" section; otherwise one or more of them. outer_only: a lazy root of only the
// trigger rules no other trigger rule holds (the outermost call syntax).
std::string arena_to_gbnf(const std::string& serialized_arena,
                          const std::map<std::string, std::string>& schemas, bool lazy,
                          bool single_call, bool outer_only = false);

// Whether llama.cpp's parser (a serialized arena) can still read `input` as the start of an
// output: false only where the parse fails before the input ends (gpt-oss's header must follow
// the generation prompt at once, so whitespace there is refused).
bool parser_reads_prefix(const std::string& serialized_arena, const std::string& input);

// The text as an ECMAScript pattern matching it literally (special characters escaped).
std::string regex_escape(std::string_view text);

// Renames every rule of a GBNF text to `prefix` + name (the root rule becomes `prefix`
// itself), leaving string literals, character classes and repetition bounds alone.
std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix);

}  // namespace lacuna::chat::detail
