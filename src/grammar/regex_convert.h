// regex_convert.h — internal entry of the regex front end: parses an ECMAScript pattern and
// writes its language into a gbnf::RuleSet, over raw text or inside a JSON string.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/regex_gbnf.h"
#include "lacuna/regex.h"

namespace lacuna::regex_detail {

// How the matched characters are written in the output.
enum class Encoding {
  Raw,         // each code point as itself
  JsonString,  // each code point as it may appear between the quotes of a JSON string
};

// A GBNF expression (a sequence, safe to wrap in parentheses) for the pattern's language.
// Adds helper rules to `rules`. Throws RegexError.
std::string regex_expression(std::string_view pattern, gbnf::RuleSet& rules, Encoding encoding,
                             const RegexOptions& options);

// A GBNF expression matching one code point of `set` in the given encoding.
std::string char_expression(const gbnf::CharSet& set, gbnf::RuleSet& rules, Encoding encoding);

// If the pattern is a single character class under one quantifier, fully anchored
// (like ^[a-z0-9]{2,8}$), returns true and fills the class and the bounds
// (max = -1: unbounded). Used to intersect with minLength/maxLength exactly.
bool simple_repeat(std::string_view pattern, gbnf::CharSet& set, long& min, long& max);

// A deterministic automaton over code points that sorts property names into classes: which
// of `patterns` (search semantics, as JSON Schema's patternProperties) a name matches and
// which of `names` it equals. Used to give each key the value schema(s) it must satisfy
// exactly, and to write "a key in class C" as a grammar.
class KeyClassifier {
 public:
  struct Signature {
    std::vector<size_t> patterns;  // indices into `patterns`, ascending
    int name = -1;                 // index into `names`, or -1
    bool operator<(const Signature& o) const {
      return patterns != o.patterns ? patterns < o.patterns : name < o.name;
    }
    bool operator==(const Signature& o) const { return patterns == o.patterns && name == o.name; }
  };

  // Throws RegexError for a pattern the converter does not support, and when the automaton
  // grows past `max_states` (NFA or DFA).
  KeyClassifier(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                const RegexOptions& options, size_t max_states);

  // Every class some string falls into (including the one of names matching nothing).
  const std::vector<Signature>& signatures() const { return sigs_; }
  // The class of a property name (UTF-8).
  size_t classify(std::string_view key) const;
  // A GBNF expression for a JSON string (with its quotes, each code point in its canonical
  // JSON encoding) whose content falls into class `sig`; with Encoding::Raw, the text itself
  // (no quotes, each code point as itself).
  std::string key_expression(size_t sig, gbnf::RuleSet& rules,
                             Encoding encoding = Encoding::JsonString) const;
  // The same for strings of class `sig` with min..max code points (max < 0: unbounded).
  // Throws RegexError when (state, length) pairs pass `max_pairs`. "" when none fits.
  std::string bounded_expression(size_t sig, long min, long max, gbnf::RuleSet& rules,
                                 size_t max_pairs, Encoding encoding = Encoding::JsonString) const;
  size_t state_count() const { return states_.size(); }
  // Whether the patterns' and names' nondeterministic automaton had a choice: a set of its
  // states that moves to several on one code point (`\S+` then `\sK` in a repetition), so
  // that a grammar written from it directly would carry several parse states at once.
  bool ambiguous() const { return ambiguous_; }

 private:
  struct State {
    std::vector<std::pair<gbnf::CharSet, int>> next;  // disjoint sets covering all code points
    size_t sig = 0;                                   // class of a string ending here
  };
  void minimize();

  std::vector<State> states_;
  std::vector<Signature> sigs_;
  bool ambiguous_ = false;
};

}  // namespace lacuna::regex_detail
