// tool_grammar.cpp — GBNF of a chat format's output syntax from llama.cpp's PEG arena, with
// lacuna's JSON-Schema grammars in place of llama.cpp's.
#include "chat/tool_grammar.h"

#include <json-schema-to-grammar.h>
#include <peg-parser.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "chat/gemma4_grammar.h"
#include "chat/raw_string_grammar.h"
#include "grammar/regex_gbnf.h"
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

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// The arena id of an `ac-ID` rule name (llama.cpp's "text up to a closing tag"), or -1.
// N of a rule named PREFIX + N (llama.cpp's "ac-12", "until-7"), or -1.
long numbered_rule_id(const std::string& name, std::string_view prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
  }
  return std::stol(name.substr(prefix.size()));
}

// The text of a literal parser (under tags and atomic groups), or nullptr.
const std::string* literal_text(const common_peg_arena& arena, common_peg_parser_id id) {
  for (int depth = 0; depth < 32; ++depth) {
    const auto& v = arena.get(id);
    if (const auto* l = std::get_if<common_peg_literal_parser>(&v)) return &l->literal;
    if (const auto* t = std::get_if<common_peg_tag_parser>(&v)) {
      id = t->child;
    } else if (const auto* a = std::get_if<common_peg_atomic_parser>(&v)) {
      id = a->child;
    } else {
      return nullptr;
    }
  }
  return nullptr;
}

// Whether every match of the parser ends with a lookahead for `lit` (llama.cpp's
// `tool_close(peek(literal))`): then nothing, whitespace included, may come before `lit`.
bool ends_with_peek(const common_peg_arena& arena, common_peg_parser_id id, const std::string& lit,
                    int depth = 0) {
  if (depth > 32) return false;
  const auto& v = arena.get(id);
  if (const auto* t = std::get_if<common_peg_tag_parser>(&v)) {
    return ends_with_peek(arena, t->child, lit, depth + 1);
  }
  if (const auto* a = std::get_if<common_peg_atomic_parser>(&v)) {
    return ends_with_peek(arena, a->child, lit, depth + 1);
  }
  if (const auto* r = std::get_if<common_peg_rule_parser>(&v)) {
    return ends_with_peek(arena, r->child, lit, depth + 1);
  }
  if (const auto* q = std::get_if<common_peg_sequence_parser>(&v)) {
    return !q->children.empty() && ends_with_peek(arena, q->children.back(), lit, depth + 1);
  }
  if (const auto* c = std::get_if<common_peg_choice_parser>(&v)) {
    bool all = !c->children.empty();
    for (common_peg_parser_id k : c->children)
      all = all && ends_with_peek(arena, k, lit, depth + 1);
    return all;
  }
  if (const auto* p = std::get_if<common_peg_and_parser>(&v)) {
    const std::string* l = literal_text(arena, p->child);
    return l != nullptr && *l == lit;
  }
  return false;
}

// GBNF has no lookahead: where a call ends with a peek for the literal that follows it
// (GLM's calls peek for `</tool_call>`), the `space` a sequence allows between the two would
// let in whitespace the parser refuses. Such spaces are dropped (a subset of the parser).
void drop_space_before_peeked_literals(common_peg_arena& arena) {
  for (size_t id = 0; id < arena.size(); ++id) {
    auto* q =
        std::get_if<common_peg_sequence_parser>(&arena.get(static_cast<common_peg_parser_id>(id)));
    if (q == nullptr) continue;
    auto& ch = q->children;
    for (size_t i = 1; i + 1 < ch.size(); ++i) {
      if (!std::holds_alternative<common_peg_space_parser>(arena.get(ch[i]))) continue;
      const std::string* lit = literal_text(arena, ch[i + 1]);
      if (lit != nullptr && ends_with_peek(arena, ch[i - 1], *lit)) {
        ch.erase(ch.begin() + static_cast<std::ptrdiff_t>(i));
        --i;
      }
    }
  }
}

// Free runs of characters in the call syntax (gpt-oss's content type after `<|constrain|>`,
// Kimi-K2's call index): at most kMaxRun characters, a subset of what the parser accepts, so
// that a call always ends.
constexpr int kMaxRun = 32;

void bound_character_runs(common_peg_arena& arena) {
  for (size_t id = 0; id < arena.size(); ++id) {
    auto* c =
        std::get_if<common_peg_chars_parser>(&arena.get(static_cast<common_peg_parser_id>(id)));
    if (c != nullptr && (c->max_count < 0 || c->max_count > kMaxRun)) {
      c->max_count = std::max(c->min_count, kMaxRun);
    }
  }
}

}  // namespace

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

