// raw_string_grammar.cpp — string parameters of XML-like tool-call formats: the schema's
// string keywords over raw text, without the closing tag.
#include "chat/raw_string_grammar.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "chat/tool_grammar.h"
#include "grammar/json_schema_parts.h"
#include "grammar/regex_convert.h"
#include "grammar/regex_gbnf.h"
#include "lacuna/regex.h"

namespace lacuna::chat::detail {

namespace {

using nlohmann::json;
using regex_detail::Encoding;
using regex_detail::KeyClassifier;

// Bounds on the automaton of one value (pattern x closing tag) and on its (state, length)
// pairs; past them the pattern, then the length bounds, are dropped (the closing tag never).
constexpr size_t kMaxStates = 512;
constexpr size_t kMaxPairs = 4096;
constexpr int kMaxDepth = 16;

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Keywords that say nothing about the value.
bool is_annotation(const std::string& k) {
  static const std::set<std::string> a = {"title",    "description", "default",    "examples",
                                          "$comment", "$defs",       "definitions"};
  return a.count(k) != 0;
}

class RawStrings {
 public:
  RawStrings(const json& root, const std::string& closer) : root_(root) {
    // The value must not contain the closer, nor end with a proper prefix of it that would
    // start an earlier closer in value + closer (a closer whose end repeats its start).
    forbidden_texts_.push_back(closer);
    forbidden_.push_back(regex_escape(closer));
    for (size_t k = 1; k < closer.size(); ++k) {
      if (closer.compare(0, closer.size() - k, closer, k, std::string::npos) == 0) {
        forbidden_texts_.push_back(closer.substr(0, k));
        forbidden_.push_back(regex_escape(closer.substr(0, k)) + "$");
      }
    }
  }

  // Adds the raw-text alternatives of schema s; false when s cannot be mapped.
  bool add(const json& s, int depth) {
    if (depth > kMaxDepth) return false;
    if (s.is_boolean()) {
      other_ = other_ || s.get<bool>();
      return true;
    }
    if (!s.is_object()) return false;
    auto only = [&](std::initializer_list<const char*> allowed) {
      for (const auto& [k, v] : s.items()) {
        bool ok = is_annotation(k);
        for (const char* a : allowed) ok = ok || k == a;
        if (!ok) return false;
      }
      return true;
    };
    if (s.contains("$ref")) {
      const json* target = resolve(s["$ref"]);
      return target != nullptr && only({"$ref"}) && add(*target, depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      if (!s[kw].is_array() || !only({kw})) return false;
      for (const json& branch : s[kw]) {
        if (!add(branch, depth + 1)) return false;
      }
      return true;
    }
    for (const char* kw : {"allOf", "not", "if", "then", "else", "$dynamicRef"}) {
      if (s.contains(kw)) return false;
    }
    std::set<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.insert(t.get<std::string>());
      if (t.is_array()) {
        for (const json& e : t) {
          if (e.is_string()) types.insert(e.get<std::string>());
        }
      }
    } else if (!s.contains("enum") && !s.contains("const")) {
      other_ = true;  // any value
      return true;
    } else {
      types = {"string"};  // what the values say (others below)
    }
    for (const std::string& t : types) other_ = other_ || (t != "string" && t != "null");
    if (types.count("string") == 0) return true;
    if (s.contains("enum") || s.contains("const")) {
      json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
      if (!values.is_array()) return false;
      Strings str;
      if (!strings(s, str)) return false;
      for (const json& v : values) {
        if (v.is_null()) continue;
        if (!v.is_string()) {
          other_ = other_ || !s.contains("type");  // else the type excludes it
          continue;
        }
        const std::string& text = v.get_ref<const std::string&>();
        const size_t n = code_points(text);
        if (n < str.min || (str.max >= 0 && n > static_cast<size_t>(str.max))) continue;
        if (str.dfa->classify(text) != str.sig) continue;
        alts_.push_back(gbnf::literal(text));
      }
      return true;
    }
    Strings str;
    if (!strings(s, str)) return false;
    if (str.sig == kNone) return true;
    if (!str.has_pattern && s.contains("format") && s["format"].is_string() &&
        format_cannot_hold_closer()) {
      // As the converter does: a format with a grammar, its length bounds not enforced.
      std::string content = schema_detail::format_content(s["format"].get<std::string>(), rules_);
      if (!content.empty()) {
        alts_.push_back(content);
        return true;
      }
    }
    std::string e;
    if (str.min > 0 || str.max >= 0) {
      try {
        e = str.dfa->bounded_expression(str.sig, static_cast<long>(str.min), str.max, rules_,
                                        kMaxPairs, Encoding::Raw);
      } catch (const RegexError&) {
        e = str.dfa->key_expression(str.sig, rules_, Encoding::Raw);
      }
    } else {
      e = str.dfa->key_expression(str.sig, rules_, Encoding::Raw);
    }
    if (!e.empty()) alts_.push_back(e);
    return true;
  }

