// regex.cpp — ECMAScript regex parser and its translation into GBNF rules.
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <vector>

#include "grammar/regex_convert.h"
#include "lacuna/regex.h"

namespace lacuna {
namespace regex_detail {
namespace {

using gbnf::CharSet;

struct Node {
  enum class Kind { Chars, Seq, Alt, Repeat, Start, End };
  Kind kind = Kind::Seq;
  CharSet chars;
  std::vector<Node> kids;
  long min = 0;
  long max = 0;  // -1 = unbounded
};

Node make_chars(CharSet s) {
  Node n;
  n.kind = Node::Kind::Chars;
  n.chars = std::move(s);
  return n;
}

CharSet digit_set() {
  return CharSet::range('0', '9');
}
CharSet word_set() {
  CharSet s = CharSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_');
  return s;
}
CharSet space_set() {
  CharSet s;
  for (uint32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u,
                     0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) {
    s.add(c);
  }
  s.add(0x2000, 0x200A);
  return s;
}
CharSet line_terminators() {
  CharSet s;
  s.add('\n');
  s.add('\r');
  s.add(0x2028, 0x2029);
  return s;
}

class Parser {
 public:
  Parser(std::string_view src, const RegexOptions& opt) : opt_(opt) {
    size_t pos = 0;
    while (pos < src.size()) {
      uint32_t c;
      size_t at = pos;
      if (!gbnf::decode_utf8(src, pos, c)) throw RegexError("invalid UTF-8 in pattern", at);
      cps_.push_back(c);
      offs_.push_back(at);
    }
    offs_.push_back(src.size());
  }

  Node parse() {
    Node n = parse_alt(0);
    if (i_ < cps_.size()) {
      if (cps_[i_] == ')') fail("unmatched ')'");
      fail("unexpected character");
    }
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw RegexError(msg, offs_[std::min(i_, cps_.size())]);
  }
  bool eof() const { return i_ >= cps_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < cps_.size() ? cps_[i_ + k] : 0xFFFFFFFF; }

  Node parse_alt(int depth) {
    if (depth > 200) fail("groups nested too deeply");
    Node first = parse_seq(depth);
    if (peek() != '|') return first;
    Node alt;
    alt.kind = Node::Kind::Alt;
    alt.kids.push_back(std::move(first));
    while (peek() == '|') {
      ++i_;
      alt.kids.push_back(parse_seq(depth));
    }
    return alt;
  }

