// tool_grammar.cpp — GBNF of a chat format's output syntax from llama.cpp's PEG arena, with
// lacuna's JSON-Schema grammars in place of llama.cpp's.
#include "chat/tool_grammar.h"

#include <json-schema-to-grammar.h>
#include <peg-parser.h>

#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lacuna/chat.h"
#include "lacuna/json_schema.h"

namespace lacuna::chat::detail {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

// A rule name lacuna's GBNF parser accepts.
std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name) out += is_name_char(c) ? c : '-';
  return out.empty() ? std::string("r") : out;
}

}  // namespace

std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix) {
  std::string out;
  out.reserve(gbnf.size() + gbnf.size() / 4);
  size_t i = 0;
  const size_t n = gbnf.size();
  auto copy_quoted = [&](char close) {
    out += gbnf[i++];
    while (i < n && gbnf[i] != close) {
      if (gbnf[i] == '\\' && i + 1 < n) out += gbnf[i++];
      out += gbnf[i++];
    }
    if (i < n) out += gbnf[i++];
  };
  while (i < n) {
    const char c = gbnf[i];
    if (c == '"') {
      copy_quoted('"');
    } else if (c == '[') {
      copy_quoted(']');
    } else if (c == '{') {
      copy_quoted('}');
    } else if (c == '#') {
      while (i < n && gbnf[i] != '\n') out += gbnf[i++];
    } else if (is_name_char(c)) {
      size_t j = i;
      while (j < n && is_name_char(gbnf[j])) ++j;
      const std::string word = gbnf.substr(i, j - i);
      out += word == "root" ? prefix : prefix + "-" + word;
      i = j;
    } else {
      out += gbnf[i++];
    }
  }
  return out;
}

std::string arena_to_gbnf(const std::string& serialized_arena,
                          const std::map<std::string, std::string>& schemas, bool lazy,
                          bool single_call) {
  common_peg_arena arena;
  arena.load(serialized_arena);
  // A saved arena keeps its schema nodes' names but not the schemas; without them the
  // grammar would accept any JSON value there. Give each named node its schema back.
  for (size_t id = 0; id < arena.size(); ++id) {
    auto* sp =
        std::get_if<common_peg_schema_parser>(&arena.get(static_cast<common_peg_parser_id>(id)));
    if (sp == nullptr) continue;
    auto it = schemas.find(sp->name);
    if (it == schemas.end()) continue;
    std::shared_ptr<common_chat_schema_document> doc;
    try {
      doc = std::make_shared<common_chat_schema_document>(
          common_chat_schema_from_json(common_json::parse(it->second)));
    } catch (const std::exception&) {
      // llama.cpp's reader refuses it; lacuna compiles it below all the same.
      doc = std::make_shared<common_chat_schema_document>();
      doc->root = std::make_unique<common_chat_schema_any>();
    }
    sp->node = doc->root.get();
    sp->doc = doc;
  }

  std::vector<std::pair<std::string, std::string>> rules;
  std::map<std::string, size_t> index;
  std::string extra;  // the schemas' own rules
  std::map<std::string, std::string> schema_rule;

  auto add_rule = [&](const std::string& name, const std::string& rhs) -> std::string {
    const std::string key = sanitize(name);
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(key, rules.size());
      rules.emplace_back(key, rhs);
    } else {
      rules[it->second].second = rhs;
    }
    return key;
  };
  common_grammar_builder builder;
  builder.add_rule = add_rule;
  builder.add_schema = [&](const std::string& name, const common_chat_schema&) -> std::string {
    auto it = schemas.find(name);
    if (it == schemas.end()) {
      throw ChatError("the chat format asks for a JSON Schema named '" + name +
                      "' that lacuna cannot map to a tool or response format");
    }
    auto done = schema_rule.find(name);
    if (done != schema_rule.end()) return done->second;
    SchemaOptions opt;
    opt.whitespace = SchemaOptions::Whitespace::Compact;
    opt.additional_properties_default = false;
    const std::string prefix = "s-" + sanitize(name);
    extra += prefix_gbnf_rules(json_schema_to_gbnf(it->second, opt), prefix);
    if (!extra.empty() && extra.back() != '\n') extra += '\n';
    schema_rule.emplace(name, prefix);
    return prefix;
  };
  arena.build_grammar(builder, lazy);

  // Formats whose calls are repeated call sections ("tool-calls ::= (tool-call? space)+", a
  // repetition that may match nothing): one call section, or several separated by
  // whitespace, each a real call.
  if (lazy && index.count("tool-call") != 0 && index.count("root") != 0 &&
      index.count("tool-calls") != 0 &&
      rules[index["tool-calls"]].second == "(tool-call? space)+") {
    rules[index["tool-calls"]].second = "tool-call (space tool-call)*";
    rules[index["root"]].second = single_call ? "tool-call" : "tool-calls";
  }
  std::string out;
  bool has_root = false;
  for (const auto& [name, rhs] : rules) {
    if (name == "root") has_root = true;
    out += name + " ::= " + (rhs.empty() ? std::string("\"\"") : rhs) + "\n";
  }
  if (!has_root) throw ChatError("the chat format's parser has no tool-call rule");
  // The parser's `space` (any whitespace) as at most one space or newline: a subset of
  // what the parser accepts, and no room for a model to wander in whitespace.
  if (index.find("space") == index.end()) out += "space ::= (\" \" | \"\\n\")?\n";
  return out + extra;
}

}  // namespace lacuna::chat::detail
