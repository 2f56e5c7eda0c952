// regex_gbnf.h — GBNF writing helpers shared by the regex and JSON Schema front ends:
// code-point sets, literal and class escaping, and a deduplicating rule set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lacuna::gbnf {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A set of Unicode code points as sorted, disjoint, non-adjacent closed intervals.
class CharSet {
 public:
  struct Range {
    uint32_t lo;
    uint32_t hi;
  };

  CharSet() = default;
  static CharSet of(uint32_t c) { return range(c, c); }
  static CharSet range(uint32_t lo, uint32_t hi);
  static CharSet all() { return range(0, kMaxCodePoint); }

  void add(uint32_t lo, uint32_t hi);
  void add(uint32_t c) { add(c, c); }
  void add(const CharSet& other);
  CharSet complement() const;
  CharSet intersect(const CharSet& other) const;
  CharSet minus(const CharSet& other) const { return intersect(other.complement()); }
  bool contains(uint32_t c) const;
  bool empty() const { return ranges_.empty(); }
  // Number of code points in the set.
  uint64_t size() const;
  const std::vector<Range>& ranges() const { return ranges_; }
  bool operator==(const CharSet& o) const;

 private:
  std::vector<Range> ranges_;
};

// Appends the UTF-8 encoding of code point c.
void append_utf8(std::string& out, uint32_t c);
// Decodes one UTF-8 sequence at s[pos]; advances pos. Returns false on invalid input.
bool decode_utf8(std::string_view s, size_t& pos, uint32_t& c);

// A GBNF string literal ("...") for the given UTF-8 bytes, escaped for llama.cpp's parser.
std::string literal(std::string_view utf8);
// A GBNF expression matching exactly one code point of the set: a literal for a single code
// point, otherwise a character class ([...] or [^...], whichever is shorter). The set must
// not be empty.
std::string char_class(const CharSet& set);

// Thrown when a grammar grows past its configured size limit.
struct GrammarTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An ordered set of named GBNF rules. Rules with identical bodies are shared.
class RuleSet {
 public:
  explicit RuleSet(size_t max_bytes = 4u << 20) : max_bytes_(max_bytes) {}

  // Adds a rule (or finds one with the same body) and returns its name. The name is made
  // from `hint` (sanitized to [a-zA-Z0-9-]) and made unique with a numeric suffix.
  std::string add(std::string_view hint, std::string body);
  // Reserves a unique name for a rule to be defined later with define() (recursion).
  std::string reserve(std::string_view hint);
  void define(const std::string& name, std::string body);
  bool has(const std::string& name) const { return bodies_.count(name) != 0; }
  size_t size_bytes() const { return bytes_; }
  size_t rule_count() const { return order_.size(); }

  // The grammar text: `root ::= root_body` first, then every rule in creation order.
  std::string to_string(const std::string& root_body) const;

  // Expressions derived from a key by a deterministic function of the key and of the rules
  // it adds (each of which add() finds again): computed once per rule set.
  std::unordered_map<std::string, std::string>& derived() { return derived_; }

 private:
  std::string unique_name(std::string_view hint);
  void account(size_t n);

  size_t max_bytes_;
  size_t bytes_ = 0;
  std::vector<std::string> order_;
  std::unordered_map<std::string, std::string> bodies_;   // name -> body
  std::unordered_map<std::string, std::string> by_body_;  // body -> name
  std::unordered_map<std::string, int> counters_;
  std::unordered_map<std::string, std::string> derived_;
};

}  // namespace lacuna::gbnf
