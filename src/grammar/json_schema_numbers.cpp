// json_schema_numbers.cpp — grammars for integer and number ranges (minimum, maximum and
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// their exclusive forms), built digit by digit.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
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

// Non-negative integers in [a, b], both decimal digit strings without leading zeros (b empty:
// unbounded).
std::string nonneg_range_text(const std::string& as, const std::string& bs) {
  bool unbounded = bs.empty();
  if (!unbounded && (as.size() > bs.size() || (as.size() == bs.size() && as > bs))) return "";
  std::vector<std::string> alts;
  // Consecutive lengths whose numbers are all allowed are one alternative,
  // [1-9] [0-9]{a,b}, rather than one per length (fewer parallel parses, same language).
  size_t run_lo = 0, run_hi = 0;  // lengths [run_lo, run_hi] fully allowed; 0: none
  auto flush = [&](bool open_end) {
    if (run_lo == 0) return;
    size_t a = run_lo - 1, b = run_hi - 1;
    std::string digits;
    if (open_end) {
      digits = a == 0 ? "[0-9]*" : a == 1 ? "[0-9]+" : "[0-9]{" + std::to_string(a) + ",}";
    } else if (a == b) {
      digits = a == 0 ? "" : a == 1 ? "[0-9]" : "[0-9]{" + std::to_string(a) + "}";
    } else {
      digits = "[0-9]{" + std::to_string(a) + "," + std::to_string(b) + "}";
    }
    alts.push_back("[1-9]" + (digits.empty() ? "" : " " + digits));
    run_lo = run_hi = 0;
  };
  size_t max_len = unbounded ? as.size() : bs.size();
  for (size_t len = as.size(); len <= max_len; ++len) {
    std::string lo = len == as.size() ? as : "1" + std::string(len - 1, '0');
    std::string hi = (!unbounded && len == max_len) ? bs : std::string(len, '9');
    if (len == 1 && lo == "0") {
      alts.push_back("\"0\"");
      lo = "1";
      if (hi == "0") continue;
    }
    if (lo == "1" + std::string(len - 1, '0') && hi == std::string(len, '9')) {
      if (run_lo == 0) run_lo = len;
      run_hi = len;
      continue;
    }
    flush(false);
    alts.push_back(fixed_range(lo, hi));
  }
  if (unbounded) {
    if (run_lo == 0 || run_hi != max_len) {
      flush(false);
      run_lo = max_len + 1;
    }
    flush(true);
  } else {
    flush(false);
  }
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return alts.size() > 1 ? "(" + body + ")" : body;
}

// Non-negative integers in [a, b] (b < 0: unbounded).
std::string nonneg_range(uint64_t a, int64_t b) {
  return nonneg_range_text(std::to_string(a), b < 0 ? "" : std::to_string(b));
}

}  // namespace

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi,
                          gbnf::RuleSet& rules, const std::string& hi_big) {
  if (lo && hi && *lo > *hi) return "";
  if (!hi && !hi_big.empty()) {
    // An upper bound above the 64-bit range, as decimal digits.
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {
      int64_t m_hi = !lo ? -1 : (*lo == INT64_MIN ? INT64_MAX : -*lo);
      std::string r = nonneg_range(1, m_hi);
      if (!r.empty()) alts.push_back("\"-\" " + r);
    }
    std::string r = nonneg_range_text(std::to_string(lo && *lo > 0 ? *lo : 0), hi_big);
    if (!r.empty()) alts.push_back(r);
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return body.empty() ? "" : rules.add("integer-range", body);
  }
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

// A non-negative decimal: integer part and fraction digits (no trailing zeros).
struct Mag {
  uint64_t ip = 0;
  std::string fp;
  bool strict = false;  // as a bound: exclusive
};

// Parses the JSON text of a number into sign and magnitude. False when the integer part
// does not fit comfortably (then the bound is treated as absent or handled by the caller).
bool parse_decimal(const std::string& text, bool& neg, Mag& m) {
  size_t i = 0;
  neg = false;
  if (i < text.size() && text[i] == '-') neg = true, ++i;
  std::string digits;
  long point = -1;
  for (; i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      point = static_cast<long>(digits.size());
    } else {
      digits.push_back(text[i]);
    }
  }
  if (digits.empty()) return false;
  if (point < 0) point = static_cast<long>(digits.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    long e = std::strtol(text.c_str() + i + 1, nullptr, 10);
    if (e > 30 || e < -30) return false;
    point += e;
  }
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (static_cast<size_t>(point) > digits.size())
    digits.append(static_cast<size_t>(point) - digits.size(), '0');
  std::string ip = digits.substr(0, static_cast<size_t>(point));
  std::string fp = digits.substr(static_cast<size_t>(point));
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  size_t nz = ip.find_first_not_of('0');
  ip = nz == std::string::npos ? "0" : ip.substr(nz);
  if (ip.size() > 15) return false;
  m.ip = std::stoull(ip);
  m.fp = fp;
  return true;
}

