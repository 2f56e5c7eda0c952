// json_schema.cpp — the JSON Schema front end: walks a schema and writes GBNF rules for the
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// JSON texts it accepts (semantics in docs/json_schema.md).
#include "lacuna/json_schema.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "grammar/json_schema_parts.h"
#include "grammar/regex_convert.h"
#include "grammar/regex_gbnf.h"

namespace lacuna {
namespace {

using json = nlohmann::ordered_json;
using schema_detail::Bound;

// Keywords this converter implements (fully or with documented approximations).
const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "patternProperties",
                                          "minProperties",
                                          "maxProperties",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "enum",
                                          "const",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf",
                                          "oneOf",
                                          "anyOf",
                                          "allOf",
                                          "not",
                                          "$ref",
                                          "nullable",
                                          "uniqueItems",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "propertyNames",
                                          "dependencies",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "if",
                                          "then",
                                          "else",
                                          "unevaluatedProperties",
                                          "unevaluatedItems",
                                          "$dynamicRef",
                                          "$recursiveRef"};
  return k;
}

bool is_validation_keyword(const std::string& k) {
  return known_keywords().count(k) != 0;
}

std::string escape_pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string join_alts(const std::vector<std::string>& alts) {
  std::string out;
  for (const std::string& a : alts) {
    if (a.empty()) continue;
    if (!out.empty()) out += " | ";
    out += a;
  }
  return out;
}

// Whether every match of an ECMAScript pattern starts at the string's start: `^` first and
// no `|` outside brackets and groups.
bool anchored_at_start(std::string_view pat) {
  if (pat.empty() || pat[0] != '^') return false;
  int depth = 0;
  bool in_class = false;
  for (size_t i = 1; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if ((c == '|' && depth == 0) || c == '.') {
      return false;
    }
  }
  return true;
}

// A never-matching expression, for rules that must exist but accept nothing.
const char* kNeverBody = "[^\\x00-\\U0010FFFF]";

// Largest key automaton (DFA states) built for patternProperties, or for a string's pattern
// with length bounds, before falling back to the approximation (for a pattern: the regex's
// own form, its length bounds left out).
constexpr size_t kMaxKeyStates = 256;
// The same for a pattern without length bounds, which is written as its automaton only
// where its regex form is ambiguous: a larger one is not built (to be thrown away, mostly:
// `^[A-Za-z0-9._-]{1,100}:` and a UUID, unambiguous, took 2.4 ms more to convert at 256).
constexpr size_t kMaxPatternStates = 64;
// States of the automaton merging the objects of anyOf/oneOf branches (merge_objects).
constexpr size_t kMaxMergedStates = 2000;
// Keys listed per state in the skipping form of large objects.
constexpr long kSkipBlock = 16;

// Alternatives one schema may grow to by expanding dependencies, if/then/else and `not`
// (each doubles them or so); past it the keyword is left unenforced with a warning.
constexpr size_t kMaxExpansion = 32;

// (DFA state, length) pairs written for a pattern with minLength/maxLength, per string and
// per schema (each pair is a grammar rule, and big grammars compile slowly).
constexpr size_t kMaxLengthPairs = 128;
constexpr size_t kMaxLengthPairsTotal = 512;

class Converter {
 public:
  Converter(const json& root, const SchemaOptions& opt)
      : root_(root), opt_(opt), rules_(opt.max_grammar_bytes) {
    index_anchors(root_, "", 0);
    if (root_.is_object()) {
      auto it = root_.find("$id");
      if (it == root_.end()) it = root_.find("id");
      if (it != root_.end() && it->is_string()) base_id_ = it->get<std::string>();
      // if/then/else came with draft 7: earlier drafts ignore them (unknown keywords).
      auto ds = root_.find("$schema");
      if (ds != root_.end() && ds->is_string()) {
        const std::string& d = ds->get_ref<const std::string&>();
        for (const char* old : {"draft-03", "draft-04", "draft-06"})
          if (d.find(old) != std::string::npos) if_keyword_ = false;
        // Up to draft 7, keywords beside a $ref are ignored.
        for (const char* old : {"draft-03", "draft-04", "draft-06", "draft-07"})
          if (d.find(old) != std::string::npos) ref_alone_ = true;
      }
    }
  }

  // The instance with its object keys in the order the grammar lists them (named
  // properties in schema order, other keys after them in their original order).
  json reorder(const json& inst, const json& schema, int depth) {
    if (depth > opt_.max_depth) return inst;
    if (!inst.is_object() && !inst.is_array()) return inst;
    std::vector<const json*> alts;
    try {
      alts = alternatives(&schema, "", 0);
    } catch (const std::exception&) {
      return inst;
    }
    static const json kTrue = true;
    if (inst.is_object() && alts.size() > 1) {
      // Put the alternatives that fit the instance best first (a discriminated oneOf picks
      // its branch by a const, enum, pattern or type).
      std::vector<std::pair<long, size_t>> scored;
      for (size_t i = 0; i < alts.size(); ++i) scored.push_back({-fit_score(inst, *alts[i]), i});
      std::stable_sort(scored.begin(), scored.end());
      std::vector<const json*> sorted;
      for (auto& [score, i] : scored) sorted.push_back(alts[i]);
      alts = std::move(sorted);
    }
    if (inst.is_object()) {
      std::vector<std::string> order;
      std::map<std::string, const json*> sub;
      const json* extra = nullptr;
      for (const json* a : alts) {
        if (!a->is_object()) continue;
        auto p = a->find("properties");
        if (p != a->end() && p->is_object()) {
          for (auto it = p->begin(); it != p->end(); ++it) {
            if (sub.emplace(it.key(), &it.value()).second) order.push_back(it.key());
          }
        }
        auto r = a->find("required");
        if (r != a->end() && r->is_array()) {
          for (const json& k : *r) {
            if (k.is_string() && sub.emplace(k.get<std::string>(), &kTrue).second) {
              order.push_back(k.get<std::string>());
            }
          }
        }
        auto ad = a->find("additionalProperties");
        if (!extra && ad != a->end() && ad->is_object()) extra = &*ad;
      }
      // A key without a property schema: the first pattern property it matches, else
      // additionalProperties.
      auto other = [&](const std::string& key) -> const json* {
        for (const json* a : alts) {
          if (!a->is_object() || !a->contains("patternProperties")) continue;
          const json& pp = (*a)["patternProperties"];
          if (!pp.is_object()) continue;
          for (auto p = pp.begin(); p != pp.end(); ++p) {
            if (p.key().size() > 200 || key.size() > 1000) continue;
            try {
              if (std::regex_search(key, std::regex(p.key(), std::regex::ECMAScript)))
                return &p.value();
            } catch (const std::exception&) {
            }
          }
        }
        return extra ? extra : &kTrue;
      };
      json out = json::object();
      for (const std::string& k : order) {
        auto it = inst.find(k);
        if (it != inst.end())
          out[k] = reorder(*it, sub[k] == &kTrue ? *other(k) : *sub[k], depth + 1);
      }
      for (auto it = inst.begin(); it != inst.end(); ++it) {
        if (!sub.count(it.key())) out[it.key()] = reorder(it.value(), *other(it.key()), depth + 1);
      }
      return out;
    }
    // Arrays.
    json out = json::array();
    const json* a = nullptr;
    for (const json* x : alts) {
      if (x->is_object() && (x->contains("items") || x->contains("prefixItems"))) {
        a = x;
        break;
      }
    }
    for (size_t i = 0; i < inst.size(); ++i) {
      const json* sch = &kTrue;
      if (a) {
        if (a->contains("prefixItems") && (*a)["prefixItems"].is_array()) {
          const json& p = (*a)["prefixItems"];
          if (i < p.size()) {
            sch = &p[i];
          } else if (a->contains("items")) {
            sch = &(*a)["items"];
          }
        } else if ((*a)["items"].is_array()) {
          const json& p = (*a)["items"];
          if (i < p.size()) {
            sch = &p[i];
          } else if (a->contains("additionalItems")) {
            sch = &(*a)["additionalItems"];
          }
        } else {
          sch = &(*a)["items"];
        }
      }
      out.push_back(reorder(inst[i], *sch, depth + 1));
    }
    return out;
  }

  // How well an object instance fits a flattened alternative (higher is better): required
  // keys present, property values plausible for their schemas.
  long fit_score(const json& inst, const json& alt) {
    if (!alt.is_object()) return 0;
    long score = 0;
    auto req = alt.find("required");
    if (req != alt.end() && req->is_array()) {
      for (const json& k : *req) {
        if (k.is_string() && !inst.contains(k.get<std::string>())) score -= 100;
      }
    }
    auto props = alt.find("properties");
    if (props == alt.end() || !props->is_object()) return score;
    for (auto it = inst.begin(); it != inst.end(); ++it) {
      auto p = props->find(it.key());
      if (p == props->end()) continue;
      score += plausible(it.value(), *p, 0) ? 1 : -50;
    }
    return score;
  }