  Node parse_seq(int depth) {
    Node seq;
    seq.kind = Node::Kind::Seq;
    while (!eof() && peek() != '|' && peek() != ')') {
      Node atom;
      uint32_t c = peek();
      if (c == '^') {
        ++i_;
        atom.kind = Node::Kind::Start;
        seq.kids.push_back(std::move(atom));
        continue;
      }
      if (c == '$') {
        ++i_;
        atom.kind = Node::Kind::End;
        seq.kids.push_back(std::move(atom));
        continue;
      }
      size_t atom_start = i_;
      if (c == '(') {
        ++i_;
        if (peek() == '?') {
          if (peek(1) == ':') {
            i_ += 2;
          } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
            i_ += 2;
            while (!eof() && peek() != '>') ++i_;
            if (eof()) fail("unterminated group name");
            ++i_;
          } else {
            i_ = atom_start;
            fail("lookaround assertions are not supported");
          }
        }
        atom = parse_alt(depth + 1);
        if (peek() != ')') fail("missing ')'");
        ++i_;
      } else if (c == '[') {
        atom = make_chars(parse_class());
      } else if (c == '.') {
        ++i_;
        atom = make_chars(line_terminators().complement());
      } else if (c == '\\') {
        ++i_;
        if (eof()) fail("pattern ends with '\\'");
        uint32_t e = peek();
        if (e == 'b' || e == 'B') fail("word-boundary assertions are not supported");
        if (e >= '1' && e <= '9') fail("backreferences are not supported");
        atom = make_chars(parse_escape(false));
      } else if (c == '*' || c == '+' || c == '?') {
        fail("nothing to repeat");
      } else if (c == '{' && quantifier_ahead()) {
        fail("nothing to repeat");
      } else {
        ++i_;
        atom = make_chars(CharSet::of(c));
      }
      parse_quantifiers(atom);
      seq.kids.push_back(std::move(atom));
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  // True when a {m}, {m,} or {m,n} quantifier starts at the current position.
  bool quantifier_ahead() const {
    size_t k = i_;
    if (k >= cps_.size() || cps_[k] != '{') return false;
    ++k;
    size_t digits = 0;
    while (k < cps_.size() && cps_[k] >= '0' && cps_[k] <= '9') ++k, ++digits;
    if (digits == 0) return false;
    if (k < cps_.size() && cps_[k] == '}') return true;
    if (k >= cps_.size() || cps_[k] != ',') return false;
    ++k;
    while (k < cps_.size() && cps_[k] >= '0' && cps_[k] <= '9') ++k;
    return k < cps_.size() && cps_[k] == '}';
  }

  long parse_number() {
    long v = 0;
    while (!eof() && peek() >= '0' && peek() <= '9') {
      if (v < 100000000) v = v * 10 + static_cast<long>(peek() - '0');
      ++i_;
    }
    return v;
  }

  void parse_quantifiers(Node& atom) {
    while (!eof()) {
      uint32_t c = peek();
      long mn, mx;
      size_t q_start = i_;
      if (c == '*') {
        mn = 0, mx = -1, ++i_;
      } else if (c == '+') {
        mn = 1, mx = -1, ++i_;
      } else if (c == '?') {
        mn = 0, mx = 1, ++i_;
      } else if (c == '{' && quantifier_ahead()) {
        ++i_;
        mn = parse_number();
        mx = mn;
        if (peek() == ',') {
          ++i_;
          mx = (peek() == '}') ? -1 : parse_number();
        }
        ++i_;  // '}'
        if (mx >= 0 && mx < mn) {
          i_ = q_start;
          fail("numbers out of order in {} quantifier");
        }
      } else {
        return;
      }
      if (peek() == '?') ++i_;  // lazy: same language
      if (atom.kind == Node::Kind::Start || atom.kind == Node::Kind::End) {
        i_ = q_start;
        fail("nothing to repeat");
      }
      if (mn > opt_.max_repeat) {
        i_ = q_start;
        fail("repetition count " + std::to_string(mn) + " exceeds the limit " +
             std::to_string(opt_.max_repeat));
      }
      if (mx > opt_.max_repeat) {
        if (opt_.on_warning) {
          opt_.on_warning("regex: upper bound " + std::to_string(mx) + " above " +
                          std::to_string(opt_.max_repeat) + " treated as unbounded");
        }
        mx = -1;
      }
      if (atom.kind == Node::Kind::Repeat && mx < 0 && atom.min <= 1 && atom.max != 0) {
        // (X{m,n}){c,} with m <= 1 is X{m*c,}: stacked quantifiers collapse.
        atom.min = atom.min * mn;
        atom.max = -1;
        continue;
      }
      Node rep;
      rep.kind = Node::Kind::Repeat;
      rep.min = mn;
      rep.max = mx;
      rep.kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      uint32_t c = peek();
      int d;
      if (c >= '0' && c <= '9') {
        d = static_cast<int>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<int>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<int>(c - 'A' + 10);
      } else {
        fail("invalid hexadecimal escape");
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  // After the backslash. Returns the set of code points the escape stands for.
  CharSet parse_escape(bool in_class) {
    uint32_t e = peek();
    ++i_;
    switch (e) {
      case 'd':
        return digit_set();
      case 'D':
        return digit_set().complement();
      case 'w':
        return word_set();
      case 'W':
        return word_set().complement();
      case 's':
        return space_set();
      case 'S':
        return space_set().complement();
      case 'n':
        return CharSet::of('\n');
      case 'r':
        return CharSet::of('\r');
      case 't':
        return CharSet::of('\t');
      case 'f':
        return CharSet::of('\f');
      case 'v':
        return CharSet::of('\v');
      case '0':
        if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
        return CharSet::of(0);
      case 'b':
        if (in_class) return CharSet::of('\b');
        break;
      case 'c': {
        uint32_t l = peek();
        if ((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')) {
          ++i_;
          return CharSet::of(l % 32);
        }
        --i_;
        return CharSet::of('\\');
      }
      case 'x':
        return CharSet::of(parse_hex(2));
      case 'u': {
        if (peek() == '{') {
          ++i_;
          uint32_t v = 0;
          int n = 0;
          while (!eof() && peek() != '}') {
            v = v * 16 + parse_hex(1);
            if (++n > 6 || v > gbnf::kMaxCodePoint) fail("code point out of range");
          }
          if (eof() || n == 0) fail("invalid \\u{...} escape");
          ++i_;
          return CharSet::of(v);
        }
        uint32_t v = parse_hex(4);
        // A surrogate pair written as two escapes is one code point.
        if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          size_t save = i_;
          i_ += 2;
          bool ok = true;
          uint32_t lo = 0;
          for (int k = 0; k < 4 && ok; ++k) {
            uint32_t c = peek();
            ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
            if (ok) lo = lo * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10), ++i_;
          }
          if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
            return CharSet::of(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          }
          i_ = save;
        }
        return CharSet::of(v);
      }
      case 'p':
      case 'P':
        --i_;
        fail("Unicode property escapes are not supported");
      default:
        break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
      // Annex B: an unknown letter escape is the letter itself.
      return CharSet::of(e);
    }
    return CharSet::of(e);  // identity escape: \. \/ \- \\ ...
  }

  CharSet parse_class() {
    size_t start = i_;
    ++i_;  // '['
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++i_;
    }
    CharSet set;
    bool first = true;
    while (true) {
      if (eof()) {
        i_ = start;
        fail("unterminated character class");
      }
      uint32_t c = peek();
      if (c == ']') {
        ++i_;
        break;
      }
      first = false;
      bool lo_single = true;
      CharSet lo_set = class_atom(lo_single);
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF && lo_single) {
        size_t dash = i_;
        ++i_;
        bool hi_single = true;
        CharSet hi_set = class_atom(hi_single);
        if (!hi_single) {
          // [a-\d]: Annex B makes '-' literal.
          set.add(lo_set);
          set.add('-');
          set.add(hi_set);
          continue;
        }
        uint32_t lo = lo_set.ranges()[0].lo, hi = hi_set.ranges()[0].lo;
        if (lo > hi) {
          i_ = dash;
          fail("range out of order in character class");
        }
        set.add(lo, hi);
      } else {
        set.add(lo_set);
      }
    }
    (void)first;
    return negate ? set.complement() : set;
  }

  CharSet class_atom(bool& single) {
    uint32_t c = peek();
    if (c == '\\') {
      ++i_;
      if (eof()) fail("pattern ends with '\\'");
      uint32_t e = peek();
      CharSet s = parse_escape(true);
      single = !(e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S');
      return s;
    }
    ++i_;
    single = true;
    return CharSet::of(c);
  }

  const RegexOptions& opt_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> offs_;
  size_t i_ = 0;
};

bool has_anchor(const Node& n) {
  if (n.kind == Node::Kind::Start || n.kind == Node::Kind::End) return true;
  for (const Node& k : n.kids) {
    if (has_anchor(k)) return true;
  }
  return false;
}

// One top-level alternative after anchors are taken out.
struct Branch {
  bool start = false;
  bool end = false;
  std::vector<Node> items;  // a sequence, anchors removed
};

void flatten_seq(const Node& n, std::vector<Node>& out) {
  if (n.kind == Node::Kind::Seq) {
    for (const Node& k : n.kids) flatten_seq(k, out);
  } else {
    out.push_back(n);
  }
}

// Search semantics: next to an unanchored end, `.*` absorbs whatever a repetition there
// matches beyond its minimum, so `.* x{m,n} P` is the language of `.* x{m} P`, `.* x{0,n} P`
// that of `.* P`, and `x{1,n}` is x, whose own end is trimmed the same way (and likewise at
// the other end). Such repetitions next to `.*` are ambiguous: `[A-Za-z0-9-_.:]{1,255}`
// searched for (any string holding one such character) made parse states of up to 34,000
// stacks, and `[a-z][a-z0-9]*` is `[a-z]`.
void trim_search_ends(std::vector<Node>& items, bool start_free, bool end_free) {
  for (const bool front : {true, false}) {
    if (front ? !start_free : !end_free) continue;
    while (!items.empty()) {
      Node& n = front ? items.front() : items.back();
      if (n.kind != Node::Kind::Repeat) break;
      if (n.min > 1) {
        n.max = n.min;
        break;
      }
      std::vector<Node> kid;
      if (n.min == 1) flatten_seq(n.kids[0], kid);
      if (front) {
        items.erase(items.begin());
        items.insert(items.begin(), kid.begin(), kid.end());
      } else {
        items.pop_back();
        items.insert(items.end(), kid.begin(), kid.end());
      }
    }
  }
}

// Splits a node into anchor-free branches, distributing leading and trailing alternations
// that contain anchors. Throws for anchors in other positions.
void split_branches(const Node& n, std::vector<Branch>& out, size_t limit) {
  if (out.size() > limit) throw RegexError("too many anchored alternatives", 0);
  if (n.kind == Node::Kind::Alt) {
    for (const Node& k : n.kids) split_branches(k, out, limit);
    return;
  }
  std::vector<Node> items;
  flatten_seq(n, items);
  // Distribute a leading or trailing alternation holding anchors.
  for (size_t idx : {size_t{0}, items.empty() ? size_t{0} : items.size() - 1}) {
    if (idx < items.size() && items[idx].kind == Node::Kind::Alt && has_anchor(items[idx])) {
      Node alt_node = items[idx];
      for (const Node& alt : alt_node.kids) {
        Node seq;
        seq.kind = Node::Kind::Seq;
        for (size_t j = 0; j < items.size(); ++j) seq.kids.push_back(j == idx ? alt : items[j]);
        split_branches(seq, out, limit);
      }
      return;
    }
  }
  Branch b;
  size_t lo = 0, hi = items.size();
  while (lo < hi && items[lo].kind == Node::Kind::Start) b.start = true, ++lo;
  while (hi > lo && items[hi - 1].kind == Node::Kind::End) b.end = true, --hi;
  for (size_t j = lo; j < hi; ++j) {
    if (has_anchor(items[j])) {
      throw RegexError("anchors are only supported at the start and end of the pattern", 0);
    }
    b.items.push_back(std::move(items[j]));
  }
  out.push_back(std::move(b));
}

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Chars:
      return false;
    case Node::Kind::Seq:
      for (const Node& k : n.kids) {
        if (!nullable(k)) return false;
      }
      return true;
    case Node::Kind::Alt:
      for (const Node& k : n.kids) {
        if (nullable(k)) return true;
      }
      return false;
    case Node::Kind::Repeat:
      return n.min == 0 || nullable(n.kids[0]);
    case Node::Kind::Start:
    case Node::Kind::End:
      return true;
  }
  return true;
}

// The node's language without the empty string; nullopt when nothing is left.
std::optional<Node> nonempty(const Node& n, size_t& budget) {
  if (budget == 0)
    throw RegexError("pattern too complex (nested repetitions of empty-matching groups)", 0);
  --budget;
  if (!nullable(n)) return n;
  switch (n.kind) {
    case Node::Kind::Chars:
      return n;
    case Node::Kind::Start:
    case Node::Kind::End:
      return std::nullopt;
    case Node::Kind::Alt:
    case Node::Kind::Seq: {
      Node alt;
      alt.kind = Node::Kind::Alt;
      if (n.kind == Node::Kind::Alt) {
        for (const Node& k : n.kids) {
          if (auto ne = nonempty(k, budget)) alt.kids.push_back(std::move(*ne));
        }
      } else {
        // Every item is nullable: some item i is the first to match something.
        for (size_t i = 0; i < n.kids.size(); ++i) {
          auto ne = nonempty(n.kids[i], budget);
          if (!ne) continue;
          Node seq;
          seq.kind = Node::Kind::Seq;
          seq.kids.push_back(std::move(*ne));
          for (size_t j = i + 1; j < n.kids.size(); ++j) seq.kids.push_back(n.kids[j]);
          alt.kids.push_back(std::move(seq));
        }
      }
      if (alt.kids.empty()) return std::nullopt;
      if (alt.kids.size() == 1) return std::move(alt.kids[0]);
      return alt;
    }
    case Node::Kind::Repeat: {
      if (n.max == 0) return std::nullopt;
      auto ne = nonempty(n.kids[0], budget);
      if (!ne) return std::nullopt;
      Node rest;
      rest.kind = Node::Kind::Repeat;
      rest.min = 0;
      rest.max = n.max < 0 ? -1 : n.max - 1;
      rest.kids.push_back(n.kids[0]);
      Node seq;
      seq.kind = Node::Kind::Seq;
      seq.kids.push_back(std::move(*ne));
      if (rest.max != 0) seq.kids.push_back(std::move(rest));
      return seq;
    }
  }
  return std::nullopt;
}

class Emitter {
 public:
  Emitter(gbnf::RuleSet& rules, Encoding enc) : rules_(rules), enc_(enc) {}

