// regex_gbnf.cpp — GBNF writing helpers: code-point sets, escaping, deduplicating rule set.
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "grammar/regex_gbnf.h"

#include <algorithm>
#include <cstdio>

namespace lacuna::gbnf {

CharSet CharSet::range(uint32_t lo, uint32_t hi) {
  CharSet s;
  s.add(lo, hi);
  return s;
}

void CharSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  std::vector<Range> out;
  out.reserve(ranges_.size() + 1);
  size_t i = 0;
  while (i < ranges_.size() && ranges_[i].hi + 1 < lo) out.push_back(ranges_[i++]);
  uint32_t nlo = lo, nhi = hi;
  while (i < ranges_.size() && ranges_[i].lo <= (nhi == kMaxCodePoint ? nhi : nhi + 1)) {
    nlo = std::min(nlo, ranges_[i].lo);
    nhi = std::max(nhi, ranges_[i].hi);
    ++i;
  }
  out.push_back({nlo, nhi});
  while (i < ranges_.size()) out.push_back(ranges_[i++]);
  ranges_ = std::move(out);
}

void CharSet::add(const CharSet& other) {
  for (const Range& r : other.ranges_) add(r.lo, r.hi);
}

CharSet CharSet::complement() const {
  CharSet out;
  uint32_t next = 0;
  bool done = false;
  for (const Range& r : ranges_) {
    if (r.lo > next) out.ranges_.push_back({next, r.lo - 1});
    if (r.hi == kMaxCodePoint) {
      done = true;
      break;
    }
    next = r.hi + 1;
  }
  if (!done) out.ranges_.push_back({next, kMaxCodePoint});
  return out;
}

CharSet CharSet::intersect(const CharSet& other) const {
  CharSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    uint32_t lo = std::max(ranges_[i].lo, other.ranges_[j].lo);
    uint32_t hi = std::min(ranges_[i].hi, other.ranges_[j].hi);
    if (lo <= hi) out.ranges_.push_back({lo, hi});
    if (ranges_[i].hi < other.ranges_[j].hi) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

bool CharSet::contains(uint32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), c,
                             [](uint32_t v, const Range& r) { return v < r.lo; });
  if (it == ranges_.begin()) return false;
  --it;
  return c <= it->hi;
}

uint64_t CharSet::size() const {
  uint64_t n = 0;
  for (const Range& r : ranges_) n += uint64_t{r.hi} - r.lo + 1;
  return n;
}

bool CharSet::operator==(const CharSet& o) const {
  if (ranges_.size() != o.ranges_.size()) return false;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    if (ranges_[i].lo != o.ranges_[i].lo || ranges_[i].hi != o.ranges_[i].hi) return false;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool decode_utf8(std::string_view s, size_t& pos, uint32_t& c) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b0 = byte(pos);
  int len;
  if (b0 < 0x80) {
    c = b0;
    len = 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    c = b0 & 0x1F;
    len = 2;
  } else if ((b0 & 0xF0) == 0xE0) {
    c = b0 & 0x0F;
    len = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    c = b0 & 0x07;
    len = 4;
  } else {
    return false;
  }
  if (pos + len > s.size()) return false;
  for (int k = 1; k < len; ++k) {
    unsigned char b = byte(pos + k);
    if ((b & 0xC0) != 0x80) return false;
    c = (c << 6) | (b & 0x3F);
  }
  if (c > kMaxCodePoint) return false;
  pos += len;
  return true;
}