  // Whether a value may satisfy a schema, from the keywords that are cheap to check (type,
  // const, enum, pattern, bounds, required, properties, items, combinators, `not` of
  // type/const/enum). Errs towards true; only used to order an instance's keys.
  bool plausible(const json& v, const json& s, int depth) {
    if (s.is_boolean()) return s.get<bool>();
    if (!s.is_object() || depth > 12) return true;
    auto has = [&](const char* k) { return s.contains(k); };
    if (has("$ref") && s["$ref"].is_string()) {
      try {
        if (!plausible(v, *resolve(s["$ref"].get<std::string>(), "").first, depth + 1))
          return false;
      } catch (const std::exception&) {
      }
      if (ref_alone_) return true;
    }
    if (has("type")) {
      std::set<std::string> types;
      for (const std::string& t : type_list(s["type"])) types.insert(t);
      if (has("nullable") && s["nullable"] == true) types.insert("null");
      if (!types.empty() && !type_matches(v, types)) return false;
    }
    if (has("const") && s["const"] != v) return false;
    if (has("enum") && s["enum"].is_array()) {
      const json& e = s["enum"];
      if (std::find(e.begin(), e.end(), v) == e.end()) return false;
    }
    if (has("not")) {
      // Exact only for a `not` made of type/const/enum (plausible() is exact on those).
      const json& n = s["not"];
      bool simple = n.is_object() && !n.empty();
      if (simple) {
        for (auto k = n.begin(); k != n.end(); ++k)
          simple &= !is_validation_keyword(k.key()) || k.key() == "type" || k.key() == "const" ||
                    k.key() == "enum";
      }
      if (simple && plausible(v, n, depth + 1)) return false;
    }
    if (v.is_string() && has("pattern") && s["pattern"].is_string()) {
      const std::string& pat = s["pattern"].get_ref<const std::string&>();
      const std::string& str = v.get_ref<const std::string&>();
      if (pat.size() <= 200 && str.size() <= 1000) {
        try {
          if (!std::regex_search(str, std::regex(pat, std::regex::ECMAScript))) return false;
        } catch (const std::exception&) {
        }
      }
    }
    if (v.is_number()) {
      double d = v.get<double>();
      if (has("minimum") && s["minimum"].is_number() && d < s["minimum"].get<double>())
        return false;
      if (has("maximum") && s["maximum"].is_number() && d > s["maximum"].get<double>())
        return false;
    }
    if (v.is_object()) {
      if (has("required") && s["required"].is_array()) {
        for (const json& k : s["required"])
          if (k.is_string() && !v.contains(k.get<std::string>())) return false;
      }
      if (has("properties") && s["properties"].is_object()) {
        const json& ps = s["properties"];
        for (auto it = v.begin(); it != v.end(); ++it) {
          auto p = ps.find(it.key());
          if (p != ps.end() && !plausible(it.value(), *p, depth + 1)) return false;
        }
      }
    }
    if (v.is_array() && has("items") && s["items"].is_object()) {
      for (const json& x : v)
        if (!plausible(x, s["items"], depth + 1)) return false;
    }
    if (has("allOf") && s["allOf"].is_array()) {
      for (const json& x : s["allOf"])
        if (!plausible(v, x, depth + 1)) return false;
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!has(k) || !s[k].is_array() || s[k].empty()) continue;
      bool any = false;
      for (const json& x : s[k]) any = any || plausible(v, x, depth + 1);
      if (!any) return false;
    }
    return true;
  }

  std::string run() {
    if (opt_.whitespace == SchemaOptions::Whitespace::Flexible) {
      int n = std::max(0, opt_.max_whitespace);
      ws_ = rules_.add("ws", n == 0 ? "\"\"" : "[ \\t\\n\\r]{0," + std::to_string(n) + "}");
    }
    std::string root = visit(root_, "", 0);
    if (root.empty()) throw SchemaError("the schema accepts no value", "");
    return drop_unreachable(rules_.to_string(root));
  }

  // The grammar without the rules root cannot reach (the per-branch objects a merged
  // union replaced): less to parse and compile, same language.
  static std::string drop_unreachable(const std::string& text) {
    struct Line {
      std::string_view name, all;
    };
    std::vector<Line> lines;
    std::unordered_map<std::string_view, size_t> by_name;
    for (size_t at = 0; at < text.size();) {
      size_t eol = text.find('\n', at);
      if (eol == std::string::npos) eol = text.size();
      std::string_view line(text.data() + at, eol - at);
      size_t sp = line.find(" ::= ");
      if (sp == std::string_view::npos) return text;  // not the shape RuleSet writes
      by_name.emplace(line.substr(0, sp), lines.size());
      lines.push_back({line.substr(0, sp), line});
      at = eol + 1;
    }
    std::vector<char> keep(lines.size(), 0);
    std::vector<size_t> work = {0};
    keep[0] = 1;
    while (!work.empty()) {
      std::string_view body = lines[work.back()].all.substr(lines[work.back()].name.size() + 5);
      work.pop_back();
      for (size_t i = 0; i < body.size();) {
        char c = body[i];
        if (c == '"' || c == '[') {  // a literal or a class: skip it, escapes included
          char close = c == '"' ? '"' : ']';
          for (++i; i < body.size() && body[i] != close; ++i)
            if (body[i] == '\\') ++i;
          ++i;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-') {
          size_t start = i;
          while (i < body.size() &&
                 ((body[i] >= 'a' && body[i] <= 'z') || (body[i] >= 'A' && body[i] <= 'Z') ||
                  (body[i] >= '0' && body[i] <= '9') || body[i] == '-'))
            ++i;
          auto it = by_name.find(body.substr(start, i - start));
          if (it != by_name.end() && !keep[it->second])
            keep[it->second] = 1, work.push_back(it->second);
        } else {
          ++i;
        }
      }
    }
    std::string out;
    out.reserve(text.size());
    for (size_t k = 0; k < lines.size(); ++k) {
      if (!keep[k]) continue;
      out += lines[k].all;
      out += '\n';
    }
    return out;
  }

 private:
  // ---- helpers -------------------------------------------------------------------------

  void warn(const std::string& keyword, const std::string& ptr, const std::string& msg) {
    if (recording_ > 0) warn_log_.push_back({keyword, ptr, msg});
    if (opt_.strict) throw SchemaError("unsupported: " + msg, ptr, keyword);
    if (opt_.on_warning) opt_.on_warning(keyword, ptr, msg);
  }

  [[noreturn]] void fail(const std::string& keyword, const std::string& ptr,
                         const std::string& msg) {
    throw SchemaError(msg, ptr, keyword);
  }

  std::string ws() const { return ws_; }
  std::string sep() const { return ws_.empty() ? "\",\"" : ws_ + " \",\" " + ws_; }
  std::string colon() const { return ws_.empty() ? "\":\"" : ws_ + " \":\" " + ws_; }

  static std::string hint_of(const std::string& ptr) {
    size_t slash = ptr.rfind('/');
    std::string last = slash == std::string::npos ? ptr : ptr.substr(slash + 1);
    if (last.empty() || last == "items" || last == "additionalProperties" ||
        (last[0] >= '0' && last[0] <= '9')) {
      // Use the parent name too: "/properties/tags/items" -> "tags-items".
      if (slash != std::string::npos && slash > 0) {
        size_t prev = ptr.rfind('/', slash - 1);
        std::string parent = ptr.substr(prev == std::string::npos ? 0 : prev + 1,
                                        slash - (prev == std::string::npos ? 0 : prev + 1));
        return parent + "-" + last;
      }
    }
    return last.empty() ? "value" : last;
  }

  void index_anchors(const json& s, const std::string& ptr, int depth) {
    if (depth > 64) return;
    if (s.is_object()) {
      for (const char* key : {"$anchor", "$id", "id"}) {
        auto it = s.find(key);
        if (it != s.end() && it->is_string()) {
          std::string v = it->get<std::string>();
          if (std::string(key) == "$anchor") v = "#" + v;
          if (!v.empty()) anchors_.emplace(v, std::make_pair(&s, ptr));
        }
      }
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() == "enum" || it.key() == "const") continue;
        index_anchors(it.value(), ptr + "/" + escape_pointer_token(it.key()), depth + 1);
      }
    } else if (s.is_array()) {
      for (size_t i = 0; i < s.size(); ++i) {
        index_anchors(s[i], ptr + "/" + std::to_string(i), depth + 1);
      }
    }
  }

  static std::string percent_decode(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else {
        out.push_back(s[i]);
      }
    }
    return out;
  }

  // Resolves a $ref to (schema, pointer). Throws for references it cannot follow.
  std::pair<const json*, std::string> resolve(const std::string& ref, const std::string& ptr) {
    std::string r = ref;
    // A reference that starts with the root's $id (without its fragment) is local.
    std::string base = base_id_.substr(0, base_id_.find('#'));
    if (!base.empty() && !r.empty() && r[0] != '#' && r.compare(0, base.size(), base) == 0) {
      r = r.substr(base.size());
      if (r.empty()) r = "#";
    }
    auto anchor = anchors_.find(r);
    if (anchor != anchors_.end()) return anchor->second;
    if (r.empty() || r[0] != '#') {
      fail("$ref", ptr, "$ref to another document is not supported: \"" + ref + "\"");
    }
    std::string pointer = percent_decode(r.substr(1));
    const json* cur = &root_;
    if (pointer.empty()) return {cur, ""};
    if (pointer[0] != '/')
      fail("$ref", ptr, "$ref fragment is not a JSON pointer: \"" + ref + "\"");
    size_t pos = 1;
    while (true) {
      size_t next = pointer.find('/', pos);
      std::string tok =
          pointer.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      std::string key;
      for (size_t i = 0; i < tok.size(); ++i) {
        if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
          key.push_back(tok[i + 1] == '0' ? '~' : '/');
          ++i;
        } else {
          key.push_back(tok[i]);
        }
      }
      if (cur->is_object()) {
        auto it = cur->find(key);
        if (it == cur->end()) fail("$ref", ptr, "$ref target not found: \"" + ref + "\"");
        cur = &*it;
      } else if (cur->is_array()) {
        char* end = nullptr;
        unsigned long idx = std::strtoul(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || idx >= cur->size()) {
          fail("$ref", ptr, "$ref target not found: \"" + ref + "\"");
        }
        cur = &(*cur)[idx];
      } else {
        fail("$ref", ptr, "$ref target not found: \"" + ref + "\"");
      }
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return {cur, pointer};
  }

  static bool has_validation(const json& s, const char* except) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != except && is_validation_keyword(it.key())) return true;
    }
    return false;
  }

  const json* store(json j) {
    arena_.push_back(std::move(j));
    return &arena_.back();
  }

  // ---- allOf / anyOf / oneOf / $ref flattening ----------------------------------------

  // The schema as a disjunction of schemas without top-level $ref/allOf/anyOf/oneOf.
  std::vector<const json*> alternatives(const json* s, const std::string& ptr, int depth) {
    deepest_ = std::max(deepest_, depth);
    if (depth > opt_.max_inline_depth) {
      fail("$ref", ptr,
           "$ref/allOf expansion deeper than " + std::to_string(opt_.max_inline_depth) +
               " (a reference cycle?)");
    }
    if (!s->is_object()) return {s};
    bool has_ref = s->contains("$ref");
    if (has_ref && ref_alone_) {
      const json& ref = (*s)["$ref"];
      if (!ref.is_string()) fail("$ref", ptr, "$ref must be a string");
      return ref_alternatives(resolve(ref.get<std::string>(), ptr), depth + 1);
    }
    bool has_all = s->contains("allOf");
    bool has_any = s->contains("anyOf");
    bool has_one = s->contains("oneOf");
    bool has_dep = has_dependencies(*s);
    bool has_if = if_keyword_ && s->contains("if");
    std::optional<std::vector<json>> not_alts;
    if (s->contains("not")) not_alts = negate((*s)["not"], 0);
    if (!has_ref && !has_all && !has_any && !has_one && !has_dep && !has_if && !not_alts)
      return {s};
    // The rest copied without the combinators: copying the whole schema and erasing them
    // copied every nested allOf below again at each level (a chain of allOf built by merging
    // properties: 0.6 s of one schema's conversion).
    json rest = json::object();
    for (auto it = s->begin(); it != s->end(); ++it) {
      const std::string& k = it.key();
      if (k == "$ref" || k == "allOf" || k == "anyOf" || k == "oneOf" || k == "dependencies" ||
          k == "dependentRequired" || k == "dependentSchemas" || k == "if" || k == "then" ||
          k == "else" || (not_alts && k == "not")) {
        continue;
      }
      rest[k] = it.value();
    }
    // The schema's own keywords first, so its property order leads.
    std::vector<const json*> acc = {store(std::move(rest))};
    if (has_ref) {
      const json& ref = (*s)["$ref"];
      if (!ref.is_string()) fail("$ref", ptr, "$ref must be a string");
      acc = product(acc, ref_alternatives(resolve(ref.get<std::string>(), ptr), depth + 1), ptr,
                    true);
    }
    auto combine = [&](const char* kw, bool any) {
      const json* lp = &(*s)[kw];
      if (!lp->is_array() || lp->empty()) {
        fail(kw, ptr, std::string(kw) + " must be a non-empty array");
      }
      if (std::string(kw) == "oneOf") lp = exclusive_branches(*s, ptr);
      const json& list = *lp;
      if (any) {
        std::vector<const json*> options;
        for (size_t i = 0; i < list.size(); ++i) {
          auto sub = bounded_alternatives(list[i], ptr + "/" + kw + "/" + std::to_string(i),
                                          depth + 1, 1, options.size());
          options.insert(options.end(), sub.begin(), sub.end());
          if (options.size() > opt_.max_alternatives) {
            fail(kw, ptr, "more than " + std::to_string(opt_.max_alternatives) + " alternatives");
          }
        }
        acc = product(acc, options, ptr, true);
      } else {
        for (size_t i = 0; i < list.size(); ++i) {
          std::string iptr = ptr + "/" + kw + "/" + std::to_string(i);
          acc = product(acc, bounded_alternatives(list[i], iptr, depth + 1, acc.size(), 1), ptr,
                        true);
        }
      }
    };
    if (has_all) combine("allOf", false);
    if (has_any) combine("anyOf", true);
    if (has_one) combine("oneOf", true);
    auto stored = [&](std::vector<json> list) {
      std::vector<const json*> out;
      for (json& j : list) out.push_back(store(std::move(j)));
      return out;
    };
    if (not_alts) {
      if (acc.size() * not_alts->size() > kMaxExpansion) {
        warn("not", ptr + "/not", "too many alternatives to enforce 'not'");
      } else {
        acc = product(acc, stored(std::move(*not_alts)), ptr, true);
      }
    }
    if (has_dep) {
      for (const char* kw : {"dependentRequired", "dependencies", "dependentSchemas"}) {
        if (!s->contains(kw) || !(*s)[kw].is_object()) continue;
        const json& deps = (*s)[kw];
        for (auto it = deps.begin(); it != deps.end(); ++it) {
          // Either the key is absent, or it is present together with what it needs.
          std::string dptr = ptr + "/" + kw + "/" + escape_pointer_token(it.key());
          std::vector<json> options = {json{{"properties", {{it.key(), false}}}}};
          json present = json{{"required", json::array({it.key()})}};
          if (it.value().is_array()) {
            for (const json& k : it.value()) {
              if (k.is_string()) present["required"].push_back(k);
            }
            options.push_back(std::move(present));
          } else if (it.value().is_object() || it.value().is_boolean()) {
            for (const json* a : alternatives(&it.value(), dptr, depth + 1)) {
              json m = merge(present, *a, dptr);
              if (!(m.is_boolean() && !m.get<bool>())) options.push_back(std::move(m));
            }
          } else {
            fail(kw, dptr, std::string(kw) + " values must be arrays or schemas");
          }
          if (acc.size() * options.size() > kMaxExpansion) {
            warn(kw, dptr, "too many combinations to enforce '" + it.key() + "'");
            continue;
          }
          acc = product(acc, stored(std::move(options)), ptr, true);
        }
      }
    }
    if (has_if) {
      // (if and then) or (not if and else), when `if` can be negated exactly.
      std::optional<std::vector<json>> not_if = negate((*s)["if"], 0);
      if (!not_if) {
        warn("if", ptr + "/if", "this 'if' cannot be negated in a grammar; if/then/else ignored");
      } else {
        static const json kTrue = true;
        const json& then_s = s->contains("then") ? (*s)["then"] : kTrue;
        const json& else_s = s->contains("else") ? (*s)["else"] : kTrue;
        std::vector<const json*> yes;
        try {
          yes = product(alternatives(&(*s)["if"], ptr + "/if", depth + 1),
                        alternatives(&then_s, ptr + "/then", depth + 1), ptr);
          std::vector<const json*> no = product(
              stored(std::move(*not_if)), alternatives(&else_s, ptr + "/else", depth + 1), ptr);
          yes.insert(yes.end(), no.begin(), no.end());
        } catch (const SchemaError& e) {
          if (opt_.strict) throw;
          yes.assign(opt_.max_alternatives + 1, nullptr);  // reported below
        }
        if (acc.size() * yes.size() > kMaxExpansion) {
          warn("if", ptr + "/if", "too many alternatives to enforce if/then/else");
        } else {
          acc = product(acc, yes, ptr, true);
        }
      }
    }
    return acc;
  }

  // alternatives() of a $ref's target, made once per target. A target lies in the root
  // document, so its address names it, and its pointers (and so its warnings) do not depend
  // on the reference. Only the depth limit does: a stored expansion serves a call at its own
  // depth, or at any depth where it stays within the limit when it did. Its warnings are
  // given again on each use. (yippee-ki's rule types expanded the same 18-way function
  // discriminator again for each property naming it: 8,851 merges and 94 ms of conversion,
  // now 4,808 and 36 ms.)
  std::vector<const json*> ref_alternatives(const std::pair<const json*, std::string>& target,
                                            int depth) {
    auto hit = expansions_.find(target.first);
    if (hit != expansions_.end()) {
      const Expansion& e = hit->second;
      int limit = opt_.max_inline_depth;
      if (e.depth == depth || (e.depth + e.reach <= limit && depth + e.reach <= limit)) {
        for (const auto& w : e.warnings) warn(w[0], w[1], w[2]);
        deepest_ = std::max(deepest_, depth + e.reach);
        return e.alts;
      }
    }
    size_t first_warning = warn_log_.size();
    int outer_deepest = deepest_;
    deepest_ = depth;
    ++recording_;
    auto leave = [&] {
      int reach = deepest_ - depth;
      deepest_ = std::max(outer_deepest, deepest_);
      if (--recording_ == 0) warn_log_.clear();
      return reach;
    };
    std::vector<const json*> alts;
    try {
      alts = alternatives(target.first, target.second, depth);
    } catch (...) {
      leave();
      throw;
    }
    Expansion e{depth,
                0,
                alts,
                {warn_log_.begin() + static_cast<std::ptrdiff_t>(first_warning), warn_log_.end()}};
    e.reach = leave();
    expansions_.insert_or_assign(target.first, std::move(e));
    return alts;
  }

  // ---- oneOf -----------------------------------------------------------------------------

  // Follows pure $refs (a few hops) to the schema they name.
  const json* deref(const json* b) {
    for (int hop = 0; hop < 8 && b->is_object() && b->contains("$ref") &&
                      (ref_alone_ || !has_validation(*b, "$ref"));
         ++hop) {
      const json& r = (*b)["$ref"];
      if (!r.is_string()) break;
      try {
        b = resolve(r.get<std::string>(), "").first;
      } catch (const std::exception&) {
        break;
      }
    }
    return b;
  }

  // The types a schema allows at its top level (all seven when it has no `type`); integer
  // is listed with number.
  static std::set<std::string> top_types(const json& b) {
    std::set<std::string> t = {"object", "array", "string", "number", "integer", "boolean", "null"};
    if (!b.is_object() || !b.contains("type")) return t;
    t.clear();
    for (const std::string& x : type_list(b["type"])) t.insert(x);
    if (t.count("number")) t.insert("integer");
    if (b.contains("nullable") && b["nullable"] == true) t.insert("null");
    return t;
  }

  // The values a property can take when a schema fixes them with const/enum.
  std::optional<json> fixed_values(const json& p) {
    const json* d = deref(&p);
    if (!d->is_object()) return std::nullopt;
    if (d->contains("const")) return json::array({(*d)["const"]});
    if (d->contains("enum") && (*d)["enum"].is_array()) return (*d)["enum"];
    return std::nullopt;
  }

  // True when no document can satisfy both branches (with the parent's `required` and
  // `type` applying to both): different types, different const/enum values, or a
  // discriminating property that both fix to different values and one requires.
  bool provably_disjoint(const json& a, const json& b, const json& parent) {
    std::set<std::string> ta = top_types(a), tb = top_types(b), tp = top_types(parent);
    bool common = false;
    for (const std::string& t : ta) common |= tb.count(t) && tp.count(t);
    if (!common) return true;
    auto fa = a.is_object() && (a.contains("const") || a.contains("enum")) ? fixed_values(a)
                                                                           : std::nullopt;
    auto fb = b.is_object() && (b.contains("const") || b.contains("enum")) ? fixed_values(b)
                                                                           : std::nullopt;
    auto disjoint_values = [](const json& x, const json& y) {
      for (const json& v : x) {
        if (std::find(y.begin(), y.end(), v) != y.end()) return false;
      }
      return true;
    };
    if (fa && fb && disjoint_values(*fa, *fb)) return true;
    // Both sides must be objects (or only objects are common) for a property to decide.
    bool objects_only = true;
    for (const std::string& t : ta) {
      if (t != "object" && tb.count(t) && tp.count(t)) objects_only = false;
    }
    if (!objects_only || !a.is_object() || !b.is_object()) return false;
    auto required_in = [&](const json& x, const std::string& k) {
      for (const json* r : {&x, &parent}) {
        if (r->contains("required") && (*r)["required"].is_array()) {
          for (const json& q : (*r)["required"]) {
            if (q == k) return true;
          }
        }
      }
      return false;
    };
    if (!a.contains("properties") || !b.contains("properties")) return false;
    const json& pa = a["properties"];
    const json& pb = b["properties"];
    if (!pa.is_object() || !pb.is_object()) return false;
    for (auto it = pa.begin(); it != pa.end(); ++it) {
      auto other = pb.find(it.key());
      if (other == pb.end()) continue;
      if (!required_in(a, it.key()) && !required_in(b, it.key())) continue;
      auto va = fixed_values(it.value()), vb = fixed_values(*other);
      if (va && vb && disjoint_values(*va, *vb)) return true;
    }
    return false;
  }

  // The branches of a oneOf, rewritten so that a document matches at most one of them:
  // branch i becomes i and not j for every other branch j that is not provably disjoint
  // from i, with `not j` from negate() (required keys, typed or fixed properties...). When
  // some branch cannot be negated, or the combinations pass 64 per branch, oneOf is read
  // as anyOf with a warning.
  const json* exclusive_branches(const json& s, const std::string& ptr) {
    const json& list = s["oneOf"];
    size_t n = list.size();
    if (n < 2) return &list;
    std::vector<const json*> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = deref(&list[i]);
    std::vector<std::optional<std::vector<json>>> neg(n);
    std::vector<char> tried(n, 0);
    json out = json::array();
    bool changed = false;
    for (size_t i = 0; i < n; ++i) {
      std::vector<json> variants = {json::array({list[i]})};  // allOf parts per variant
      for (size_t j = 0; j < n; ++j) {
        if (i == j || provably_disjoint(*raw[i], *raw[j], s)) continue;
        if (!tried[j]) tried[j] = 1, neg[j] = negate(list[j], 0);
        if (!neg[j]) {
          warn("oneOf", ptr,
               "oneOf branches " + std::to_string(i) + " and " + std::to_string(j) +
                   " may overlap and branch " + std::to_string(j) +
                   " cannot be negated; read as anyOf");
          return &list;
        }
        std::vector<json> next;
        for (const json& v : variants) {
          for (const json& alt : *neg[j]) {
            if (alt.is_boolean() && !alt.get<bool>()) continue;
            json w = v;
            w.push_back(alt);
            next.push_back(std::move(w));
          }
        }
        if (next.size() > 64) {
          warn("oneOf", ptr, "too many combinations to make oneOf exclusive; read as anyOf");
          return &list;
        }
        variants = std::move(next);
        changed = true;
      }
      for (json& v : variants) out.push_back(v.size() == 1 ? v[0] : json{{"allOf", std::move(v)}});
    }
    if (!changed) return &list;
    if (out.empty()) out.push_back(false);
    return store(std::move(out));
  }

  static bool has_dependencies(const json& s) {
    for (const char* k : {"dependencies", "dependentRequired", "dependentSchemas"}) {
      auto it = s.find(k);
      if (it != s.end() && !(it->is_object() && it->empty())) return true;
    }
    return false;
  }

  static bool trivially_true(const json& x) {
    if (x.is_boolean()) return x.get<bool>();
    if (!x.is_object()) return false;
    for (auto it = x.begin(); it != x.end(); ++it) {
      if (is_validation_keyword(it.key())) return false;
    }
    return true;
  }

  // The complement of a schema as a disjunction of simple schemas, for the forms a grammar
  // can express: booleans, `type`, `required`, properties fixed by const/enum (or typed),
  // and allOf/anyOf of those. nullopt for anything else (const/enum at the top are left to
  // visit_simple, which removes the values).
  std::optional<std::vector<json>> negate(const json& x0, int depth) {
    if (depth > 8) return std::nullopt;
    const json* x = deref(&x0);
    if (x->is_boolean()) return std::vector<json>{json(!x->get<bool>())};
    if (!x->is_object()) return std::nullopt;
    std::vector<std::string> kws;
    for (auto it = x->begin(); it != x->end(); ++it) {
      if (is_validation_keyword(it.key())) kws.push_back(it.key());
    }
    if (kws.empty()) return std::vector<json>{json(false)};
    if (kws.size() == 1 && (kws[0] == "allOf" || kws[0] == "anyOf")) {
      const json& list = (*x)[kws[0]];
      if (!list.is_array() || list.empty()) return std::nullopt;
      std::vector<json> out;
      if (kws[0] == "allOf") {  // not (A and B) = not A or not B
        for (const json& sub : list) {
          auto n = negate(sub, depth + 1);
          if (!n) return std::nullopt;
          out.insert(out.end(), n->begin(), n->end());
        }
      } else {  // not (A or B) = not A and not B
        out = {json(true)};
        for (const json& sub : list) {
          auto n = negate(sub, depth + 1);
          if (!n) return std::nullopt;
          std::vector<json> next;
          for (const json& a : out) {
            for (const json& b : *n) {
              json m = merge(a, b, "");
              if (!(m.is_boolean() && !m.get<bool>())) next.push_back(std::move(m));
            }
          }
          if (next.size() > 64) return std::nullopt;
          out = std::move(next);
        }
      }
      if (out.empty()) out.push_back(json(false));
      return out;
    }
    for (const std::string& k : kws) {
      if (k != "type" && k != "required" && k != "properties") return std::nullopt;
    }
    std::vector<json> out;
    std::set<std::string> types = top_types(*x);
    if (x->contains("type")) {
      json others = json::array();
      for (const char* t : {"object", "array", "string", "number", "boolean", "null"}) {
        if (!types.count(t)) others.push_back(t);
      }
      // number without integer: the non-integral numbers cannot be written as a type.
      if (!types.count("number") && types.count("integer")) return std::nullopt;
      if (!others.empty()) out.push_back(json{{"type", others}});
    }
    if (types.count("object")) {
      if (x->contains("required")) {
        const json& r = (*x)["required"];
        if (!r.is_array()) return std::nullopt;
        for (const json& k : r) {
          if (!k.is_string()) return std::nullopt;
          out.push_back(json{{"type", "object"}, {"properties", {{k.get<std::string>(), false}}}});
        }
      }
      if (x->contains("properties")) {
        const json& props = (*x)["properties"];
        if (!props.is_object()) return std::nullopt;
        for (auto it = props.begin(); it != props.end(); ++it) {
          if (trivially_true(it.value())) continue;
          json inner;
          const json* v = deref(&it.value());
          if (v->is_boolean()) {
            inner = true;  // `false`: having the key at all breaks the schema
          } else if (auto vals = fixed_values(*v)) {
            for (const json& e : *vals) {
              if (e.is_object() || e.is_array()) return std::nullopt;
            }
            for (auto k = v->begin(); k != v->end(); ++k) {
              if (is_validation_keyword(k.key()) && k.key() != "const" && k.key() != "enum" &&
                  k.key() != "type")
                return std::nullopt;
            }
            // Outside the values, or outside the type.
            json alts = json::array({json{{"not", {{"enum", *vals}}}}});
            if (v->contains("type")) alts.push_back(json{{"not", {{"type", (*v)["type"]}}}});
            inner = alts.size() == 1 ? alts[0] : json{{"anyOf", alts}};
          } else if (v->is_object() && v->size() == 1 && v->contains("type")) {
            inner = json{{"not", {{"type", (*v)["type"]}}}};
          } else {
            return std::nullopt;
          }
          out.push_back(json{{"type", "object"},
                             {"required", json::array({it.key()})},
                             {"properties", {{it.key(), inner}}}});
        }
      }
    }
    if (out.empty()) out.push_back(json(false));
    return out;
  }

  // alternatives() of a combinator's item, where `factor` * n + `offset` alternatives must
  // stay within the limit: an item whose if/then/else would pass it has that part left
  // unenforced (warning) instead of failing the whole schema.
  std::vector<const json*> bounded_alternatives(const json& item, const std::string& iptr,
                                                int depth, size_t factor, size_t offset) {
    auto sub = alternatives(&item, iptr, depth);
    if (factor * sub.size() + offset > opt_.max_alternatives && item.is_object() && if_keyword_ &&
        item.contains("if")) {
      warn("if", iptr + "/if", "too many alternatives to enforce if/then/else");
      json stripped = item;
      for (const char* k : {"if", "then", "else"}) stripped.erase(k);
      sub = alternatives(store(std::move(stripped)), iptr, depth);
    }
    return sub;
  }

  // Every merge of a schema of `a` with one of `b`. With `consume_a`, a's schemas were made
  // for this product alone (alternatives' accumulator): each is moved into its last merge
  // instead of copied. (A chain of allOf/if items copied the growing schema once per item:
  // most of cloudify's 1.1 s conversion and 628 MB.)
  std::vector<const json*> product(const std::vector<const json*>& a,
                                   const std::vector<const json*>& b, const std::string& ptr,
                                   bool consume_a = false) {
    std::vector<const json*> out;
    for (const json* x : a) {
      for (size_t j = 0; j < b.size(); ++j) {
        const json* y = b[j];
        // The arena holds its schemas as mutable objects; x is referenced by `a` alone.
        json m = consume_a && j + 1 == b.size() ? merge(std::move(*const_cast<json*>(x)), *y, ptr)
                                                : merge(*x, *y, ptr);
        if (m.is_boolean() && !m.get<bool>()) continue;
        out.push_back(store(std::move(m)));
        if (out.size() > opt_.max_alternatives) {
          fail("allOf", ptr,
               "more than " + std::to_string(opt_.max_alternatives) +
                   " alternatives after "
                   "distributing allOf over anyOf/oneOf");
        }
      }
    }
    return out;
  }

  // Schemas whose keywords are only `type`, `const`, `enum` and `not` of const/enum: they
  // merge eagerly, so contradictions (two different discriminator values) show up early.
  static bool value_only(const json& x) {
    if (!x.is_object()) return false;
    for (auto it = x.begin(); it != x.end(); ++it) {
      const std::string& k = it.key();
      if (!is_validation_keyword(k) || k == "type" || k == "const" || k == "enum") continue;
      if (k == "not" && it.value().is_object() && it.value().size() == 1 &&
          (it.value().contains("enum") || it.value().contains("const")))
        continue;
      return false;
    }
    return true;
  }

  // Both schemas allow only listed values (const or enum) and no value is in both lists: nothing
  // satisfies both, whatever their other keywords say. Merging two branches of a
  // discriminator (`if` name is "a" `then` ..., `if` name is "b" ...) then finds the property
  // unsatisfiable and drops the branch; kept as an allOf, every pair of branches survived and
  // the alternatives doubled per `if` (128 copies of the schema and past the limit in one
  // schema: 0.6 s, its later `if`s left unenforced).
  static bool disjoint_values(const json& a, const json& b) {
    const std::optional<json> la = allowed_values(a, 0), lb = allowed_values(b, 0);
    if (!la || !lb) return false;
    for (const json& x : *la) {
      if (std::find(lb->begin(), lb->end(), x) != lb->end()) return false;
    }
    return true;
  }
  // The values a schema allows as a list, when it lists them (const, enum, or an allOf whose
  // parts do: their intersection); nullopt when it does not.
  static std::optional<json> allowed_values(const json& x, int depth) {
    if (!x.is_object()) return std::nullopt;
    if (auto it = x.find("const"); it != x.end()) return json::array({*it});
    if (auto it = x.find("enum"); it != x.end() && it->is_array()) return *it;
    auto all = x.find("allOf");
    if (all == x.end() || !all->is_array() || depth >= 8) return std::nullopt;
    std::optional<json> out;
    for (const json& part : *all) {
      std::optional<json> v = allowed_values(part, depth + 1);
      if (!v) continue;
      if (!out) {
        out = std::move(v);
        continue;
      }
      json both = json::array();
      for (const json& y : *out) {
        if (std::find(v->begin(), v->end(), y) != v->end()) both.push_back(y);
      }
      out = std::move(both);
    }
    return out;
  }

  json all_of(const json& a, const json& b) {
    if (a.is_boolean() && a.get<bool>()) return b;
    if (b.is_boolean() && b.get<bool>()) return a;
    // Nothing satisfies false, whatever the other side: kept as an allOf, a property made
    // false by two branches of a discriminator nested one allOf per later branch, and every
    // alternative expanded the chain again (minecraft-predicate: 2,806 products, 120 ms).
    if (a.is_boolean() || b.is_boolean()) return json(false);
    if (a == b) return a;
    if (value_only(a) && value_only(b) && !(a.contains("not") && b.contains("not")))
      return merge(a, b, "");
    if (disjoint_values(a, b)) return json(false);
    return json{{"allOf", json::array({a, b})}};
  }

  static std::vector<std::string> type_list(const json& t) {
    std::vector<std::string> out;
    if (t.is_string()) out.push_back(t.get<std::string>());
    if (t.is_array()) {
      for (const json& x : t) {
        if (x.is_string()) out.push_back(x.get<std::string>());
      }
    }
    return out;
  }

  // allOf of two schemas without top-level combinators. false = unsatisfiable.
  // `a` is taken by value: a caller done with its schema moves it in (product).
  json merge(json a, const json& b, const std::string& ptr) {
    if (a.is_boolean()) return a.get<bool>() ? b : json(false);
    if (b.is_boolean()) return b.get<bool>() ? std::move(a) : json(false);
    if (!a.is_object() || !b.is_object()) fail("", ptr, "schema must be an object or a boolean");
    if (a.empty()) return b;
    if (b.empty()) return a;
    // What merging `properties` reads of `a` as it came (the loop below changes it).
    json a_add = true;
    bool a_pat = false;
    if (a.contains("properties") && b.contains("properties")) {
      if (a.contains("additionalProperties")) a_add = a["additionalProperties"];
      a_pat = a.contains("patternProperties");
    }
    json out = std::move(a);
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      json& o = out[k];
      if (o == v) continue;
      if (k == "type") {
        auto ta = type_list(o), tb = type_list(v);
        std::vector<std::string> both;
        for (const std::string& x : ta) {
          for (const std::string& y : tb) {
            if (x == y) {
              both.push_back(x);
            } else if (x == "number" && y == "integer") {
              both.push_back("integer");
            } else if (x == "integer" && y == "number") {
              both.push_back("integer");
            }
          }
        }
        if (both.empty()) return json(false);
        o = both.size() == 1 ? json(both[0]) : json(both);
      } else if (k == "required") {
        if (o.is_array() && v.is_array()) {
          for (const json& r : v) {
            if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
          }
        }
      } else if (k == "properties") {
        if (!o.is_object() || !v.is_object()) continue;
        json b_add = b.contains("additionalProperties") ? b["additionalProperties"] : json(true);
        bool b_pat = b.contains("patternProperties");
        json merged = json::object();
        for (auto p = o.begin(); p != o.end(); ++p) {
          if (v.contains(p.key())) {
            merged[p.key()] = all_of(p.value(), v[p.key()]);
          } else {
            merged[p.key()] = b_pat ? p.value() : all_of(p.value(), b_add);
          }
        }
        for (auto p = v.begin(); p != v.end(); ++p) {
          if (!o.contains(p.key())) merged[p.key()] = a_pat ? p.value() : all_of(a_add, p.value());
        }
        o = std::move(merged);
      } else if (k == "additionalProperties" || k == "items" || k == "additionalItems" ||
                 k == "not" || k == "propertyNames" || k == "contains") {
        if (k == "not") {
          o = json{{"anyOf", json::array({o, v})}};
        } else {
          o = all_of(o, v);
        }
      } else if (k == "patternProperties") {
        if (o.is_object() && v.is_object()) {
          for (auto p = v.begin(); p != v.end(); ++p) {
            o[p.key()] = o.contains(p.key()) ? all_of(o[p.key()], p.value()) : p.value();
          }
        }
      } else if (k == "prefixItems") {
        if (o.is_array() && v.is_array()) {
          for (size_t i = 0; i < v.size(); ++i) {
            if (i < o.size()) {
              o[i] = all_of(o[i], v[i]);
            } else {
              o.push_back(v[i]);
            }
          }
        }
      } else if (k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties" ||
                 (k == "exclusiveMinimum" && o.is_number() && v.is_number())) {
        if (o.is_number() && v.is_number() && v.get<double>() > o.get<double>()) o = v;
      } else if (k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties" ||
                 (k == "exclusiveMaximum" && o.is_number() && v.is_number())) {
        if (o.is_number() && v.is_number() && v.get<double>() < o.get<double>()) o = v;
      } else if (k == "enum" || k == "const") {
        json la = k == "const" ? json::array({o}) : o;
        json lb = k == "const" ? json::array({v}) : v;
        json both = json::array();
        if (la.is_array() && lb.is_array()) {
          for (const json& x : la) {
            if (std::find(lb.begin(), lb.end(), x) != lb.end()) both.push_back(x);
          }
        }
        if (both.empty()) return json(false);
        out.erase(k);
        out["enum"] = both;
      } else if (k == "nullable") {
        o = o.is_boolean() && v.is_boolean() && o.get<bool>() && v.get<bool>();
      } else if (k == "pattern") {
        // Two patterns: a grammar cannot intersect them in general; keep both as allOf of
        // strings is not expressible either. Keep the first and warn.
        warn("pattern", ptr, "two patterns in allOf; only the first is enforced");
      } else if (is_validation_keyword(k)) {
        warn(k, ptr, "conflicting values of '" + k + "' in allOf; the first is enforced");
      }
    }
    // A required property that can take no value: nothing matches.
    if (out.contains("required") && out["required"].is_array() && out.contains("properties") &&
        out["properties"].is_object()) {
      for (const json& r : out["required"]) {
        if (!r.is_string()) continue;
        auto p = out["properties"].find(r.get<std::string>());
        if (p != out["properties"].end() && p->is_boolean() && !p->get<bool>()) return json(false);
      }
    }
    // Values excluded by `not` of const/enum.
    if ((out.contains("const") || out.contains("enum")) && out.contains("not") &&
        out["not"].is_object() && out["not"].size() == 1) {
      const json& n = out["not"];
      json banned = n.contains("const") ? json::array({n["const"]}) : n.value("enum", json());
      json vals = out.contains("const") ? json::array({out["const"]}) : out["enum"];
      if (banned.is_array() && vals.is_array()) {
        json kept = json::array();
        for (const json& v : vals) {
          if (std::find(banned.begin(), banned.end(), v) == banned.end()) kept.push_back(v);
        }
        if (kept.empty()) return json(false);
        out.erase("const");
        out.erase("not");
        out["enum"] = kept;
      }
    }
    // "const"/"enum" from both sides are already intersected; enum with const on the other.
    if (out.contains("const") && out.contains("enum")) {
      json both = json::array();
      if (out["enum"].is_array()) {
        for (const json& x : out["enum"]) {
          if (x == out["const"]) both.push_back(x);
        }
      }
      if (both.empty()) return json(false);
      out.erase("const");
      out["enum"] = both;
    }
    return out;
  }

  // ---- visiting ------------------------------------------------------------------------

  std::string visit(const json& s, const std::string& ptr, int depth) {
    if (depth > opt_.max_depth) {
      fail("", ptr, "schema nested deeper than " + std::to_string(opt_.max_depth));
    }
    if (s.is_boolean()) return s.get<bool>() ? any_value() : "";
    if (!s.is_object()) fail("", ptr, "schema must be an object or a boolean");
    // A pure $ref becomes a rule reference (shared, and recursion-safe); so does any $ref up
    // to draft 7, where its siblings are ignored.
    if (s.contains("$ref") && (ref_alone_ || !has_validation(s, "$ref"))) {
      const json& ref = s["$ref"];
      if (!ref.is_string()) fail("$ref", ptr, "$ref must be a string");
      auto target = resolve(ref.get<std::string>(), ptr);
      return pointer_rule(*target.first, target.second, depth);
    }
    if (s.contains("$ref") || s.contains("allOf") || s.contains("anyOf") || s.contains("oneOf") ||
        has_dependencies(s) || (if_keyword_ && s.contains("if")) ||
        (s.contains("not") && negate(s["not"], 0))) {
      std::string key = s.dump();
      bool memo = key.size() < 20000;
      if (memo) {
        auto it = synthetic_.find(key);
        if (it != synthetic_.end()) return it->second;
      }
      std::string name;
      if (memo) {
        name = rules_.reserve(hint_of(ptr));
        synthetic_.emplace(key, name);
      }
      auto alts = alternatives(&s, ptr, 0);
      // The alternatives' parts per type, each once: branches that differ only in their
      // objects share one `string`, `number`... instead of one copy per branch (fewer
      // parallel parses for the matcher, same language).
      std::vector<std::string> exprs;
      std::set<std::string> seen;
      // A branch that accepts every value makes the others redundant (e.g. a oneOf read as
      // anyOf with a branch of only annotations): one parse instead of two, and no rules
      // for the others.
      for (const json* a : alts) {
        if ((a->is_boolean() && a->get<bool>()) ||
            (a->is_object() && opt_.additional_properties_default && trivially_true(*a))) {
          alts = {a};
          break;
        }
      }
      for (const json* a : alts) {
        for (std::string& e : simple_parts(*a, ptr, depth + 1)) {
          if (!e.empty() && seen.insert(e).second) exprs.push_back(std::move(e));
        }
      }
      merge_branch_objects(exprs, ptr);
      std::string body = join_alts(exprs);
      if (!memo) return body.empty() ? "" : rules_.add(hint_of(ptr), body);
      rules_.define(name, body.empty() ? kNeverBody : body);
      if (body.empty()) {
        synthetic_[key] = "";
        return "";
      }
      return name;
    }
    return visit_simple(s, ptr, depth);
  }

  std::string pointer_rule(const json& target, const std::string& tptr, int depth) {
    auto it = ref_rules_.find(tptr);
    if (it != ref_rules_.end()) return it->second;
    std::string name = rules_.reserve(hint_of(tptr.empty() ? "/root-schema" : tptr));
    ref_rules_.emplace(tptr, name);
    std::string body = visit(target, tptr, depth + 1);
    if (body.empty()) {
      rules_.define(name, kNeverBody);
      ref_rules_[tptr] = "";
      return "";
    }
    rules_.define(name, body);
    return name;
  }

  void check_keywords(const json& s, const std::string& ptr) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      if (k == "uniqueItems") {
        if (v.is_boolean() && v.get<bool>()) warn(k, ptr, "uniqueItems is not enforced");
      } else if (k == "contains" || k == "minContains" || k == "maxContains" ||
                 k == "unevaluatedItems" || k == "$dynamicRef" || k == "$recursiveRef") {
        if (!(v.is_boolean() && v.get<bool>())) warn(k, ptr, "'" + k + "' is not enforced");
      } else if (k == "unevaluatedProperties") {
        if (!(v.is_boolean() && v.get<bool>())) warn(k, ptr, "'" + k + "' is not enforced");
      }
    }
  }

  // ---- simple schemas (no top-level combinators) -----------------------------------------

  std::string visit_simple(const json& s, const std::string& ptr, int depth) {
    std::vector<std::string> parts = simple_parts(s, ptr, depth);
    if (parts.empty()) return "";
    if (parts.size() == 1 && is_name(parts[0])) return parts[0];
    return rules_.add(hint_of(ptr), join_alts(parts));
  }

  // The expressions of a schema without top-level combinators, one per type it allows
  // (or one for its enum/const values); empty when it accepts nothing.
  std::vector<std::string> simple_parts(const json& s, const std::string& ptr, int depth) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return {any_value()};
      return {};
    }
    if (!s.is_object()) fail("", ptr, "schema must be an object or a boolean");
    // No validation keyword: any value (unless objects are closed by default).
    if (opt_.additional_properties_default && trivially_true(s)) return {any_value()};
    // Here, not in visit(): keywords inside anyOf/oneOf/allOf branches arrive merged.
    check_keywords(s, ptr);
    // Types allowed.
    std::set<std::string> types;
    bool typed = false;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (!t.is_string() && !t.is_array()) fail("type", ptr, "type must be a string or an array");
      typed = true;
      for (const std::string& x : type_list(t)) {
        static const std::set<std::string> valid = {"object",  "array",   "string", "number",
                                                    "integer", "boolean", "null"};
        if (!valid.count(x)) fail("type", ptr, "unknown type \"" + x + "\"");
        types.insert(x);
      }
    }
    if (!typed) types = {"object", "array", "string", "number", "boolean", "null"};
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) {
      types.insert("null");
    }
    if (types.count("number")) types.erase("integer");
    json excluded = json::array();  // scalar values `not` rules out
    if (s.contains("not")) apply_not(s["not"], types, excluded, ptr + "/not");
    if (s.contains("enum") || s.contains("const")) {
      std::string e = enum_values(s, types, ptr, excluded);
      if (e.empty()) return {};
      return {e};
    }
    std::vector<std::string> excluded_strings;
    bool excluded_numbers = false;
    for (const json& v : excluded) {
      if (v.is_string()) excluded_strings.push_back(v.get<std::string>());
      if (v.is_number()) excluded_numbers = true;
    }
    std::vector<std::string> alts;
    for (const char* t : {"object", "array", "string", "number", "integer", "boolean", "null"}) {
      if (!types.count(t)) continue;
      std::string e;
      std::string type(t);
      if (type == "object") {
        e = gen_object(s, ptr, depth);
      } else if (type == "array") {
        e = gen_array(s, ptr, depth);
      } else if (type == "string") {
        e = gen_string(s, ptr);
        if (!e.empty() && !excluded_strings.empty()) {
          if (e == string_rule()) {
            e = key_not_in(excluded_strings);  // any string but these (canonical encoding)
          } else {
            warn("not", ptr + "/not", "excluded string values are not enforced on this string");
          }
        }
      } else if (type == "number" || type == "integer") {
        e = gen_number(s, ptr, type == "integer");
        if (excluded_numbers) warn("not", ptr + "/not", "excluded numbers are not enforced");
      } else if (type == "boolean") {
        std::vector<std::string> bools;
        for (bool b : {true, false}) {
          if (std::find(excluded.begin(), excluded.end(), json(b)) == excluded.end())
            bools.push_back(b ? "\"true\"" : "\"false\"");
        }
        e = bools.empty() ? "" : "(" + join_alts(bools) + ")";
      } else {
        e = "\"null\"";
      }
      if (!e.empty()) alts.push_back(e);
    }
    return alts;
  }

  static bool is_name(const std::string& e) {
    for (char c : e) {
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-')) {
        return false;
      }
    }
    return !e.empty();
  }

  void apply_not(const json& n0, std::set<std::string>& types, json& excluded,
                 const std::string& ptr, int depth = 0) {
    const json& n = *deref(&n0);
    if (n.is_object() && depth < 8 && n.contains("anyOf") && n["anyOf"].is_array() &&
        !has_validation(n, "anyOf")) {
      // not (A or B) = not A and not B.
      for (const json& sub : n["anyOf"]) apply_not(sub, types, excluded, ptr, depth + 1);
      return;
    }
    if (n.is_object() && (n.contains("enum") || n.contains("const"))) {
      bool simple = true;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (is_validation_keyword(it.key()) && it.key() != "enum" && it.key() != "const")
          simple = false;
      }
      auto vals = fixed_values(n);
      if (simple && vals && vals->is_array()) {
        bool scalars = true;
        for (const json& v : *vals) scalars &= !v.is_object() && !v.is_array();
        if (scalars) {
          for (const json& v : *vals) {
            if (v.is_null()) types.erase("null");
            excluded.push_back(v);
          }
          return;
        }
      }
    }
    if (n.is_boolean()) {
      if (n.get<bool>()) types.clear();
      return;
    }
    if (n.is_object() && n.size() == 1 && n.contains("type")) {
      for (const std::string& t : type_list(n["type"])) {
        types.erase(t);
        if (t == "number") types.erase("integer");
        if (t == "integer" && types.count("number")) {
          warn("not", ptr, "'not: integer' on numbers is approximated as numbers");
        }
      }
      return;
    }
    if (n.is_object() && n.empty()) {
      types.clear();
      return;
    }
    warn("not", ptr, "'not' is only enforced for type");
  }

  // ---- enum / const ----------------------------------------------------------------------

  static bool type_matches(const json& v, const std::set<std::string>& types) {
    if (v.is_null()) return types.count("null");
    if (v.is_boolean()) return types.count("boolean");
    if (v.is_string()) return types.count("string");
    if (v.is_array()) return types.count("array");
    if (v.is_object()) return types.count("object");
    if (v.is_number_integer() || v.is_number_unsigned()) {
      return types.count("integer") || types.count("number");
    }
    if (v.is_number_float()) {
      double d = v.get<double>();
      return types.count("number") || (types.count("integer") && std::floor(d) == d);
    }
    return false;
  }

  std::string literal_value(const json& v) {
    if (v.is_object()) {
      if (v.empty()) return "\"{\" " + (ws_.empty() ? "" : ws_ + " ") + "\"}\"";
      std::string out = "\"{\" " + (ws_.empty() ? "" : ws_ + " ");
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += sep() + " ";
        first = false;
        out += gbnf::literal(json(it.key()).dump()) + " " + colon() + " " +
               literal_value(it.value()) + " ";
      }
      return out + (ws_.empty() ? "" : ws_ + " ") + "\"}\"";
    }
    if (v.is_array()) {
      if (v.empty()) return "\"[\" " + (ws_.empty() ? "" : ws_ + " ") + "\"]\"";
      std::string out = "\"[\" " + (ws_.empty() ? "" : ws_ + " ");
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += sep() + " ";
        out += literal_value(v[i]) + " ";
      }
      return out + (ws_.empty() ? "" : ws_ + " ") + "\"]\"";
    }
    if (v.is_number()) return number_literal(v);
    return gbnf::literal(v.dump(-1, ' ', false, json::error_handler_t::replace));
  }

  // A number of an enum/const in every decimal spelling without exponent: JSON Schema
  // compares numbers by value, so `2.0` also matches 2 and 2.00, and `1.5` matches 1.50.
  static std::string number_literal(const json& v) {
    std::string text = v.dump();
    bool neg = !text.empty() && text[0] == '-';
    std::string body = neg ? text.substr(1) : text;
    size_t e = body.find_first_of("eE");
    long exp = 0;
    if (e != std::string::npos) {
      exp = std::strtol(body.c_str() + e + 1, nullptr, 10);
      body.resize(e);
    }
    if (exp > 40 || exp < -40) return gbnf::literal(text);
    size_t dot = body.find('.');
    std::string ip = dot == std::string::npos ? body : body.substr(0, dot);
    std::string fp = dot == std::string::npos ? "" : body.substr(dot + 1);
    // Shift the decimal point by the exponent.
    for (; exp > 0; --exp) {
      ip.push_back(fp.empty() ? '0' : fp[0]);
      if (!fp.empty()) fp.erase(0, 1);
    }
    for (; exp < 0; ++exp) {
      fp.insert(fp.begin(), ip.empty() ? '0' : ip.back());
      if (!ip.empty()) ip.pop_back();
    }
    ip.erase(0, std::min(ip.find_first_not_of('0'), ip.size()));
    if (ip.empty()) ip = "0";
    while (!fp.empty() && fp.back() == '0') fp.pop_back();
    bool zero = ip == "0" && fp.empty();
    std::string out = (neg && !zero ? "\"-" : "\"") + ip;
    out += fp.empty() ? "\" (\".\" \"0\"+)?" : "." + fp + "\" \"0\"*";
    // The shortest spelling with exponent too, as serializers write it (1e-06).
    if (e != std::string::npos) out += " | " + gbnf::literal(text);
    return "(" + out + ")";
  }

  std::string enum_values(const json& s, const std::set<std::string>& types, const std::string& ptr,
                          const json& excluded) {
    json values = json::array();
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array()) fail("enum", ptr, "enum must be an array");
      if (e.size() > opt_.max_enum) {
        fail("enum", ptr,
             "enum has " + std::to_string(e.size()) + " values, above the limit " +
                 std::to_string(opt_.max_enum));
      }
      if (s.contains("const")) {
        if (std::find(e.begin(), e.end(), s["const"]) == e.end()) return "";
      } else {
        values = e;
      }
    }
    std::vector<std::string> alts, texts;  // texts: the JSON texts of strings, booleans, null
    std::set<std::string> seen;
    for (const json& v : values) {
      if (!type_matches(v, types)) continue;
      if (!value_fits(v, s)) continue;
      if (std::find(excluded.begin(), excluded.end(), v) != excluded.end()) continue;
      std::string lit = literal_value(v);
      if (!seen.insert(lit).second) continue;
      if (v.is_string() || v.is_boolean() || v.is_null()) {
        texts.push_back(v.dump(-1, ' ', false, json::error_handler_t::replace));
      } else {
        alts.push_back(lit);
      }
    }
    if (texts.size() >= kMinEnumTrie) {
      std::sort(texts.begin(), texts.end());
      alts.push_back(literal_trie(texts, 0, texts.size(), 0, hint_of(ptr)));
    } else {
      for (const std::string& t : texts) alts.push_back(gbnf::literal(t));
    }
    if (alts.empty()) return "";
    return rules_.add(hint_of(ptr), join_alts(alts));
  }

  // Many literal values (an enum of 2,461 names in JsonSchemaStore's cryproj) written as
  // alternatives make a parse state of one stack per value at the value's start, and every
  // step of it (and of what follows its first characters) costs in proportion: 6-50 ms
  // first-use masks. Written as a trie of their texts instead (the common prefix of a group
  // once, each branching point a rule of its own), the same language has a few stacks per
  // state. `texts` sorted; [lo, hi) share their first `depth` bytes, a code point boundary.
  static constexpr size_t kMinEnumTrie = 16;
  std::string literal_trie(const std::vector<std::string>& texts, size_t lo, size_t hi,
                           size_t depth, const std::string& hint) {
    std::vector<std::string> alts;
    bool ends = false;  // one text ends here (not for JSON texts: they are prefix-free)
    for (size_t i = lo; i < hi;) {
      const std::string& t = texts[i];
      if (t.size() == depth) {
        ends = true;
        ++i;
        continue;
      }
      // The group: the texts whose next code point is t's.
      size_t first_end = depth;
      uint32_t cp;
      if (!gbnf::decode_utf8(t, first_end, cp)) first_end = depth + 1;
      const size_t n = first_end - depth;
      size_t j = i + 1;
      while (j < hi && texts[j].compare(depth, n, t, depth, n) == 0) ++j;
      // Its common prefix: that of its first and last texts (they are sorted), cut back to
      // a code point boundary.
      const std::string& last = texts[j - 1];
      size_t end = depth + n;
      while (end < t.size() && end < last.size() && t[end] == last[end]) ++end;
      while (end < t.size() && (static_cast<unsigned char>(t[end]) & 0xC0) == 0x80) --end;
      std::string alt = gbnf::literal(std::string_view(t).substr(depth, end - depth));
      if (j - i > 1 || end < t.size()) alt += " " + literal_trie(texts, i, j, end, hint);
      alts.push_back(std::move(alt));
      i = j;
    }
    if (alts.size() == 1 && !ends) return alts[0];
    std::string body = join_alts(alts);
    return rules_.add(hint, ends ? "(" + body + ")?" : body);
  }

  // Filters enum values by the simple sibling keywords a value can be checked against.
  static bool value_fits(const json& v, const json& s) {
    if (v.is_string()) {
      size_t len = 0;
      const std::string& str = v.get_ref<const std::string&>();
      for (unsigned char c : str) len += (c & 0xC0) != 0x80;
      if (s.contains("minLength") && s["minLength"].is_number() &&
          static_cast<double>(len) < s["minLength"].get<double>()) {
        return false;
      }
      if (s.contains("maxLength") && s["maxLength"].is_number() &&
          static_cast<double>(len) > s["maxLength"].get<double>()) {
        return false;
      }
    }
    if (v.is_number()) {
      double d = v.get<double>();
      if (s.contains("minimum") && s["minimum"].is_number() && d < s["minimum"].get<double>()) {
        return false;
      }
      if (s.contains("maximum") && s["maximum"].is_number() && d > s["maximum"].get<double>()) {
        return false;
      }
    }
    return true;
  }

  // ---- any value -------------------------------------------------------------------------

  std::string any_value() {
    if (!any_.empty()) return any_;
    any_ = rules_.reserve("value");
    std::string str = string_rule();
    std::string num =
        rules_.add("number", "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
    std::string w = ws_.empty() ? "" : ws_ + " ";
    std::string member = rules_.add("member", str + " " + colon() + " " + any_);
    std::string obj = rules_.add("object", "\"{\" " + w + "(" + member + " (" + sep() + " " +
                                               member + ")* " + w + ")? \"}\"");
    std::string arr = rules_.add(
        "array", "\"[\" " + w + "(" + any_ + " (" + sep() + " " + any_ + ")* " + w + ")? \"]\"");
    rules_.define(
        any_, obj + " | " + arr + " | " + str + " | " + num + " | \"true\" | \"false\" | \"null\"");
    return any_;
  }

  std::string json_char() {
    return rules_.add("char",
                      "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})");
  }

  std::string string_rule() {
    return rules_.add("string", "\"\\\"\" " + json_char() + "* \"\\\"\"");
  }

  // ---- strings ---------------------------------------------------------------------------

  std::optional<long> count_keyword(const json& s, const char* kw, const std::string& ptr) {
    if (!s.contains(kw)) return std::nullopt;
    const json& v = s[kw];
    if (!v.is_number() || v.get<double>() < 0)
      fail(kw, ptr, std::string(kw) + " must be a non-negative number");
    double d = v.get<double>();
    if (d > 1e15) return static_cast<long>(1e15);
    return static_cast<long>(std::ceil(d));
  }

  // `item{min,max}` with the limits applied (max < 0: unbounded).
  std::string repeat(const std::string& item, long min, long max, const char* kw,
                     const std::string& ptr) {
    if (min > opt_.max_repeat) {
      fail(kw, ptr,
           std::string(kw) + " " + std::to_string(min) + " exceeds the limit " +
               std::to_string(opt_.max_repeat));
    }
    if (max > opt_.max_repeat) {
      warn(kw, ptr,
           std::string(kw) + " " + std::to_string(max) + " above the limit " +
               std::to_string(opt_.max_repeat) + " is not enforced");
      max = -1;
    }
    if (max == 0) return "";
    if (min == 0 && max < 0) return item + "*";
    if (min == 1 && max < 0) return item + "+";
    if (min == 0 && max == 1) return item + "?";
    if (min == 1 && max == 1) return item;
    if (max < 0) return item + "{" + std::to_string(min) + ",}";
    if (min == max) return item + "{" + std::to_string(min) + "}";
    return item + "{" + std::to_string(min) + "," + std::to_string(max) + "}";
  }

  std::string gen_string(const json& s, const std::string& ptr) {
    auto min_len = count_keyword(s, "minLength", ptr);
    auto max_len = count_keyword(s, "maxLength", ptr);
    long lo = min_len.value_or(0), hi = max_len ? *max_len : -1;
    if (hi >= 0 && lo > hi) return "";
    const std::string q = "\"\\\"\"";
    if (s.contains("pattern")) {
      const json& p = s["pattern"];
      if (!p.is_string()) fail("pattern", ptr, "pattern must be a string");
      std::string pat = p.get<std::string>();
      // The pattern is enforced; a format with a grammar beside it is not (reported).
      auto drop_format = [&] {
        if (!s.contains("format") || !s["format"].is_string()) return;
        gbnf::RuleSet scratch(1u << 20);
        if (!schema_detail::format_content(s["format"].get<std::string>(), scratch).empty())
          warn("format", ptr, "format is not enforced together with pattern");
      };
      gbnf::CharSet set;
      long pmin, pmax;
      if (regex_detail::simple_repeat(pat, set, pmin, pmax)) {
        long a = std::max(lo, pmin);
        long b = hi < 0 ? pmax : (pmax < 0 ? hi : std::min(hi, pmax));
        if (b >= 0 && a > b) return "";
        std::string ch =
            regex_detail::char_expression(set, rules_, regex_detail::Encoding::JsonString);
        if (ch.empty()) return a == 0 ? q + " " + q : "";
        std::string body =
            repeat(ch.find(' ') != std::string::npos ? "(" + ch + ")" : ch, a, b, "pattern", ptr);
        drop_format();
        return rules_.add(hint_of(ptr), q + " " + (body.empty() ? "" : body + " ") + q);
      }
      // Length bounds with a pattern: the pattern's automaton times a length counter. And
      // without them, a pattern anchored at the start with no `.` whose regex form is
      // ambiguous is written as its deterministic automaton too: where a repetition may
      // also begin what follows it (`^(K_\w+=\S+)*(\sK_\w+=\S+)*$`, a URL's path class
      // repeated before a narrower last one), the regex form's parse states carried every
      // way of splitting a token, and a string's first mask took 3.4-3.6 ms on five dev-set
      // schemas, 0.4-0.75 ms as an automaton. The regex form is kept for the others: a search (an
      // unanchored start, a top-level `|`, a `.`) as an automaton is a broad class less a few
      // letters in each state, which the matcher walks more slowly than the regex's loop (`admin`,
      // `^.*@.*gov\.uk$`: 0.3-0.6 ms a mask, 2-12 ms as automata), and an unambiguous
      // pattern (`^Abs$`, `^[a-z]+(-[a-z]+)*$`) gains nothing from more rules.
      const bool bounded = (min_len || max_len) && lo <= opt_.max_repeat && hi <= opt_.max_repeat;
      const regex_detail::KeyClassifier* dfa = nullptr;
      if (bounded || (!min_len && !max_len && anchored_at_start(pat))) {
        dfa = pattern_dfa(pat, bounded ? kMaxKeyStates : kMaxPatternStates, ptr);
      }
      if (dfa && (bounded || dfa->ambiguous())) {
        try {
          const auto& sigs = dfa->signatures();
          for (size_t i = 0; i < sigs.size(); ++i) {
            if (sigs[i].patterns.empty()) continue;
            std::string e;
            if (bounded) {
              size_t before = rules_.rule_count();
              e = dfa->bounded_expression(
                  i, lo, hi, rules_,
                  std::min(kMaxLengthPairs,
                           kMaxLengthPairsTotal - std::min(kMaxLengthPairsTotal, length_pairs_)));
              length_pairs_ += rules_.rule_count() - before;
            } else {
              e = dfa->key_expression(i, rules_);
            }
            drop_format();
            return e.empty() ? "" : rules_.add(hint_of(ptr), e);
          }
          return "";  // the pattern matches nothing
        } catch (const RegexError&) {
          // Too many (state, length) pairs: handled below.
        }
      }
      RegexOptions ro = search_options();
      ro.on_warning = [&](const std::string& m) { warn("pattern", ptr, m); };
      try {
        std::string e =
            regex_detail::regex_expression(pat, rules_, regex_detail::Encoding::JsonString, ro);
        if (min_len || max_len) {
          warn("minLength", ptr, "minLength/maxLength are not enforced together with pattern");
        }
        drop_format();
        return rules_.add(hint_of(ptr), q + " " + e + " " + q);
      } catch (const RegexError& e) {
        if (opt_.strict) fail("pattern", ptr + "/pattern", std::string("pattern: ") + e.what());
        warn("pattern", ptr + "/pattern", std::string("pattern not enforced: ") + e.what());
      }
    }
    if (s.contains("format") && s["format"].is_string()) {
      std::string f = s["format"].get<std::string>();
      std::string content = schema_detail::format_content(f, rules_);
      if (!content.empty()) {
        if (min_len || max_len) {
          warn("minLength", ptr, "minLength/maxLength are not enforced together with format");
        }
        return rules_.add(f, q + " " + content + " " + q);
      }
    }
    if (lo == 0 && hi < 0) return string_rule();
    std::string body = repeat(json_char(), lo, hi, lo > 0 ? "minLength" : "maxLength", ptr);
    return rules_.add(hint_of(ptr), q + " " + (body.empty() ? "" : body + " ") + q);
  }

  // Regex options for a JSON Schema pattern: search semantics, the schema's repeat limit.
  RegexOptions search_options() const {
    RegexOptions ro;
    ro.search = true;
    ro.max_repeat = opt_.max_repeat;
    return ro;
  }

  // A `pattern`'s automaton (search semantics), built once per pattern and state limit: a
  // schema repeats its patterns over many properties (Github_hard o21072: 17 patterns, 7
  // different, 1.2-2.4 ms each to build or to find too large). Null when it cannot be
  // built. The warnings its parse gave are given again, at `ptr`, on each use.
  const regex_detail::KeyClassifier* pattern_dfa(const std::string& pat, size_t max_states,
                                                 const std::string& ptr) {
    auto key = std::make_pair(pat, max_states);
    auto it = pattern_dfas_.find(key);
    if (it != pattern_dfas_.end()) {
      for (const std::string& m : it->second.warnings) warn("pattern", ptr, m);
      return it->second.dfa.get();
    }
    PatternDfa built;
    RegexOptions ro = search_options();
    ro.on_warning = [&](const std::string& m) {
      built.warnings.push_back(m);
      warn("pattern", ptr, m);
    };
    try {
      built.dfa = std::make_unique<regex_detail::KeyClassifier>(
          std::vector<std::string>{pat}, std::vector<std::string>{}, ro, max_states);
    } catch (const RegexError&) {
      // Too large or unsupported: the caller writes the regex form.
    }
    return pattern_dfas_.emplace(std::move(key), std::move(built)).first->second.dfa.get();
  }

  // ---- numbers ---------------------------------------------------------------------------

  std::optional<Bound> bound(const json& s, const char* inclusive, const char* exclusive,
                             bool lower, const std::string& ptr) {
    std::optional<Bound> b;
    auto tighter = [&](Bound c) {
      if (!b) {
        b = c;
      } else if (lower ? (c.value > b->value || (c.value == b->value && c.exclusive))
                       : (c.value < b->value || (c.value == b->value && c.exclusive))) {
        b = c;
      }
    };
    if (s.contains(inclusive)) {
      const json& v = s[inclusive];
      if (!v.is_number()) {
        warn(inclusive, ptr, std::string(inclusive) + " is not a number; ignored");
        return b;
      }
      bool excl = s.contains(exclusive) && s[exclusive].is_boolean() && s[exclusive].get<bool>();
      tighter({v.get<double>(), excl, v.dump()});
    }
    if (s.contains(exclusive) && s[exclusive].is_number()) {
      tighter({s[exclusive].get<double>(), true, s[exclusive].dump()});
    }
    return b;
  }

  std::string gen_number(const json& s, const std::string& ptr, bool integer) {
    auto lo = bound(s, "minimum", "exclusiveMinimum", true, ptr);
    auto hi = bound(s, "maximum", "exclusiveMaximum", false, ptr);
    std::optional<double> mult;
    if (s.contains("multipleOf")) {
      const json& m = s["multipleOf"];
      if (!m.is_number() || m.get<double>() <= 0) fail("multipleOf", ptr, "multipleOf must be > 0");
      mult = m.get<double>();
    }
    if (integer) {
      std::optional<int64_t> a, b;
      const double lim = 9.2e18;
      // A bound written as an integer that fits in 64 bits is taken exactly (doubles lose
      // the last digits of bounds like 9223372036854775807).
      auto exact = [](const Bound& x, int step) -> std::optional<int64_t> {
        const std::string& t = x.text;
        if (t.empty() || t.find_first_not_of("-0123456789") != std::string::npos)
          return std::nullopt;
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(t.c_str(), &end, 10);
        if (errno == ERANGE || *end != '\0') return std::nullopt;
        if (!x.exclusive) return static_cast<int64_t>(v);
        if ((step > 0 && v == std::numeric_limits<long long>::max()) ||
            (step < 0 && v == std::numeric_limits<long long>::min()))
          return std::nullopt;
        return static_cast<int64_t>(v + step);
      };
      if (lo) {
        double v = lo->exclusive ? std::floor(lo->value) + 1 : std::ceil(lo->value);
        if (auto e = exact(*lo, 1)) {
          a = e;
        } else if (v > lim) {
          return "";
        } else if (v > -lim) {
          a = static_cast<int64_t>(v);
        } else {
          warn("minimum", ptr, "a minimum below -9.2e18 is not enforced");
        }
      }
      std::string hi_big;  // a maximum above the 64-bit range, as decimal digits
      if (hi) {
        double v = hi->exclusive ? std::ceil(hi->value) - 1 : std::floor(hi->value);
        const std::string& t = hi->text;
        if (auto e = exact(*hi, -1)) {
          b = e;
        } else if (v < -lim) {
          return "";
        } else if (v < lim) {
          b = static_cast<int64_t>(v);
        } else if (!t.empty() && t.size() <= 40 && t[0] != '0' &&
                   t.find_first_not_of("0123456789") == std::string::npos) {
          hi_big = t;
          if (hi->exclusive) {  // decimal decrement (t > INT64_MAX, so no borrow past the top)
            size_t i = hi_big.size();
            while (i > 0 && hi_big[i - 1] == '0') hi_big[--i] = '9';
            --hi_big[i - 1];
          }
        } else {
          warn("maximum", ptr, "a maximum above 9.2e18 is not enforced");
        }
      }
      if (mult && *mult != 1.0 && std::floor(*mult) != *mult) {
        // A fractional multipleOf on integers: every integer that is a multiple; only
        // handled when 1/mult is an integer (all integers qualify).
        double inv = 1.0 / *mult;
        if (std::fabs(inv - std::round(inv)) > 1e-9)
          warn("multipleOf", ptr, "multipleOf is not enforced");
      } else if (mult && *mult > 1) {
        if (!a && !b && *mult <= 100) return multiple_of(static_cast<int64_t>(*mult));
        warn("multipleOf", ptr, "multipleOf is only enforced on integers without bounds");
      }
      return schema_detail::integer_range(a, b, rules_, hi_big);
    }
    bool widened = false;
    std::string e = schema_detail::number_range(lo, hi, rules_, widened);
    if (widened) warn("minimum", ptr, "a bound beyond 15 integer digits is not enforced");
    if (mult) {
      double inv = 1.0 / *mult;
      double digits = std::log10(inv);
      if (!lo && !hi && *mult < 1 && std::fabs(digits - std::round(digits)) < 1e-9) {
        // multipleOf 10^-d: at most d decimals.
        int d = static_cast<int>(std::round(digits));
        return rules_.add(
            "number-dec" + std::to_string(d),
            "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]{1," + std::to_string(d) + "})?");
      }
      if (*mult == 1.0 || (std::floor(*mult) == *mult && *mult <= 100 && !lo && !hi)) {
        // Numbers that are multiples of an integer are integers (written without fraction).
        if (*mult == 1.0)
          return gen_number(json{{"minimum", lo ? json(lo->value) : json()}}, ptr, true);
        return multiple_of(static_cast<int64_t>(*mult));
      }
      warn("multipleOf", ptr, "multipleOf is not enforced on this number");
    }
    return e;
  }

  // Integers divisible by k (k >= 2): a divisibility automaton over decimal digits.
  std::string multiple_of(int64_t k) {
    std::string key = "mult-" + std::to_string(k);
    auto it = mult_rules_.find(k);
    if (it != mult_rules_.end()) return it->second;
    // state r: remainder so far; D_r accepts the rest of the digits ending at remainder 0.
    std::vector<std::string> names(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r)
      names[static_cast<size_t>(r)] = rules_.reserve(key + "-r" + std::to_string(r));
    for (int64_t r = 0; r < k; ++r) {
      std::vector<std::string> alts;
      if (r == 0) alts.push_back("\"\"");
      std::map<int64_t, std::string> by_next;
      for (int d = 0; d <= 9; ++d) by_next[(r * 10 + d) % k] += static_cast<char>('0' + d);
      for (auto& [next, ds] : by_next) {
        std::string cls = ds.size() == 1 ? "\"" + ds + "\"" : "[" + ds + "]";
        alts.push_back(cls + " " + names[static_cast<size_t>(next)]);
      }
      rules_.define(names[static_cast<size_t>(r)], join_alts(alts));
    }
    // First digit nonzero (or the number 0).
    std::map<int64_t, std::string> first;
    for (int d = 1; d <= 9; ++d) first[d % k] += static_cast<char>('0' + d);
    std::vector<std::string> alts = {"\"0\""};
    for (auto& [next, ds] : first) {
      std::string cls = ds.size() == 1 ? "\"" + ds + "\"" : "[" + ds + "]";
      alts.push_back("\"-\"? " + cls + " " + names[static_cast<size_t>(next)]);
    }
    std::string name = rules_.add(key, join_alts(alts));
    mult_rules_.emplace(k, name);
    return name;
  }

  // ---- arrays ----------------------------------------------------------------------------

  std::string gen_array(const json& s, const std::string& ptr, int depth) {
    std::vector<std::string> prefix;
    const json* rest = nullptr;
    std::string rest_ptr;
    json true_schema = true;
    bool rest_allowed = true;
    if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
      const json& p = s["prefixItems"];
      for (size_t i = 0; i < p.size(); ++i) {
        prefix.push_back(visit(p[i], ptr + "/prefixItems/" + std::to_string(i), depth + 1));
      }
      if (s.contains("items")) rest = &s["items"], rest_ptr = ptr + "/items";
    } else if (s.contains("items") && s["items"].is_array()) {
      const json& p = s["items"];
      for (size_t i = 0; i < p.size(); ++i) {
        prefix.push_back(visit(p[i], ptr + "/items/" + std::to_string(i), depth + 1));
      }
      if (s.contains("additionalItems"))
        rest = &s["additionalItems"], rest_ptr = ptr + "/additionalItems";
    } else if (s.contains("items")) {
      rest = &s["items"], rest_ptr = ptr + "/items";
    }
    std::string rest_expr;
    if (rest) {
      rest_expr = visit(*rest, rest_ptr, depth + 1);
    } else {
      rest_expr = any_value();
    }
    if (rest_expr.empty()) rest_allowed = false;
    long min = count_keyword(s, "minItems", ptr).value_or(0);
    auto max_opt = count_keyword(s, "maxItems", ptr);
    long max = max_opt ? *max_opt : -1;
    long k = static_cast<long>(prefix.size());
    // A prefix item that accepts nothing caps the length before it.
    for (long i = 0; i < k; ++i) {
      if (prefix[static_cast<size_t>(i)].empty()) {
        max = max < 0 ? i : std::min(max, i);
        k = i;
        prefix.resize(static_cast<size_t>(i));
        rest_allowed = false;
        break;
      }
    }
    if (!rest_allowed) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && min > max) return "";
    if (min > opt_.max_repeat) {
      fail("minItems", ptr,
           "minItems " + std::to_string(min) + " exceeds the limit " +
               std::to_string(opt_.max_repeat));
    }
    std::string w = ws_.empty() ? "" : ws_ + " ";
    // Items after the prefix: count in [max(0, min-k), max-k].
    std::string tail;  // items at positions >= k, each preceded by a separator unless first
    if (rest_allowed && (max < 0 || max > k)) {
      long cmin = std::max(0L, min - k);
      long cmax = max < 0 ? -1 : max - k;
      std::string item = rest_expr;
      if (k == 0) {
        std::string more = repeat("(" + sep() + " " + item + ")", std::max(0L, cmin - 1),
                                  cmax < 0 ? -1 : cmax - 1, "maxItems", ptr);
        std::string seq = item + (more.empty() ? "" : " " + rules_.add("items", more));
        tail = cmin == 0 ? "(" + seq + ")?" : seq;
      } else {
        std::string more = repeat("(" + sep() + " " + item + ")", cmin, cmax, "maxItems", ptr);
        tail = more.empty() ? "" : rules_.add("items", more);
      }
    }
    // Prefix items from the back.
    std::string seq = tail;
    for (long i = k - 1; i >= 0; --i) {
      std::string item = (i > 0 ? sep() + " " : "") + prefix[static_cast<size_t>(i)];
      std::string cur = seq.empty() ? item : item + " " + seq;
      bool optional = i >= min;
      seq = optional ? "(" + cur + ")?" : cur;
    }
    std::string body;
    if (seq.empty()) {
      body = "\"[\" " + w + "\"]\"";
    } else if (min == 0) {
      body = "\"[\" " + w + "(" + seq + " " + w + ")? \"]\"";
      if (w.empty()) body = "\"[\" " + seq + " \"]\"";
    } else {
      body = "\"[\" " + w + seq + " " + w + "\"]\"";
    }
    return rules_.add(hint_of(ptr), body);
  }

  // ---- objects ---------------------------------------------------------------------------

  // The GBNF literal of one code point of a key, as the key's JSON encoding writes it
  // (made once per code point: a JSON value dumped per trie child was a third of a key
  // automaton's time).
  const std::string& key_char_literal(uint32_t c) {
    auto [found, fresh] = key_char_literals_.try_emplace(c);
    if (fresh) {
      std::string one;
      gbnf::append_utf8(one, c);
      std::string content = json(one).dump(-1, ' ', false, json::error_handler_t::replace);
      found->second = gbnf::literal(content.substr(1, content.size() - 2));
    }
    return found->second;
  }
  std::unordered_map<uint32_t, std::string> key_char_literals_;

  // A JSON string (with quotes) whose content is none of `keys`.
  std::string key_not_in(const std::vector<std::string>& keys) {
    std::string sig;
    for (const std::string& k : keys) sig += k + '\x01';
    auto it = not_in_rules_.find(sig);
    if (it != not_in_rules_.end()) return it->second;
    // Trie over code points.
    struct TrieNode {
      std::map<uint32_t, int> kids;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const std::string& k : keys) {
      int n = 0;
      size_t pos = 0;
      while (pos < k.size()) {
        uint32_t c;
        if (!gbnf::decode_utf8(k, pos, c)) c = static_cast<unsigned char>(k[pos++]);
        auto f = trie[static_cast<size_t>(n)].kids.find(c);
        if (f == trie[static_cast<size_t>(n)].kids.end()) {
          trie.push_back({});
          int id = static_cast<int>(trie.size() - 1);
          trie[static_cast<size_t>(n)].kids.emplace(c, id);
          n = id;
        } else {
          n = f->second;
        }
      }
      trie[static_cast<size_t>(n)].terminal = true;
    }
    std::string str = string_rule();
    if (trie.size() > 4000) {
      not_in_rules_.emplace(sig, str);
      return str;  // too large: any key (documented approximation)
    }
    std::string tail = rules_.add("key-tail", json_char() + "* \"\\\"\"");
    // Children are created after their parents, so walking the nodes backwards defines
    // every child first; add() shares identical bodies, which merges equal subtries (the
    // trie becomes its minimal DAG, also across the objects of one schema): fewer rules,
    // fewer distinct matcher contexts, same language.
    std::vector<std::string> names(trie.size());
    for (size_t i = trie.size(); i-- > 0;) {
      const TrieNode& n = trie[i];
      std::vector<std::string> alts;
      if (!n.terminal) alts.push_back("\"\\\"\"");
      std::string kids;  // the children's code points, in order: the key of `oc` below
      for (auto& [c, id] : n.kids) {
        kids.append(reinterpret_cast<const char*>(&c), sizeof c);
        alts.push_back(key_char_literal(c) + " " + names[static_cast<size_t>(id)]);
      }
      // Escapes always count as "other" (keys are compared in their canonical encoding).
      // Made once per set of children (most nodes are one letter of one name).
      auto& derived = rules_.derived();
      std::string key = "key-other:" + kids;
      auto found = derived.find(key);
      if (found == derived.end()) {
        gbnf::CharSet children;
        for (const auto& kid : n.kids) children.add(kid.first);
        std::string expr = regex_detail::char_expression(
            gbnf::CharSet::all().minus(children), rules_, regex_detail::Encoding::JsonString);
        found = derived.emplace(std::move(key), std::move(expr)).first;
      }
      const std::string oc = found->second;
      if (!oc.empty()) alts.push_back((is_name(oc) ? oc : "(" + oc + ")") + " " + tail);
      names[i] = rules_.add("key-other", join_alts(alts));
    }
    std::string name = rules_.add("key-other", "\"\\\"\" " + names[0]);
    not_in_rules_.emplace(sig, name);
    return name;
  }

  // propertyNames reduced to what a key grammar can enforce: a finite set of names, a
  // pattern, length bounds. `active` false: no constraint (or an unsupported one, reported).
  struct KeyNames {
    bool active = false;
    bool has_enum = false;
    std::vector<std::string> values;  // has_enum: the only names allowed (before filters)
    bool has_pattern = false;
    std::string pattern;
    long min = 0, max = -1;  // code points
  };

  KeyNames key_names(const json& pn0, const std::string& ptr) {
    KeyNames k;
    const json& pn = *deref(&pn0);
    if (pn.is_boolean()) {
      // false: no name is allowed (an empty enum).
      if (!pn.get<bool>()) k.active = k.has_enum = true;
      return k;
    }
    if (!pn.is_object()) fail("propertyNames", ptr, "propertyNames must be a schema");
    for (auto it = pn.begin(); it != pn.end(); ++it) {
      const std::string& kw = it.key();
      const json& v = it.value();
      if (!is_validation_keyword(kw)) continue;
      if (kw == "type") {
        auto types = type_list(v);
        if (std::find(types.begin(), types.end(), "string") == types.end()) {
          k.has_enum = true;  // keys are strings: none can match
          k.values.clear();
        }
      } else if (kw == "pattern" && v.is_string()) {
        k.has_pattern = true;
        k.pattern = v.get<std::string>();
      } else if (kw == "minLength" || kw == "maxLength") {
        long n = count_keyword(pn, kw.c_str(), ptr).value_or(0);
        (kw == "minLength" ? k.min : k.max) = n;
      } else if (kw == "enum" || kw == "const") {
        std::vector<std::string> vals;
        const json list = kw == "const" ? json::array({v}) : v;
        if (!list.is_array()) fail(kw, ptr, kw + " must be an array");
        for (const json& x : list) {
          if (x.is_string()) vals.push_back(x.get<std::string>());
        }
        if (k.has_enum) {  // both: the intersection
          std::vector<std::string> both;
          for (const std::string& x : vals) {
            if (std::find(k.values.begin(), k.values.end(), x) != k.values.end()) both.push_back(x);
          }
          vals = std::move(both);
        }
        k.has_enum = true;
        k.values = std::move(vals);
      } else {
        warn("propertyNames", ptr, "'propertyNames' with '" + kw + "' is not enforced");
        return {};
      }
    }
    k.active = k.has_enum || k.has_pattern || k.min > 0 || k.max >= 0;
    if (k.active && !k.has_enum && !k.has_pattern) k.has_pattern = true;  // "" matches all
    return k;
  }

  // An object's member automaton in the direct form (every move reads one member): per
  // state, the members that may come next (expression, target state) and whether "}" may
  // follow. State 0 comes right after "{".
  struct ObjectMachine {
    std::vector<std::vector<std::pair<std::string, int>>> moves;
    std::vector<char> can_end;
  };

  // The body of an object state: its next members ("member target" each) and the end.
  // After the first member the separator is read once, then the members:
  // `ws ("," ws (m1 | m2 | ...) | "}")` instead of one `ws "," ws mK` per member, so the
  // matcher keeps one parse through the separator, not one per member that may come next
  // (90 for an object of 90 optional keys). Same language.
  std::string object_state_body(const std::vector<std::string>& members, bool first,
                                bool can_end) const {
    std::vector<std::string> alts;
    if (first) {
      alts = members;
      if (can_end) alts.push_back("\"}\"");
    } else if (members.size() > 1 || (members.size() == 1 && can_end)) {
      std::string body = "\",\" " + (ws_.empty() ? "" : ws_ + " ") + "(" + join_alts(members) + ")";
      if (can_end) body += " | \"}\"";
      alts = {ws_.empty() ? body : ws_ + " (" + body + ")"};
    } else {
      for (const std::string& m : members) alts.push_back(sep() + " " + m);
      if (can_end) alts.push_back(ws_.empty() ? "\"}\"" : ws_ + " \"}\"");
    }
    return alts.empty() ? kNeverBody : join_alts(alts);
  }

  // The union of objects given by their member automata, as one automaton (subset
  // construction over (object, state) pairs): members the objects share are read by one
  // parse instead of one per object, and the objects part where their members differ (a
  // discriminator's value, keys only one allows). A sequence of members is accepted iff one
  // of the objects accepts it, so the language is the union. "" when it would pass
  // kMaxMergedStates states.
  std::string merge_objects(const std::vector<const ObjectMachine*>& ms, const std::string& base) {
    using Set = std::vector<std::pair<size_t, int>>;  // (object, state), sorted
    std::map<Set, size_t> index;
    std::vector<Set> sets;
    Set start;
    for (size_t b = 0; b < ms.size(); ++b) start.push_back({b, 0});
    index.emplace(start, 0);
    sets.push_back(start);
    // Moves per merged state: member -> target set, in first-seen order.
    std::vector<std::vector<std::pair<std::string, size_t>>> moves;
    std::vector<char> can_end;
    for (size_t k = 0; k < sets.size(); ++k) {
      if (sets.size() > kMaxMergedStates) return "";
      std::vector<std::string> order;
      std::map<std::string, Set> by_member;
      bool end = false;
      for (auto [b, st] : sets[k]) {
        const ObjectMachine& m = *ms[b];
        end = end || m.can_end[static_cast<size_t>(st)];
        for (const auto& [member, t] : m.moves[static_cast<size_t>(st)]) {
          auto [it, fresh] = by_member.emplace(member, Set{});
          if (fresh) order.push_back(member);
          it->second.push_back({b, t});
        }
      }
      std::vector<std::pair<std::string, size_t>> mv;
      for (const std::string& member : order) {
        Set t = std::move(by_member[member]);
        std::sort(t.begin(), t.end());
        t.erase(std::unique(t.begin(), t.end()), t.end());
        auto [it, fresh] = index.emplace(t, sets.size());
        if (fresh) sets.push_back(t);
        mv.push_back({member, it->second});
      }
      moves.push_back(std::move(mv));
      can_end.push_back(end);
    }
    std::vector<std::string> names(sets.size());
    for (std::string& nm : names) nm = rules_.reserve(base + "-obj");
    for (size_t k = 0; k < sets.size(); ++k) {
      std::vector<std::string> members;
      for (const auto& [member, t] : moves[k]) members.push_back(member + " " + names[t]);
      rules_.define(names[k], object_state_body(members, k == 0, can_end[k] != 0));
    }
    return rules_.add(base, "\"{\" " + (ws_.empty() ? "" : ws_ + " ") + names[0]);
  }

  // The objects among a union's parts (rules with a member automaton) become one merged
  // object in place of the first; the others are dropped from the union.
  void merge_branch_objects(std::vector<std::string>& exprs, const std::string& ptr) {
    std::vector<std::string> objs;
    std::vector<const ObjectMachine*> ms;
    for (const std::string& e : exprs) {
      auto it = machines_.find(e);
      if (it != machines_.end()) objs.push_back(e), ms.push_back(&it->second);
    }
    if (objs.size() < 2) return;
    auto memo = merged_.find(objs);
    std::string merged;
    if (memo != merged_.end()) {
      merged = memo->second;
    } else {
      merged = merge_objects(ms, hint_of(ptr) + "-union");
      merged_.emplace(objs, merged);
    }
    if (merged.empty()) return;
    std::set<std::string> drop(objs.begin(), objs.end());
    std::vector<std::string> out;
    for (std::string& e : exprs) {
      if (!drop.count(e)) {
        out.push_back(std::move(e));
      } else if (e == objs[0]) {
        out.push_back(merged);
      }
    }
    exprs = std::move(out);
  }

  std::string gen_object(const json& s, const std::string& ptr, int depth) {
    struct Prop {
      std::string key;
      std::string kv;  // member expression; empty: the property cannot appear
      bool required = false;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    std::vector<std::string> required_order;  // as listed (the grammar's order for them)
    if (s.contains("required")) {
      const json& r = s["required"];
      if (r.is_array()) {
        for (const json& x : r) {
          if (x.is_string() && required.insert(x.get<std::string>()).second)
            required_order.push_back(x.get<std::string>());
        }
      }
    }
    json default_add = opt_.additional_properties_default;
    const json* add =
        s.contains("additionalProperties") ? &s["additionalProperties"] : &default_add;
    const json* pats = s.contains("patternProperties") && s["patternProperties"].is_object()
                           ? &s["patternProperties"]
                           : nullptr;
    std::string add_expr = visit(*add, ptr + "/additionalProperties", depth + 1);
    // propertyNames: its pattern joins the key automaton as one more pattern (kn_index).
    KeyNames kn;
    if (s.contains("propertyNames")) kn = key_names(s["propertyNames"], ptr + "/propertyNames");
    auto member = [&](const std::string& key, const std::string& value) {
      std::string klit =
          gbnf::literal(json(key).dump(-1, ' ', false, json::error_handler_t::replace));
      return klit + " " + colon() + " " + value;
    };
    // With patternProperties, key classes decide exactly which schemas a key's value must
    // satisfy (every matching pattern, the named property, or additionalProperties).
    std::optional<regex_detail::KeyClassifier> classes;
    std::vector<const json*> pat_schemas;
    std::vector<std::string> pat_ptrs;
    size_t kn_index = SIZE_MAX;
    if (pats || (kn.active && kn.has_pattern)) {
      std::vector<std::string> pat_list, names;
      if (pats) {
        for (auto it = pats->begin(); it != pats->end(); ++it) {
          pat_list.push_back(it.key());
          pat_schemas.push_back(&it.value());
          pat_ptrs.push_back(ptr + "/patternProperties/" + escape_pointer_token(it.key()));
        }
      }
      if (kn.active && kn.has_pattern) {
        kn_index = pat_list.size();
        pat_list.push_back(kn.pattern);
      }
      if (s.contains("properties") && s["properties"].is_object()) {
        for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
          names.push_back(it.key());
      }
      for (const std::string& r : required) names.push_back(r);
      RegexOptions ro = search_options();
      ro.on_warning = [&](const std::string& m) { warn("patternProperties", ptr, m); };
      try {
        classes.emplace(pat_list, names, ro, kMaxKeyStates);
      } catch (const RegexError& e) {
        if (kn_index != SIZE_MAX) {
          warn("propertyNames", ptr + "/propertyNames",
               std::string("'propertyNames' is not enforced: ") + e.what());
          kn = {};
          kn_index = SIZE_MAX;
        }
        if (pats) {
          warn("patternProperties", ptr,
               std::string("keys matching several patterns, named keys or additional keys are "
                           "not told apart: ") +
                   e.what());
        }
      }
    }
    // Whether propertyNames allows a key.
    auto key_ok = [&](const std::string& key) {
      if (!kn.active) return true;
      long len = 0;
      for (unsigned char c : key) len += (c & 0xC0) != 0x80;
      if (len < kn.min || (kn.max >= 0 && len > kn.max)) return false;
      if (kn.has_enum && std::find(kn.values.begin(), kn.values.end(), key) == kn.values.end())
        return false;
      if (kn_index != SIZE_MAX) {
        const auto& pl = classes->signatures()[classes->classify(key)].patterns;
        if (std::find(pl.begin(), pl.end(), kn_index) == pl.end()) return false;
      }
      return true;
    };
    // The value expression for a named key: its own schema (if any) and every matching
    // pattern's schema; additionalProperties when neither applies.
    auto named_value = [&](const std::string& key, const json* own, const std::string& vptr) {
      std::vector<const json*> parts;
      if (own) parts.push_back(own);
      if (classes) {
        const auto& sig = classes->signatures()[classes->classify(key)];
        for (size_t p : sig.patterns) {
          if (p != kn_index) parts.push_back(pat_schemas[p]);
        }
      }
      if (parts.empty()) return add_expr;
      if (parts.size() == 1) return visit(*parts[0], vptr, depth + 1);
      json all = json::array();
      for (const json* x : parts) all.push_back(*x);
      try {
        return visit(*store(json{{"allOf", std::move(all)}}), vptr, depth + 1);
      } catch (const SchemaError& e) {
        if (opt_.strict) throw;
        warn("patternProperties", vptr,
             "the patterns matching '" + key + "' are not applied to it: " + e.what());
        return own ? visit(*own, vptr, depth + 1) : add_expr;
      }
    };
    std::set<std::string> named;
    if (s.contains("properties")) {
      const json& p = s["properties"];
      if (!p.is_object()) fail("properties", ptr, "properties must be an object");
      if (p.size() > opt_.max_properties) {
        fail("properties", ptr, "more than " + std::to_string(opt_.max_properties) + " properties");
      }
      for (auto it = p.begin(); it != p.end(); ++it) {
        std::string v = named_value(it.key(), &it.value(),
                                    ptr + "/properties/" + escape_pointer_token(it.key()));
        if (!key_ok(it.key())) v.clear();
        Prop pr{it.key(), v.empty() ? "" : member(it.key(), v), required.count(it.key()) != 0};
        if (pr.kv.empty() && pr.required) return "";
        named.insert(it.key());
        props.push_back(std::move(pr));
      }
    }
    // Required keys without a property schema (in the order listed): any value the other
    // keywords allow.
    for (const std::string& r : required_order) {
      if (named.count(r)) continue;
      if (!key_ok(r)) return "";
      std::string v = add_expr;
      if (classes) {
        v = named_value(r, nullptr, ptr + "/required");
      } else if (pats) {
        // A required key matched by a pattern takes that schema (approximated: any value).
        v = any_value();
      }
      if (v.empty()) return "";
      props.push_back({r, member(r, v), true});
      named.insert(r);
    }
    // Extra members: pattern properties and additional properties.
    std::vector<std::string> extra_alts;
    if (kn.active && kn.has_enum) {
      // Only the listed names: each one not named above is an extra member.
      std::set<std::string> seen;
      for (const std::string& k : kn.values) {
        if (named.count(k) || !seen.insert(k).second || !key_ok(k)) continue;
        std::string v = named_value(k, nullptr, ptr + "/propertyNames");
        if (!v.empty()) extra_alts.push_back(member(k, v));
      }
    } else if (classes) {
      const auto& sigs = classes->signatures();
      for (size_t i = 0; i < sigs.size(); ++i) {
        if (sigs[i].name >= 0) continue;
        std::vector<size_t> pl;
        bool name_ok = kn_index == SIZE_MAX;
        for (size_t p : sigs[i].patterns) {
          if (p == kn_index) {
            name_ok = true;
          } else {
            pl.push_back(p);
          }
        }
        if (!name_ok) continue;
        std::string v;
        if (pl.empty()) {
          v = add_expr;
        } else if (pl.size() == 1) {
          v = visit(*pat_schemas[pl[0]], pat_ptrs[pl[0]], depth + 1);
        } else {
          json all = json::array();
          for (size_t p : pl) all.push_back(*pat_schemas[p]);
          v = visit(*store(json{{"allOf", std::move(all)}}), ptr + "/patternProperties", depth + 1);
        }
        if (v.empty()) continue;
        std::string k;
        if (kn.active && (kn.min > 0 || kn.max >= 0)) {
          try {
            k = classes->bounded_expression(i, kn.min, kn.max, rules_, kMaxLengthPairs);
          } catch (const RegexError& e) {
            warn("propertyNames", ptr + "/propertyNames",
                 std::string("length bounds on property names are not enforced: ") + e.what());
            k = classes->key_expression(i, rules_);
          }
        } else {
          k = classes->key_expression(i, rules_);
        }
        if (k.empty()) continue;
        extra_alts.push_back(k + " " + colon() + " " + v);
      }
    } else if (pats) {
      for (auto it = pats->begin(); it != pats->end(); ++it) {
        std::string v = visit(
            it.value(), ptr + "/patternProperties/" + escape_pointer_token(it.key()), depth + 1);
        if (v.empty()) continue;
        const RegexOptions ro = search_options();
        try {
          std::string k = regex_detail::regex_expression(it.key(), rules_,
                                                         regex_detail::Encoding::JsonString, ro);
          extra_alts.push_back("\"\\\"\" " + k + " \"\\\"\" " + colon() + " " + v);
        } catch (const RegexError& e) {
          warn("patternProperties", ptr, std::string("pattern not enforced: ") + e.what());
          extra_alts.push_back(string_rule() + " " + colon() + " " + v);
        }
      }
    }
    if (!add_expr.empty() && !classes && !(kn.active && kn.has_enum)) {
      std::vector<std::string> keys(named.begin(), named.end());
      extra_alts.push_back(key_not_in(keys) + " " + colon() + " " + add_expr);
    }
    std::string extra =
        extra_alts.empty() ? "" : rules_.add(hint_of(ptr) + "-extra", join_alts(extra_alts));

    long min_p = count_keyword(s, "minProperties", ptr).value_or(0);
    auto max_p_opt = count_keyword(s, "maxProperties", ptr);
    long max_p = max_p_opt ? *max_p_opt : -1;
    long n = static_cast<long>(props.size());
    long cap = max_p >= 0 ? max_p : std::max(1L, min_p);
    if ((cap + 1) * (n + 1) > 20000) {
      warn(max_p >= 0 ? "maxProperties" : "minProperties", ptr,
           "minProperties/maxProperties too large to enforce");
      min_p = 0, max_p = -1, cap = 1;
    }
    // Counting: how many named properties must / may still come from index i.
    std::vector<long> req_from(static_cast<size_t>(n + 1), 0),
        avail_from(static_cast<size_t>(n + 1), 0);
    for (long i = n - 1; i >= 0; --i) {
      const Prop& p = props[static_cast<size_t>(i)];
      req_from[static_cast<size_t>(i)] =
          req_from[static_cast<size_t>(i + 1)] + (p.required ? 1 : 0);
      avail_from[static_cast<size_t>(i)] =
          avail_from[static_cast<size_t>(i + 1)] + (p.kv.empty() ? 0 : 1);
    }
    auto sat = [&](long c) { return max_p >= 0 ? c : std::min(c, cap); };
    auto feasible = [&](long i, long c) {
      long need = c + req_from[static_cast<size_t>(i)];
      if (max_p >= 0 && need > max_p) return false;
      if (!extra.empty()) return true;
      return c + avail_from[static_cast<size_t>(i)] >= min_p;
    };
    if (!feasible(0, 0)) return "";
    std::string w = ws_.empty() ? "" : ws_ + " ";
    std::map<std::pair<long, long>, std::string> names;
    std::string base = hint_of(ptr);
    auto state_name = [&](long i, long c) {
      auto key = std::make_pair(i, c);
      auto f = names.find(key);
      if (f != names.end()) return f->second;
      std::string nm = rules_.reserve(base + "-obj");
      names.emplace(key, nm);
      return nm;
    };
    // Each state lists every member that may come next (a named key up to the next required
    // one, or an extra key) rather than skipping optional keys one by one through empty
    // steps: the next key alone decides the branch, so the matcher keeps one parse instead
    // of one per state an extra key could belong to. Same language; the skipping form is
    // kept for objects too large for the quadratic listing.
    const bool direct = (cap + 1) * (n + 1) * (n + 1) <= 20000;
    std::vector<std::pair<long, long>> work = {{0, 0}};
    std::set<std::pair<long, long>> done;
    state_name(0, 0);
    // The direct form's automaton, kept so anyOf/oneOf can merge objects (merge_objects).
    ObjectMachine machine;
    std::map<std::pair<long, long>, int> state_index = {{{0, 0}, 0}};
    auto index_of = [&](long i, long c) {
      auto [it, fresh] =
          state_index.emplace(std::make_pair(i, c), static_cast<int>(state_index.size()));
      return it->second;
    };
    std::map<std::tuple<long, long, bool>, std::string> choice_names;
    std::function<std::string(long, long, bool)> choices = [&](long i, long c,
                                                               bool with_extra) -> std::string {
      auto key = std::make_tuple(i, c, with_extra);
      if (auto f = choice_names.find(key); f != choice_names.end()) return f->second;
      std::vector<std::string> alts;
      bool all_optional = true;
      long end = std::min(n, i + kSkipBlock);
      for (long j = i; j < end; ++j) {
        const Prop& p = props[static_cast<size_t>(j)];
        if (!p.kv.empty() && (max_p < 0 || c + 1 <= max_p) && feasible(j + 1, sat(c + 1))) {
          if (!done.count({j + 1, sat(c + 1)})) work.push_back({j + 1, sat(c + 1)});
          alts.push_back(p.kv + " " + state_name(j + 1, sat(c + 1)));
        }
        if (p.required) {
          all_optional = false;
          break;
        }
      }
      if (with_extra && !extra.empty() && (max_p < 0 || c + 1 <= max_p) &&
          feasible(i, sat(c + 1))) {
        if (!done.count({i, sat(c + 1)})) work.push_back({i, sat(c + 1)});
        alts.push_back(extra + " " + state_name(i, sat(c + 1)));
      }
      if (all_optional && end < n && feasible(end, c)) {
        std::string next = choices(end, c, false);
        if (!next.empty()) alts.push_back(next);
      }
      std::string name = alts.empty() ? "" : rules_.add(base + "-keys", join_alts(alts));
      choice_names.emplace(key, name);
      return name;
    };
    while (!work.empty()) {
      auto [i, c] = work.back();
      work.pop_back();
      if (!done.insert({i, c}).second) continue;
      auto go = [&](long ni, long nc) {
        if (!done.count({ni, nc})) work.push_back({ni, nc});
        return state_name(ni, nc);
      };
      if (direct) {
        std::vector<std::pair<std::string, int>> mv;
        std::vector<std::string> members;
        auto move = [&](const std::string& member, long ni, long nc) {
          members.push_back(member + " " + go(ni, nc));
          mv.push_back({member, index_of(ni, nc)});
        };
        for (long j = i; j < n; ++j) {
          const Prop& p = props[static_cast<size_t>(j)];
          if (!p.kv.empty() && (max_p < 0 || c + 1 <= max_p) && feasible(j + 1, sat(c + 1)))
            move(p.kv, j + 1, sat(c + 1));
          if (p.required) break;  // it cannot be skipped
        }
        if (!extra.empty() && (max_p < 0 || c + 1 <= max_p) && feasible(i, sat(c + 1)))
          move(extra, i, sat(c + 1));
        bool can_end = req_from[static_cast<size_t>(i)] == 0 && c >= min_p;
        size_t k = static_cast<size_t>(index_of(i, c));
        if (machine.moves.size() <= k) machine.moves.resize(k + 1), machine.can_end.resize(k + 1);
        machine.moves[k] = std::move(mv);
        machine.can_end[k] = can_end;
        rules_.define(state_name(i, c), object_state_body(members, c == 0, can_end));
        continue;
      }
      // Skipping form (objects too large to list every next member): the state's choices
      // are the members of the next block of kSkipBlock keys (up to a required one), an
      // extra key, or one empty step past the whole block to the next block's choices
      // (which offer no extra key and no end: the state before the step offered both). A
      // key further on is reached through n/kSkipBlock nested steps instead of n, and the
      // separator is read once (o30544, 150 properties: masks of 0.1-1.8 s at every key).
      std::string ch = choices(i, c, true);
      bool can_end = req_from[static_cast<size_t>(i)] == 0 && c >= min_p;
      rules_.define(state_name(i, c), object_state_body(ch.empty() ? std::vector<std::string>{}
                                                                   : std::vector<std::string>{ch},
                                                        c == 0, can_end));
    }
    std::string name = rules_.add(base, "\"{\" " + w + state_name(0, 0));
    if (direct) machines_.emplace(name, std::move(machine));
    return name;
  }

  const json& root_;
  const SchemaOptions& opt_;
  gbnf::RuleSet rules_;
  std::string ws_;
  std::string any_;
  std::string base_id_;
  bool if_keyword_ = true;   // false for draft 3, 4 and 6 schemas
  bool ref_alone_ = false;   // draft 3 to 7: a $ref's sibling keywords are ignored
  size_t length_pairs_ = 0;  // rules written for patterns with length bounds
  std::deque<json> arena_;
  struct Expansion {
    int depth;  // the depth it was made at
    int reach;  // how much deeper than that its calls went
    std::vector<const json*> alts;
    std::vector<std::array<std::string, 3>> warnings;  // keyword, pointer, message
  };
  struct PatternDfa {
    std::unique_ptr<const regex_detail::KeyClassifier> dfa;  // null: none could be built
    std::vector<std::string> warnings;                       // its parse's, in order
  };
  std::map<std::pair<std::string, size_t>, PatternDfa> pattern_dfas_;
  std::unordered_map<const json*, Expansion> expansions_;  // $ref target -> its alternatives
  std::vector<std::array<std::string, 3>> warn_log_;       // warnings while an expansion is made
  int recording_ = 0;                                      // expansions being made
  int deepest_ = 0;                                        // deepest alternatives() call so far
  std::multimap<std::string, std::pair<const json*, std::string>> anchors_;
  std::unordered_map<std::string, std::string> ref_rules_;
  std::unordered_map<std::string, std::string> synthetic_;
  std::map<std::string, std::string> not_in_rules_;
  std::map<int64_t, std::string> mult_rules_;
  std::map<std::string, ObjectMachine> machines_;           // object rule -> its member automaton
  std::map<std::vector<std::string>, std::string> merged_;  // object rules -> their union
};

}  // namespace