  std::string emit(const Node& n) {
    switch (n.kind) {
      case Node::Kind::Chars:
        if (n.chars.empty()) return "";  // callers take them out first (without_empty_classes)
        return char_expression(n.chars, rules_, enc_);
      case Node::Kind::Seq: {
        std::string out;
        std::string run;  // consecutive single code points, merged into one literal
        auto flush = [&]() {
          if (run.empty()) return;
          if (!out.empty()) out += " ";
          out += gbnf::literal(run);
          run.clear();
        };
        for (const Node& k : n.kids) {
          if (k.kind == Node::Kind::Chars && k.chars.size() == 1 &&
              (enc_ == Encoding::Raw || plain_json(k.chars.ranges()[0].lo))) {
            gbnf::append_utf8(run, k.chars.ranges()[0].lo);
            continue;
          }
          std::string e = emit(k);
          if (e.empty()) continue;
          flush();
          if (!out.empty()) out += " ";
          out += wrap(k, e);
        }
        flush();
        return out.empty() ? "\"\"" : out;
      }
      case Node::Kind::Alt: {
        std::string out;
        for (const Node& k : n.kids) {
          if (!out.empty()) out += " | ";
          std::string e = emit(k);
          out += e.empty() ? "\"\"" : e;
        }
        return "(" + out + ")";
      }
      case Node::Kind::Repeat: {
        if (n.max < 0 && nullable(n.kids[0])) {
          // X{m,} with X able to match "" is (X minus "")*: this keeps the grammar free of
          // left recursion (a repeated rule reaching itself without consuming input).
          std::optional<Node> ne = nonempty(n.kids[0], budget_);
          if (!ne) return "\"\"";
          Node star;
          star.kind = Node::Kind::Repeat;
          star.min = 0;
          star.max = -1;
          star.kids.push_back(std::move(*ne));
          return emit(star);
        }
        const Node& inner = n.kids[0];
        std::string e = emit(inner);
        if (e.empty() || e == "\"\"") return "\"\"";
        if (n.max == 0) return "\"\"";
        std::string atom = e;
        bool simple = inner.kind == Node::Kind::Chars;
        if (!simple) atom = rules_.add("re-group", e);
        if (n.min == 0 && n.max == -1) return atom + "*";
        if (n.min == 1 && n.max == -1) return atom + "+";
        if (n.min == 0 && n.max == 1) return atom + "?";
        if (n.min == 1 && n.max == 1) return atom;
        if (n.max == -1) return atom + "{" + std::to_string(n.min) + ",}";
        if (n.min == n.max) return atom + "{" + std::to_string(n.min) + "}";
        return atom + "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
      }
      case Node::Kind::Start:
      case Node::Kind::End:
        return "";
    }
    return "";
  }

