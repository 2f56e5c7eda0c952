// tool_grammar.cpp — GBNF of a chat format's output syntax from llama.cpp's PEG arena, with
// lacuna's JSON-Schema grammars in place of llama.cpp's.
#include "chat/tool_grammar.h"

#include <json-schema-to-grammar.h>
#include <peg-parser.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
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

// Walks GBNF text: every rule name (a word outside literals, character classes, repetition
// bounds and comments) goes to on_name, everything else, unchanged, to on_text.
template <typename OnText, typename OnName>
void scan_gbnf(const std::string& gbnf, OnText&& on_text, OnName&& on_name) {
  size_t i = 0;
  const size_t n = gbnf.size();
  while (i < n) {
    const char c = gbnf[i];
    size_t j = i + 1;
    if (c == '"' || c == '[' || c == '{') {
      const char close = c == '"' ? '"' : (c == '[' ? ']' : '}');
      while (j < n && gbnf[j] != close) j += (gbnf[j] == '\\' && j + 1 < n) ? 2 : 1;
      j = std::min(j + 1, n);
    } else if (c == '#') {
      while (j < n && gbnf[j] != '\n') ++j;
    } else if (is_name_char(c)) {
      while (j < n && is_name_char(gbnf[j])) ++j;
      on_name(std::string_view(gbnf).substr(i, j - i));
      i = j;
      continue;
    }
    on_text(std::string_view(gbnf).substr(i, j - i));
    i = j;
  }
}

// The rule names a GBNF right-hand side refers to.
std::vector<std::string> referenced_rules(const std::string& rhs) {
  std::vector<std::string> out;
  scan_gbnf(
      rhs, [](std::string_view) {}, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

}  // namespace

std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix) {
  std::string out;
  out.reserve(gbnf.size() + gbnf.size() / 4);
  scan_gbnf(
      gbnf, [&](std::string_view text) { out += text; },
      [&](std::string_view word) {
        if (word == "root") {
          out += prefix;
        } else {
          out += prefix;
          out += '-';
          out += word;
        }
      });
  return out;
}

std::string arena_to_gbnf(const std::string& serialized_arena,
                          const std::map<std::string, std::string>& schemas, bool lazy,
                          bool single_call, bool outer_only) {
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

  // A format whose parser marks no rule as a trigger has no call syntax to constrain.
  if (lazy && (index.count("root") == 0 || rules[index["root"]].second.empty())) {
    throw ChatError("the chat format's parser has no tool-call rule");
  }
  // A lazy root is every trigger rule; where one trigger rule holds another (DeepSeek's
  // calls section holds its calls) the parser finds calls only inside the outer one, so
  // with outer_only the root is the outermost trigger rules.
  if (lazy && outer_only && index.count("root") != 0) {
    std::vector<std::string> alts;
    {
      const std::string& rhs = rules[index["root"]].second;
      size_t at = 0;
      while (at <= rhs.size()) {
        const size_t bar = rhs.find(" | ", at);
        alts.push_back(rhs.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
        if (bar == std::string::npos) break;
        at = bar + 3;
      }
    }
    auto reaches = [&](const std::string& from, const std::string& to) {
      std::vector<std::string> todo{from};
      std::set<std::string> seen;
      while (!todo.empty()) {
        const std::string name = todo.back();
        todo.pop_back();
        auto it = index.find(name);
        if (it == index.end() || !seen.insert(name).second) continue;
        for (const std::string& ref : referenced_rules(rules[it->second].second)) {
          if (ref == to) return true;
          todo.push_back(ref);
        }
      }
      return false;
    };
    std::string root;
    for (const std::string& a : alts) {
      bool inner = false;
      for (const std::string& b : alts) inner = inner || (b != a && reaches(b, a));
      if (!inner) root += (root.empty() ? "" : " | ") + a;
    }
    if (!root.empty()) rules[index["root"]].second = root;
  }

  // Formats whose calls are repeated call sections ("tool-calls ::= (tool-call? space)+", a
  // repetition that may match nothing, or the same with every section a call): one call
  // section, or several separated by whitespace, each a real call.
  if (lazy && index.count("tool-call") != 0 && index.count("root") != 0 &&
      index.count("tool-calls") != 0 &&
      (rules[index["tool-calls"]].second == "(tool-call? space)+" ||
       rules[index["tool-calls"]].second == "(tool-call space)+")) {
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