namespace {

void dump_spaced(const json& j, std::string& out) {
  if (j.is_object()) {
    out.push_back('{');
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
      out += ": ";
      dump_spaced(it.value(), out);
    }
    out.push_back('}');
  } else if (j.is_array()) {
    out.push_back('[');
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      dump_spaced(j[i], out);
    }
    out.push_back(']');
  } else {
    out += j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

std::string schema_detail::canonical_instance(std::string_view schema_json,
                                              std::string_view instance_json, bool spaced,
                                              const SchemaOptions& options) {
  json schema = json::parse(schema_json);
  json inst = json::parse(instance_json);
  Converter c(schema, options);
  json out = c.reorder(inst, schema, 0);
  if (!spaced) return out.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string s;
  dump_spaced(out, s);
  return s;
}

std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaOptions& options) {
  json schema;
  try {
    schema = json::parse(schema_json);
  } catch (const json::exception& e) {
    throw SchemaError(std::string("schema is not valid JSON: ") + e.what(), "");
  }
  try {
    Converter c(schema, options);
    return c.run();
  } catch (const gbnf::GrammarTooLarge& e) {
    throw SchemaError(e.what(), "");
  } catch (const json::exception& e) {
    throw SchemaError(std::string("malformed schema: ") + e.what(), "");
  }
}

}  // namespace lacuna