 private:
  static bool plain_json(uint32_t c) { return c >= 0x20 && c != '"' && c != '\\' && c != '/'; }

  static std::string wrap(const Node& k, const std::string& e) {
    if (k.kind == Node::Kind::Chars && e.find(" | ") != std::string::npos) return "(" + e + ")";
    return e;
  }

  gbnf::RuleSet& rules_;
  Encoding enc_;
  size_t budget_ = 20000;  // nodes nonempty() may build, against exponential rewrites
};

// The node with what can never match taken out (an empty class such as `[]`): an
// alternative that cannot match is dropped, and a repetition of one matches only "" when
// it may repeat zero times. nullopt: the node can never match. Emitting an empty class as ""
// instead would accept text the pattern refuses (`(?:[]|a)` would match "") and make a
// repeated group look unable to match "" when it can.
std::optional<Node> without_empty_classes(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Chars:
      if (n.chars.empty()) return std::nullopt;
      return n;
    case Node::Kind::Seq: {
      Node out;
      out.kind = Node::Kind::Seq;
      for (const Node& k : n.kids) {
        auto live = without_empty_classes(k);
        if (!live) return std::nullopt;
        out.kids.push_back(std::move(*live));
      }
      return out;
    }
    case Node::Kind::Alt: {
      Node out;
      out.kind = Node::Kind::Alt;
      for (const Node& k : n.kids) {
        if (auto live = without_empty_classes(k)) out.kids.push_back(std::move(*live));
      }
      if (out.kids.empty()) return std::nullopt;
      if (out.kids.size() == 1) return std::move(out.kids[0]);
      return out;
    }
    case Node::Kind::Repeat: {
      auto live = without_empty_classes(n.kids[0]);
      if (!live) {
        if (n.min > 0) return std::nullopt;
        Node empty;  // only zero repetitions are possible: the empty string
        empty.kind = Node::Kind::Seq;
        return empty;
      }
      Node out = n;
      out.kids[0] = std::move(*live);
      return out;
    }
    case Node::Kind::Start:
    case Node::Kind::End:
      return n;
  }
  return n;
}

// A branch's items as one sequence without what can never match; nullopt when the branch
// can never match.
std::optional<Node> live_sequence(const std::vector<Node>& items) {
  Node seq;
  seq.kind = Node::Kind::Seq;
  seq.kids = items;
  return without_empty_classes(seq);
}

}  // namespace

namespace {
std::string json_string_char_expression(const CharSet& set, gbnf::RuleSet& rules);
}  // namespace

std::string char_expression(const CharSet& set, gbnf::RuleSet& rules, Encoding encoding) {
  if (encoding == Encoding::Raw) {
    std::string c = gbnf::char_class(set);
    return c;
  }
  // The same classes come back in every key automaton and string of a schema: the
  // expression of a class is made once per rule set.
  std::string key = "char:";
  for (const auto& r : set.ranges()) {
    key.append(reinterpret_cast<const char*>(&r.lo), sizeof r.lo);
    key.append(reinterpret_cast<const char*>(&r.hi), sizeof r.hi);
  }
  auto& derived = rules.derived();
  auto found = derived.find(key);
  if (found != derived.end()) return found->second;
  std::string out = json_string_char_expression(set, rules);
  derived.emplace(std::move(key), out);
  return out;
}

namespace {

std::string json_string_char_expression(const CharSet& set, gbnf::RuleSet& rules) {
  CharSet plain = set.intersect(CharSet::range(0x20, gbnf::kMaxCodePoint));
  plain = plain.minus(CharSet::of('"'));
  plain = plain.minus(CharSet::of('\\'));
  std::vector<std::string> alts;
  if (!plain.empty()) alts.push_back(gbnf::char_class(plain));
  static const std::pair<uint32_t, char> kShort[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                     {'\b', 'b'}, {'\f', 'f'},  {'\n', 'n'},
                                                     {'\r', 'r'}, {'\t', 't'}};
  CharSet letters;
  for (auto [c, l] : kShort) {
    if (set.contains(c)) letters.add(static_cast<uint32_t>(l));
  }
  if (!letters.empty()) alts.push_back("\"\\\\\" " + gbnf::char_class(letters));
  CharSet controls = set.intersect(CharSet::range(0, 0x1F));
  if (controls.size() == 32) {
    alts.push_back("\"\\\\u00\" [01] [0-9a-fA-F]");
  } else {
    // One alternative per high hex digit, its low digits in one class (both letter cases):
    // "\\u000" [0-8eEfF] rather than one alternative per control character.
    static const char* kHex = "0123456789abcdef";
    for (uint32_t hi = 0; hi < 2; ++hi) {
      std::string digits;
      size_t n = 0;
      for (uint32_t lo = 0; lo < 16; ++lo) {
        if (!controls.contains(hi * 16 + lo)) continue;
        ++n;
        digits.push_back(kHex[lo]);
        if (kHex[lo] >= 'a') digits.push_back(static_cast<char>(kHex[lo] - 32));
      }
      if (n == 0) continue;
      std::string cls = n == 16 ? "[0-9a-fA-F]" : "[" + digits + "]";
      alts.push_back("\"\\\\u00" + std::string(1, kHex[hi]) + "\" " + cls);
    }
  }
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  std::string body;
  for (const std::string& a : alts) {
    if (!body.empty()) body += " | ";
    body += a;
  }
  return rules.add("char", body);
}

}  // namespace

std::string regex_expression(std::string_view pattern, gbnf::RuleSet& rules, Encoding encoding,
                             const RegexOptions& options) {
  Parser parser(pattern, options);
  Node root = parser.parse();
  std::vector<Branch> branches;
  try {
    split_branches(root, branches, 64);
  } catch (const RegexError& e) {
    // Re-throw with a useful position: the anchor's place is not tracked, point at the end.
    std::string msg = e.what();
    msg = msg.substr(0, msg.rfind(" at offset "));
    throw RegexError(msg, pattern.size());
  }
  Emitter emitter(rules, encoding);
  std::string any;
  auto any_rule = [&]() -> const std::string& {
    if (any.empty()) {
      any = rules.add("re-any", char_expression(CharSet::all(), rules, encoding) + "");
      any = any + "*";
    }
    return any;
  };
  // Searched-for branches that start with the same code point share their free ends:
  // `.* (ab | ac) .*` rather than `.* ab .* | .* ac .*`, the same language. (A search for
  // one of 17 names, Github_easy o5195's `INTERVAL_TICK|INTERVAL_M1|...`, gave a string's
  // first mask 17 searches of its own to walk, each a context per parse state: 1.6 ms,
  // against 0.27 ms as one search. Not names that start apart: one search for
  // `date|time|string|enum|...` has an automaton over all their letters, which the mask
  // engine walked node by node, 12-14 ms against 1.2-1.6 ms as one search per name.)
  struct Ends {
    bool start_free, end_free;
    int64_t first;                    // the code point every body starts with (-1: alone)
    std::vector<std::string> bodies;  // "" for a branch with nothing between its ends
  };
  std::vector<Ends> groups;
  for (const Branch& b : branches) {
    std::optional<Node> kept = live_sequence(b.items);
    if (!kept) continue;  // this branch can never match
    Node& seq = *kept;
    bool anchored_start = b.start || !options.search;
    bool anchored_end = b.end || !options.search;
    trim_search_ends(seq.kids, !anchored_start, !anchored_end);
    std::string e = seq.kids.empty() ? "" : emitter.emit(seq);
    if (e == "\"\"") e.clear();
    if (e.empty() && !anchored_start) anchored_end = true;  // `.*` once
    int64_t first = -1;
    if (!anchored_start && !seq.kids.empty() && seq.kids[0].kind == Node::Kind::Chars &&
        seq.kids[0].chars.size() == 1) {
      first = seq.kids[0].chars.ranges()[0].lo;
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Ends& g) {
      return first >= 0 && g.first == first && g.end_free == !anchored_end;
    });
    if (it == groups.end()) {
      groups.push_back({!anchored_start, !anchored_end, first, {}});
      it = groups.end() - 1;
    }
    if (std::find(it->bodies.begin(), it->bodies.end(), e) == it->bodies.end()) {
      it->bodies.push_back(e);
    }
  }
  if (groups.empty()) throw RegexError("the pattern can never match", 0);
  std::string out;
  for (const Ends& g : groups) {
    std::string middle;
    if (g.bodies.size() == 1) {
      middle = g.bodies[0];
    } else {
      for (const std::string& e : g.bodies) {
        middle += middle.empty() ? "(" : " | ";
        middle += e.empty() ? "\"\"" : e;
      }
      middle += ")";
    }
    std::string body = g.start_free ? any_rule() : "";
    for (const std::string& part : {middle, g.end_free ? any_rule() : std::string()}) {
      if (part.empty()) continue;
      if (!body.empty()) body += " ";
      body += part;
    }
    if (body.empty()) body = "\"\"";
    if (!out.empty()) out += " | ";
    out += body;
  }
  if (groups.size() == 1) return out;
  return "(" + out + ")";
}

