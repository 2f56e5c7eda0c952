// gemma4_grammar.h — a tool's arguments in gemma-4's value notation, from the tool's JSON
// Schema: `{city:<|"|>Paris<|"|>,days:3}` (keys bare, strings raw between `<|"|>`, numbers,
// booleans and null as in JSON), which llama.cpp's gemma-4 parser turns into JSON arguments.
#pragma once

#include <optional>
#include <string>

namespace lacuna::chat::detail {

// The GBNF (root rule "root") of the argument objects valid under `schema_json` (a tool's
// `parameters`), written compactly in gemma-4's notation: declared properties only, each at
// most once in the schema's order, required ones always; strings through raw_string_gbnf
// (enum, const, pattern, lengths, format); numbers, integers, booleans and null through
// lacuna's JSON-Schema converter; arrays with items / minItems / maxItems; anyOf / oneOf;
// local $ref (recursion included); a schema without constraints is any gemma-4 value.
// std::nullopt where the schema is not an object or uses keywords this does not map (allOf,
// not, if/then/else, patternProperties, prefixItems, uniqueItems, ...), or a property name
// the notation cannot write (empty, with ':' or '}', or starting with whitespace): the caller
// then keeps the format's own rule (any gemma-4 dictionary).
std::optional<std::string> gemma4_args_gbnf(const std::string& schema_json);

}  // namespace lacuna::chat::detail