namespace {

// One code point as it may appear inside a GBNF literal or class.
void append_escaped(std::string& out, uint32_t c, bool in_class) {
  char buf[16];
  bool printable_ascii = c >= 0x20 && c < 0x7F;
  bool special =
      c == '"' || c == '\\' || (in_class && (c == ']' || c == '[' || c == '-' || c == '^'));
  if (printable_ascii && !special) {
    out.push_back(static_cast<char>(c));
  } else if (c == '"' || c == '\\' || c == ']' || c == '[' || c == '-') {
    out.push_back('\\');
    out.push_back(static_cast<char>(c));
  } else if (c == '\n' || c == '\r' || c == '\t') {
    out.push_back('\\');
    out.push_back(c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
  } else if (c < 0x80) {
    std::snprintf(buf, sizeof buf, "\\x%02X", c);
    out += buf;
  } else if (c <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", c);
    out += buf;
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", c);
    out += buf;
  }
}

std::string class_body(const CharSet& s) {
  std::string out;
  for (const CharSet::Range& r : s.ranges()) {
    append_escaped(out, r.lo, true);
    if (r.hi != r.lo) {
      if (r.hi != r.lo + 1) out.push_back('-');
      append_escaped(out, r.hi, true);
    }
  }
  return out;
}

}  // namespace

std::string literal(std::string_view utf8) {
  std::string out = "\"";
  size_t pos = 0;
  while (pos < utf8.size()) {
    uint32_t c;
    if (!decode_utf8(utf8, pos, c)) {
      // Not UTF-8: write the byte as is, escaped.
      c = static_cast<unsigned char>(utf8[pos++]);
    }
    if (c >= 0x80 && c <= 0xFFFF && !(c >= 0xD800 && c <= 0xDFFF) && c != 0xFFFE && c != 0xFFFF) {
      append_utf8(out, c);
    } else {
      append_escaped(out, c, false);
    }
  }
  out.push_back('"');
  return out;
}

std::string char_class(const CharSet& set) {
  if (set.ranges().size() == 1 && set.ranges()[0].lo == set.ranges()[0].hi) {
    std::string s;
    append_utf8(s, set.ranges()[0].lo);
    return literal(s);
  }
  std::string pos = class_body(set);
  CharSet comp = set.complement();
  std::string neg = comp.empty() ? std::string() : class_body(comp);
  // A class that reaches the last code point is written negated, as a JSON string's own
  // character class is: it then treats every code point above ASCII alike. (Positive, a
  // key's first character that leaves out the first letters of many names, ending in
  // `x-\U0010FFFF`, left the engine's live search no uniform set: a 1.5 ms first-use mask
  // in Github_hard o30544.)
  bool use_neg = !comp.empty() && (neg.size() < pos.size() || set.contains(0x10FFFF));
  std::string out(use_neg ? "[^" : "[");
  out.append(use_neg ? neg : pos);
  out.push_back(']');
  return out;
}

std::string RuleSet::unique_name(std::string_view hint) {
  std::string base;
  for (char ch : hint) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (ok) {
      base.push_back(ch);
    } else if (!base.empty() && base.back() != '-') {
      base.push_back('-');
    }
    if (base.size() >= 40) break;
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base.push_back('r');
  // No name ends in "-<digits>": GBNF parsers name the rules they generate for groups and
  // repetitions "<rule>-<n>", and our names must never collide with those.
  size_t dash = base.rfind('-');
  if (dash != std::string::npos && dash + 1 < base.size() &&
      base.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
    base.insert(dash + 1, "n");
  }
  if (base == "root") base.append("-r");
  std::string name = base;
  int& n = counters_[base];
  while (bodies_.count(name) != 0 || name == "root") {
    name = base;
    name.append("-v");
    name.append(std::to_string(++n));
  }
  return name;
}

void RuleSet::account(size_t n) {
  bytes_ += n;
  if (bytes_ > max_bytes_) {
    throw GrammarTooLarge("grammar exceeds the size limit of " + std::to_string(max_bytes_) +
                          " bytes");
  }
}

std::string RuleSet::add(std::string_view hint, std::string body) {
  auto it = by_body_.find(body);
  if (it != by_body_.end()) return it->second;
  std::string name = unique_name(hint);
  account(name.size() + body.size() + 6);
  order_.push_back(name);
  by_body_.emplace(body, name);
  bodies_.emplace(name, std::move(body));
  return name;
}

std::string RuleSet::reserve(std::string_view hint) {
  std::string name = unique_name(hint);
  order_.push_back(name);
  bodies_.emplace(name, std::string());
  return name;
}

void RuleSet::define(const std::string& name, std::string body) {
  account(name.size() + body.size() + 6);
  bodies_[name] = std::move(body);
}

std::string RuleSet::to_string(const std::string& root_body) const {
  std::string out = "root ::= " + root_body + "\n";
  for (const std::string& name : order_) {
    out += name;
    out += " ::= ";
    out += bodies_.at(name);
    out += "\n";
  }
  return out;
}

}  // namespace lacuna::gbnf
