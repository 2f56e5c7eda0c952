// json_schema_numbers.cpp — grammars for integer and number ranges (minimum, maximum and
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// their exclusive forms), built digit by digit.
#include <cmath>
#include <string>
#include <vector>

#include "grammar/json_schema_parts.h"

namespace lacuna::schema_detail {
namespace {

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  if (lo == '0' && hi == '9') return "[0-9]";
  return std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return "[0-9]{" + std::to_string(n) + "}";
}

void join(std::string& out, const std::string& part) {
  if (part.empty()) return;
  if (!out.empty()) out += " ";
  out += part;
}

// Strings of exactly lo.size() digits between lo and hi (same length, lo <= hi).
std::string fixed_range(const std::string& lo, const std::string& hi) {
  size_t n = lo.size();
  if (n == 0) return "";
  size_t p = 0;
  while (p < n && lo[p] == hi[p]) ++p;
  std::string prefix = p ? "\"" + lo.substr(0, p) + "\"" : "";
  if (p == n) return prefix;
  std::string lo_rest = lo.substr(p + 1), hi_rest = hi.substr(p + 1);
  size_t m = n - p - 1;
  bool lo_min = lo_rest.find_first_not_of('0') == std::string::npos;
  bool hi_max = hi_rest.find_first_not_of('9') == std::string::npos;
  std::vector<std::string> alts;
  char a = lo[p], b = hi[p];
  char full_lo = lo_min ? a : static_cast<char>(a + 1);
  char full_hi = hi_max ? b : static_cast<char>(b - 1);
  if (!lo_min) {
    std::string s = std::string("\"") + a + "\"";
    join(s, fixed_range(lo_rest, std::string(m, '9')));
    alts.push_back(s);
  }
  if (full_lo <= full_hi) {
    std::string s = digit_class(full_lo, full_hi);
    join(s, any_digits(m));
    alts.push_back(s);
  }
  if (!hi_max) {
    std::string s = std::string("\"") + b + "\"";
    join(s, fixed_range(std::string(m, '0'), hi_rest));
    alts.push_back(s);
  }
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  if (alts.size() > 1) body = "(" + body + ")";
  join(prefix, body);
  return prefix;
}

// Non-negative integers in [a, b] (b < 0: unbounded).
std::string nonneg_range(uint64_t a, int64_t b_signed) {
  bool unbounded = b_signed < 0;
  uint64_t b = unbounded ? 0 : static_cast<uint64_t>(b_signed);
  if (!unbounded && a > b) return "";
  std::string as = std::to_string(a);
  std::vector<std::string> alts;
  size_t max_len = unbounded ? as.size() : std::to_string(b).size();
  for (size_t len = as.size(); len <= max_len; ++len) {
    std::string lo = len == as.size() ? as : "1" + std::string(len - 1, '0');
    std::string hi = (!unbounded && len == max_len) ? std::to_string(b) : std::string(len, '9');
    if (len == 1 && lo == "0" && hi == "9") {
      alts.push_back("[0-9]");
      continue;
    }
    alts.push_back(fixed_range(lo, hi));
  }
  if (unbounded) alts.push_back("[1-9] [0-9]{" + std::to_string(as.size()) + ",}");
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return alts.size() > 1 ? "(" + body + ")" : body;
}

}  // namespace

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi,
                          gbnf::RuleSet& rules) {
  if (lo && hi && *lo > *hi) return "";
  if (!lo && !hi) return rules.add("integer", "\"-\"? (\"0\" | [1-9] [0-9]*)");
  std::vector<std::string> alts;
  // Negative part: -m with m in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    uint64_t m_lo = 1;
    if (hi && *hi < -1) m_lo = static_cast<uint64_t>(-(*hi + 1)) + 1;
    int64_t m_hi = -1;
    if (lo) m_hi = *lo == INT64_MIN ? INT64_MAX : -*lo;
    std::string r = nonneg_range(m_lo, m_hi);
    if (!r.empty()) alts.push_back("\"-\" " + r);
  }
  if (!hi || *hi >= 0) {
    uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    int64_t b = hi ? *hi : -1;
    std::string r = nonneg_range(a, b);
    if (!r.empty()) alts.push_back(r);
  }
  if (alts.empty()) return "";
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return rules.add("integer-range", body);
}

