// grammar.h — the grammar IR (rules of alternatives of elements), the GBNF parser and printer.
//
// The IR mirrors the structure llama.cpp builds from GBNF: groups and repetitions become
// generated rules (named "<rule>-<n>"), literals become one single-character element per
// code point. See docs/grammar.md for the accepted dialect and its limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lacuna {

// A GBNF syntax or validity error. line and column are 1-based; what() reads
// "line L, column C: problem".
struct GrammarError : std::runtime_error {
  GrammarError(size_t line, size_t column, const std::string& problem);
  size_t line;
  size_t column;
  std::string problem;  // the message without the position
};

// An inclusive range of code points.
struct CharRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
  bool operator==(const CharRange&) const = default;
};

// The ranges of a character element, as written. One range is kept inline (a literal's
// character: most elements of a generated schema grammar), more on the heap: with a
// std::vector, parsing gave each element an allocation of its own (a third of parsing a
// 1.2 MB schema grammar went to allocating and freeing them).
class CharRanges {
 public:
  CharRanges() = default;
  CharRanges(std::initializer_list<CharRange> ranges) { assign(ranges.begin(), ranges.end()); }
  CharRanges(const CharRanges& other) { assign(other.begin(), other.end()); }
  CharRanges(CharRanges&& other) noexcept { take(other); }
  CharRanges& operator=(const CharRanges& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  CharRanges& operator=(CharRanges&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  ~CharRanges() = default;

  void push_back(CharRange r) {
    if (n_ == cap_) reserve(2 * cap_);
    data()[n_++] = r;
  }
  void reserve(size_t n);
  void clear() { n_ = 0; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const CharRange* data() const { return heap_ ? heap_.get() : &one_; }
  CharRange* data() { return heap_ ? heap_.get() : &one_; }
  const CharRange* begin() const { return data(); }
  const CharRange* end() const { return data() + n_; }
  CharRange* begin() { return data(); }
  CharRange* end() { return data() + n_; }
  const CharRange& operator[](size_t i) const { return data()[i]; }
  CharRange& operator[](size_t i) { return data()[i]; }
  const CharRange& front() const { return data()[0]; }
  const CharRange& back() const { return data()[n_ - 1]; }
  bool operator==(const CharRanges& other) const;

 private:
  void assign(const CharRange* first, const CharRange* last);
  void take(CharRanges& other) noexcept {
    one_ = other.one_;
    heap_ = std::move(other.heap_);
    n_ = other.n_;
    cap_ = other.cap_;
    other.n_ = 0;
    other.cap_ = 1;
  }
  CharRange one_{};
  std::unique_ptr<CharRange[]> heap_;  // when more than one range was ever held
  uint32_t n_ = 0;
  uint32_t cap_ = 1;
};

struct GrammarElement {
  enum class Kind : uint8_t {
    kChars,     // one code point from a set: a literal character, [class], [^class] or '.'
    kRuleRef,   // a reference to rule `rule`
    kToken,     // one token: <[id]> or <text> (resolved against the vocabulary at compile time)
    kTokenNot,  // any one token except that one: !<[id]> or !<text>
  };
  Kind kind = Kind::kChars;
  // kChars: '.' (any code point) when `any`; else (cp in ranges) != negated.
  bool any = false;
  bool negated = false;
  // kRuleRef: the referenced rule's index. (Beside the flags: 72 bytes an element, not 80.)
  uint32_t rule = 0;
  CharRanges ranges;
  // kToken / kTokenNot: the id for <[id]>; -1 with `token_text` ("<|eot_id|>") otherwise.
  int64_t token = -1;
  std::string token_text;

  bool operator==(const GrammarElement&) const = default;
};

using GrammarAlternative = std::vector<GrammarElement>;

struct GrammarRule {
  std::string name;
  std::vector<GrammarAlternative> alternatives;
  bool generated = false;  // made by the parser for a group or a repetition
  uint32_t owner = 0;      // the user-written rule this one was generated inside (itself if not)
  size_t line = 0;         // where the rule (or the construct it was generated for) starts
  size_t column = 0;
};

struct GbnfLimits;

// The grammar IR: a value type, cheap to move. Rules are referenced by index.
class Grammar {
 public:
  Grammar() = default;
  Grammar(std::vector<GrammarRule> rules, uint32_t root);

  const std::vector<GrammarRule>& rules() const { return rules_; }
  uint32_t root() const { return root_; }
  const GrammarRule& rule(uint32_t i) const { return rules_.at(i); }
  // Index of the rule with this name, or -1.
  int64_t find_rule(std::string_view name) const;

  // Structural checks: every reference names an existing rule, every rule has at least
  // one alternative, no left recursion (also through rules that can match the empty
  // string). Throws GrammarError naming the rule. parse_gbnf() already calls it, and a
  // grammar it returns is not checked again (the IR cannot change after construction).
  void validate() const;

 private:
  friend Grammar parse_gbnf(std::string_view, std::string_view, const GbnfLimits&);
  std::vector<GrammarRule> rules_;
  uint32_t root_ = 0;
  bool validated_ = false;  // set by parse_gbnf once validate() passed
};

// Limits on what the parser accepts (defaults match llama.cpp where it has a limit).
struct GbnfLimits {
  uint64_t max_repetition = 2000;      // bounds above this: {m} error, {m,n} means {m,}
  uint64_t max_repeated_rules = 2000;  // llama.cpp's product-of-repetitions threshold
  size_t max_nesting = 256;            // nested parentheses
  size_t max_rules = 200000;
};

// Parses GBNF text (llama.cpp's dialect). Throws GrammarError with line and column.
Grammar parse_gbnf(std::string_view text, std::string_view root = "root");
Grammar parse_gbnf(std::string_view text, std::string_view root, const GbnfLimits& limits);

// Prints the IR back as GBNF text that parses to the same language.
std::string to_gbnf(const Grammar& grammar);

}  // namespace lacuna