  std::optional<std::string> grammar() const {
    if (other_ || alts_.empty()) return std::nullopt;
    std::string body;
    for (const std::string& a : alts_) body += (body.empty() ? "" : " | ") + a;
    return rules_.to_string(body);
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // A string schema's automaton: its pattern (when one maps) with the forbidden texts, and
  // the class of the values it accepts.
  struct Strings {
    std::shared_ptr<KeyClassifier> dfa;
    size_t sig = kNone;
    bool has_pattern = false;
    size_t min = 0;
    long max = -1;
  };

  bool strings(const json& s, Strings& out) {
    for (const char* kw : {"minLength", "maxLength"}) {
      if (!s.contains(kw)) continue;
      if (!s[kw].is_number() || s[kw].get<double>() < 0) return false;
      const double d = std::min(std::ceil(s[kw].get<double>()), 1e15);
      if (std::string(kw) == "minLength") {
        out.min = static_cast<size_t>(d);
      } else {
        out.max = static_cast<long>(d);
      }
    }
    RegexOptions ro;
    ro.search = true;
    std::vector<std::string> patterns = forbidden_;
    if (s.contains("pattern") && s["pattern"].is_string()) {
      patterns.push_back(s["pattern"].get<std::string>());
      try {
        out.dfa =
            std::make_shared<KeyClassifier>(patterns, std::vector<std::string>{}, ro, kMaxStates);
        out.has_pattern = true;
      } catch (const RegexError&) {
        patterns.pop_back();  // a pattern the converter cannot map: not enforced
      }
    }
    if (!out.dfa) {
      out.dfa =
          std::make_shared<KeyClassifier>(patterns, std::vector<std::string>{}, ro, kMaxStates);
    }
    // The class of the values: the pattern matches (when there is one), no forbidden text.
    std::vector<size_t> want;
    if (out.has_pattern) want.push_back(forbidden_.size());
    const auto& sigs = out.dfa->signatures();
    for (size_t i = 0; i < sigs.size(); ++i) {
      if (sigs[i].patterns == want && sigs[i].name < 0) out.sig = i;
    }
    return true;
  }

  // Every format grammar writes neither '<' nor a newline (json_schema_formats.cpp): a
  // closing tag holding one of them, and each forbidden end of it, cannot occur there.
  bool format_cannot_hold_closer() const {
    for (const std::string& t : forbidden_texts_) {
      if (t.find_first_of("<\n") == std::string::npos) return false;
    }
    return true;
  }

  const json* resolve(const json& ref) const { return resolve_local_ref(root_, ref); }

  const json& root_;
  std::vector<std::string> forbidden_;        // as search patterns
  std::vector<std::string> forbidden_texts_;  // as text
  gbnf::RuleSet rules_;
  std::vector<std::string> alts_;
  bool other_ = false;  // a value other than a string or null is allowed
};

}  // namespace

const json* resolve_local_ref(const json& root, const json& ref) {
  if (!ref.is_string()) return nullptr;
  const std::string r = ref.get<std::string>();
  if (r == "#") return &root;
  for (const char* defs : {"#/$defs/", "#/definitions/"}) {
    const std::string prefix = defs;
    if (r.rfind(prefix, 0) != 0) continue;
    const std::string key = prefix.substr(2, prefix.size() - 3);
    const std::string name = r.substr(prefix.size());
    if (root.contains(key) && root[key].is_object() && root[key].contains(name)) {
      return &root[key][name];
    }
  }
  return nullptr;
}

std::optional<std::string> raw_string_gbnf(const std::string& schema_json,
                                           const std::string& closer) {
  const json schema = json::parse(schema_json, nullptr, false);
  if (schema.is_discarded() || closer.empty()) return std::nullopt;
  try {
    RawStrings raw(schema, closer);
    if (!raw.add(schema, 0)) return std::nullopt;
    return raw.grammar();
  } catch (const RegexError&) {
    return std::nullopt;
  } catch (const gbnf::GrammarTooLarge&) {
    return std::nullopt;
  }
}

}  // namespace lacuna::chat::detail