namespace {

// Non-negative numbers m (no sign, no exponent) with a <= m <= b (integers; b < 0:
// unbounded), a_excl / b_excl making the bounds strict.
std::string nonneg_number(int64_t a, bool a_excl, int64_t b, bool b_excl) {
  const std::string frac = "(\".\" [0-9]+)?";
  const std::string zero_frac = "(\".\" \"0\"+)?";
  const std::string nonzero_frac = "\".\" \"0\"* [1-9] [0-9]*";
  std::vector<std::string> alts;
  bool unbounded = b < 0;
  if (!unbounded && a > b) return "";
  if (!unbounded && a == b) {
    if (a_excl || b_excl) return "";
    return "\"" + std::to_string(a) + "\" " + zero_frac;
  }
  // I == a
  alts.push_back("\"" + std::to_string(a) + "\" " + (a_excl ? nonzero_frac : frac));
  // a < I < b
  std::string mid = nonneg_range(static_cast<uint64_t>(a) + 1, unbounded ? -1 : b - 1);
  if (!mid.empty()) alts.push_back(mid + " " + frac);
  // I == b
  if (!unbounded && !b_excl) alts.push_back("\"" + std::to_string(b) + "\" " + zero_frac);
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return "(" + body + ")";
}

constexpr double kMaxExact = 9.0e15;

}  // namespace

std::string number_range(std::optional<Bound> lo, std::optional<Bound> hi, gbnf::RuleSet& rules,
                         bool& widened) {
  widened = false;
  if (lo && std::fabs(lo->value) > kMaxExact) {
    if (lo->value < 0) lo.reset();
  }
  if (hi && std::fabs(hi->value) > kMaxExact) {
    if (hi->value > 0) hi.reset();
  }
  if (lo && lo->value > kMaxExact) lo->value = kMaxExact, widened = true;
  if (hi && hi->value < -kMaxExact) hi->value = -kMaxExact, widened = true;
  if (!lo && !hi) {
    return rules.add("number",
                     "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
  }
  // Widen fractional bounds to integers.
  auto widen_lo = [&](Bound& b) {
    double f = std::floor(b.value);
    if (f != b.value) b = {f, false}, widened = true;
  };
  auto widen_hi = [&](Bound& b) {
    double c = std::ceil(b.value);
    if (c != b.value) b = {c, false}, widened = true;
  };
  if (lo) widen_lo(*lo);
  if (hi) widen_hi(*hi);
  if (lo && hi &&
      (lo->value > hi->value || (lo->value == hi->value && (lo->exclusive || hi->exclusive)))) {
    return "";
  }
  std::vector<std::string> alts;
  // Negative side: x = -m, m > 0; m in [max(0, -hi), -lo].
  if (!lo || lo->value < 0) {
    int64_t m_hi = lo ? static_cast<int64_t>(-lo->value) : -1;
    bool m_hi_excl = lo ? lo->exclusive : false;
    int64_t m_lo = 0;
    bool m_lo_excl = true;  // m == 0 is covered by the non-negative side
    if (hi && hi->value < 0) {
      m_lo = static_cast<int64_t>(-hi->value);
      m_lo_excl = hi->exclusive;
    }
    std::string r = nonneg_number(m_lo, m_lo_excl, m_hi, m_hi_excl);
    if (!r.empty()) alts.push_back("\"-\" " + r);
  }
  if (!hi || hi->value >= 0) {
    int64_t a = 0;
    bool a_excl = false;
    if (lo && lo->value >= 0) a = static_cast<int64_t>(lo->value), a_excl = lo->exclusive;
    int64_t b = hi ? static_cast<int64_t>(hi->value) : -1;
    bool b_excl = hi ? hi->exclusive : false;
    std::string r = nonneg_number(a, a_excl, b, b_excl);
    if (!r.empty()) alts.push_back(r);
  }
  if (alts.empty()) return "";
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return rules.add("number-range", body);
}

}  // namespace lacuna::schema_detail