bool simple_repeat(std::string_view pattern, gbnf::CharSet& set, long& min, long& max) {
  RegexOptions opt;
  opt.max_repeat = std::numeric_limits<int>::max();
  Node root;
  try {
    root = Parser(pattern, opt).parse();
  } catch (const RegexError&) {
    return false;
  }
  std::vector<Node> items;
  flatten_seq(root, items);
  if (items.size() != 3 || items[0].kind != Node::Kind::Start || items[2].kind != Node::Kind::End) {
    return false;
  }
  const Node& mid = items[1];
  if (mid.kind == Node::Kind::Repeat && mid.kids[0].kind == Node::Kind::Chars) {
    set = mid.kids[0].chars;
    min = mid.min;
    max = mid.max;
    return true;
  }
  return false;
}

// ---- key classifier: NFA from the parsed patterns, subset construction ----------------

namespace {

// Thompson NFA over code points; marks say which pattern or name a string ending in a
// state matches.
class KeyNfa {
 public:
  explicit KeyNfa(size_t max_states) : max_states_(max_states) { add_state(); }

  int add_state() {
    if (eps_.size() >= max_states_) throw RegexError("key automaton too large", 0);
    eps_.emplace_back();
    edges_.emplace_back();
    marks_.emplace_back();
    return static_cast<int>(eps_.size() - 1);
  }
  void eps(int a, int b) { eps_[static_cast<size_t>(a)].push_back(b); }
  void edge(int a, const CharSet& s, int b) {
    if (!s.empty()) edges_[static_cast<size_t>(a)].push_back({s, b});
  }
  void mark(int s, int m) { marks_[static_cast<size_t>(s)].push_back(m); }

  // Builds n from `from`; returns the state reached at its end.
  int build(const Node& n, int from) {
    switch (n.kind) {
      case Node::Kind::Chars: {
        int to = add_state();
        edge(from, n.chars, to);
        return to;
      }
      case Node::Kind::Seq: {
        int cur = from;
        for (const Node& k : n.kids) cur = build(k, cur);
        return cur;
      }
      case Node::Kind::Alt: {
        int to = add_state();
        for (const Node& k : n.kids) {
          int s = add_state();
          eps(from, s);
          eps(build(k, s), to);
        }
        return to;
      }
      case Node::Kind::Repeat: {
        int cur = from;
        for (long i = 0; i < n.min; ++i) cur = build(n.kids[0], cur);
        if (n.max < 0) {
          int loop = add_state();
          eps(cur, loop);
          int body = add_state();
          eps(loop, body);
          eps(build(n.kids[0], body), loop);
          return loop;
        }
        int to = add_state();
        eps(cur, to);
        for (long i = n.min; i < n.max; ++i) {
          cur = build(n.kids[0], cur);
          eps(cur, to);
        }
        return to;
      }
      case Node::Kind::Start:
      case Node::Kind::End:
        throw RegexError("anchors are only supported at the start and end of the pattern", 0);
    }
    return from;
  }

  // Adds the ε-closure of `set` to it, sorted and unique. The subset construction closes a
  // set per piece of the alphabet per state, so the marks and the work list are kept between
  // calls (a fresh array per call was most of building a 256-state automaton).
  void close(std::vector<int>& set) {
    if (in_.size() < eps_.size()) in_.resize(eps_.size(), 0);
    if (++stamp_ == 0) {
      std::fill(in_.begin(), in_.end(), 0);
      stamp_ = 1;
    }
    work_.assign(set.begin(), set.end());
    for (int s : set) in_[static_cast<size_t>(s)] = stamp_;
    while (!work_.empty()) {
      int s = work_.back();
      work_.pop_back();
      for (int t : eps_[static_cast<size_t>(s)]) {
        if (in_[static_cast<size_t>(t)] != stamp_) {
          in_[static_cast<size_t>(t)] = stamp_;
          set.push_back(t);
          work_.push_back(t);
        }
      }
    }
    std::sort(set.begin(), set.end());
  }

  const std::vector<std::pair<CharSet, int>>& edges(int s) const {
    return edges_[static_cast<size_t>(s)];
  }
  const std::vector<int>& marks(int s) const { return marks_[static_cast<size_t>(s)]; }