// a > b (as values; strictness ignored).
int compare(const Mag& a, const Mag& b) {
  if (a.ip != b.ip) return a.ip < b.ip ? -1 : 1;
  size_t n = std::max(a.fp.size(), b.fp.size());
  for (size_t i = 0; i < n; ++i) {
    char x = i < a.fp.size() ? a.fp[i] : '0', y = i < b.fp.size() ? b.fp[i] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

// Grammars for fraction digit strings D with lo <= 0.D <= hi (either bound optional),
// as a small automaton: one rule per (position in lo, position in hi).
class FracBuilder {
 public:
  FracBuilder(gbnf::RuleSet& rules, const Mag* lo, const Mag* hi)
      : rules_(rules), lo_(lo), hi_(hi) {}

  // The part after the integer: "" (no fraction) when allowed, or "." and digits.
  std::string fraction() {
    State s{lo_ != nullptr, 0, hi_ != nullptr, 0};
    if (!s.lo && !s.hi) return "(\".\" [0-9]+)?";
    std::string plus = digits_plus(s);
    bool empty_ok = empty_allowed(s);
    if (plus.empty()) return empty_ok ? "\"\"" : "";
    return empty_ok ? "(\".\" " + plus + ")?" : "\".\" " + plus;
  }

 private:
  struct State {
    bool lo;
    size_t lo_pos;
    bool hi;
    size_t hi_pos;
    bool operator<(const State& o) const {
      return std::tie(lo, lo_pos, hi, hi_pos) < std::tie(o.lo, o.lo_pos, o.hi, o.hi_pos);
    }
  };

  bool empty_allowed(const State& s) const {
    bool lo_ok = !s.lo || (s.lo_pos >= lo_->fp.size() && !lo_->strict);
    bool hi_ok = !s.hi || s.hi_pos < hi_->fp.size() || !hi_->strict;
    return lo_ok && hi_ok;
  }

  // Next state after digit d, or false when d is refused.
  bool step(const State& s, char d, State& next) const {
    next = s;
    if (s.lo) {
      if (s.lo_pos >= lo_->fp.size()) {
        if (!lo_->strict || d > '0') next.lo = false;  // at the end: >= 0 holds / > 0 now holds
      } else {
        char l = lo_->fp[s.lo_pos];
        if (d < l) return false;
        if (d > l) {
          next.lo = false;
        } else {
          next.lo_pos = s.lo_pos + 1;
        }
      }
    }
    if (s.hi) {
      if (s.hi_pos >= hi_->fp.size()) {
        if (d > '0') return false;  // the rest must stay zero
      } else {
        char h = hi_->fp[s.hi_pos];
        if (d > h) return false;
        if (d < h) {
          next.hi = false;
        } else {
          next.hi_pos = s.hi_pos + 1;
        }
      }
    }
    return true;
  }

  // Non-empty digit strings from state s.
  std::string digits_plus(const State& s) {
    std::map<State, std::string> by_next;
    for (char d = '0'; d <= '9'; ++d) {
      State n;
      if (step(s, d, n)) by_next[n].push_back(d);
    }
    std::vector<std::string> alts;
    for (auto& [n, ds] : by_next) {
      std::string cls;
      if (ds.size() == 1) {
        cls = "\"" + ds + "\"";
      } else if (ds.back() - ds.front() + 1 == static_cast<int>(ds.size())) {
        cls = std::string("[") + ds.front() + "-" + ds.back() + "]";
      } else {
        cls = "[" + ds + "]";
      }
      alts.push_back(cls + " " + digits_star(n));
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return alts.size() > 1 ? "(" + body + ")" : body;
  }

  // Possibly empty digit strings from state s, as a rule reference (or [0-9]*).
  std::string digits_star(const State& s) {
    if (!s.lo && !s.hi) return "[0-9]*";
    auto it = memo_.find(s);
    if (it != memo_.end()) return it->second;
    std::string name = rules_.reserve("frac");
    memo_.emplace(s, name);
    std::string plus = digits_plus(s);
    std::string body = empty_allowed(s) ? "\"\"" : "";
    if (!plus.empty()) body += (body.empty() ? "" : " | ") + plus;
    if (body.empty()) body = "[^\\x00-\\U0010FFFF]";
    rules_.define(name, body);
    return name;
  }

  gbnf::RuleSet& rules_;
  const Mag* lo_;
  const Mag* hi_;
  std::map<State, std::string> memo_;
};

// Non-negative numbers m (no sign, no exponent) with lo <= m <= hi (strictness in the Mags;
// absent bound: none on that side).
std::string magnitude(const Mag* lo, const Mag* hi, gbnf::RuleSet& rules) {
  Mag zero;
  const Mag* a = lo ? lo : &zero;
  if (hi) {
    int c = compare(*a, *hi);
    if (c > 0 || (c == 0 && (a->strict || hi->strict))) return "";
  }
  std::vector<std::string> alts;
  auto lit = [](uint64_t v) { return "\"" + std::to_string(v) + "\""; };
  auto add = [&](const std::string& head, const std::string& frac) {
    if (!frac.empty()) alts.push_back(frac == "\"\"" ? head : head + " " + frac);
  };
  if (hi && a->ip == hi->ip) {
    FracBuilder fb(rules, lo, hi);
    add(lit(a->ip), fb.fraction());
  } else {
    FracBuilder low(rules, lo, nullptr);
    add(lit(a->ip), low.fraction());
    std::string mid = nonneg_range(a->ip + 1, hi ? static_cast<int64_t>(hi->ip) - 1 : -1);
    if (!mid.empty()) alts.push_back(mid + " (\".\" [0-9]+)?");
    if (hi) {
      FracBuilder up(rules, nullptr, hi);
      add(lit(hi->ip), up.fraction());
    }
  }
  if (alts.empty()) return "";
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return "(" + body + ")";
}

}  // namespace

std::string number_range(std::optional<Bound> lo, std::optional<Bound> hi, gbnf::RuleSet& rules,
                         bool& widened) {
  widened = false;
  bool lo_neg = false, hi_neg = false;
  Mag lo_m, hi_m;
  bool has_lo = lo && parse_decimal(lo->text, lo_neg, lo_m);
  bool has_hi = hi && parse_decimal(hi->text, hi_neg, hi_m);
  if (lo && !has_lo) {
    if (lo->value > 0) widened = true;  // a huge positive minimum is dropped
  }
  if (hi && !has_hi) {
    if (hi->value < 0) widened = true;
  }
  if (!has_lo && !has_hi) {
    return rules.add("number",
                     "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
  }
  if (has_lo) lo_m.strict = lo->exclusive;
  if (has_hi) hi_m.strict = hi->exclusive;
  bool lo_zero = has_lo && lo_m.ip == 0 && lo_m.fp.empty();
  bool hi_zero = has_hi && hi_m.ip == 0 && hi_m.fp.empty();
  if (lo_zero) lo_neg = false;
  if (hi_zero) hi_neg = false;
  std::vector<std::string> alts;
  // Negative side: x = -m with m > 0.
  if (!(has_lo && !lo_neg)) {
    Mag m_lo;  // from hi: m >= -hi, or m > 0
    m_lo.strict = true;
    if (has_hi && hi_neg) m_lo = hi_m;
    std::string r = magnitude(&m_lo, has_lo ? &lo_m : nullptr, rules);
    if (!r.empty()) alts.push_back("\"-\" " + r);
  }
  // Non-negative side.
  if (!(has_hi && hi_neg)) {
    std::string r = magnitude(has_lo && !lo_neg ? &lo_m : nullptr, has_hi ? &hi_m : nullptr, rules);
    if (!r.empty()) alts.push_back(r);
  }
  // With zero as the only bound, the sign decides: numbers with an exponent are exact too
  // (minimum 0 accepts 1e-06).
  const std::string exp = "[eE] [-+]? [0-9]+";
  const std::string any_mag = "(\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)?";
  const std::string nonzero_mag = "([1-9] [0-9]* (\".\" [0-9]+)? | \"0.\" \"0\"* [1-9] [0-9]*)";
  const std::string zero_mag = "\"0\" (\".\" \"0\"+)?";
  if (lo_zero && !has_hi) {
    alts.push_back((lo->exclusive ? nonzero_mag : any_mag) + " " + exp);
  } else if (hi_zero && !has_lo) {
    alts.push_back("\"-\" " + (hi->exclusive ? nonzero_mag : any_mag) + " " + exp);
    if (!hi->exclusive) alts.push_back(zero_mag + " " + exp);
  }
  if (alts.empty()) return "";
  std::string body;
  for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
  return rules.add("number-range", body);
}

}  // namespace lacuna::schema_detail
