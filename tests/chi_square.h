// chi_square.h — a two-sample chi-square test of two category counts, for the tests that
// check a sampling path keeps the distribution of another (verified drafts, backend sampling).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lacuna::testing {

// Two-sample chi-square statistic over categories; categories with fewer than `min_count`
// pooled observations are merged. Returns {statistic, degrees of freedom}.
inline std::pair<double, int> chi_square(const std::map<std::string, int>& a,
                                         const std::map<std::string, int>& b, int min_count) {
  std::map<std::string, std::pair<int, int>> cells;
  for (const auto& [k, v] : a) cells[k].first += v;
  for (const auto& [k, v] : b) cells[k].second += v;
  std::vector<std::pair<int, int>> merged;
  std::pair<int, int> rare{0, 0};
  for (const auto& [k, v] : cells) {
    if (v.first + v.second < min_count) {
      rare.first += v.first;
      rare.second += v.second;
    } else {
      merged.push_back(v);
    }
  }
  if (rare.first + rare.second > 0) merged.push_back(rare);
  double na = 0;
  double nb = 0;
  for (const auto& c : merged) {
    na += c.first;
    nb += c.second;
  }
  double stat = 0;
  for (const auto& c : merged) {
    const double tot = c.first + c.second;
    const double ea = tot * na / (na + nb);
    const double eb = tot * nb / (na + nb);
    stat += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  return {stat, static_cast<int>(merged.size()) - 1};
}

// Upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty).
inline double chi_square_critical_999(int df) {
  const double z = 3.0902;
  const double d = df;
  const double t = 1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d));
  return d * t * t * t;
}

}  // namespace lacuna::testing
