// gbnf_parser.cpp — parses llama.cpp's GBNF dialect into the grammar IR, with line/column errors.
#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lacuna/grammar.h"

namespace lacuna {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || is_digit(c);
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GbnfLimits& limits) : src_(text), limits_(limits) {}

  Grammar parse(std::string_view root_name) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\0') fail_at(i, "NUL character in grammar text");
    }
    skip_space(true);
    while (!at_end()) parse_rule();
    // Every referenced rule must be defined.
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!defined_[i]) fail_at(first_ref_[i], "undefined rule '" + rules_[i].name + "'");
    }
    auto it = ids_.find(root_name);
    if (it == ids_.end() || !defined_[it->second]) {
      fail_at(0, "missing root rule '" + std::string(root_name) + "'");
    }
    Grammar g(std::move(rules_), it->second);
    g.validate();
    return g;
  }

 private:
  std::string_view src_;
  GbnfLimits limits_;
  size_t pos_ = 0;
  size_t nesting_ = 0;
  std::vector<GrammarRule> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> first_ref_;  // offset of the first reference to each rule
  // Rule ids by name, looked up by the name's view in the text: a hit allocates nothing
  // (an emplace made the name's string and a node before finding it known, for every
  // reference: most of a large generated grammar's references).
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> ids_;
  uint32_t current_owner_ = 0;

  bool at_end() const { return pos_ >= src_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& problem) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++column;  // count code points, not bytes
      }
    }
    throw GrammarError(line, column, problem);
  }
  [[noreturn]] void fail(const std::string& problem) const { fail_at(pos_, problem); }

  std::string describe_here() const {
    if (at_end()) return "end of input";
    char c = peek();
    if (c == '\n' || c == '\r') return "end of line";
    if (static_cast<unsigned char>(c) < 0x20) return "control character";
    std::string out = "'";
    out += c;
    out += '\'';
    return out;
  }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      char c = peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\r' && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  uint32_t symbol_id(std::string_view name, size_t offset) {
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    if (rules_.size() >= limits_.max_rules) fail_at(offset, "too many rules");
    const auto id = static_cast<uint32_t>(rules_.size());
    ids_.emplace(std::string(name), id);
    GrammarRule r;
    r.name = std::string(name);
    rules_.push_back(std::move(r));
    defined_.push_back(false);
    first_ref_.push_back(offset);
    return id;
  }

  uint32_t generate_rule(const std::string& base, size_t offset) {
    // '-' keeps generated names valid GBNF names, so printed grammars parse again.
    std::string name = base + "-" + std::to_string(rules_.size());
    while (ids_.find(std::string_view(name)) != ids_.end()) name += "-g";
    uint32_t id = symbol_id(name, offset);
    GrammarRule& r = rules_[id];
    r.generated = true;
    r.owner = current_owner_;
    auto [line, column] = line_col(offset);
    r.line = line;
    r.column = column;
    return id;
  }

  // Line and column (in code points) of a byte offset. Offsets come almost always in
  // increasing order (one per rule and per group), so the count goes on from the last
  // answer; scanning from the start each time made large grammars quadratic to parse.
  std::pair<size_t, size_t> line_col(size_t offset) const {
    offset = std::min(offset, src_.size());
    if (offset < lc_offset_) {
      lc_offset_ = 0;
      lc_line_ = 1;
      lc_column_ = 1;
    }
    for (size_t i = lc_offset_; i < offset; ++i) {
      if (src_[i] == '\n') {
        ++lc_line_;
        lc_column_ = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++lc_column_;
      }
    }
    lc_offset_ = offset;
    return {lc_line_, lc_column_};
  }
  mutable size_t lc_offset_ = 0, lc_line_ = 1, lc_column_ = 1;

  void define(uint32_t id, std::vector<GrammarAlternative> alts) {
    rules_[id].alternatives = std::move(alts);
    defined_[id] = true;
  }

  std::string_view parse_name() {
    size_t start = pos_;
    while (!at_end() && is_word_char(peek())) ++pos_;
    if (pos_ == start) fail("expecting a rule name, found " + describe_here());
    return src_.substr(start, pos_ - start);
  }

  uint64_t parse_int() {
    size_t start = pos_;
    while (!at_end() && is_digit(peek())) ++pos_;
    if (pos_ == start) fail("expecting an integer, found " + describe_here());
    uint64_t v = 0;
    for (size_t i = start; i < pos_; ++i) {
      if (v > (UINT64_MAX - 9) / 10) fail_at(start, "integer too large");
      v = v * 10 + static_cast<uint64_t>(src_[i] - '0');
    }
    return v;
  }

  void parse_rule() {
    size_t start = pos_;
    const std::string name(parse_name());
    skip_space(false);
    if (!(peek() == ':' && peek(1) == ':' && peek(2) == '=')) {
      fail("expecting '::=' after rule name '" + name + "', found " + describe_here());
    }
    pos_ += 3;
    skip_space(true);
    uint32_t id = symbol_id(name, start);
    if (defined_[id]) fail_at(start, "rule '" + name + "' is defined twice");
    auto [line, column] = line_col(start);
    rules_[id].line = line;
    rules_[id].column = column;
    rules_[id].owner = id;
    current_owner_ = id;
    defined_[id] = true;  // provisional, so a self-reference does not look undefined
    define(id, parse_alternates(name, false));
    if (peek() == '\r') {
      pos_ += peek(1) == '\n' ? 2 : 1;
    } else if (peek() == '\n') {
      ++pos_;
    } else if (!at_end()) {
      fail("expecting newline or end after rule '" + name + "', found " + describe_here());
    }
    skip_space(true);
  }

  std::vector<GrammarAlternative> parse_alternates(const std::string& rule_name, bool nested) {
    std::vector<GrammarAlternative> alts;
    alts.push_back(parse_sequence(rule_name, nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(rule_name, nested));
    }
    return alts;
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  uint32_t parse_char() {
    size_t start = pos_;
    char c = peek();
    if (c == '\\') {
      char e = peek(1);
      pos_ += 2;
      switch (e) {
        case 'x':
          return parse_hex(2, start);
        case 'u':
          return parse_hex(4, start);
        case 'U':
          return parse_hex(8, start);
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'n':
          return '\n';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
          return static_cast<uint32_t>(static_cast<unsigned char>(e));
        default:
          if (e == '\0' && pos_ > src_.size()) fail_at(start, "unexpected end of input after '\\'");
          fail_at(start, std::string("unknown escape '\\") + e + "'");
      }
    }
    auto b0 = static_cast<unsigned char>(c);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (len == 0) fail("invalid UTF-8 in grammar text");
    uint32_t v = len == 1 ? b0 : b0 & (0xFFu >> (len + 1));
    for (int i = 1; i < len; ++i) {
      auto b = static_cast<unsigned char>(peek(static_cast<size_t>(i)));
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in grammar text");
      v = (v << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return v;
  }

  uint32_t parse_hex(int digits, size_t start) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        fail_at(start, "bad escape: expecting " + std::to_string(digits) + " hex digits after '" +
                           std::string(src_.substr(start, 2)) + "'");
      }
      v = (v << 4) | d;
      ++pos_;
    }
    return v;
  }

  GrammarElement parse_token_ref(bool negated) {
    size_t start = pos_;
    GrammarElement el;
    el.kind = negated ? GrammarElement::Kind::kTokenNot : GrammarElement::Kind::kToken;
    if (peek() != '<') fail("expecting '<' after '!', found " + describe_here());
    ++pos_;
    if (peek() == '[') {
      ++pos_;
      uint64_t id = parse_int();
      if (id > 0x7FFFFFFF) fail_at(start, "token id too large");
      if (peek() != ']') fail("expecting ']' in token reference, found " + describe_here());
      ++pos_;
      if (peek() != '>') fail("expecting '>' in token reference, found " + describe_here());
      ++pos_;
      el.token = static_cast<int64_t>(id);
      return el;
    }
    while (!at_end() && peek() != '>' && peek() != '\n') ++pos_;
    if (peek() != '>') fail_at(start, "unterminated token reference (missing '>')");
    ++pos_;
    el.token_text = std::string(src_.substr(start, pos_ - start));
    return el;
  }

  GrammarAlternative parse_sequence(const std::string& rule_name, bool nested) {
    GrammarAlternative seq;
    size_t last_sym_start = seq.size();
    uint64_t n_prev_rules = 1;

    auto handle_repetitions = [&](uint64_t min_times, uint64_t max_times, size_t op_offset) {
      const bool no_max = max_times == UINT64_MAX;
      if (last_sym_start == seq.size()) {
        fail_at(op_offset, "repetition operator without a preceding item");
      }
      GrammarAlternative prev(seq.begin() + static_cast<std::ptrdiff_t>(last_sym_start), seq.end());
      uint64_t total_rules = 1;
      if (!no_max && max_times > 0) {
        total_rules = max_times;
      } else if (min_times > 0) {
        total_rules = min_times;
      }
      if (total_rules != 0 && n_prev_rules > limits_.max_repeated_rules / total_rules) {
        fail_at(op_offset, "repetitions nested too deeply: " + std::to_string(n_prev_rules) +
                               " x " + std::to_string(total_rules) +
                               " repeated rules exceed the limit of " +
                               std::to_string(limits_.max_repeated_rules));
      }
      if (min_times == 0) {
        seq.resize(last_sym_start);
      } else {
        for (uint64_t i = 1; i < min_times; ++i) seq.insert(seq.end(), prev.begin(), prev.end());
      }
      uint32_t last_rec = 0;
      uint64_t n_opt = no_max ? 1 : max_times - min_times;
      for (uint64_t i = 0; i < n_opt; ++i) {
        uint32_t rec_id = generate_rule(rule_name, op_offset);
        GrammarAlternative rec = prev;
        if (i > 0 || no_max) {
          GrammarElement ref;
          ref.kind = GrammarElement::Kind::kRuleRef;
          ref.rule = no_max ? rec_id : last_rec;
          rec.push_back(ref);
        }
        define(rec_id, {std::move(rec), GrammarAlternative{}});
        last_rec = rec_id;
      }
      if (n_opt > 0) {
        GrammarElement ref;
        ref.kind = GrammarElement::Kind::kRuleRef;
        ref.rule = last_rec;
        seq.push_back(ref);
      }
      n_prev_rules *= total_rules;
    };

    while (!at_end()) {
      char c = peek();
      size_t start = pos_;
      if (c == '"') {
        ++pos_;
        last_sym_start = seq.size();
        n_prev_rules = 1;
        while (peek() != '"') {
          if (at_end()) fail_at(start, "unterminated string literal");
          GrammarElement el;
          uint32_t cp = parse_char();
          el.ranges.push_back({cp, cp});
          seq.push_back(std::move(el));
        }
        ++pos_;
        skip_space(nested);
      } else if (c == '[') {
        ++pos_;
        GrammarElement el;
        if (peek() == '^') {
          ++pos_;
          el.negated = true;
        }
        last_sym_start = seq.size();
        n_prev_rules = 1;
        while (peek() != ']') {
          if (at_end()) fail_at(start, "unterminated character class");
          uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && peek(1) != ']') {
            ++pos_;
            if (at_end()) fail_at(start, "unterminated character class");
            size_t hi_at = pos_;
            hi = parse_char();
            if (hi < lo)
              fail_at(hi_at, "character range out of order (upper bound below lower bound)");
          }
          el.ranges.push_back({lo, hi});
        }
        ++pos_;
        // llama.cpp silently turns [] into the empty string; here it is an error.
        if (el.ranges.empty()) fail_at(start, "empty character class");
        seq.push_back(std::move(el));
        skip_space(nested);
      } else if (c == '<' || c == '!') {
        bool negated = c == '!';
        if (negated) ++pos_;
        GrammarElement el = parse_token_ref(negated);
        last_sym_start = seq.size();
        n_prev_rules = 1;
        seq.push_back(std::move(el));
        skip_space(nested);
      } else if (is_word_char(c)) {
        const std::string_view name = parse_name();
        uint32_t id = symbol_id(name, start);
        skip_space(nested);
        last_sym_start = seq.size();
        n_prev_rules = 1;
        GrammarElement el;
        el.kind = GrammarElement::Kind::kRuleRef;
        el.rule = id;
        seq.push_back(el);
      } else if (c == '(') {
        ++pos_;
        if (++nesting_ > limits_.max_nesting) fail_at(start, "parentheses nested too deeply");
        skip_space(true);
        size_t n_rules_before = rules_.size();
        uint32_t sub = generate_rule(rule_name, start);
        auto alts = parse_alternates(rule_name, true);
        define(sub, std::move(alts));
        n_prev_rules = std::max<uint64_t>(1, rules_.size() - n_rules_before);
        last_sym_start = seq.size();
        GrammarElement el;
        el.kind = GrammarElement::Kind::kRuleRef;
        el.rule = sub;
        seq.push_back(el);
        if (peek() != ')')
          fail("expecting ')' to close the group opened at " + pos_str(start) + ", found " +
               describe_here());
        ++pos_;
        --nesting_;
        skip_space(nested);
      } else if (c == '.') {
        ++pos_;
        last_sym_start = seq.size();
        n_prev_rules = 1;
        GrammarElement el;
        el.any = true;
        seq.push_back(el);
        skip_space(nested);
      } else if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        skip_space(nested);
        if (c == '*') handle_repetitions(0, UINT64_MAX, start);
        if (c == '+') handle_repetitions(1, UINT64_MAX, start);
        if (c == '?') handle_repetitions(0, 1, start);
      } else if (c == '{') {
        ++pos_;
        skip_space(nested);
        if (!is_digit(peek())) fail("expecting an integer after '{', found " + describe_here());
        uint64_t min_times = parse_int();
        skip_space(nested);
        uint64_t max_times = UINT64_MAX;
        if (peek() == '}') {
          max_times = min_times;
          ++pos_;
          skip_space(nested);
        } else if (peek() == ',') {
          ++pos_;
          skip_space(nested);
          if (is_digit(peek())) {
            max_times = parse_int();
            skip_space(nested);
          }
          if (peek() != '}')
            fail("expecting '}' to close the repetition, found " + describe_here());
          ++pos_;
          skip_space(nested);
        } else {
          fail("expecting ',' or '}' in repetition, found " + describe_here());
        }
        if (min_times > limits_.max_repetition) {
          fail_at(start, "repetition count " + std::to_string(min_times) +
                             " exceeds the limit of " + std::to_string(limits_.max_repetition));
        }
        if (max_times != UINT64_MAX && max_times < min_times) {
          fail_at(start, "repetition {m,n} with n < m");
        }
        if (max_times != UINT64_MAX && max_times > limits_.max_repetition) max_times = UINT64_MAX;
        handle_repetitions(min_times, max_times, start);
      } else {
        break;
      }
    }
    return seq;
  }

  std::string pos_str(size_t offset) const {
    auto [l, c] = line_col(offset);
    return "line " + std::to_string(l) + ", column " + std::to_string(c);
  }
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root) {
  return parse_gbnf(text, root, GbnfLimits{});
}

Grammar parse_gbnf(std::string_view text, std::string_view root, const GbnfLimits& limits) {
  GbnfParser parser(text, limits);
  Grammar g = parser.parse(root);  // (validated)
  g.validated_ = true;
  return g;
}

}  // namespace lacuna