bool parser_reads_prefix(const std::string& serialized_arena, const std::string& input) {
  common_peg_arena arena;
  arena.load(serialized_arena);
  common_peg_parse_context ctx(input, COMMON_PEG_PARSE_FLAG_LENIENT);
  return !arena.parse(ctx).fail();
}

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

  drop_space_before_peeked_literals(arena);
  bound_character_runs(arena);

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
  // The schemas of the tools ("tool-NAME-schema") and of their parameters
  // ("tool-NAME-arg-PARAM-schema") by the rule the parser writes for them (the name without
  // "-schema").
  std::map<std::string, const std::string*> schema_of_rule;
  for (const auto& [name, schema] : schemas) {
    const std::string suffix = "-schema";
    if (name.rfind("tool-", 0) != 0 || !ends_with(name, suffix)) continue;
    schema_of_rule[sanitize(name.substr(0, name.size() - suffix.size()))] = &schema;
  }
  // gemma-4 writes a call's arguments in its own notation (bare keys, strings between
  // `<|"|>`), any dictionary in llama.cpp's grammar: there the tool's schema in that notation.
  for (auto& [name, rhs] : rules) {
    if (name.rfind("tool-", 0) != 0 || !ends_with(rhs, " gemma4-dict")) continue;
    auto tool = schema_of_rule.find(name);
    if (tool == schema_of_rule.end()) continue;
    const std::optional<std::string> args = gemma4_args_gbnf(*tool->second);
    if (!args) continue;
    const std::string rule = "g4-" + name;
    extra += prefix_gbnf_rules(*args, rule);
    if (!extra.empty() && extra.back() != '\n') extra += '\n';
    rhs = rhs.substr(0, rhs.size() - std::string("gemma4-dict").size()) + rule;
  }
  // XML-like formats write a parameter's value as raw text up to a closing tag (an `ac` rule
  // of llama.cpp: any text without the tag). Where the parameter's schema allows only strings
  // (and null), the value is lacuna's grammar of those strings as raw text, without the tag.
  const auto is_arg_rule = [&](const std::string& rule) {
    return rule.find("-arg-") != std::string::npos && schema_of_rule.count(rule) != 0;
  };
  for (auto& [name, rhs] : rules) {
    if (!is_arg_rule(name)) continue;
    auto arg = schema_of_rule.find(name);
    const std::vector<std::string> refs = referenced_rules(rhs);
    if (refs.empty()) continue;
    // The value and its tag: `ac-N` (or a rule that is one, Qwen3-Coder's xml-arg-string),
    // or `until-N "TAG"` (DeepSeek V3.2's DSML).
    std::string tail = refs.back();
    std::string delimiter;
    long id = numbered_rule_id(refs.back(), "ac-");
    if (id < 0 && index.count(refs.back()) != 0) {
      id = numbered_rule_id(rules[index[refs.back()]].second, "ac-");
    }
    if (id >= 0 && static_cast<size_t>(id) < arena.size()) {
      const auto* ac =
          std::get_if<common_peg_ac_parser>(&arena.get(static_cast<common_peg_parser_id>(id)));
      if (ac != nullptr && ac->delimiters.size() == 1) delimiter = ac->delimiters[0];
    } else if (const long u = numbered_rule_id(refs.back(), "until-"); u >= 0) {
      const auto* until = static_cast<size_t>(u) < arena.size()
                              ? std::get_if<common_peg_until_parser>(
                                    &arena.get(static_cast<common_peg_parser_id>(u)))
                              : nullptr;
      if (until != nullptr && until->delimiters.size() == 1) {
        tail = refs.back() + " " + gbnf_format_literal(until->delimiters[0]);
        delimiter = until->delimiters[0];
      }
    }
    if (delimiter.empty() || !ends_with(rhs, tail)) continue;
    const std::optional<std::string> value = raw_string_gbnf(*arg->second, delimiter);
    if (!value) continue;
    const std::string rule = "x-" + name;
    extra += prefix_gbnf_rules(*value, rule);
    if (!extra.empty() && extra.back() != '\n') extra += '\n';
    rhs = rhs.substr(0, rhs.size() - tail.size()) + rule + " " + gbnf::literal(delimiter);
  }
  // Optional parameters as llama.cpp writes them, any of them any number of times
  // ("(space (a | b))*" or "(a | b)*"), would repeat a key: each at most once, in order.
  static const std::regex repeated(R"(\((space )?\(([^()]+)\)\)\*|\(([^()]+)\)\*)");
  for (auto& [name, rhs] : rules) {
    std::string done;
    std::smatch m;
    std::string rest = rhs;
    while (std::regex_search(rest, m, repeated)) {
      const std::string list = m[2].matched ? m[2].str() : m[3].str();
      const std::string sep = m[1].matched ? "space " : "";
      std::string once;
      size_t at = 0;
      bool args = true;
      while (args && at <= list.size()) {
        size_t bar = list.find(" | ", at);
        const std::string a =
            list.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
        args = is_arg_rule(a);
        if (!once.empty()) once += ' ';
        once.append(sep.empty() ? "" : "(").append(sep).append(a).append(sep.empty() ? "?" : ")?");
        if (bar == std::string::npos) break;
        at = bar + 3;
      }
      done += m.prefix().str() + (args ? once : m[0].str());
      rest = m.suffix().str();
    }
    rhs = done + rest;
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
