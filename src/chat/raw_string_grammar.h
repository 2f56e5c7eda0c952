// raw_string_grammar.h — the grammar of a string parameter's value written as raw text up to
// a closing tag, as XML-like tool-call formats write it (Qwen3-Coder's
// `<parameter=city>\nParis\n</parameter>\n`, GLM's `<arg_value>Paris</arg_value>`).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace lacuna::chat::detail {

// The GBNF (root rule "root") of the raw texts that are valid values of a parameter with
// JSON Schema `schema_json`, as the format's parser reads them (the text, unescaped, becomes
// the JSON string): the strings the schema accepts (type string with enum, const, pattern,
// minLength / maxLength, format as lacuna's JSON-Schema converter enforces them; anyOf /
// oneOf of such; local $ref) in which `closer` occurs only as the end of value + closer
// (the parser ends the value at the first closer). std::nullopt when the schema also allows
// values other than strings and null, or uses keywords this cannot map (allOf, not, ...):
// the caller then keeps the format's own rule (any text without the closer).
std::optional<std::string> raw_string_gbnf(const std::string& schema_json,
                                           const std::string& closer);

// The schema a local `$ref` names in `root` ("#", "#/$defs/NAME", "#/definitions/NAME"), or
// nullptr (another kind of reference, or a name that is not there).
const nlohmann::json* resolve_local_ref(const nlohmann::json& root, const nlohmann::json& ref);

}  // namespace lacuna::chat::detail