 private:
  size_t max_states_;
  std::vector<std::vector<int>> eps_;
  std::vector<std::vector<std::pair<CharSet, int>>> edges_;
  std::vector<std::vector<int>> marks_;  // pattern i: i; name j: -1 - j
  std::vector<uint32_t> in_;             // close(): stamp_ where a state is in the set
  uint32_t stamp_ = 0;
  std::vector<int> work_;
};

// Adds to `cuts` where the code points split along `edges`: each range's start, and the
// code point after its end. cuts_sorted() then makes them the starts of the pieces no edge
// tells apart (given a 0 to begin with).
void add_cuts(const std::vector<std::pair<CharSet, int>>& edges, std::vector<uint32_t>& cuts) {
  for (const auto& [cs, t] : edges) {
    for (const CharSet::Range& r : cs.ranges()) {
      cuts.push_back(r.lo);
      if (r.hi < gbnf::kMaxCodePoint) cuts.push_back(r.hi + 1);
    }
  }
}
void cuts_sorted(std::vector<uint32_t>& cuts) {
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
}

}  // namespace

KeyClassifier::KeyClassifier(const std::vector<std::string>& patterns,
                             const std::vector<std::string>& names, const RegexOptions& options,
                             size_t max_states) {
  KeyNfa nfa(max_states * 8);
  const CharSet any = CharSet::all();
  for (size_t p = 0; p < patterns.size(); ++p) {
    Node root = Parser(patterns[p], options).parse();
    std::vector<Branch> branches;
    split_branches(root, branches, 64);
    for (const Branch& b : branches) {
      std::optional<Node> live = live_sequence(b.items);
      if (!live) continue;  // this branch can never match
      Node& seq = *live;
      trim_search_ends(seq.kids, !b.start, !b.end);
      int s = nfa.add_state();
      nfa.eps(0, s);
      if (!b.start) nfa.edge(s, any, s);  // search: anything before the match
      int e = nfa.build(seq, s);
      if (!b.end) {
        int tail = nfa.add_state();  // search: anything after the match
        nfa.eps(e, tail);
        nfa.edge(tail, any, tail);
        e = tail;
      }
      nfa.mark(e, static_cast<int>(p));
    }
  }
  for (size_t j = 0; j < names.size(); ++j) {
    int cur = 0;
    size_t pos = 0;
    const std::string& k = names[j];
    while (pos < k.size()) {
      uint32_t c;
      if (!gbnf::decode_utf8(k, pos, c)) c = static_cast<unsigned char>(k[pos++]);
      int to = nfa.add_state();
      nfa.edge(cur, CharSet::of(c), to);
      cur = to;
    }
    if (cur == 0) {  // the empty name: a fresh state reached by ε
      cur = nfa.add_state();
      nfa.eps(0, cur);
    }
    nfa.mark(cur, -1 - static_cast<int>(j));
  }
  // Subset construction.
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  std::map<Signature, size_t> sig_ids;
  auto intern = [&](std::vector<int> set) {
    nfa.close(set);
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (sets.size() >= max_states) throw RegexError("key automaton too large", 0);
    int id = static_cast<int>(sets.size());
    ids.emplace(set, id);
    Signature sig;
    for (int s : set) {
      for (int m : nfa.marks(s)) {
        if (m >= 0) {
          sig.patterns.push_back(static_cast<size_t>(m));
        } else if (sig.name < 0) {
          sig.name = -1 - m;
        }
      }
    }
    std::sort(sig.patterns.begin(), sig.patterns.end());
    sig.patterns.erase(std::unique(sig.patterns.begin(), sig.patterns.end()), sig.patterns.end());
    auto [sit, fresh] = sig_ids.emplace(sig, sigs_.size());
    if (fresh) sigs_.push_back(sig);
    sets.push_back(std::move(set));
    states_.push_back({{}, sit->second});
    return id;
  };
  intern({0});
  for (size_t d = 0; d < sets.size(); ++d) {
    // Split the code points at every range boundary of the outgoing edges.
    std::vector<uint32_t> cuts = {0};
    for (int s : sets[d]) add_cuts(nfa.edges(s), cuts);
    cuts_sorted(cuts);
    std::map<int, CharSet> by_target;
    // Pieces that move to the same NFA states share one closure and lookup.
    std::vector<std::pair<std::vector<int>, int>> moved;
    std::vector<int> target;
    for (size_t i = 0; i < cuts.size(); ++i) {
      uint32_t lo = cuts[i];
      uint32_t hi = i + 1 < cuts.size() ? cuts[i + 1] - 1 : gbnf::kMaxCodePoint;
      target.clear();
      for (int s : sets[d]) {
        for (const auto& [cs, t] : nfa.edges(s)) {
          if (cs.contains(lo)) target.push_back(t);
        }
      }
      std::sort(target.begin(), target.end());
      target.erase(std::unique(target.begin(), target.end()), target.end());
      if (target.size() > 1) ambiguous_ = true;
      int id = -1;
      for (const auto& [raw, known] : moved) {
        if (raw == target) id = known;
      }
      if (id < 0) {
        id = intern(target);
        moved.push_back({target, id});
      }
      by_target[id].add(lo, hi);
    }
    for (auto& [t, cs] : by_target) states_[d].next.push_back({std::move(cs), t});
  }
  minimize();
}

