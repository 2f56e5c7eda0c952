// grammar.cpp — the grammar IR: construction, lookup and structural validation (left recursion).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lacuna/grammar.h"

namespace lacuna {

GrammarError::GrammarError(size_t line_, size_t column_, const std::string& problem_)
    : std::runtime_error("line " + std::to_string(line_) + ", column " + std::to_string(column_) +
                         ": " + problem_),
      line(line_),
      column(column_),
      problem(problem_) {}

Grammar::Grammar(std::vector<GrammarRule> rules, uint32_t root)
    : rules_(std::move(rules)), root_(root) {}

int64_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

namespace {

// The user-facing name for a rule: generated rules are reported by the rule they sit in.
std::string display_name(const std::vector<GrammarRule>& rules, uint32_t r) {
  const GrammarRule& rule = rules[r];
  if (rule.generated && rule.owner < rules.size() && rule.owner != r) {
    return "'" + rules[rule.owner].name + "' (in its generated rule '" + rule.name + "')";
  }
  return "'" + rule.name + "'";
}

}  // namespace

void CharRanges::reserve(size_t n) {
  if (n <= cap_) return;
  auto more = std::make_unique<CharRange[]>(n);
  std::copy(begin(), end(), more.get());
  heap_ = std::move(more);
  cap_ = static_cast<uint32_t>(n);
}

void CharRanges::assign(const CharRange* first, const CharRange* last) {
  n_ = 0;
  reserve(static_cast<size_t>(last - first));
  std::copy(first, last, data());
  n_ = static_cast<uint32_t>(last - first);
}

bool CharRanges::operator==(const CharRanges& other) const {
  return std::equal(begin(), end(), other.begin(), other.end());
}

void Grammar::validate() const {
  if (validated_) return;
  const size_t n = rules_.size();
  if (n == 0) throw GrammarError(1, 1, "empty grammar");
  if (root_ >= n) throw GrammarError(1, 1, "root rule index out of range");
  for (size_t r = 0; r < n; ++r) {
    const GrammarRule& rule = rules_[r];
    if (rule.alternatives.empty()) {
      throw GrammarError(rule.line, rule.column, "rule '" + rule.name + "' has no alternatives");
    }
    for (const auto& alt : rule.alternatives) {
      for (const auto& el : alt) {
        if (el.kind == GrammarElement::Kind::kRuleRef && el.rule >= n) {
          throw GrammarError(rule.line, rule.column,
                             "rule '" + rule.name + "' references an undefined rule");
        }
      }
    }
  }
  // Nullable rules (can match the empty string), by fixpoint.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : rules_[r].alternatives) {
        bool all = true;
        for (const auto& el : alt) {
          if (el.kind != GrammarElement::Kind::kRuleRef || !nullable[el.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left-call graph: r -> s when s can be called before anything is consumed in r.
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : rules_[r].alternatives) {
      for (const auto& el : alt) {
        if (el.kind != GrammarElement::Kind::kRuleRef) break;
        left[r].push_back(el.rule);
        if (!nullable[el.rule]) break;
      }
    }
  }
  // Cycle detection, iterative DFS (0 = new, 1 = on the path, 2 = done).
  std::vector<char> color(n, 0);
  std::vector<std::pair<uint32_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    path.push_back({static_cast<uint32_t>(start), 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i < left[r].size()) {
        uint32_t s = left[r][i++];
        if (color[s] == 1) {
          // Report the first user-written rule on the cycle.
          std::string cycle;
          uint32_t report = s;
          bool found = false;
          for (auto& [pr, pi] : path) {
            (void)pi;
            if (!found && pr != s) continue;
            found = true;
            if (!cycle.empty()) cycle += " -> ";
            cycle += rules_[pr].generated ? rules_[rules_[pr].owner].name : rules_[pr].name;
            if (rules_[report].generated && !rules_[pr].generated) report = pr;
          }
          const GrammarRule& rep = rules_[report];
          throw GrammarError(rep.line, rep.column,
                             "left recursion in rule " + display_name(rules_, report) + " (" +
                                 cycle +
                                 " -> ...): a rule may not reach itself before consuming input");
        }
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back({s, 0});
        }
      } else {
        color[r] = 2;
        path.pop_back();
      }
    }
  }
}

}  // namespace lacuna
