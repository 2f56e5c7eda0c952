// gemma4_grammar.cpp — a tool's arguments in gemma-4's value notation, from its JSON Schema
// (gemma4_grammar.h). The notation, as llama.cpp's parser for the format reads it:
//   dict   "{" ws ("}" | key ":" ws value ("," ws key ":" ws value)* ws "}")
//   array  "[" ws ("]" | value ("," ws value)* ws "]")
//   string <|"|> raw text without <|"|> <|"|>
//   key    one or more characters other than ':' and '}'
//   number, true, false, null as in JSON
// The grammar here writes it compactly (no whitespace), a subset the parser always reads.
#include "chat/gemma4_grammar.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "chat/raw_string_grammar.h"
#include "chat/tool_grammar.h"
#include "grammar/regex_gbnf.h"
#include "lacuna/json_schema.h"

namespace lacuna::chat::detail {

namespace {

using nlohmann::json;

constexpr const char* kQuote = "<|\"|>";
constexpr int kMaxDepth = 32;
constexpr int kMaxKeyRun = 32;  // a free key's length, as for other free runs of a call

struct Unmapped {};  // the schema uses something this does not map

bool is_annotation(const std::string& k) {
  static const std::set<std::string> a = {
      "title", "description", "default",  "examples",  "$comment",    "$defs",   "$schema",
      "$id",   "deprecated",  "readOnly", "writeOnly", "definitions", "nullable"};
  return a.count(k) != 0;
}

// Keywords this maps, by the type they constrain ("" for any type).
bool is_mapped(const std::string& k) {
  static const std::set<std::string> m = {"type",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "$ref",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "pattern",
                                          "minLength",
                                          "maxLength",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf"};
  return m.count(k) != 0 || is_annotation(k);
}

bool type_matches(const json& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer() || v.is_number_unsigned();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

class Gemma4Values {
 public:
  explicit Gemma4Values(const json& root) : root_(root) {}

  std::string grammar(const json& schema) {
    if (!schema.is_object()) throw Unmapped{};
    const std::vector<std::string> types = types_of(schema);
    if (types.size() != 1 || types[0] != "object" || schema.contains("anyOf") ||
        schema.contains("oneOf") || schema.contains("enum") || schema.contains("const")) {
      throw Unmapped{};  // the arguments are a dictionary
    }
    check_keywords(schema);
    const std::string root = object(schema, 0);
    return rules_.to_string(root) + embedded_;
  }

 private:
  // The expression of the values valid under `s`.
  std::string value(const json& s, int depth) {
    if (depth > kMaxDepth) throw Unmapped{};
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw Unmapped{};
      return any();
    }
    if (!s.is_object()) throw Unmapped{};
    check_keywords(s);
    if (s.contains("$ref")) {
      for (const auto& [k, v] : s.items()) {
        if (k != "$ref" && !is_annotation(k)) throw Unmapped{};  // siblings of $ref
      }
      return ref(s["$ref"], depth);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      for (const auto& [k, v] : s.items()) {
        if (k != "anyOf" && k != "oneOf" && !is_annotation(k)) throw Unmapped{};
      }
      std::string alts;
      for (const char* key : {"anyOf", "oneOf"}) {
        if (!s.contains(key)) continue;
        if (!s[key].is_array() || s[key].empty()) throw Unmapped{};
        for (const json& branch : s[key]) {
          alts += (alts.empty() ? "" : " | ") + value(branch, depth + 1);
        }
      }
      return "(" + alts + ")";
    }
    const std::vector<std::string> types = types_of(s);
    if (s.contains("enum") || s.contains("const")) {
      std::vector<json> members;
      if (s.contains("const")) members.push_back(s["const"]);
      if (s.contains("enum")) {
        if (!s["enum"].is_array()) throw Unmapped{};
        for (const json& m : s["enum"]) members.push_back(m);
      }
      std::string alts;
      for (const json& m : members) {
        bool typed = types.empty();
        for (const std::string& t : types) typed = typed || type_matches(m, t);
        if (!typed) continue;
        std::string lit;
        if (m.is_string()) {
          const std::string text = m.get<std::string>();
          if (text.find(kQuote) != std::string::npos) continue;  // cannot be written
          lit = gbnf::literal(kQuote + text + kQuote);
        } else if (m.is_number() || m.is_boolean() || m.is_null()) {
          lit = gbnf::literal(m.dump());
        } else {
          throw Unmapped{};  // objects and arrays as enum members
        }
        alts += (alts.empty() ? "" : " | ") + lit;
      }
      if (alts.empty()) throw Unmapped{};
      return "(" + alts + ")";
    }
    if (types.empty()) return any();
    std::string alts;
    for (const std::string& t : types) {
      std::string e;
      if (t == "string") {
        e = string(s);
      } else if (t == "integer" || t == "number") {
        json only = with_defs(s);
        only["type"] = t;
        SchemaOptions opt;
        opt.whitespace = SchemaOptions::Whitespace::Compact;
        e = embed(json_schema_to_gbnf(only.dump(), opt));
      } else if (t == "boolean") {
        e = "(\"true\" | \"false\")";
      } else if (t == "null") {
        e = "\"null\"";
      } else if (t == "object") {
        e = object(s, depth);
      } else if (t == "array") {
        e = array(s, depth);
      } else {
        throw Unmapped{};
      }
      alts += (alts.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? alts : "(" + alts + ")";
  }

  // The types `s` allows: its `type`, or what its keywords imply; empty: any.
  static std::vector<std::string> types_of(const json& s) {
    std::vector<std::string> out;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        out.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const json& x : t) {
          if (!x.is_string()) throw Unmapped{};
          out.push_back(x.get<std::string>());
        }
      } else {
        throw Unmapped{};
      }
      if (out.empty()) throw Unmapped{};
      return out;
    }
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      out.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      out.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") ||
               s.contains("format")) {
      out.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum") || s.contains("multipleOf")) {
      out.push_back("number");
    }
    return out;
  }