void KeyClassifier::minimize() {
  // Hopcroft's partition refinement: states are equivalent when they end in the same class
  // and go to equivalent states on every code point. Fewer states, smaller grammars. (Moore's
  // rounds, used before, took one round per step of a counting chain: `^(?:\S+\s+){0,49}\S+$`
  // took 100 rounds over 200 states, 6 ms of its 6.1 ms build, now 1.3 ms in all, and a
  // schema may repeat such patterns over many properties.)
  const size_t n = states_.size();
  // The alphabet: ranges of code points that no state's transitions tell apart.
  std::vector<uint32_t> cuts = {0};
  for (const State& st : states_) add_cuts(st.next, cuts);
  cuts_sorted(cuts);
  const size_t k = cuts.size();
  // Where each state goes on each letter (its transitions cover every code point), and the
  // reverse: the states that go to t on letter c, sources[at[t * k + c] ..][at[t * k + c + 1]).
  std::vector<uint32_t> delta(n * k);
  std::vector<std::pair<uint32_t, uint32_t>> pieces;  // (lo, target)
  for (size_t s = 0; s < n; ++s) {
    pieces.clear();
    for (const auto& [cs, t] : states_[s].next) {
      for (const CharSet::Range& r : cs.ranges())
        pieces.push_back({r.lo, static_cast<uint32_t>(t)});
    }
    std::sort(pieces.begin(), pieces.end());
    size_t j = 0;
    for (size_t c = 0; c < k; ++c) {
      while (j + 1 < pieces.size() && pieces[j + 1].first <= cuts[c]) ++j;
      delta[s * k + c] = pieces[j].second;
    }
  }
  std::vector<uint32_t> at(n * k + 1, 0), sources(n * k);
  for (size_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < k; ++c) ++at[delta[s * k + c] * k + c + 1];
  }
  for (size_t i = 1; i < at.size(); ++i) at[i] += at[i - 1];
  {
    std::vector<uint32_t> fill(at.begin(), at.end() - 1);
    for (size_t s = 0; s < n; ++s) {
      for (size_t c = 0; c < k; ++c)
        sources[fill[delta[s * k + c] * k + c]++] = static_cast<uint32_t>(s);
    }
  }
  // The partition: block b holds elems[first[b] .. end[b]); while a letter is processed, the
  // states marked in it are moved to elems[first[b] .. mid[b]).
  std::vector<uint32_t> elems(n), loc(n), block(n), first, end, mid;
  std::iota(elems.begin(), elems.end(), 0u);
  std::stable_sort(elems.begin(), elems.end(),
                   [&](uint32_t a, uint32_t b) { return states_[a].sig < states_[b].sig; });
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || states_[elems[i]].sig != states_[elems[i - 1]].sig) {
      if (i > 0) end.push_back(static_cast<uint32_t>(i));
      first.push_back(static_cast<uint32_t>(i));
    }
    loc[elems[i]] = static_cast<uint32_t>(i);
    block[elems[i]] = static_cast<uint32_t>(first.size() - 1);
  }
  end.push_back(static_cast<uint32_t>(n));
  mid = first;
  // Splitters: (block, letter) pairs still to process; every pair at the start.
  std::vector<char> waiting(n * k, 0);
  std::vector<std::pair<uint32_t, uint32_t>> work;
  for (uint32_t b = 0; b < first.size(); ++b) {
    for (uint32_t c = 0; c < k; ++c) {
      work.push_back({b, c});
      waiting[b * k + c] = 1;
    }
  }
  std::vector<uint32_t> pre, touched;
  while (!work.empty()) {
    auto [a, c] = work.back();
    work.pop_back();
    waiting[a * k + c] = 0;
    pre.clear();
    for (uint32_t i = first[a]; i < end[a]; ++i) {
      const size_t t = elems[i];
      pre.insert(pre.end(), sources.begin() + at[t * k + c], sources.begin() + at[t * k + c + 1]);
    }
    for (uint32_t s : pre) {
      const uint32_t b = block[s];
      if (loc[s] < mid[b]) continue;  // marked already
      if (mid[b] == first[b]) touched.push_back(b);
      const uint32_t other = elems[mid[b]];
      std::swap(elems[loc[s]], elems[mid[b]]);
      loc[other] = loc[s];
      loc[s] = mid[b]++;
    }
    for (uint32_t b : touched) {
      if (mid[b] == end[b]) {  // all of it goes into the splitter: no split
        mid[b] = first[b];
        continue;
      }
      // The marked states become a new block z.
      const uint32_t z = static_cast<uint32_t>(first.size());
      first.push_back(first[b]);
      end.push_back(mid[b]);
      mid.push_back(first[b]);
      first[b] = mid[b];
      for (uint32_t i = first[z]; i < end[z]; ++i) block[elems[i]] = z;
      const uint32_t smaller = end[z] - first[z] <= end[b] - first[b] ? z : b;
      for (uint32_t d = 0; d < k; ++d) {
        const uint32_t add = waiting[b * k + d] ? z : smaller;
        if (!waiting[add * k + d]) {
          waiting[add * k + d] = 1;
          work.push_back({add, d});
        }
      }
    }
    touched.clear();
  }
  const size_t count = first.size();
  // Rebuild with the start state's block first.
  std::vector<int> id(count, -1);
  std::vector<State> out;
  std::vector<size_t> order = {0};
  id[block[0]] = 0;
  out.push_back({});
  for (size_t i = 0; i < order.size(); ++i) {
    size_t s = order[i];
    std::map<int, CharSet> by_target;
    for (const auto& [cs, t] : states_[s].next) {
      size_t b = block[static_cast<size_t>(t)];
      if (id[b] < 0) {
        id[b] = static_cast<int>(out.size());
        out.push_back({});
        order.push_back(static_cast<size_t>(t));
      }
      by_target[id[b]].add(cs);
    }
    State& st = out[static_cast<size_t>(id[block[s]])];
    st.sig = states_[s].sig;
    for (auto& [t, cs] : by_target) st.next.push_back({std::move(cs), t});
  }
  states_ = std::move(out);
}

size_t KeyClassifier::classify(std::string_view key) const {
  size_t cur = 0;
  size_t pos = 0;
  while (pos < key.size()) {
    uint32_t c;
    if (!gbnf::decode_utf8(key, pos, c)) c = static_cast<unsigned char>(key[pos++]);
    for (const auto& [cs, t] : states_[cur].next) {
      if (cs.contains(c)) {
        cur = static_cast<size_t>(t);
        break;
      }
    }
  }
  return states_[cur].sig;
}

std::string KeyClassifier::key_expression(size_t sig, gbnf::RuleSet& rules,
                                          Encoding encoding) const {
  // The end of the string: its closing quote, or nothing for raw text.
  const std::string end = encoding == Encoding::Raw ? "\"\"" : "\"\\\"\"";
  // States from which a string of class `sig` can still end.
  std::vector<std::vector<size_t>> back(states_.size());
  for (size_t s = 0; s < states_.size(); ++s) {
    for (const auto& [cs, t] : states_[s].next) back[static_cast<size_t>(t)].push_back(s);
  }
  std::vector<char> live(states_.size(), 0);
  std::vector<size_t> work;
  for (size_t s = 0; s < states_.size(); ++s) {
    if (states_[s].sig == sig) live[s] = 1, work.push_back(s);
  }
  while (!work.empty()) {
    size_t s = work.back();
    work.pop_back();
    for (size_t p : back[s]) {
      if (!live[p]) live[p] = 1, work.push_back(p);
    }
  }
  if (!live[0]) return "";
  std::vector<std::string> names(states_.size());
  for (size_t s = 0; s < states_.size(); ++s) {
    if (live[s]) names[s] = rules.reserve("key-class");
  }
  for (size_t s = 0; s < states_.size(); ++s) {
    if (!live[s]) continue;
    std::string body, loop;
    if (states_[s].sig == sig) body = end;
    size_t alts = body.empty() ? 0 : 1;
    for (const auto& [cs, t] : states_[s].next) {
      if (!live[static_cast<size_t>(t)]) continue;
      std::string ch = char_expression(cs, rules, encoding);
      if (ch.empty()) continue;
      if (ch.find(' ') != std::string::npos) ch = "(" + ch + ")";
      // A self-loop is written as a repetition in front of the other moves (same
      // language): the matcher handles `c*` far better than `s ::= c s | ...`, whose key
      // positions in patternProperties objects cost up to 400 ms per mask (o12613).
      if (static_cast<size_t>(t) == s) {
        loop = ch + "* ";
        continue;
      }
      if (!body.empty()) body += " | ";
      body += ch + " " + names[static_cast<size_t>(t)];
      ++alts;
    }
    if (body.empty()) {
      body = "[^\\x00-\\U0010FFFF]";
    } else if (!loop.empty()) {
      body = loop + (alts > 1 ? "(" + body + ")" : body);
    }
    rules.define(names[s], body);
  }
  return (encoding == Encoding::Raw ? "" : "\"\\\"\" ") + names[0];
}