  static void check_keywords(const json& s) {
    for (const auto& [k, v] : s.items()) {
      if (!is_mapped(k)) throw Unmapped{};
    }
  }

  // A copy of `s` that can still resolve the root's definitions.
  json with_defs(const json& s) const {
    json out = s;
    for (const char* defs : {"$defs", "definitions"}) {
      if (root_.is_object() && root_.contains(defs) && !out.contains(defs)) out[defs] = root_[defs];
    }
    return out;
  }

  std::string string(const json& s) {
    json only = with_defs(s);
    only["type"] = "string";
    const std::optional<std::string> raw = raw_string_gbnf(only.dump(), kQuote);
    if (!raw) throw Unmapped{};
    const std::string q = gbnf::literal(kQuote);
    return q + " " + embed(*raw) + " " + q;
  }

  std::string key_literal(const std::string& name) {
    if (name.empty() || name.find_first_of(":}") != std::string::npos ||
        name.find_first_of(" \t\r\n") == 0) {
      throw Unmapped{};
    }
    return gbnf::literal(name + ":");
  }

  std::string object(const json& s, int depth) {
    if (!s.contains("properties")) {
      const bool closed = s.contains("additionalProperties") &&
                          s["additionalProperties"].is_boolean() &&
                          !s["additionalProperties"].get<bool>();
      if (s.contains("required") && s["required"].is_array() && !s["required"].empty()) {
        throw Unmapped{};  // required names without their schemas
      }
      return closed ? "\"{}\"" : any_dict();
    }
    const json& props = s["properties"];
    if (!props.is_object()) throw Unmapped{};
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) throw Unmapped{};
      for (const json& r : s["required"]) {
        if (!r.is_string()) throw Unmapped{};
        if (!props.contains(r.get<std::string>())) throw Unmapped{};
        required.insert(r.get<std::string>());
      }
    }
    std::vector<std::string> members;  // "key:" value
    std::vector<bool> needed;
    for (const auto& [name, sub] : props.items()) {
      members.push_back(key_literal(name) + " " + value(sub, depth + 1));
      needed.push_back(required.count(name) != 0);
    }
    // tail(i, first): members i.. in order, each optional one present or not; `first`: no
    // member written yet (no comma before the next one). Built from the end.
    const size_t n = members.size();
    std::vector<std::string> tail_first(n + 1), tail_after(n + 1);  // "" = nothing left
    for (size_t i = n; i-- > 0;) {
      for (bool first : {true, false}) {
        const std::string sep = first ? "" : "\",\" ";
        const std::string& next = tail_after[i + 1];
        const std::string present = sep + members[i] + (next.empty() ? "" : " " + next);
        std::string body;
        if (needed[i]) {
          body = present;
        } else {
          const std::string& skip = first ? tail_first[i + 1] : tail_after[i + 1];
          body = "(" + present + " | " + skip + ")";
        }
        (first ? tail_first[i] : tail_after[i]) = rules_.add("g-obj", body);
      }
    }
    return "\"{\" " + (tail_first[0].empty() ? std::string() : tail_first[0] + " ") + "\"}\"";
  }

  std::string array(const json& s, int depth) {
    const std::string item = s.contains("items") ? value(s["items"], depth + 1) : any();
    long lo = 0, hi = -1;
    if (s.contains("minItems")) {
      if (!s["minItems"].is_number_integer() || s["minItems"].get<long>() < 0) throw Unmapped{};
      lo = s["minItems"].get<long>();
    }
    if (s.contains("maxItems")) {
      if (!s["maxItems"].is_number_integer() || s["maxItems"].get<long>() < 0) throw Unmapped{};
      hi = s["maxItems"].get<long>();
    }
    if (hi >= 0 && hi < lo) throw Unmapped{};
    if (hi == 0) return "\"[]\"";
    const std::string more = "(\",\" " + item + ")";
    std::string rest;
    const long more_lo = lo > 0 ? lo - 1 : 0;
    if (hi < 0) {
      rest = more_lo == 0 ? more + "*" : more + "{" + std::to_string(more_lo) + ",}";
    } else {
      rest = more + "{" + std::to_string(more_lo) + "," + std::to_string(hi - 1) + "}";
    }
    const std::string items = item + " " + rest;
    return rules_.add("g-arr", "\"[\" " + (lo == 0 ? "(" + items + ")?" : items) + " \"]\"");
  }

  std::string ref(const json& r, int depth) {
    if (!r.is_string()) throw Unmapped{};
    const std::string path = r.get<std::string>();
    auto done = refs_.find(path);
    if (done != refs_.end()) return done->second;
    const json* target = resolve_local_ref(root_, r);
    if (target == nullptr) throw Unmapped{};
    const std::string name = rules_.reserve("g-ref");
    refs_.emplace(path, name);
    rules_.define(name, value(*target, depth + 1));
    return name;
  }

  // Any gemma-4 value (a schema that does not constrain it).
  std::string any() {
    if (!any_.empty()) return any_;
    any_ = rules_.reserve("g-any");
    const std::string text = string(json::object());
    SchemaOptions opt;
    opt.whitespace = SchemaOptions::Whitespace::Compact;
    const std::string number = embed(json_schema_to_gbnf(R"({"type": "number"})", opt));
    const std::string dict = any_dict();
    const std::string arr = "\"[\" (" + any_ + " (\",\" " + any_ + ")*)? \"]\"";
    rules_.define(any_, text + " | " + dict + " | " + arr + " | " + number +
                            " | \"true\" | \"false\" | \"null\"");
    return any_;
  }

  std::string any_dict() {
    if (!any_dict_.empty()) return any_dict_;
    any_dict_ = rules_.reserve("g-dict");
    const std::string value = any();
    const std::string key = "[^:} \\t\\r\\n] [^:}]{0," + std::to_string(kMaxKeyRun - 1) + "}";
    const std::string kv = key + " \":\" " + value;
    rules_.define(any_dict_, "\"{\" (" + kv + " (\",\" " + kv + ")*)? \"}\"");
    return any_dict_;
  }

  // A whole grammar (root "root") as one rule of this one.
  std::string embed(const std::string& gbnf) {
    const std::string prefix = "emb" + std::to_string(++n_embedded_);
    embedded_ += prefix_gbnf_rules(gbnf, prefix);
    if (!embedded_.empty() && embedded_.back() != '\n') embedded_ += '\n';
    return prefix;
  }

  const json& root_;
  gbnf::RuleSet rules_;
  std::string embedded_;
  int n_embedded_ = 0;
  std::map<std::string, std::string> refs_;
  std::string any_, any_dict_;
};

}  // namespace

std::optional<std::string> gemma4_args_gbnf(const std::string& schema_json) {
  const json schema = json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return std::nullopt;
  try {
    Gemma4Values g(schema);
    return g.grammar(schema);
  } catch (const Unmapped&) {
    return std::nullopt;
  } catch (const gbnf::GrammarTooLarge&) {
    return std::nullopt;
  } catch (const std::exception&) {
    // lacuna's converter refused a part (its SchemaError): keep the format's own rule.
    return std::nullopt;
  }
}

}  // namespace lacuna::chat::detail