std::string KeyClassifier::bounded_expression(size_t sig, long min, long max, gbnf::RuleSet& rules,
                                              size_t max_pairs, Encoding encoding) const {
  const std::string end = encoding == Encoding::Raw ? "\"\"" : "\"\\\"\"";
  const std::string open = encoding == Encoding::Raw ? "" : "\"\\\"\" ";
  // Pairs (state, length so far); without a maximum the length saturates at the minimum.
  const long cap = max >= 0 ? max : min;
  auto key = [&](size_t s, long c) {
    return s * static_cast<size_t>(cap + 1) + static_cast<size_t>(c);
  };
  // A "tail" state accepts and only loops on itself over one class (every other move is
  // dead), like the [0-9a-z._-]* end of ^[a-z][0-9a-z._-]*$: from it the rest is that
  // class repeated {min-c, max-c} times, one rule instead of one pair per length.
  std::vector<char> good(states_.size(), 0);  // can still end in class `sig`
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t s = 0; s < states_.size(); ++s) {
      if (good[s]) continue;
      bool g = states_[s].sig == sig;
      for (const auto& [cs, t] : states_[s].next) g = g || good[static_cast<size_t>(t)];
      if (g) good[s] = 1, grew = true;
    }
  }
  std::vector<gbnf::CharSet> tail(states_.size());
  std::vector<char> is_tail(states_.size(), 0);
  for (size_t s = 0; s < states_.size(); ++s) {
    if (states_[s].sig != sig) continue;
    bool ok = true;
    for (const auto& [cs, t] : states_[s].next) {
      if (static_cast<size_t>(t) == s) {
        tail[s].add(cs);
      } else if (good[static_cast<size_t>(t)]) {
        ok = false;
      }
    }
    is_tail[s] = ok && !tail[s].empty();
  }
  std::map<size_t, std::string> names;
  std::vector<std::pair<size_t, long>> work = {{0, 0}};
  std::vector<std::pair<size_t, long>> order;
  size_t tails = 0;
  names[key(0, 0)] = "";
  while (!work.empty()) {
    auto [s, c] = work.back();
    work.pop_back();
    order.push_back({s, c});
    tails += is_tail[s];  // one repetition each: not counted against the budget
    if (order.size() - tails > max_pairs)
      throw RegexError("pattern with length bounds too large", 0);
    if ((max >= 0 && c >= max) || is_tail[s]) continue;
    long nc = max >= 0 ? c + 1 : std::min(c + 1, cap);
    for (const auto& [cs, t] : states_[s].next) {
      if (names.emplace(key(static_cast<size_t>(t), nc), "").second)
        work.push_back({static_cast<size_t>(t), nc});
    }
  }
  // Pairs from which an accepted end is reachable.
  std::map<size_t, std::vector<size_t>> back;
  std::vector<size_t> live_work;
  std::map<size_t, bool> live;
  for (auto [s, c] : order) {
    if (states_[s].sig == sig && (c >= min || is_tail[s]))
      live[key(s, c)] = true, live_work.push_back(key(s, c));
    if ((max >= 0 && c >= max) || is_tail[s]) continue;
    long nc = max >= 0 ? c + 1 : std::min(c + 1, cap);
    for (const auto& [cs, t] : states_[s].next)
      back[key(static_cast<size_t>(t), nc)].push_back(key(s, c));
  }
  while (!live_work.empty()) {
    size_t k = live_work.back();
    live_work.pop_back();
    for (size_t p : back[k]) {
      if (!live[p]) live[p] = true, live_work.push_back(p);
    }
  }
  if (!live[key(0, 0)]) return "";
  for (auto [s, c] : order) {
    if (live[key(s, c)]) names[key(s, c)] = rules.reserve("str-len");
  }
  for (auto [s, c] : order) {
    if (!live[key(s, c)]) continue;
    std::string body;
    if (is_tail[s]) {
      long lo = std::max(0L, min - c), hi = max < 0 ? -1 : max - c;
      std::string ch = char_expression(tail[s], rules, encoding);
      if (ch.find(' ') != std::string::npos) ch = "(" + ch + ")";
      std::string rep;
      if (hi == 0) {
        rep = "";
      } else if (hi < 0) {
        rep = lo == 0 ? ch + "*" : lo == 1 ? ch + "+" : ch + "{" + std::to_string(lo) + ",}";
      } else if (lo == hi) {
        rep = lo == 1 ? ch : ch + "{" + std::to_string(lo) + "}";
      } else {
        rep = ch + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
      }
      rules.define(names[key(s, c)],
                   rep.empty() ? end : (encoding == Encoding::Raw ? rep : rep + " " + end));
      continue;
    }
    if (states_[s].sig == sig && c >= min) body = end;
    if (max < 0 || c < max) {
      long nc = max >= 0 ? c + 1 : std::min(c + 1, cap);
      for (const auto& [cs, t] : states_[s].next) {
        size_t k = key(static_cast<size_t>(t), nc);
        if (!live[k]) continue;
        std::string ch = char_expression(cs, rules, encoding);
        if (ch.empty()) continue;
        if (ch.find(' ') != std::string::npos) ch = "(" + ch + ")";
        if (!body.empty()) body += " | ";
        body += ch + " " + names[k];
      }
    }
    rules.define(names[key(s, c)], body.empty() ? "[^\\x00-\\U0010FFFF]" : body);
  }
  return open + names[key(0, 0)];
}

}  // namespace regex_detail

std::string regex_to_gbnf(std::string_view pattern, const RegexOptions& options) {
  gbnf::RuleSet rules(options.max_grammar_bytes);
  std::string root;
  try {
    root = regex_detail::regex_expression(pattern, rules, regex_detail::Encoding::Raw, options);
  } catch (const gbnf::GrammarTooLarge& e) {
    throw RegexError(e.what(), 0);
  }
  return rules.to_string(root);
}

}  // namespace lacuna
