// compiler.cpp — CompiledGrammar::compile: flattens the grammar, enumerates every grammar
// context (the part of a parse stack known from its top) and classifies every token in each
// context as accepted / rejected / uncertain by one walk of the vocabulary trie, at compile
// time or on the context's first use.
#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "lacuna/matcher.h"
#include "match/compiled_data.h"

namespace lacuna {

namespace detail {

namespace {
// Published entries are never changed or freed; an id is handed out only after its entry.
struct ClassHoleTable {
  std::mutex mu;
  std::vector<std::unique_ptr<const std::vector<CharRange>>> owned;  // guarded by mu
  std::array<std::atomic<const std::vector<CharRange>*>, kMaxClassHoleSets> sets{};
};
ClassHoleTable& class_hole_table() {
  static ClassHoleTable table;
  return table;
}
const std::vector<CharRange> kNoHoles;
}  // namespace

uint16_t intern_class_holes(const std::vector<CharRange>& ranges) {
  if (ranges.empty() || ranges.size() > kMaxClassHoleRanges) return 0;
  ClassHoleTable& t = class_hole_table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (size_t i = 0; i < t.owned.size(); ++i) {
    if (*t.owned[i] == ranges) return static_cast<uint16_t>(i + 1);
  }
  if (t.owned.size() + 1 >= kMaxClassHoleSets) return 0;
  t.owned.push_back(std::make_unique<const std::vector<CharRange>>(ranges));
  t.sets[t.owned.size()].store(t.owned.back().get(), std::memory_order_release);
  return static_cast<uint16_t>(t.owned.size());
}

const std::vector<CharRange>& class_holes(uint16_t id) {
  if (id == 0) return kNoHoles;
  return *class_hole_table().sets[id].load(std::memory_order_acquire);
}

bool in_class_holes(uint16_t id, uint32_t cp) {
  const std::vector<CharRange>& h = class_holes(id);
  auto it = std::upper_bound(h.begin(), h.end(), cp,
                             [](uint32_t v, const CharRange& r) { return v < r.lo; });
  return it != h.begin() && cp <= (it - 1)->hi;
}

}  // namespace detail

using detail::CharSet;
using detail::CompiledData;
using detail::Elem;
using detail::GrammarTables;
using detail::StackPool;

namespace {

// Set bits of a word. Without a target that has POPCNT, __builtin_popcountll is a call into
// libgcc, which counts a byte at a time through a table: 2.4% of compiling json.gbnf with
// every mask eager went there. This is the same count, inline.
inline int bit_count(uint64_t x) {
#if defined(__POPCNT__)
  return __builtin_popcountll(x);
#else
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
#endif
}

// The ASCII code points a character set takes, as two words of bits (its negation applied).
inline std::array<uint64_t, 2> ascii_taken(const CharSet& cs) {
  if (cs.any) return {~uint64_t{0}, ~uint64_t{0}};
  return {cs.negated ? ~cs.ascii[0] : cs.ascii[0], cs.negated ? ~cs.ascii[1] : cs.ascii[1]};
}

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Code-point sets as sorted, merged ranges (for FIRST/FOLLOW).
using RangeSet = std::vector<CharRange>;

RangeSet normalize(RangeSet r) {
  std::sort(r.begin(), r.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  RangeSet out;
  for (const auto& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1ull) {
      out.back().hi = std::max(out.back().hi, x.hi);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// The first code point >= 128 outside normalized ranges (0x110000 where they hold them all).
uint32_t first_high_outside(const RangeSet& ranges) {
  uint32_t cp = 128;
  for (const CharRange& r : ranges) {  // in order, apart
    if (r.lo <= cp && cp <= r.hi) cp = r.hi >= 0x10FFFF ? 0x110000 : r.hi + 1;
  }
  return cp;
}

RangeSet charset_ranges(const CharSet& cs) {
  if (cs.any) return {{0, 0xFFFFFFFFu}};
  if (!cs.negated) return cs.ranges;
  RangeSet out;
  uint64_t next = 0;
  for (const auto& r : cs.ranges) {
    if (r.lo > next) out.push_back({static_cast<uint32_t>(next), r.lo - 1});
    next = uint64_t(r.hi) + 1;
  }
  if (next <= 0xFFFFFFFFull) out.push_back({static_cast<uint32_t>(next), 0xFFFFFFFFu});
  return out;
}

void flatten(const Grammar& grammar, const TokenIndex* tokens, const CompileOptions& opt,
             GrammarTables& g) {
  const auto& rules = grammar.rules();
  // Character sets as written, by a hash of their ranges: the elements each set was made
  // from (a std::map keyed by the range lists was 40% of compiling a large schema grammar,
  // most of its elements single characters of property names).
  std::unordered_multimap<uint64_t, std::pair<const GrammarElement*, uint32_t>> cs_ids;
  auto cs_hash = [](const GrammarElement& el) {
    uint64_t h = 1469598103934665603ull ^ (el.any ? 1u : 0u) ^ (el.negated ? 2u : 0u);
    for (const auto& cr : el.ranges) {
      h = (h ^ cr.lo) * 1099511628211ull;
      h = (h ^ cr.hi) * 1099511628211ull;
    }
    return h;
  };
  g.rule_alt_begin.push_back(0);
  for (uint32_t r = 0; r < rules.size(); ++r) {
    const GrammarRule& rule = rules[r];
    g.rule_owner.push_back(rule.owner < rules.size() ? rule.owner : r);
    g.rule_generated.push_back(rule.generated ? 1 : 0);
    for (const auto& alt : rule.alternatives) {
      g.alt_starts.push_back(static_cast<uint32_t>(g.elems.size()));
      for (const auto& el : alt) {
        Elem e{detail::kEnd, 0};
        switch (el.kind) {
          case GrammarElement::Kind::kChars: {
            const uint64_t h = cs_hash(el);
            uint32_t id = UINT32_MAX;
            for (auto [it, end] = cs_ids.equal_range(h); it != end && id == UINT32_MAX; ++it) {
              const GrammarElement& seen = *it->second.first;
              if (seen.any == el.any && seen.negated == el.negated && seen.ranges == el.ranges) {
                id = it->second.second;
              }
            }
            if (id == UINT32_MAX) {
              id = static_cast<uint32_t>(g.charsets.size());
              cs_ids.emplace(h, std::make_pair(&el, id));
              g.charsets.push_back(detail::make_charset(
                  el.any, el.negated, std::vector<CharRange>(el.ranges.begin(), el.ranges.end())));
            }
            e = {detail::kChars, id};
            break;
          }
          case GrammarElement::Kind::kRuleRef:
            if (el.rule >= rules.size()) {
              throw GrammarError(rule.line, rule.column,
                                 "rule '" + rule.name + "' references an undefined rule");
            }
            e = {detail::kRef, el.rule};
            break;
          case GrammarElement::Kind::kToken:
          case GrammarElement::Kind::kTokenNot: {
            int64_t id = el.token;
            if (id < 0 && tokens != nullptr) {
              auto found = tokens->find_piece(el.token_text);
              if (!found) {
                throw GrammarError(rule.line, rule.column,
                                   "unknown token " + el.token_text + " in rule '" + rule.name +
                                       "': no token of the vocabulary has this text");
              }
              id = *found;
            }
            if (tokens != nullptr && id >= static_cast<int64_t>(tokens->n_vocab())) {
              throw GrammarError(rule.line, rule.column,
                                 "token id " + std::to_string(id) + " in rule '" + rule.name +
                                     "' is outside the vocabulary (" +
                                     std::to_string(tokens->n_vocab()) + " tokens)");
            }
            e = {el.kind == GrammarElement::Kind::kToken ? detail::kTok : detail::kTokNot,
                 static_cast<uint32_t>(id < 0 ? 0xFFFFFFFFu : static_cast<uint32_t>(id))};
            break;
          }
        }
        g.elems.push_back(e);
        g.elem_rule.push_back(r);
      }
      g.elems.push_back({detail::kEnd, 0});
      g.elem_rule.push_back(r);
      if (g.elems.size() > opt.max_positions) {
        throw GrammarLimitError("grammar too large: more than " +
                                std::to_string(opt.max_positions) +
                                " positions (CompileOptions::max_positions)");
      }
    }
    g.rule_alt_begin.push_back(static_cast<uint32_t>(g.alt_starts.size()));
  }
  g.root = grammar.root();
}

// Strongly connected components of a call graph (callee, pushes) by iterative Tarjan: the
// component of each rule in comp; a component is numbered after every component it calls.
uint32_t strong_components(const std::vector<std::vector<std::pair<uint32_t, bool>>>& calls,
                           std::vector<uint32_t>& comp) {
  const uint32_t nr = static_cast<uint32_t>(calls.size());
  std::vector<uint32_t> index(nr, UINT32_MAX), low(nr, 0);
  comp.assign(nr, UINT32_MAX);
  std::vector<uint32_t> stack;
  std::vector<uint8_t> on_stack(nr, 0);
  std::vector<std::pair<uint32_t, size_t>> work;
  uint32_t counter = 0, n_comp = 0;
  for (uint32_t s = 0; s < nr; ++s) {
    if (index[s] != UINT32_MAX) continue;
    work.push_back({s, 0});
    while (!work.empty()) {
      auto& [v, i] = work.back();
      if (i == 0) {
        index[v] = low[v] = counter++;
        stack.push_back(v);
        on_stack[v] = 1;
      }
      if (i < calls[v].size()) {
        const uint32_t w = calls[v][i++].first;
        if (index[w] == UINT32_MAX) {
          work.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          comp[w] = n_comp;
        } while (w != v);
        ++n_comp;
      }
      const uint32_t done = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
    }
  }
  return n_comp;
}

// The components of a call graph (strong_components) with their rules grouped:
// members[begin[k], begin[k + 1]) are the rules of component k.
struct Components {
  std::vector<uint32_t> comp, begin, members;
  uint32_t size() const { return static_cast<uint32_t>(begin.size() - 1); }
};
// The rules of each component grouped, from the component of each rule.
Components group_components(std::vector<uint32_t> comp, uint32_t n_comp) {
  Components c;
  const uint32_t nr = static_cast<uint32_t>(comp.size());
  c.comp = std::move(comp);
  c.begin.assign(n_comp + 1, 0);
  c.members.resize(nr);
  for (uint32_t r = 0; r < nr; ++r) ++c.begin[c.comp[r] + 1];
  for (uint32_t k = 0; k < n_comp; ++k) c.begin[k + 1] += c.begin[k];
  std::vector<uint32_t> fill(c.begin.begin(), c.begin.end() - 1);
  for (uint32_t r = 0; r < nr; ++r) c.members[fill[c.comp[r]]++] = r;
  return c;
}
Components group_components(const std::vector<std::vector<std::pair<uint32_t, bool>>>& calls) {
  std::vector<uint32_t> comp;
  const uint32_t n_comp = strong_components(calls, comp);
  return group_components(std::move(comp), n_comp);
}

// Boundary rules: every rule in a strongly connected component of the call graph that
// has a call inside the component which pushes a return address (so stacks can grow
// without bound through it). Per rule (kRules), every user-written rule too; with
// kRulesButSmall, except the rules that reach at most kSmallRule positions in all (a
// character class with its escapes, an enum, an integer): as a context of its own such a
// rule is left by nearly every token, and each stack there then needs a whole-stack walk.
enum Boundaries : int { kInline = 0, kRulesButSmall = 1, kRules = 2 };
constexpr uint32_t kSmallRule = 32;
void mark_boundaries(GrammarTables& g, int mode) {
  const uint32_t nr = static_cast<uint32_t>(g.rule_alt_begin.size() - 1);
  std::vector<std::vector<std::pair<uint32_t, bool>>> calls(nr);  // (callee, pushes)
  for (uint32_t p = 0; p + 1 < g.elems.size(); ++p) {
    if (g.elems[p].kind != detail::kRef) continue;
    calls[g.elem_rule[p]].push_back({g.elems[p].arg, g.elems[p + 1].kind != detail::kEnd});
  }
  std::vector<uint32_t> comp;
  const uint32_t n_comp = strong_components(calls, comp);
  std::vector<uint8_t> comp_grows(n_comp, 0);
  g.comp_cyclic.assign(n_comp, 0);
  for (uint32_t r = 0; r < nr; ++r) {
    for (auto [callee, pushes] : calls[r]) {
      if (pushes && comp[callee] == comp[r]) comp_grows[comp[r]] = 1;
      if (comp[callee] == comp[r]) g.comp_cyclic[comp[r]] = 1;
    }
  }
  // Positions a rule reaches (its own and its callees', shared callees counted again),
  // capped; a rule on a cycle is never small. Tarjan numbers a component after every
  // component it calls, so callees come first in component order.
  std::vector<uint32_t> reach(nr, UINT32_MAX);
  if (mode == kRulesButSmall) {
    std::vector<uint32_t> own(nr, 0), order(nr);
    for (uint32_t p = 0; p < g.elems.size(); ++p) {
      if (g.elems[p].kind != detail::kEnd) ++own[g.elem_rule[p]];
    }
    for (uint32_t r = 0; r < nr; ++r) order[r] = r;
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return comp[a] < comp[b]; });
    for (uint32_t r : order) {
      if (g.comp_cyclic[comp[r]]) continue;
      uint64_t t = own[r];
      for (const auto& call : calls[r]) t = std::min<uint64_t>(UINT32_MAX, t + reach[call.first]);
      reach[r] = static_cast<uint32_t>(t);
    }
  }
  g.rule_boundary.assign(nr, 0);
  for (uint32_t r = 0; r < nr; ++r) {
    const bool small = reach[r] <= kSmallRule;
    const bool own_context =
        mode != kInline && !g.rule_generated[r] && !(mode == kRulesButSmall && small);
    g.rule_boundary[r] = comp_grows[comp[r]] || own_context;
  }
  g.rule_comp = std::move(comp);
}

// The number of nodes the context closure in compile_impl makes for the boundaries marked
// in g (the empty stack included), counted without making them: more than `limit` once the
// count passes it, kCountUnknown when the sets below would grow past a budget (the closure
// then finds out by itself).
//
// A position of a boundary rule has one node, (position, empty stack). A position of any
// other rule has one node per *base* of its rule: a parent its frames start on. The bases of
// a rule come in disjoint blocks: the empty stack (the root's frames); per call that is not a
// tail call, the nodes after the call (one per base of the caller: one when the caller is a
// boundary); per tail call from a boundary rule, its end marker. A tail call from another rule
// passes on the caller's blocks. Rules that are not boundaries call each other without
// pushing only along tail calls, so their components are taken callers first and each one's
// blocks are the union of its own and its tail callers'. Deciding the context mode this way
// instead of trying the closure in each mode saved the failed tries: 1,327 of 8,485 dev-set
// schemas fell back from inlined contexts, and the tries were 56% of the set's compile time.
constexpr uint64_t kCountUnknown = UINT64_MAX;
uint64_t count_contexts(const GrammarTables& g, const std::vector<uint8_t>& reachable,
                        uint64_t limit) {
  const uint32_t nr = static_cast<uint32_t>(g.rule_alt_begin.size() - 1);
  const auto& bnd = g.rule_boundary;
  std::vector<uint64_t> npos(nr, 0);
  std::vector<std::vector<uint32_t>> sites(nr);  // calls of each rule that is not a boundary
  std::vector<std::vector<std::pair<uint32_t, bool>>> calls(nr);  // among such rules
  for (uint32_t p = 0; p < g.elems.size(); ++p) {
    const Elem& e = g.elems[p];
    if (e.kind != detail::kEnd) ++npos[g.elem_rule[p]];
    if (e.kind != detail::kRef || bnd[e.arg]) continue;
    sites[e.arg].push_back(p);
    if (!bnd[g.elem_rule[p]]) calls[g.elem_rule[p]].push_back({e.arg, false});
  }
  uint64_t total = 1;
  auto add = [&](uint64_t n, uint64_t m) {  // total += n * m, saturating past the limit
    if (n != 0 && m > (limit + 1 - std::min(total, limit + 1)) / n) {
      total = limit + 1;
    } else {
      total += n * m;
    }
  };
  for (uint32_t r = 0; r < nr; ++r) {
    if (bnd[r] && reachable[r]) add(npos[r], 1);
  }
  const Components components = group_components(calls);
  const std::vector<uint32_t>& comp = components.comp;
  const uint32_t n_comp = components.size();
  const std::vector<uint32_t>& comp_begin = components.begin;
  const std::vector<uint32_t>& members = components.members;
  // Blocks by id: 0 the empty stack, p + 1 the call at p.
  std::vector<uint64_t> bases(nr, 0);
  auto block_size = [&](uint32_t id) -> uint64_t {
    if (id == 0) return 1;
    const uint32_t r = g.elem_rule[id - 1];
    return bnd[r] ? 1 : bases[r];
  };
  std::vector<std::vector<uint32_t>> blocks(n_comp);
  size_t budget = 4 * g.elems.size() + (size_t{1} << 16);
  for (uint32_t k = n_comp; k-- > 0;) {  // callers first
    std::vector<uint32_t>& set = blocks[k];
    for (uint32_t i = comp_begin[k]; i < comp_begin[k + 1]; ++i) {
      const uint32_t c = members[i];
      if (bnd[c]) continue;
      if (c == g.root) set.push_back(0);
      for (uint32_t p : sites[c]) {
        const uint32_t r = g.elem_rule[p];
        const bool tail = g.elems[p + 1].kind == detail::kEnd;
        if (bnd[r]) {
          if (reachable[r]) set.push_back(p + 1);
          continue;
        }
        if (comp[r] == k) {
          if (!tail) return kCountUnknown;  // a pushing cycle: not the shape assumed above
          continue;
        }
        if (bases[r] == 0) continue;  // the caller has no nodes
        if (!tail) {
          set.push_back(p + 1);
        } else {
          const auto& from = blocks[comp[r]];
          if (from.size() > budget) return kCountUnknown;
          budget -= from.size();
          set.insert(set.end(), from.begin(), from.end());
        }
      }
    }
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    uint64_t b = 0;
    for (uint32_t id : set) b = std::min(b + block_size(id), limit + 1);
    for (uint32_t i = comp_begin[k]; i < comp_begin[k + 1]; ++i) {
      const uint32_t c = members[i];
      if (bnd[c]) continue;
      bases[c] = b;
      add(npos[c], b);
    }
    if (total > limit) return limit + 1;
  }
  // End markers: a tail call from a reachable boundary rule into a rule that is not one.
  for (uint32_t c = 0; c < nr; ++c) {
    for (uint32_t p : sites[c]) {
      const uint32_t r = g.elem_rule[p];
      if (bnd[r] && reachable[r] && g.elems[p + 1].kind == detail::kEnd) add(1, 1);
    }
  }
  return total;
}

// The hole set of a class (detail::class_holes); a subtree's code points have none.
template <class A>
uint16_t holes_of(const A& a) {
  if constexpr (requires { a.holes; }) {
    return a.holes;
  } else {
    return 0;
  }
}
// Whether hole set a lies within hole set b.
// (Hole sets are sorted and merged: one pass over both, as a set may hold hundreds of ranges,
// a Unicode letter class written out.)
bool holes_within(uint16_t a, uint16_t b) {
  if (a == 0 || a == b) return true;
  if (b == 0) return false;
  const std::vector<CharRange>& qs = detail::class_holes(b);
  size_t k = 0;
  for (const CharRange& r : detail::class_holes(a)) {
    while (k < qs.size() && qs[k].hi < r.lo) ++k;
    if (k == qs.size() || qs[k].lo > r.lo || r.hi > qs[k].hi) return false;
  }
  return true;
}

// Whether hole sets a and b share no code point.
bool holes_apart(uint16_t a, uint16_t b) {
  if (a == 0 || b == 0) return true;
  const std::vector<CharRange>& qs = detail::class_holes(b);
  size_t k = 0;
  for (const CharRange& r : detail::class_holes(a)) {
    while (k < qs.size() && qs[k].hi < r.lo) ++k;
    if (k < qs.size() && qs[k].lo <= r.hi) return false;
  }
  return true;
}

// Whether the code points from 128 on of `a` lie within those of `b`. Each is a flag for
// every code point from 128 on, less its holes, or without the flag, the code points of its
// holes alone (a run of CJK ranges; see WalkStates::Run), or none (no holes). A subtree's
// descendants have no holes: the flag says some code point from 128 on lies below, within b
// only where b takes them all.
template <class A, class B>
bool high_within(const A& a, const B& b) {
  const uint16_t ha = holes_of(a), hb = holes_of(b);
  if (a.non_ascii) return b.non_ascii && holes_within(hb, ha);
  if (ha == 0) return true;
  return b.non_ascii ? holes_apart(ha, hb) : holes_within(ha, hb);
}
// Whether the code points of `a` lie within those of `b`, each an ASCII bitmap and a high
// part as above (a subtree's descendants, a run's class, a class key).
template <class A, class B>
bool chars_within(const A& a, const B& b) {
  return (a.ascii[0] & ~b.ascii[0]) == 0 && (a.ascii[1] & ~b.ascii[1]) == 0 && high_within(a, b);
}
// Whether a class takes some code point from 128 on.
template <class A>
bool takes_high_cps(const A& a) {
  return a.non_ascii || holes_of(a) != 0;
}

// Interned sets of chains and memoized transitions, shared by all context walks.
class WalkStates {
 public:
  WalkStates(StackPool& pool, const GrammarTables& g, size_t max_states, size_t max_members)
      : pool_(pool), g_(g), max_states_(max_states), max_members_(max_members) {
    sets_.add(nullptr, 0, 0);  // set 0: empty
  }

  size_t n_sets() const { return sets_.size(); }
  // Forgets every set (ids start again; only the per-character-set tables stay), so that a
  // grammar whose walks keep making sets is bounded per walk rather than over its life.
  void reset() {
    sets_ = detail::IdSeqs();
    sets_.add(nullptr, 0, 0);
    ascii_row_.clear();
    ascii_rows_used_ = 0;  // the chunks stay, refilled as rows are handed out again
    other_.clear();
    uniform_.clear();
    high_like_.clear();
    high_holes_.clear();
    // firsts_ keeps its character sets, overwritten as sets are interned again (freeing
    // tens of thousands of range lists here was most of a reset's milliseconds).
    first_ptr_.clear();
    for (auto& runs : runs_by_mode_) runs.clear();
    for (auto& state : run_state_by_mode_) state.clear();
  }

  // The number of stacks in a set.
  uint32_t size(uint32_t set) const {
    uint32_t n;
    sets_.at(set, &n);
    return n;
  }
  uint32_t intern(std::vector<uint32_t>& members) {
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    if (members.empty()) return 0;
    const uint64_t h = detail::hash_ids(members.data(), members.size());
    if (const uint32_t known = sets_.find(members.data(), members.size(), h);
        known != detail::IdSeqs::kNone) {
      return known;
    }
    const uint32_t id = static_cast<uint32_t>(sets_.size());
    // Ambiguous grammars (a repetition of something that may itself repeat) can make the
    // sets grow exponentially with the length of a token: bound their size too.
    if (members.size() > max_members_ || sets_.total() + members.size() > 64 * max_members_) {
      throw GrammarLimitError(
          "grammar too ambiguous: more than " + std::to_string(max_members_) +
          " parse stacks in one state while precomputing masks (CompileOptions::max_walk_states, "
          "max_mask_set_stacks)");
    }
    if (id > max_states_) {
      throw GrammarLimitError(
          "grammar too ambiguous: more than " + std::to_string(max_states_) +
          " parse-state sets while precomputing masks (CompileOptions::max_walk_states)");
    }
    sets_.add(members.data(), members.size(), h);
    return id;
  }

  // (next set << 1) | exited
  uint32_t step(uint32_t set, uint32_t cp) {
    if (set == 0) return 0;
    if (cp < 128) {
      uint32_t* row = ascii_row(set);
      if (row[cp] != kUnset) return row[cp];
      const uint32_t v = compute(set, cp);
      row[cp] = v;  // (rows never move: compute's new sets add rows in other places)
      return v;
    }
    // Most sets treat every code point >= 128 alike: one memo entry serves them all.
    if (cp != 0x100 && uniform(set)) return step(set, 0x100);
    // The others alike outside their members' ranges from 128 on (high_outside_holes): a
    // code point there steps like the first of them. Each code point was stepped apart
    // (a pattern's `\S`, which leaves out a few spaces above ASCII, met at the root's 1,400
    // children above ASCII: a step computed for each, a third of a first mask).
    if (cp != 0x100) {
      const uint32_t like = high_like(set);
      if (like != 0 && like != cp && !detail::in_class_holes(high_holes_[set], cp)) {
        return step(set, like);
      }
    }
    const uint64_t key = (uint64_t(set) << 32) | cp;
    auto it = other_.find(key);
    if (it != other_.end()) return it->second;
    uint32_t v = compute(set, cp);
    other_.emplace(key, v);
    return v;
  }

  // step(), where a step computed for an ASCII code point fills the memo for every ASCII
  // code point that the same members take (they step alike): for a walk that meets a set
  // at many of its code points (lazy_region).
  uint32_t step_alike(uint32_t set, uint32_t cp) {
    if (set == 0 || cp >= 128) return step(set, cp);
    uint32_t* row = ascii_row(set);
    if (row[cp] != kUnset) return row[cp];
    const uint32_t v = compute(set, cp);
    row = ascii_row(set);  // (compute may add rows: they lie in chunks that never move)
    uint64_t alike[2] = {~uint64_t{0}, ~uint64_t{0}};
    for_each_member_chars(set, [&](uint32_t id) {
      const std::array<uint64_t, 2> in = ascii_taken(g_.charsets[id]);
      const bool takes = ((in[cp >> 6] >> (cp & 63)) & 1u) != 0;
      alike[0] &= takes ? in[0] : ~in[0];
      alike[1] &= takes ? in[1] : ~in[1];
    });
    for (uint32_t w = 0; w < 2; ++w) {
      for (uint64_t b = alike[w]; b != 0; b &= b - 1) {
        uint32_t& cell = row[64 * w + static_cast<uint32_t>(__builtin_ctzll(b))];
        if (cell == kUnset) cell = v;
      }
    }
    row[cp] = v;
    return v;
  }

  // Whether every member treats all code points >= 128 alike (memoized).
  bool uniform(uint32_t set) { return (high_flags(set) & kUniform) != 0; }
  // For a set that is not uniform: the first code point >= 128 outside its members' ranges
  // there (high_holes_[set]), which every other one outside them steps like; 0 where there
  // is none to be had. Memoized for step(), runs (run_base) and live searches (high_holes).
  uint32_t high_like(uint32_t set) {
    if (high_like_.size() <= set) {
      high_like_.resize(sets_.size(), kUnset);
      high_holes_.resize(sets_.size(), 0);
    }
    if (high_like_[set] == kUnset) {
      uint16_t holes = 0;
      high_like_[set] = high_outside_holes(set, &holes);
      high_holes_[set] = holes;
      if (high_like_[set] != 0) {
        detail::test_walk_counters.high_like_sets.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return high_like_[set];
  }
  // For a set that is not uniform: the members' ranges from 128 on as a hole set, outside
  // which every member treats the code points >= 128 alike (0: none to be had).
  uint16_t high_holes(uint32_t set) { return high_like(set) != 0 ? high_holes_[set] : 0; }
  // The union of two hole sets (0 where it is too many ranges to intern).
  uint16_t union_holes(uint16_t a, uint16_t b) {
    RangeSet u = detail::class_holes(a);
    const RangeSet& more = detail::class_holes(b);
    u.insert(u.end(), more.begin(), more.end());
    return intern_holes(normalize(std::move(u)));
  }
  // Whether some member may consume a code point >= 128: if not, no partial UTF-8 sequence
  // (which always stands for one) can go on from this set.
  bool takes_high(uint32_t set) { return (high_flags(set) & kTakesHigh) != 0; }

  // The code points some member can consume next (union of the members' character sets).
  const CharSet& first(uint32_t set) {
    if (set < first_ptr_.size() && first_ptr_[set] != nullptr) return *first_ptr_[set];
    if (first_ptr_.size() <= set) {
      if (firsts_.size() < sets_.size()) firsts_.resize(sets_.size());
      first_ptr_.resize(sets_.size(), nullptr);
    }
    // The members' distinct character sets, their positive ranges gathered and merged once
    // (merging set by set allocated three lists per member).
    const std::vector<uint32_t>& ids = member_charsets(set);
    if (ids.size() == 1) {
      // One character set: its own, or its positive ranges made a set once per character
      // set, not per walk set (a Unicode letter class of 700 ranges under `{1,200}`: a
      // level's sets each sorted them again).
      const CharSet& only = g_.charsets[ids[0]];
      if (!only.any && !only.negated) {
        first_ptr_[set] = &only;
      } else {
        if (one_first_.size() < g_.charsets.size()) one_first_.resize(g_.charsets.size());
        auto& one = one_first_[ids[0]];
        if (one == nullptr) {
          one = std::make_unique<CharSet>(
              detail::make_charset(false, false, positive_ranges(ids[0])));
        }
        first_ptr_[set] = one.get();
      }
    } else {
      RangeSet u;
      for (uint32_t id : ids) {
        const RangeSet& r = positive_ranges(id);
        u.insert(u.end(), r.begin(), r.end());
      }
      firsts_[set] = detail::make_charset(false, false, std::move(u));
      first_ptr_[set] = &firsts_[set];
    }
    return *first_ptr_[set];
  }
  // The distinct character sets of the members of `set` (sorted; a scratch list valid until
  // the next call).
  const std::vector<uint32_t>& member_charsets(uint32_t set) {
    member_ids_.clear();
    for_each_member_chars(set, [&](uint32_t id) { member_ids_.push_back(id); });
    std::sort(member_ids_.begin(), member_ids_.end());
    member_ids_.erase(std::unique(member_ids_.begin(), member_ids_.end()), member_ids_.end());
    return member_ids_;
  }

  // A run of a set: the code points that all lead to one same successor `next` (non-empty,
  // without leaving the context), and how many code points in a row the run goes on
  // (`depth`): every string of up to `depth` code points from the run's class is consumed
  // without leaving the context, the k-th one ending in next^k(set). A set that loops on
  // its class (next == set) has unbounded depth. This lets a walk accept a whole trie
  // subtree at once: repetitions like `[a-z]*` and bounded ones like `char{0,24}`.
  struct Run {
    uint64_t ascii[2];
    bool non_ascii;  // every code point >= 128 belongs to the class, but for its holes
    uint32_t next;
    uint32_t depth;
    bool exits;  // (kTolerant) the context may also end after each code point of the class
    // With non_ascii: code points >= 128 outside the class (detail::class_holes). Without:
    // the code points >= 128 inside it (a run of CJK ranges, `[\u4e00-\u9fff]{1,20}`), or
    // none (0).
    uint16_t holes = 0;
  };
  static constexpr uint32_t kUnbounded = 1u << 30;

  // How runs treat a code point after which the context may end. kStrict: it is outside
  // every run. kQuiet: the walk has nothing past the context's end (see Classifier::quiet),
  // so such a code point leads only to its successors in the context, and runs go on
  // through it. kTolerant: as kQuiet when it also has successors in the context, with
  // Run::exits telling the walk that the context may end there (a code point that only
  // ends the context stays outside). Runs are memoized per mode.
  enum Mode { kStrict = 0, kQuiet = 1, kTolerant = 2 };
  void set_mode(Mode m) {
    mode_ = m;
    runs_ = &runs_by_mode_[m];
    run_state_ = &run_state_by_mode_[m];
  }
  Mode mode() const { return mode_; }
  // Runs in mode `m` for the scope's lifetime, then the mode before it again.
  class ModeScope {
   public:
    ModeScope(WalkStates& s, Mode m) : s_(s), before_(s.mode()) { s_.set_mode(m); }
    ~ModeScope() { s_.set_mode(before_); }
    ModeScope(const ModeScope&) = delete;
    ModeScope& operator=(const ModeScope&) = delete;

   private:
    WalkStates& s_;
    Mode before_;
  };

  // The run of `set` with its depth known up to `need`: the depth returned is exact when
  // below `need`, and otherwise at least `need` (a lower bound; a walk asks for the height
  // of the subtree it would take, and a bounded repetition's chain of sets, 255 of them
  // for a `maxLength` of 255, is followed only that far).
  Run run(uint32_t set, uint32_t need) {
    grow_runs();
    auto& runs = *runs_;
    auto& state = *run_state_;
    if (state[set] == kDepthExact || (state[set] == kDepthAtLeast && runs[set].depth >= need)) {
      return runs[set];
    }
    // Follow the chain of successors until a known depth, a break, the cap, or a depth of
    // `need`; then fill the depths backwards.
    chain_.clear();
    uint32_t cur = set;
    uint32_t tail_depth = 0;
    bool exact = true;
    while (true) {
      const Run r = run_base(cur);
      if (r.next == 0) {
        tail_depth = 0;
        break;
      }
      if (r.next == cur) {
        tail_depth = kUnbounded;
        break;
      }
      if (!continues(r) || chain_.size() >= kMaxChain) {
        tail_depth = 1;
        break;
      }
      if (state[r.next] == kDepthExact) {
        tail_depth = std::min(kUnbounded, runs[r.next].depth + 1);
        break;
      }
      // From here cur's depth is at least 1 + that of r.next, and set's is chain_.size()
      // more than cur's.
      const size_t above = chain_.size();
      if (state[r.next] == kDepthAtLeast && above + 1 + runs[r.next].depth >= need) {
        tail_depth = runs[r.next].depth + 1;
        exact = false;
        break;
      }
      if (above + 2 >= need) {
        tail_depth = 2;
        exact = false;
        break;
      }
      chain_.push_back(cur);
      cur = r.next;
    }
    if (!exact) detail::test_walk_counters.depth_bounds.fetch_add(1, std::memory_order_relaxed);
    const uint8_t known = exact ? kDepthExact : kDepthAtLeast;
    runs[cur].depth = tail_depth;
    state[cur] = known;
    for (size_t i = chain_.size(); i-- > 0;) {
      const uint32_t s = chain_[i];
      runs[s].depth = std::min(kUnbounded, runs[runs[s].next].depth + 1);
      state[s] = known;
    }
    if (detail::test_check_run_depths.load(std::memory_order_relaxed)) check_depth(set, need);
    return runs[set];
  }

  // Whether a run's strings go on in the next set's run (its class holds the run's).
  bool continues(const Run& r) { return chars_within(r, run_base(r.next)); }

  // Tests only (detail::test_check_run_depths): the depth run() gives `set` for `need`
  // against the chain followed to its end without the memo: equal, or at least `need` and
  // no more than the end.
  void check_depth(uint32_t set, uint32_t need) {
    uint32_t full = 0;
    for (uint32_t cur = set, k = 0;; ++k) {
      const Run r = run_base(cur);
      if (r.next == 0) break;
      if (r.next == cur) {
        full = kUnbounded;
        break;
      }
      ++full;
      if (!continues(r) || k >= kMaxChain) break;
      cur = r.next;
    }
    const uint32_t got = (*runs_)[set].depth;
    if (got != full && (got < need || got > full)) {
      throw std::logic_error("run depth " + std::to_string(got) + " for a need of " +
                             std::to_string(need) + ", followed to the end " +
                             std::to_string(full));
    }
  }

  // The class and successor of a set's run, without its depth.
  Run run_class(uint32_t set) { return run_base(set); }

  const uint32_t* members(uint32_t set, uint32_t* n) const { return sets_.at(set, n); }

 private:
  static constexpr uint32_t kUnset = 0xFFFFFFFFu;
  static constexpr size_t kMaxChain = 256;
  // ASCII code points a class needs to count as broad on their own (Classifier::broad).
  static constexpr uint32_t kMinBroadAscii = 48;

  void grow_runs() {
    runs_->resize(sets_.size());
    run_state_->resize(sets_.size(), 0);
  }

  // The class and successor of a run (depth not yet known). Successors are computed
  // without interning them: only the chosen one becomes a set, so asking for runs does not
  // grow the number of sets beyond what walks need (CompileOptions::max_walk_states).
  Run run_base(uint32_t set) {
    grow_runs();
    if ((*run_state_)[set] != 0) return (*runs_)[set];
    cands_.clear();
    int32_t cand_of[128];
    std::fill(std::begin(cand_of), std::end(cand_of), -1);
    // ASCII code points that the same members take have the same successors: one probe
    // per group of them (a string's characters are three or four groups, where each of the
    // 95 printable ones was a probe).
    const CharSet& f = first(set);
    ascii_groups(set, f);
    for (const auto& g : groups_) {
      const int32_t k = probe(set, lowest_cp(g), uint32_t(bit_count(g[0]) + bit_count(g[1])));
      for (int w = 0; w < 2; ++w) {
        for (uint64_t b = g[w]; b != 0; b &= b - 1) cand_of[64 * w + __builtin_ctzll(b)] = k;
      }
    }
    int32_t best = -1;
    uint32_t best_n = 0;
    for (size_t k = 0; k < cands_.size(); ++k) {
      if (cands_[k].count > best_n) {
        best = static_cast<int32_t>(k);
        best_n = cands_[k].count;
      }
    }
    // Code points >= 128 belong to the class when every member treats them alike; or, but
    // for a few ranges (holes) where some member's class changes, when the members treat
    // the rest alike: the successors of a code point depend only on which members take it.
    // Every such code point outside the holes then steps like one of them.
    // Where the ASCII code points of the best successor are too few for a broad class (see
    // Classifier::broad), the code points >= 128 are the larger part: their successor wins.
    const bool ascii_narrow = best < 0 || best_n < kMinBroadAscii;
    bool non_ascii = false;
    uint16_t holes = 0;
    uint32_t high = 0x100;
    if (!uniform(set)) {
      high = high_like(set);
      holes = high_holes_[set];
    }
    const uint16_t member_high = holes;
    if (high != 0) {
      const int32_t k = probe(set, high);
      bool high_wins = k >= 0 && (best < 0 || k == best || ascii_narrow);
      if (k >= 0 && !high_wins && !looking_ahead_) {
        high_wins = ascii_after_takes_high(best, cand_of);
      }
      if (high_wins) {
        best = k;
        non_ascii = true;
      } else {
        holes = 0;
      }
    }
    // Otherwise the code points >= 128 inside the members' ranges may still step alike: the
    // pieces those ranges cut them into, one probe each, those of the best successor (or of
    // the one taking the most code points, as above) kept as the class's positive high part.
    if (!non_ascii && member_high != 0) holes = high_inside(set, &best, ascii_narrow);
    Run r{{0, 0}, non_ascii, 0, 0, false, holes};
    if (best >= 0) {
      r.exits = cands_[static_cast<size_t>(best)].exits;
      members_ = cands_[static_cast<size_t>(best)].members;
      r.next = intern(members_);
      ascii_of(cand_of, best, r.ascii);
    }
    grow_runs();  // intern() may have added a set
    (*runs_)[set] = r;
    (*run_state_)[set] = kClassKnown;
    return r;
  }

  // Where the best ASCII class (candidate `best`, the code points c with cand_of[c] == best)
  // and the code points from 128 on lead apart, whether the ASCII class's successor takes
  // every code point from 128 on and every one of that class in one run of its own, with no
  // such choice to make there. The code points from 128 on are then the better run: the walk
  // visits each child of the ASCII class once, and that child's run takes its subtree, where
  // the other choice walked every node below a code point >= 128 one by one. (A search with
  // a length bound, `[A-z]+` in 3..64 code points, Github_medium o23174: before the first
  // letter, each code point moves to a new count, so the runs of letters there only
  // stepped into the run after them, and llama-bpe's tens of thousands of nodes of other
  // scripts were walked: 6-10 ms for the string's first mask.) One level deep: the
  // successor's own run is chosen without a lookahead, and kept so (a word's count states,
  // `[a-zA-Z0-9_-]{162}` searched for, keep their runs of the word's characters).
  bool ascii_after_takes_high(int32_t best, const int32_t* cand_of) {
    uint64_t ascii[2] = {0, 0};
    ascii_of(cand_of, best, ascii);
    std::vector<Candidate> cands;
    cands.swap(cands_);
    const auto groups = groups_;
    const uint32_t after = intern(cands[static_cast<size_t>(best)].members);
    looking_ahead_ = true;
    const Run r = run_base(after);
    looking_ahead_ = false;
    cands_.swap(cands);
    groups_ = groups;
    const bool takes = r.next != 0 && r.non_ascii && r.holes == 0 &&
                       (ascii[0] & ~r.ascii[0]) == 0 && (ascii[1] & ~r.ascii[1]) == 0;
    if (takes) detail::test_walk_counters.high_after_ascii.fetch_add(1, std::memory_order_relaxed);
    return takes;
  }
  bool looking_ahead_ = false;
  // Sets in `bits` the ASCII code points c whose probe gave candidate k (cand_of[c] == k).
  static void ascii_of(const int32_t* cand_of, int32_t k, uint64_t bits[2]) {
    for (uint32_t c = 0; c < 128; ++c) {
      if (cand_of[c] == k) bits[c >> 6] |= 1ull << (c & 63);
    }
  }

  // For a set whose members treat code points >= 128 differently: the union of the
  // members' ranges from 128 on, as a hole set (*holes), and a code point >= 128 outside
  // them (0 when there is none, or the union is too many ranges to intern).
  uint32_t high_outside_holes(uint32_t set, uint16_t* holes) {
    hole_ranges_.clear();
    // Members of one character set (a class under a repetition: each level's sets) give
    // the same answer: kept per character set, where each set sorted its ranges again.
    const std::vector<uint32_t>& ids = member_charsets(set);
    if (ids.size() == 1) {
      if (one_holes_.size() < g_.charsets.size()) one_holes_.resize(g_.charsets.size());
      OneHoles& known = one_holes_[ids[0]];
      if (known.high_plus_one == 0) {
        add_high_ranges(ids[0]);
        known.high_plus_one = high_of_ranges(&known.holes) + 1;
        known.ranges = hole_ranges_;
      } else {
        hole_ranges_ = known.ranges;  // (as high_inside reads them)
      }
      *holes = known.holes;
      return known.high_plus_one - 1;
    }
    for (uint32_t id : ids) add_high_ranges(id);
    return high_of_ranges(holes);
  }
  void add_high_ranges(uint32_t id) {
    for (const auto& r : g_.charsets[id].ranges) {
      if (r.hi >= 128) hole_ranges_.push_back({std::max<uint32_t>(r.lo, 128), r.hi});
    }
  }
  uint32_t high_of_ranges(uint16_t* holes) {
    hole_ranges_ = normalize(std::move(hole_ranges_));
    const uint32_t high = first_high_outside(hole_ranges_);
    if (high > 0x10FFFF) return 0;
    *holes = intern_holes(hole_ranges_);
    return *holes != 0 ? high : 0;
  }
  // Per character set, for sets of its members alone: high_outside_holes + 1 (0: not known
  // yet), its holes, and the ranges it leaves in hole_ranges_.
  struct OneHoles {
    uint32_t high_plus_one = 0;
    uint16_t holes = 0;
    RangeSet ranges;
  };
  std::vector<OneHoles> one_holes_;
  // The code points >= 128 inside the members' ranges (hole_ranges_, as high_outside_holes
  // left them) that step like candidate *best, as a hole set of the class's own (0: none,
  // more than kMaxHighPieces pieces, or too many ranges). Where `pick` (no broad ASCII
  // part), *best becomes the candidate of the pieces with the most code points when they
  // outnumber its ASCII code points.
  uint16_t high_inside(uint32_t set, int32_t* best, bool pick) {
    cuts_.clear();
    for_each_member_chars(set, [&](uint32_t id) {
      for (const auto& r : g_.charsets[id].ranges) {
        if (r.hi < 128) continue;
        cuts_.push_back(std::max<uint32_t>(r.lo, 128));
        if (r.hi < 0x10FFFF) cuts_.push_back(r.hi + 1);
      }
    });
    std::sort(cuts_.begin(), cuts_.end());
    cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
    // The pieces: each stretch between two cuts inside the members' ranges.
    pieces_.clear();
    const RangeSet& within = hole_ranges_;
    size_t w = 0;
    for (size_t i = 0; i < cuts_.size(); ++i) {
      const uint32_t lo = cuts_[i];
      const uint32_t hi = i + 1 < cuts_.size() ? cuts_[i + 1] - 1 : 0x10FFFF;
      while (w < within.size() && within[w].hi < lo) ++w;
      if (w == within.size() || within[w].lo > lo) continue;
      if (pieces_.size() == kMaxHighPieces) return 0;
      pieces_.push_back({lo, std::min(hi, within[w].hi), -1});
    }
    for (auto& piece : pieces_) piece.cand = probe(set, piece.lo);
    const int32_t before = *best;
    if (pick) {
      std::vector<uint64_t>& weight = piece_weight_;
      weight.assign(cands_.size(), 0);
      for (const auto& piece : pieces_) {
        if (piece.cand >= 0) weight[static_cast<size_t>(piece.cand)] += piece.hi - piece.lo + 1;
      }
      for (size_t k = 0; k < weight.size(); ++k) {
        const uint64_t mine = *best >= 0 ? weight[static_cast<size_t>(*best)] +
                                               cands_[static_cast<size_t>(*best)].count
                                         : 0;
        if (weight[k] > mine) *best = static_cast<int32_t>(k);
      }
    }
    const uint16_t id = high_inside_of(*best);
    if (id == 0 && *best != before) {  // too many ranges: the ASCII part's successor after all
      *best = before;
      return high_inside_of(before);
    }
    return id;
  }
  // The pieces of candidate `cand`, as a hole set (0: none, or too many ranges).
  uint16_t high_inside_of(int32_t cand) {
    if (cand < 0) return 0;
    RangeSet taken;
    for (const auto& piece : pieces_) {
      if (piece.cand == cand) taken.push_back({piece.lo, piece.hi});
    }
    return taken.empty() ? 0 : intern_holes(normalize(std::move(taken)));
  }
  static constexpr size_t kMaxHighPieces = 16;
  struct HighPiece {
    uint32_t lo, hi;
    int32_t cand;
  };
  std::vector<uint32_t> cuts_;
  std::vector<HighPiece> pieces_;
  std::vector<uint64_t> piece_weight_;

  // The process-wide id of a hole set (detail::intern_class_holes, behind a lock), through
  // the few this grammar's walks have met.
  uint16_t intern_holes(const RangeSet& ranges) {
    for (const auto& [known, id] : holes_known_) {
      if (known == ranges) return id;
    }
    const uint16_t id = detail::intern_class_holes(ranges);
    if (holes_known_.size() < kMaxHolesKnown) holes_known_.emplace_back(ranges, id);
    return id;
  }
  static constexpr size_t kMaxHolesKnown = 64;
  RangeSet hole_ranges_{};
  std::vector<std::pair<RangeSet, uint16_t>> holes_known_{};

  // Splits the ASCII code points of `first` (the set's) into groups taken by the same
  // members, in the order of their lowest code points (so that candidates are met in the
  // same order as code point by code point).
  void ascii_groups(uint32_t set, const CharSet& first) {
    groups_.clear();
    if ((first.ascii[0] | first.ascii[1]) == 0) return;
    groups_.push_back({first.ascii[0], first.ascii[1]});
    for_each_member_chars(set, [&](uint32_t id) {
      const CharSet& cs = g_.charsets[id];
      if (cs.any) return;
      const std::array<uint64_t, 2> in = ascii_taken(cs);
      for (size_t k = 0, n = groups_.size(); k < n; ++k) {
        const std::array<uint64_t, 2> a = {groups_[k][0] & in[0], groups_[k][1] & in[1]};
        const std::array<uint64_t, 2> b = {groups_[k][0] & ~in[0], groups_[k][1] & ~in[1]};
        if ((a[0] | a[1]) == 0 || (b[0] | b[1]) == 0) continue;
        groups_[k] = a;
        groups_.push_back(b);
      }
    });
    std::sort(groups_.begin(), groups_.end(),
              [](const auto& x, const auto& y) { return lowest_cp(x) < lowest_cp(y); });
  }
  std::vector<std::array<uint64_t, 2>> groups_;
  // The lowest code point of a non-empty group.
  static uint32_t lowest_cp(const std::array<uint64_t, 2>& g) {
    return g[0] != 0 ? uint32_t(__builtin_ctzll(g[0])) : 64u + uint32_t(__builtin_ctzll(g[1]));
  }

  // The successor of `set` on cp as a candidate index into cands_ (counted `weight` times:
  // the ASCII code points it stands for), or -1 when it is empty or leaves the context.
  // Does not intern anything.
  int32_t probe(uint32_t set, uint32_t cp, uint32_t weight = 0) {
    const bool exited = successors(set, cp, mode_ == kStrict);
    if (exited && mode_ == kStrict) return -1;
    if (scratch_.empty()) return -1;
    const bool exits = exited && mode_ == kTolerant;
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
    for (size_t k = 0; k < cands_.size(); ++k) {
      if (cands_[k].members == scratch_ && cands_[k].exits == exits) {
        cands_[k].count += weight;
        return static_cast<int32_t>(k);
      }
    }
    cands_.push_back({scratch_, weight, exits});
    return static_cast<int32_t>(cands_.size() - 1);
  }

  // kUniform: every member treats all code points >= 128 alike (so 0x100 stands for them);
  // kTakesHigh: some member may consume a code point >= 128. Memoized per set.
  static constexpr uint32_t kUniform = 1, kTakesHigh = 2;
  uint32_t high_flags(uint32_t set) {
    if (uniform_.size() <= set) uniform_.resize(sets_.size(), kUnset);
    if (uniform_[set] == kUnset) uniform_[set] = compute_high_flags(set);
    return uniform_[set];
  }
  uint32_t compute_high_flags(uint32_t set) const {
    uint32_t flags = kUniform;
    for_each_member_chars(set, [&](uint32_t id) {
      const CharSet& cs = g_.charsets[id];
      if (cs.any) {
        flags |= kTakesHigh;
        return;
      }
      bool none = true, all = false;
      for (const auto& r : cs.ranges) {
        if (r.hi >= 128) none = false;
        if (r.lo <= 128 && r.hi == 0xFFFFFFFFu) all = true;
      }
      // Negated, some high code point is left out only if the ranges cover them all.
      if (cs.negated ? !all : !none) flags |= kTakesHigh;
      if (!none && !all) flags &= ~kUniform;
    });
    return flags;
  }

  // Calls f(character set id) for each member of `set` at a character-set position.
  template <class F>
  void for_each_member_chars(uint32_t set, F&& f) const {
    uint32_t len;
    const uint32_t* m = sets_.at(set, &len);
    for (uint32_t i = 0; i < len; ++i) {
      const Elem& e = g_.elems[pool_.pos(m[i])];
      if (e.kind == detail::kChars) f(e.arg);
    }
  }

  // Fills scratch_ with the successors of the members of `set` that consume cp. Returns
  // whether some member leaves the context (stopping there when stop_at_exit).
  bool successors(uint32_t set, uint32_t cp, bool stop_at_exit) {
    scratch_.clear();
    bool exited = false;
    uint32_t len;
    const uint32_t* m = sets_.at(set, &len);
    for (uint32_t i = 0; i < len; ++i) {
      const uint32_t c = m[i];
      const Elem& e = g_.elems[pool_.pos(c)];
      if (e.kind != detail::kChars || !g_.charsets[e.arg].match(cp)) continue;
      uint32_t n;
      const uint32_t* s = pool_.succ(c, &n);
      for (uint32_t k = 0; k < n; ++k) {
        if (s[k] != StackPool::kEmpty) {
          scratch_.push_back(s[k]);
        } else if (stop_at_exit) {
          return true;
        } else {
          exited = true;
        }
      }
    }
    return exited;
  }

  // The code points of a grammar character set as ranges (negation applied): memoized.
  const RangeSet& positive_ranges(uint32_t charset) {
    if (pos_done_.empty()) {
      pos_ranges_.resize(g_.charsets.size());
      pos_done_.resize(g_.charsets.size(), 0);
    }
    if (!pos_done_[charset]) {
      pos_ranges_[charset] = charset_ranges(g_.charsets[charset]);
      pos_done_[charset] = 1;
    }
    return pos_ranges_[charset];
  }

  // The memo of a set's steps by ASCII code points, made on its first such step. Rows lie
  // in chunks that never move: one table grown by 512 bytes for every interned set was
  // copied on each growth and its new pages faulted in (interning was a sixth of the
  // first-use mask time of 40 dev-set schemas with many key states, now a twentieth).
  static constexpr uint32_t kNoRow = 0xFFFFFFFFu;
  static constexpr size_t kRowsPerChunk = 64;  // 32 KiB: from the heap, reused across grammars
  uint32_t* ascii_row(uint32_t set) {
    if (ascii_row_.size() <= set)
      ascii_row_.resize(std::max(sets_.size(), size_t{set} + 1), kNoRow);
    const bool fresh = ascii_row_[set] == kNoRow;
    if (fresh) {
      ascii_row_[set] = static_cast<uint32_t>(ascii_rows_used_++);
      if (ascii_row_[set] / kRowsPerChunk == ascii_chunks_.size()) {
        ascii_chunks_.emplace_back(new uint32_t[kRowsPerChunk * 128]);
      }
    }
    const uint32_t r = ascii_row_[set];
    uint32_t* row = &ascii_chunks_[r / kRowsPerChunk][(r % kRowsPerChunk) * 128];
    if (fresh) std::fill(row, row + 128, kUnset);
    return row;
  }

  uint32_t compute(uint32_t set, uint32_t cp) {
    const bool exited = successors(set, cp, false);
    members_.assign(scratch_.begin(), scratch_.end());
    return (intern(members_) << 1) | (exited ? 1u : 0u);
  }

  StackPool& pool_;
  const GrammarTables& g_;
  size_t max_states_;
  size_t max_members_;
  detail::IdSeqs sets_;
  std::vector<uint32_t> ascii_row_;  // per set: its row in ascii_chunks_, or kNoRow
  std::vector<std::unique_ptr<uint32_t[]>> ascii_chunks_;
  size_t ascii_rows_used_ = 0;
  std::unordered_map<uint64_t, uint32_t> other_;
  std::vector<uint32_t> uniform_;    // per set: kUniform | kTakesHigh, or kUnset
  std::vector<uint32_t> high_like_;  // per set: high_like(), or kUnset
  std::vector<uint16_t> high_holes_;
  std::vector<uint32_t> scratch_, members_;
  std::deque<CharSet> firsts_;  // a deque: frames keep pointers into it while it grows
  std::vector<std::unique_ptr<CharSet>> one_first_;  // per negated character set (first())
  // Into firsts_ (without the deque's indexing), g_.charsets or one_first_.
  std::vector<const CharSet*> first_ptr_;
  std::vector<uint32_t> member_ids_;  // scratch of member_charsets()
  std::vector<RangeSet> pos_ranges_;  // per grammar character set (positive_ranges)
  std::vector<uint8_t> pos_done_;
  Mode mode_ = kStrict;
  std::vector<Run> runs_by_mode_[3];
  // Per set: 0 unknown, kClassKnown (class and successor), kDepthAtLeast (and a lower bound
  // of its depth), kDepthExact.
  static constexpr uint8_t kClassKnown = 1, kDepthAtLeast = 2, kDepthExact = 3;
  std::vector<uint8_t> run_state_by_mode_[3];
  std::vector<Run>* runs_ = &runs_by_mode_[0];
  std::vector<uint8_t>* run_state_ = &run_state_by_mode_[0];
  std::vector<uint32_t> chain_;
  struct Candidate {
    std::vector<uint32_t> members;
    uint32_t count;  // ASCII code points leading to it
    bool exits;      // kTolerant: the context may end there too
  };
  std::vector<Candidate> cands_;
};

struct Classifier {
  const TokenIndex& tokens;
  const GrammarTables& g;
  StackPool& pool;
  WalkStates& states;
  const std::vector<uint8_t>& no_text;
  std::vector<Token> accepted{}, uncertain{};

  // The parse state after a trie node's code points: inside the context (`set`), and past
  // its end (the stacks the rule of the chain's bottom returns to, with what lies below
  // them unknown). `pending`: the walk past the end left those stacks too, so every token
  // below is uncertain.
  struct Frame {
    uint32_t set;
    uint32_t fset;   // the stacks past the context's end after this node's code points
    uint32_t fnext;  // what the part past the context's end consumes next (set ids)
    uint32_t depth;  // code points consumed from the context's start
    bool exited;     // the context ended right after this node's code point
    bool fexited;    // the part past the end left its stacks right after this code point
    bool pending;
    const CharSet* first;   // what `set` can consume next (null: nothing)
    const CharSet* ffirst;  // what `fnext` can consume next (null: nothing)
  };
  std::vector<Frame> frames{}, path{};
  std::vector<std::pair<uint32_t, uint32_t>> todo{};  // (trie node, parent frame)
  // The eager budget (compile_impl): a walk is abandoned (detail::WalkAbandoned) once the
  // clock passes `deadline`, read every kDeadlineStride trie nodes, or after `nodes_left`
  // nodes (tests). Off on first use.
  static constexpr uint32_t kDeadlineStride = 1024;
  bool has_deadline = false;
  Clock::time_point deadline{};
  uint64_t nodes_left = UINT64_MAX;
  uint32_t stride_left = kDeadlineStride;
  void tick() {
    if (!has_deadline) return;
    if (--nodes_left == 0) throw detail::WalkAbandoned{};
    if (--stride_left == 0) {
      stride_left = kDeadlineStride;
      if (Clock::now() >= deadline) throw detail::WalkAbandoned{};
    }
  }
  // What walk_subtree added for each root child walked from the start set of contexts
  // whose code points after the first are walked alike (ContextClassifier::classify):
  // a key's first character, a class that leaves out the letters the names start with,
  // then the rest of the key, in every object of a schema (six such contexts of 100-140
  // µs each, 1,700 trie nodes, on one mask of Github_ultra o41081). A child's walk depends
  // on the set its code point steps the start set to, whose structure the memo's key
  // fixes, and on whether the cover holds the child's frame (covered()): kept per child
  // and that answer, for one cover class, length and mode.
  struct KidMemo {
    struct Slice {
      uint32_t acc, n_acc, unc, n_unc;
    };
    uint32_t uses = 0;  // contexts that asked for it: the first one keeps nothing
    bool cover_known = false;
    detail::SharedMasks::ClassKey cover_class{};
    uint32_t cover_len = 0;
    WalkStates::Mode cover_mode = WalkStates::kStrict;
    std::unordered_map<uint64_t, Slice> kids;
    std::vector<Token> acc, unc;
  };
  KidMemo* kid_memo = nullptr;
  // Tokens kept by all of one grammar's kid memos together, at most.
  static constexpr size_t kMaxKidMemoTokens = size_t{1} << 22;
  size_t kid_memo_tokens = 0;

  uint32_t after_end = 0;           // set: the stacks returned to when the context ends
  bool exit_any = false;            // leaving the context makes every longer token uncertain
  size_t uncertain_cap = SIZE_MAX;  // a walk stops (over_cap) with more uncertain tokens
  bool over_cap = false;
  const CharSet* leave_follow = nullptr;  // what may follow once the stacks past the end are left
  // Observation for family_chain: the lowest level of the family with base obs_base on
  // any stack of an in-context set of the walk (kNoObserve: off).
  static constexpr uint32_t kNoObserve = 0xFFFFFFFFu;
  uint32_t obs_base = kNoObserve;
  uint32_t obs_low = 0;
  const std::vector<uint32_t>* fam_level = nullptr;
  const std::vector<uint32_t>* fam_base = nullptr;
  // Memos, each entry tagged with the family base it was computed for.
  std::vector<std::pair<uint32_t, uint32_t>> node_low_{}, set_low_{};  // (base, low)

  uint32_t level_at(uint32_t node) const {
    const uint32_t r = g.elem_rule[pool.pos(node)];
    return (*fam_level)[r] != 0 && (*fam_base)[r] == obs_base ? (*fam_level)[r] : kNoObserve;
  }
  // The lowest family level on the stack `node` (memoized per node for obs_base).
  uint32_t node_low(uint32_t node) {
    if (node_low_.size() < pool.size()) node_low_.resize(pool.size() * 2, {kNoObserve, 0});
    std::vector<uint32_t>& up = low_path_;
    up.clear();
    uint32_t n = node, below = kNoObserve;
    while (n != StackPool::kEmpty) {
      if (node_low_[n].first == obs_base) {
        below = node_low_[n].second;
        break;
      }
      up.push_back(n);
      n = pool.parent(n);
    }
    for (size_t k = up.size(); k-- > 0;) {
      below = std::min(below, level_at(up[k]));
      node_low_[up[k]] = {obs_base, below};
    }
    return below;
  }
  // The walk states forgot their sets (WalkStates::reset): so do the memos by set.
  void forget_sets() {
    live_.clear();
    live_cells_ = 0;
    set_low_.clear();
    node_low_.clear();
  }
  uint32_t set_low(uint32_t set) {
    if (set_low_.size() <= set) set_low_.resize(set * 2 + 16, {kNoObserve, 0});
    if (set_low_[set].first != obs_base) {
      uint32_t n, low = kNoObserve;
      const uint32_t* m = states.members(set, &n);
      for (uint32_t i = 0; i < n; ++i) low = std::min(low, node_low(m[i]));
      set_low_[set] = {obs_base, low};
    }
    return set_low_[set].second;
  }
  void observe(uint32_t base) {
    obs_base = base;
    obs_low = kNoObserve;
  }
  // A walk that reached the family's base levels cannot be shared: it stops observing
  // (obs_low stays below kMinSharedLow).
  static constexpr uint32_t kMinSharedLow = 3;
  void note_low(uint32_t low) {
    obs_low = std::min(obs_low, low);
    if (obs_low < kMinSharedLow) obs_base = kNoObserve;
  }
  std::vector<uint32_t> low_path_{};
  std::unordered_map<uint64_t, uint32_t> unions{};
  std::vector<uint32_t> union_buf{};

  uint32_t merge(uint32_t a, uint32_t b) {
    if (a == 0 || a == b) return b;
    if (b == 0) return a;
    if (a > b) std::swap(a, b);
    const uint64_t key = (uint64_t(a) << 32) | b;
    auto it = unions.find(key);
    if (it != unions.end()) return it->second;
    uint32_t n;
    const uint32_t* m = states.members(a, &n);
    union_buf.assign(m, m + n);
    m = states.members(b, &n);
    union_buf.insert(union_buf.end(), m, m + n);
    const uint32_t id = states.intern(union_buf);
    unions.emplace(key, id);
    return id;
  }

  bool partial_ok(uint32_t set, PartialUtf8 p) {
    if (!states.takes_high(set)) return false;
    uint32_t n;
    const uint32_t* m = states.members(set, &n);
    return detail::stacks_take_partial(g, pool, m, n, p);
  }

  // Sorts the tokens ending at a node: accepted (the context alone takes them, whatever
  // lies below it), uncertain (only the real stack below can tell), or refused.
  void classify_node(const TokenIndex::TrieNode& node, uint32_t set, bool exited, uint32_t fset,
                     bool past) {
    const auto& tt = tokens.trie_tokens();
    for (uint32_t k = node.tok_begin; k < node.tok_end; ++k) {
      const auto& t = tt[k];
      if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) continue;
      sort_token(t.id, t.partial, set, exited, fset, past);
    }
  }

  void sort_token(Token id, PartialUtf8 partial, uint32_t set, bool exited, uint32_t fset,
                  bool past) {
    bool acc, unc;
    if (partial.n_remain == 0) {
      acc = set != 0 || exited;
      unc = past || fset != 0;
    } else {
      acc = set != 0 && partial_ok(set, partial);
      unc = past || exited || (fset != 0 && partial_ok(fset, partial));
    }
    if (acc) {
      accepted.push_back(id);
    } else if (unc) {
      uncertain.push_back(id);
    }
  }

  // An observed walk (see family_chain) sees the sets a run stands for, down to `height`
  // code points: whether it reaches them depends on those sets.
  void note_run(uint32_t set, uint32_t height) {
    for (uint32_t s = set, k = 0; s != 0 && k <= height && obs_base != kNoObserve;
         ++k, s = states.run_class(s).next) {
      note_low(set_low(s));
    }
  }

  // When every string below node j (at depth `depth`, parse state `set`) stays inside one
  // run of `set`, each token below is accepted (if its partial tail fits) without walking
  // the subtree.
  bool bulk_accept(uint32_t j, uint32_t set, uint32_t depth, bool pending) {
    const auto& sc = tokens.subtree_chars()[j];
    // A run's class lies within what its set takes next: a subtree with other ASCII code
    // points is not taken, and the run of a set met once (a literal's, a name's) need not
    // be computed for it. (An observed walk notes the run's sets all the same.)
    if (obs_base == kNoObserve) {
      const CharSet& f = states.first(set);
      if ((sc.ascii[0] & ~f.ascii[0]) != 0 || (sc.ascii[1] & ~f.ascii[1]) != 0) return false;
    }
    const WalkStates::Run r = states.run(set, sc.height);
    note_run(set, sc.height);
    if (sc.height > r.depth) return false;
    if (!chars_within(sc, r)) return false;
    if (tolerant_ && !past_end_dies(r)) return false;
    take_in_run(tokens.trie()[j].tok_end, tok_begin_of(tokens.trie()[j].end), set, depth, accepted,
                pending ? &uncertain : nullptr, covered(j, set, depth, pending));
    return true;
  }

  // Tolerant takes (WalkStates::kTolerant): a frame where the context may end, with
  // something past its end, is taken at once when what follows the end (after_end) can take
  // no code point of the run's class: past the end every path dies at the next code point
  // of the run, so only the run's exits and cuts go on past the end. Also in a walk observed
  // for a repetition family (the runs it takes are noted like any other): the last line of
  // `line ("\n" line){0,8}` otherwise visited every node (22 ms a mask on gemma-4).
  bool tolerant_ = false;
  bool past_end_dies(const WalkStates::Run& r) {
    const CharSet& f = states.first(after_end);
    if (f.any || (r.ascii[0] & f.ascii[0]) != 0 || (r.ascii[1] & f.ascii[1]) != 0) return false;
    if (takes_high_cps(r)) {
      for (const auto& range : f.ranges) {
        if (range.hi >= 128) return false;
      }
    }
    return true;
  }
  // Sets a member for the scope's lifetime (tolerant_ during a tolerant take), then back to
  // what it was.
  template <class T>
  struct ScopedSet {
    T& var;
    const T before;
    ScopedSet(T& v, T value) : var(v), before(v) { var = value; }
    ~ScopedSet() { var = before; }
    ScopedSet(const ScopedSet&) = delete;
    ScopedSet& operator=(const ScopedSet&) = delete;
  };
  bool tolerant_take(uint32_t j, const Frame& c) {
    const WalkStates::ModeScope mode(states, WalkStates::kTolerant);
    const ScopedSet<bool> tolerant(tolerant_, true);
    return bulk_accept(j, c.set, c.depth, false) || skip_region(j, c, false);
  }

  // Quiet takes: a walk observed for a repetition family runs in kStrict mode (quiet runs
  // note lower levels of the family, and its mask is then shared with fewer levels), where
  // a run stops at every code point after which the context may end: a line of
  // `[^\n]{1,40}` that may end after any character, or the words after a separator in
  // `(word sep){0,60} word`, visited every node of the trie (5-9 ms a mask on llama-bpe).
  // With nothing past the context's end, a frame whose next class is broad is taken with
  // the runs of kQuiet mode instead (exact there, as in quiet walks); only the frames the
  // strict runs could not take pay for the lower levels they note.
  bool quiet_take(uint32_t j, const Frame& c) {
    const WalkStates::ModeScope mode(states, WalkStates::kQuiet);
    return bulk_accept(j, c.set, c.depth, c.pending) || skip_region(j, c, false);
  }

  // The first token of node j's subtree in trie order (past the last node: the end).
  uint32_t tok_begin_of(uint32_t j) const {
    const auto& trie = tokens.trie();
    return j < trie.size() ? trie[j].tok_begin : static_cast<uint32_t>(tokens.trie_tokens().size());
  }

  // Adds to `out` the tokens trie_tokens()[tb, te), all of whose code points past the
  // first `depth` lie in the run of `set` (within its depth): a token with a partial UTF-8
  // tail only if the set its full code points end in may take the tail, and otherwise to
  // `rest` if given (a pending walk: what lies past the context may take it).
  // `covered`: the tokens without a partial tail are in cover_bits already; only those with
  // one are looked at.
  // `exited0`: the context may end after the first `depth` code points (a tolerant cover's
  // first code point, for the tokens of that one code point and a partial tail).
  void take_in_run(uint32_t tb, uint32_t te, uint32_t set, uint32_t depth, std::vector<Token>& out,
                   std::vector<Token>* rest, bool covered = false, bool exited0 = false) {
    const auto& tt = tokens.trie_tokens();
    auto take_partial = [&](const TokenIndex::TrieToken& t) {
      size_t ncp;
      tokens.code_points(t.id, &ncp);
      // (exited: the context may end after the token's full code points)
      const auto [s, exited] =
          follow_runs(set, ncp > depth ? static_cast<uint32_t>(ncp - depth) : 0, exited0);
      if (partial_ok(s, t.partial)) {
        out.push_back(t.id);
      } else if (rest != nullptr) {
        rest->push_back(t.id);
      } else if (exited) {
        uncertain.push_back(t.id);  // what lies past the end may take the tail
      }
    };
    if (covered) {
      const auto& pt = tokens.partial_trie_tokens();
      for (auto it = std::lower_bound(pt.begin(), pt.end(), tb); it != pt.end() && *it < te; ++it) {
        const auto& t = tt[*it];
        if (no_text.empty() || !no_text[static_cast<size_t>(t.id)]) take_partial(t);
      }
      return;
    }
    for (uint32_t k = tb; k < te; ++k) {
      const auto& t = tt[k];
      if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) continue;
      if (t.partial.n_remain == 0) {
        out.push_back(t.id);
      } else {
        take_partial(t);
      }
    }
  }

  // Root cover: a context whose top takes a broad class C0 into a set that loops on a broad
  // class C1 containing C0 (a string's characters; the first character of a key that is
  // not one of the names, then the rest of it) accepts every token of C0 C1* without a
  // partial tail. The tokens of C1* are shared by every grammar (SharedMasks::class_tokens):
  // the walk copies them as a bitmask, clears those that start outside C0 (a few of the
  // root's subtrees), and takes only what lies outside them.
  const std::vector<uint32_t>* cover_bits = nullptr;
  uint32_t cover_set = 0;                       // the set after one code point of C0
  detail::SharedMasks::ClassKey cover_first{};  // C0
  std::vector<uint32_t> cover_clear{};          // root children in C1 but not in C0
  // At most this many ASCII code points of C1 outside C0. The first character of a key that
  // is none of an object's names leaves out the names' first letters: with 20 of them (60
  // properties, Github_hard o30342), 16 sent the key's start to a walk of every string token
  // node by node (3.3 ms of a 5.3 ms first mask, 1.9 ms with the cover); clearing the
  // tokens below 20 root children costs a few tens of microseconds.
  static constexpr int kMaxCoverClear = 64;

  static detail::SharedMasks::ClassKey class_key(const WalkStates::Run& r) {
    return {{r.ascii[0], r.ascii[1]}, r.non_ascii, r.holes};
  }
  static bool in_class(const detail::SharedMasks::ClassKey& k, uint32_t cp) {
    if (cp < 128) return ((k.ascii[cp >> 6] >> (cp & 63)) & 1u) != 0;
    if (k.holes == 0) return k.non_ascii;
    return detail::in_class_holes(k.holes, cp) != k.non_ascii;
  }
  // Whether the tokens a run takes below node j, at `depth` in `set`, are all in the cover
  // but for partial tails: j is a child of the root in C0, and `set` the loop on C1. With
  // runs of another mode than the cover's (a quiet or tolerant take), when the run of `set`
  // keeps within C1 and the cover's length.
  bool covered(uint32_t j, uint32_t set, uint32_t depth, bool pending) {
    if (cover_bits == nullptr || depth != 1 || pending || set != cover_set ||
        !in_class(cover_first, tokens.trie()[j].cp)) {
      return false;
    }
    if (states.mode() == cover_mode_) return true;
    if (!chars_within(states.run_class(set), cover_class_)) return false;
    return cover_unbounded() || states.run(set, cover_len_).depth < cover_len_;
  }
  detail::SharedMasks::ClassKey cover_class_{};  // C1
  // (A tolerant cover) the context may end after C0's code point.
  bool cover_first_exits_ = false;
  // (A tolerant cover) its last code point only ends the context (setup_cover_in_mode).
  bool cover_final_exit_ = false;
  // Whether every code point of `cls` steps set s out of the context and nowhere else.
  bool only_ends_on(uint32_t s, const detail::SharedMasks::ClassKey& cls) {
    if (s == 0) return false;
    for (uint32_t cp = 0; cp < 128; ++cp) {
      if (in_class(cls, cp) && states.step(s, cp) != 1u) return false;
    }
    return !takes_high_cps(cls) || (states.uniform(s) && states.step(s, 0x100) == 1u);
  }
  // Where a run's chain of sets reaches the empty set after this many steps, the context
  // ended there (a tolerant cover's last code point, in walk_root_stops); else none.
  uint32_t exit_after_steps_ = UINT32_MAX;
  // The set n code points along the run chain from `set`, and whether the context may end
  // right after them: the last step's exit flag (`exited` when n is 0), or the end a
  // tolerant cover's last code point makes (exit_after_steps_).
  // The set n code points along the run chain from `set` (0 once the chain ends).
  uint32_t set_along(uint32_t set, uint32_t n) {
    for (uint32_t d = 0; d < n && set != 0; ++d) set = states.run_class(set).next;
    return set;
  }
  std::pair<uint32_t, bool> follow_runs(uint32_t set, uint32_t n, bool exited) {
    uint32_t s = set;
    for (uint32_t d = 0; d < n; ++d) {
      const WalkStates::Run r = states.run_class(s);
      exited = r.exits;
      s = r.next;
    }
    if (s == 0 && n == exit_after_steps_) exited = true;
    return {s, exited};
  }
  uint32_t cover_len_ = 0;  // at most this many code points (or kUnbounded)
  bool cover_unbounded() const { return cover_len_ == WalkStates::kUnbounded; }
  // A live walk is tried before a cover whose first class is wider than the rest: a costly
  // failure there does not count towards giving live walks up.
  bool live_optional_ = false;

  // The runs the cover was found with: a take in another mode (quiet_take) has other runs.
  WalkStates::Mode cover_mode_ = WalkStates::kStrict;
  // In a strict walk where that finds none, the cover is looked for with tolerant runs
  // (a context that may end after each code point: a last line, a word before a comma):
  // their strings are consumed inside the context all the same.
  void setup_cover(uint32_t set0) {
    setup_cover_in_mode(set0);
    if (cover_bits != nullptr || states.mode() != WalkStates::kStrict) return;
    const WalkStates::ModeScope mode(states, WalkStates::kTolerant);
    setup_cover_in_mode(set0);
  }
  void setup_cover_in_mode(uint32_t set0) {
    cover_bits = nullptr;
    cover_mode_ = states.mode();
    if (!broad(states.first(set0))) return;
    // Depths past the longest token make no difference to the cover.
    const uint32_t height = tokens.subtree_chars()[0].height + 1u;
    const WalkStates::Run r0 = states.run(set0, height);
    if (r0.next == 0 || !broad(class_key(r0))) return;
    WalkStates::Run r1 = states.run_class(r0.next);
    // The set after C0 moves on more than a few printable code points outside its run (a
    // pattern's automaton over a key, beyond the quote and backslash of a string's loop):
    // the cover's class would leave out those letters, and the walk would go on at every
    // node of them below a code point of C1 (250 root children, 4 ms a first-use mask in
    // Github_hard o74466). A live walk takes the automaton's letters inside its class.
    {
      const CharSet& f = states.first(r0.next);  // (positive: its ascii bits are its members)
      // (Other than a string's quote and backslash.)
      const uint64_t quote_backslash[2] = {uint64_t{1} << '"', uint64_t{1} << ('\\' - 64)};
      const uint64_t beyond[2] = {f.ascii[0] & ~r1.ascii[0] & ~quote_backslash[0],
                                  f.ascii[1] & ~r1.ascii[1] & ~quote_backslash[1]};
      // Those letters' nodes are most of what the cover's exits have beyond the live
      // class's: the live walk is taken where its exits (and die stops) are fewer than
      // them (its class's exits under half the cover's). Counted by the token index's
      // code-point groups: building the cover's exits to count them (a class per letter
      // a search leaves out) cost more than either walk. (Under a third of them until the
      // twenty-seventh pass: the key after `github` in Github_hard o82144, 1,860 exits
      // against 3,354 `h` nodes, took a cover of 1.1-2.8 ms a context: the mask went from
      // 2.4-3.5 to 1.1-1.7 ms; over the 892 slowest dev-set schemas, neutral.)
      if (printable_count(beyond) > 0 &&
          live_instead(set0, class_nodes({{beyond[0], beyond[1]}, false}))) {
        detail::test_walk_counters.live_over_letters.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    // The tokens covered are at most `len` code points long (kUnbounded: any length).
    uint32_t len = r0.depth;
    // C0 may also take code points C1 does not (`.{0,50} "<END>"`: any code point first,
    // then the rest of the run apart from `<`, which may start the marker): r0 then ends
    // after one code point, and the cover holds the tokens of (C0 and C1) C1* up to one more
    // than the depth of C1's run; the root's children outside C1 are walked.
    bool last_only = false;
    // (Or code points from 128 on: CJK ranges first, then the same less a full stop.)
    const bool first_apart = !chars_within(r0, r1);
    if (first_apart) {
      // Where the set is a live automaton (a search: C1 leaves out the letter that moves it,
      // and every token with one would be walked), the live walk does better, and the
      // cover's class exits and tokens, new classes per pattern, would be built for nothing.
      if (live_instead(set0)) return;
      r1 = states.run(r0.next, height);
      if (r1.next == 0 || !broad(class_key(r1))) {
        // The run's last code point (C0 then something narrow: `.{0,1} "<END>"`): the
        // tokens of one code point of C0; no walked frame is covered (covered() never
        // holds: the runs after that code point are not C0's). Not in an observed walk,
        // which notes the cover's set.
        if (obs_base != kNoObserve) return;
        last_only = true;
        r1 = r0;
        r1.next = 0;
        len = 1;
      } else {
        len = r1.depth == WalkStates::kUnbounded ? r1.depth : r1.depth + 1;
      }
    }
    // C1 takes no code point from 128 on that C0 does not (such root children would have to
    // be cleared from the cover, as only1's are below): C0 and C1 share C1's.
    if (!high_within(r1, r0)) return;
    // Not a loop: a bounded run (`char{0,100}`) whose every level takes C1 covers the tokens
    // of C0 C1* up to its depth.
    const bool bounded = r1.next != r0.next;
    // A run at least as long as the longest token bounds nothing: the cover is then taken
    // as unbounded (a take in another mode, whose run's depth is known only that far, is
    // held by it: an observed walk's quiet takes at a line's start pushed gemma-4's 246,000
    // tokens one by one, 5 ms a mask).
    const uint32_t longest = height - 1;
    cover_final_exit_ = false;
    if (bounded) {
      if (len == WalkStates::kUnbounded || len < kMinBoundedCover) return;
      // A run cut short not by a count but by sets that change along it (`c* c "txt"`, a
      // search for a suffix: each code point of C adds a state until a `t` comes): a live
      // automaton, whose walk takes every token of C*, where the cover would hold those of
      // two code points and leave 112,000 of llama-bpe's tokens to be walked one by one
      // (8-19 ms a first-use mask). A bounded repetition's sets die at its depth, so the
      // search fails within that many steps: tried on short covers only.
      if (len <= kMaxLiveOverBounded && live_instead(set0)) return;
      uint32_t s = r1.next;
      for (uint32_t d = 2; d < std::min(len, height); ++d) {
        const WalkStates::Run rs = states.run_class(s);
        if (!(class_key(rs) == class_key(r1))) return;
        s = rs.next;
      }
      // A tolerant run leaves out a last code point after which the context can only end
      // (a line's last character): its tokens are consumed inside the context all the same,
      // so the cover holds them too (and root stops then need only what follows its end).
      if (states.mode() == WalkStates::kTolerant && !last_only && len < height) {
        if (only_ends_on(set_along(r0.next, len - 1), class_key(r1))) {
          ++len;
          cover_final_exit_ = true;
        }
      }
    }
    const bool limits = bounded && len < longest;
    const uint64_t only1[2] = {r1.ascii[0] & ~r0.ascii[0], r1.ascii[1] & ~r0.ascii[1]};
    const int forced_clear = detail::test_max_cover_clear.load(std::memory_order_relaxed);
    if (bit_count(only1[0]) + bit_count(only1[1]) >
        (forced_clear != 0 ? forced_clear : kMaxCoverClear)) {
      return;
    }
    if (class_exits(r1) == nullptr) return;
    cover_bits = class_tokens(class_key(r1));
    if (cover_bits == nullptr) return;
    if (limits && !drop_longer(len)) {
      cover_bits = nullptr;
      return;
    }
    cover_set = last_only ? 0 : r0.next;
    cover_first_exits_ = r0.exits;
    cover_first = class_key(r0);
    cover_first.ascii[0] &= r1.ascii[0];
    cover_first.ascii[1] &= r1.ascii[1];
    cover_first.non_ascii = r1.non_ascii;
    cover_first.holes = r1.holes;
    cover_class_ = class_key(r1);
    cover_len_ = limits ? len : WalkStates::kUnbounded;
    clear_root_children(only1);
  }
  // cover_clear: the root's children at the ASCII code points `cps` (their tokens leave the
  // cover's bitmask). The root's children come in code-point order, ASCII first.
  void clear_root_children(const uint64_t cps[2]) {
    cover_clear.clear();
    if ((cps[0] | cps[1]) == 0) return;
    const auto& trie = tokens.trie();
    for (uint32_t j : tokens.root_children()) {
      const uint32_t cp = trie[j].cp;
      if (cp >= 128) break;
      if (in_class({{cps[0], cps[1]}, false}, cp)) cover_clear.push_back(j);
    }
  }

  // Whether every token below the root's child rc (in C0) is in the cover already and none
  // has a partial UTF-8 tail: nothing there to walk. A leaf holds tokens of one code point
  // (qwen2 and gemma-4 have 10,000-20,000 such leaves, CJK characters and symbols); a
  // larger subtree qualifies when its code points lie in C1 and its tokens within the
  // cover's length (a line of `[^\n]{1,40}`: about 1,500 of llama-bpe's root children, each
  // a frame and a run lookup before), except in a walk observed for a repetition family,
  // which notes the levels its runs stand for as it walks (the cover's set is noted once).
  bool in_cover(const TokenIndex::RootChild& rc) {
    if (rc.partial) return false;
    if (rc.end == rc.node + 1) return true;
    return obs_base == kNoObserve && (cover_unbounded() || rc.height + 1 <= cover_len_) &&
           (chars_within(rc, cover_class_) || no_exit_below(rc.node));
  }
  // Whether no exit of the cover's class lies below node j (in C1): every code point below
  // is in C1. A subtree's code points say only whether some lie from 128 on, which a class
  // with holes or of CJK ranges cannot tell apart; its exits can.
  bool no_exit_below(uint32_t j) {
    const std::vector<uint32_t>* exits = class_exits(cover_class_);
    if (exits == nullptr) return false;
    const auto it = std::upper_bound(exits->begin(), exits->end(), j);
    return it == exits->end() || *it >= tokens.trie()[j].end;
  }

  // A bounded cover: the class tokens less those of more than max_len code points, in
  // bounded_cover_ (cover_bits then points there). False when the shared cache is full.
  // Where many tokens are longer (a short run: the last characters of a `[^\n]{1,40}`
  // line), the class tokens ANDed with the tokens of at most max_len code points: before,
  // such a context got no cover and took 100,000 tokens one by one (0.5-1 ms a mask).
  bool drop_longer(uint32_t max_len) {
    const auto& by_len = tokens_by_length();
    const auto first_short = first_up_to(by_len, max_len);
    const size_t longer = static_cast<size_t>(first_short - by_len.begin());
    if (longer * 16 > tokens.n_vocab()) {
      const std::vector<uint32_t>* up_to = tokens_up_to(max_len);
      if (up_to == nullptr) return false;
      bounded_cover_ = *cover_bits;
      for (size_t w = 0; w < bounded_cover_.size(); ++w) bounded_cover_[w] &= (*up_to)[w];
      cover_bits = &bounded_cover_;
      return true;
    }
    bounded_cover_ = *cover_bits;
    for (auto it = by_len.begin(); it != first_short; ++it) {
      const auto t = static_cast<uint32_t>(it->second);
      bounded_cover_[t >> 5] &= ~(1u << (t & 31));
    }
    cover_bits = &bounded_cover_;
    return true;
  }
  std::vector<uint32_t> bounded_cover_{};
  static constexpr uint32_t kMinBoundedCover = 1;
  static constexpr uint32_t kMaxLiveOverBounded = 8;
  static constexpr size_t kMaxLiveInsteadExits = 8192;
  // Whether set0 is a live automaton (outside an observed walk), which a live walk serves
  // better than the cover being set up: the cover is then left unset. Such a search does
  // not count towards giving live walks up.
  bool live_instead(uint32_t set0, size_t max_exits = SIZE_MAX) {
    if (obs_base != kNoObserve) return false;
    live_optional_ = true;
    const LiveAuto* la = live_auto(set0, true);
    live_optional_ = false;
    if (la == nullptr) return false;
    if (max_exits == SIZE_MAX && !la->dies_at_start()) return true;
    const std::vector<uint32_t>* exits = class_exits(la->cls);
    return exits != nullptr &&
           exits->size() + la->stops.size() <= std::min(max_exits, kMaxLiveInsteadExits);
  }

  // The tokens of at most n full code points as a bitmask (SharedMasks::tokens_up_to),
  // shared by every grammar of the token index. Null when the shared cache is full.
  const std::vector<uint32_t>* tokens_up_to(uint32_t n) {
    const auto& by_len = tokens_by_length();  // (locks shared.mu on first use)
    detail::SharedMasks& shared = tokens.shared_masks();
    std::lock_guard<std::mutex> lock(shared.mu);
    auto& up_to = shared.tokens_up_to;
    if (up_to.size() <= n) up_to.resize(n + 1);
    if (!up_to[n]) {
      // Every length from the longest one known below n up to n at once, each from the one
      // before and the tokens of its own length: the last characters of a bounded run ask
      // for one length after another (8, 7, ... 1), and each built alone set the bits of
      // most of the vocabulary (0.4 ms a length on gemma-4).
      uint32_t k = n;
      while (k > 0 && !up_to[k - 1]) --k;
      const size_t words = bitmask_words(tokens.n_vocab());
      if (shared.bytes + (n + 1 - k) * words * 4 > detail::SharedMasks::kMaxBytes) return nullptr;
      // The tokens of exactly m code points are those before first_up_to(m - 1).
      auto it = k > 0 ? first_up_to(by_len, k - 1) : by_len.end();
      for (uint32_t len = k; len <= n; ++len) {
        auto bits = len > 0 ? std::make_unique<std::vector<uint32_t>>(*up_to[len - 1])
                            : std::make_unique<std::vector<uint32_t>>(words, 0);
        const auto from = first_up_to(by_len, len);
        for (auto t = from; t != it; ++t) bitmask_set(bits->data(), t->second);
        it = from;
        shared.bytes += words * 4;
        up_to[len] = std::move(bits);
      }
    }
    return up_to[n].get();
  }

  // The first entry of tokens_by_length() (longest first) of at most m code points: the
  // tokens of at most m code points are [first_up_to(m), end).
  static std::vector<std::pair<uint32_t, Token>>::const_iterator first_up_to(
      const std::vector<std::pair<uint32_t, Token>>& by_len, uint32_t m) {
    return std::lower_bound(
        by_len.begin(), by_len.end(), m,
        [](const std::pair<uint32_t, Token>& e, uint32_t x) { return e.first > x; });
  }

  // Text tokens with their number of full code points, longest first
  // (SharedMasks::tokens_by_length), shared by every grammar of the token index.
  const std::vector<std::pair<uint32_t, Token>>& tokens_by_length() {
    if (by_length_ == nullptr) {
      detail::SharedMasks& shared = tokens.shared_masks();
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.tokens_by_length.empty()) {
        // A counting sort by length: a comparison sort of 128,000 tokens cost two
        // milliseconds more of the first mask that needed it (llama-bpe).
        const auto& tt = tokens.trie_tokens();
        std::vector<uint32_t> len(tt.size()), count;
        for (size_t k = 0; k < tt.size(); ++k) {
          size_t n;
          tokens.code_points(tt[k].id, &n);
          len[k] = static_cast<uint32_t>(n);
          if (count.size() <= n) count.resize(n + 1, 0);
          ++count[n];
        }
        // Longest first: the slot of length n starts after every longer token.
        std::vector<size_t> start(count.size() + 1, 0);
        for (size_t n = count.size(); n-- > 0;) start[n] = start[n + 1] + count[n];
        for (size_t n = 0; n < count.size(); ++n) start[n] -= count[n];
        std::vector<std::pair<uint32_t, Token>> v(tt.size());
        for (size_t k = 0; k < tt.size(); ++k) v[start[len[k]]++] = {len[k], tt[k].id};
        shared.bytes += v.size() * sizeof(v[0]);
        shared.tokens_by_length = std::move(v);
        shared.trie_rank.assign(tokens.n_vocab(), UINT32_MAX);
        for (size_t k = 0; k < tt.size(); ++k) {
          shared.trie_rank[static_cast<size_t>(tt[k].id)] = static_cast<uint32_t>(k);
        }
        shared.bytes += shared.trie_rank.size() * 4;
      }
      by_length_ = &shared.tokens_by_length;
      trie_rank_ = &shared.trie_rank;
    }
    return *by_length_;
  }
  const std::vector<std::pair<uint32_t, Token>>* by_length_ = nullptr;
  const std::vector<uint32_t>* trie_rank_ = nullptr;
  // A comparison of two text tokens by their place in trie order (SharedMasks::trie_rank).
  auto trie_order() {
    tokens_by_length();
    return [rank = trie_rank_](Token a, Token b) {
      return (*rank)[static_cast<size_t>(a)] < (*rank)[static_cast<size_t>(b)];
    };
  }
  // The text tokens of more than n full code points that `among` (a bitmask over the
  // vocabulary) holds, in trie order, into *out: false (and *out unspecified) where more
  // than `scan` tokens are that long, or more than `most` of them are held.
  bool tokens_longer(uint32_t n, const std::vector<uint32_t>& among, size_t scan, size_t most,
                     std::vector<Token>* out) {
    const auto& by_len = tokens_by_length();
    const auto end = first_up_to(by_len, n);
    if (static_cast<size_t>(end - by_len.begin()) > scan) return false;
    out->clear();
    for (auto it = by_len.begin(); it != end; ++it) {
      if (!bitmask_test(among.data(), it->second)) continue;
      if (out->size() == most) return false;
      out->push_back(it->second);
    }
    std::sort(out->begin(), out->end(), trie_order());
    return true;
  }
  // The full code points of text token t (a partial UTF-8 tail not counted).
  size_t full_cps(Token t) const {
    size_t n;
    tokens.code_points(t, &n);
    return n;
  }

  // The cover's bitmask: the class tokens less those under cover_clear.
  void cover_into(std::vector<uint32_t>& bits) const {
    bits = *cover_bits;
    for (uint32_t j : cover_clear) clear_tokens_below(bits, j);
  }
  // Clears the bits of the tokens at and below trie node j.
  void clear_tokens_below(std::vector<uint32_t>& bits, uint32_t j) const {
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const uint32_t te = tok_begin_of(trie[j].end);
    for (uint32_t k = trie[j].tok_begin; k < te; ++k) {
      const auto t = static_cast<uint32_t>(tt[k].id);
      bits[t >> 5] &= ~(1u << (t & 31));
    }
  }

  // The class tokens of `cls` (see SharedMasks::class_tokens): built once per token index
  // and class, shared by every grammar; null when the shared cache is full.
  std::unordered_map<detail::SharedMasks::ClassTokensKey, const std::vector<uint32_t>*,
                     detail::SharedMasks::ClassTokensKeyHash>
      class_tokens_cache_{};
  const std::vector<uint32_t>* class_tokens(const detail::SharedMasks::ClassKey& cls) {
    const detail::SharedMasks::ClassTokensKey key{cls, no_text.empty()};
    auto it = class_tokens_cache_.find(key);
    if (it != class_tokens_cache_.end()) return it->second;
    const std::vector<uint32_t>* out = nullptr;
    detail::SharedMasks& shared = tokens.shared_masks();
    // The tokens of every code point's class less those with a code point outside `cls`
    // (TokenIndex::cp_token_bits, by group and by ASCII block): tens of microseconds, where
    // the preorder pass below visits most of the trie for a broad class (0.3-1 ms a class,
    // and live walks meet new classes). (Locked apart: the nested call takes shared.mu.)
    const Label every{{~uint64_t{0}, ~uint64_t{0}}, true};
    const std::vector<uint32_t>* all = cls == every ? nullptr : class_tokens(every);
    if (cls != every && all == nullptr) {
      class_tokens_cache_.emplace(key, nullptr);
      return nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      auto sit = shared.class_tokens.find(key);
      if (sit != shared.class_tokens.end()) {
        out = sit->second.get();
      } else {
        const size_t words = bitmask_words(tokens.n_vocab());
        if (shared.bytes + words * 4 <= detail::SharedMasks::kMaxBytes) {
          auto bits = std::make_unique<std::vector<uint32_t>>(words, 0);
          if (all != nullptr) {
            *bits = *all;
            leave_out_tokens(cls, *all, *bits);
          } else {
            // The trie in preorder (every token of the trie but partial tails and controls).
            const auto& trie = tokens.trie();
            const auto& tt = tokens.trie_tokens();
            for (uint32_t j = 1; j < trie.size(); ++j) {
              for (uint32_t k = trie[j].tok_begin; k < trie[j].tok_end; ++k) {
                const auto& t = tt[k];
                if (t.partial.n_remain != 0) continue;
                if (!key.controls_as_text && tokens.is_control(t.id)) continue;
                bitmask_set(bits->data(), t.id);
              }
            }
          }
          shared.bytes += words * 4;
          out = bits.get();
          shared.class_tokens.emplace(key, std::move(bits));
        }
      }
    }
    class_tokens_cache_.emplace(key, out);
    return out;
  }
  // Clears from `bits` (a copy of `all`, the every-code-point class's tokens) every token
  // with a code point outside `cls`: the groups of the ASCII code points outside it (a whole
  // block's union where it leaves out all 32), then group 128 where the class takes no code
  // point from 128 on but its holes. With holes outside the class, the tokens below a hole's
  // node whose parent is inside the class or the root (where the token first leaves it; one
  // that meets an ASCII code point outside first is cleared above); with holes inside it, the
  // tokens below a hole's node all of whose code points are in the class come back.
  void leave_out_tokens(const detail::SharedMasks::ClassKey& cls, const std::vector<uint32_t>& all,
                        std::vector<uint32_t>& bits) const {
    const size_t words = bits.size();
    auto clear_group = [&](uint32_t g) {
      const uint32_t* gb = tokens.cp_token_bits(g);
      for (size_t w = 0; w < words; ++w) bits[w] &= ~gb[w];
    };
    for (uint32_t b = 0; b < 4; ++b) {
      const auto out = static_cast<uint32_t>(~(cls.ascii[b >> 1] >> (32 * (b & 1))));
      if (out == ~uint32_t{0}) {
        clear_group(TokenIndex::kCpGroups + b);
        continue;
      }
      for (uint32_t m = out; m != 0; m &= m - 1) {
        clear_group(32 * b + static_cast<uint32_t>(__builtin_ctz(m)));
      }
    }
    if (!cls.non_ascii) clear_group(128);
    if (cls.holes == 0) return;
    if (cls.non_ascii) {
      // The tokens below a hole's node whose parent is inside the class or the root (the
      // first code point of the token outside it, where no ASCII one came first).
      high_nodes_in_holes(cls, [&](const TokenIndex::HighNode& h) {
        if (h.parent_cp == TokenIndex::kRootParent || in_class(cls, h.parent_cp)) {
          clear_tokens_below(bits, h.node);
        }
      });
      return;
    }
    // The class holds some code points from 128 on (`cls.holes`, CJK ranges): the tokens
    // whose first such code point is at a node below the root, or below an ASCII code point
    // of the class on a path inside it, come back where every node on their path is in the
    // class: a preorder pass over each such node's subtree, pruned outside the class. The
    // root's children are read in trie order (a CJK range holds thousands of them), the
    // deeper nodes from the sorted high nodes.
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    auto bring_back_below = [&](uint32_t j0) {
      for (uint32_t j = j0; j < trie[j0].end;) {
        if (!in_class(cls, trie[j].cp)) {
          j = trie[j].end;
          continue;
        }
        for (uint32_t k = trie[j].tok_begin; k < trie[j].tok_end; ++k) {
          const auto t = static_cast<uint32_t>(tt[k].id);
          if (bitmask_test(all.data(), t)) bitmask_set(bits.data(), tt[k].id);
        }
        ++j;
      }
    };
    for (const TokenIndex::RootChild& rc : tokens.root_kids()) {
      if (rc.cp >= 128 && in_class(cls, rc.cp)) bring_back_below(rc.node);
    }
    const auto& depth_of = tokens.node_depth();
    high_nodes_in_holes(cls, [&](const TokenIndex::HighNode& h) {
      if (h.parent_cp >= 128 || !in_class(cls, h.parent_cp)) return;
      // The path above h, read from the first token of its subtree.
      size_t n;
      const uint32_t* cps = tokens.code_points(tt[trie[h.node].tok_begin].id, &n);
      const uint32_t d = depth_of[h.node];
      if (std::all_of(cps, cps + d - 1, [&](uint32_t c) { return in_class(cls, c); })) {
        bring_back_below(h.node);
      }
    });
  }
  // Calls f on each trie node whose code point >= 128 lies in the holes of `cls` (outside
  // the class where it takes every other code point from 128 on, inside it where it takes
  // only those): a binary search per range in the nodes sorted by code point.
  template <class F>
  void high_nodes_in_holes(const detail::SharedMasks::ClassKey& cls, F f) const {
    const auto& high = tokens.high_nodes();
    for (const CharRange& r : detail::class_holes(cls.holes)) {
      auto it =
          std::lower_bound(high.begin(), high.end(), r.lo,
                           [](const TokenIndex::HighNode& h, uint32_t cp) { return h.cp < cp; });
      for (; it != high.end() && it->cp <= r.hi; ++it) f(*it);
    }
  }

  // Printable ASCII code points (0x20-0x7E) in a bitmap of 0-127. A class with fewer than
  // half of them is left to the walk, which prunes a narrow class quickly anyway.
  static int printable_count(const uint64_t ascii[2]) {
    return bit_count(ascii[0] & ~uint64_t{0xFFFFFFFF}) + bit_count(ascii[1] & ~(uint64_t{1} << 63));
  }
  // Live and label walks need this many printable code points in their class.
  static constexpr int kMinExitClassPrintable = 48;
  static constexpr int kMinBroadPrintable = 26;
  static constexpr uint32_t kMinBroadHigh = 128;
  // A class broad enough for runs, exits and covers to pay: at least kMinBroadPrintable
  // printable ASCII code points (`[a-z]`: a word of a bounded length), or every code point
  // from 128 on but its holes, or at least kMinBroadHigh code points from 128 on (CJK ranges,
  // a Cyrillic block); a narrower class's walk prunes quickly anyway.
  static bool broad(const detail::SharedMasks::ClassKey& k) {
    if (printable_count(k.ascii) >= kMinBroadPrintable || k.non_ascii) return true;
    uint64_t n = 0;
    for (const CharRange& r : detail::class_holes(k.holes)) n += uint64_t{r.hi} - r.lo + 1;
    return n >= kMinBroadHigh;
  }
  // The same for what a set takes next (WalkStates::first: positive ranges).
  static bool broad(const CharSet& f) {
    if (f.any || f.negated || printable_count(f.ascii) >= kMinBroadPrintable) return true;
    uint64_t n = 0;
    for (size_t i = f.ranges.size(); i-- > 0 && f.ranges[i].hi >= 128 && n < kMinBroadHigh;) {
      n += uint64_t{f.ranges[i].hi} - std::max<uint32_t>(f.ranges[i].lo, 128) + 1;
    }
    return n >= kMinBroadHigh;
  }
  static constexpr uint32_t kMinPastEndSkipNodes = 256;

  // The class exits of a run's class (see SharedMasks::exits): built once per token index
  // and class, shared by every grammar; null when the class is too narrow to be worth it
  // (a walk prunes a narrow class quickly anyway), has too many exits, or the cache is full.
  std::unordered_map<detail::SharedMasks::ClassKey, const std::vector<uint32_t>*,
                     detail::SharedMasks::ClassKeyHash>
      exit_cache_{};
  // `budget`: what the caller's walk would cost without the exits, in nodes an exits build
  // looks at. A schema's key automaton makes a class per prefix of its names (a string's
  // characters less a few letters), each with thousands of exits: built to skip through one
  // small subtree, they cost more than walking it. So a class not built yet is built once
  // the budgets asked of it add up to the nodes its build looks at (those outside the class),
  // and until then each call gets null: a walk that meets the class in thousands of small
  // subtrees (the characters of `.*.txt` less the `t` that moves it on, under each of the
  // root's children) pays at most about twice what skipping would have cost it.
  const std::vector<uint32_t>* class_exits(const WalkStates::Run& r, size_t budget = SIZE_MAX) {
    return class_exits(class_key(r), budget);
  }
  const std::vector<uint32_t>* class_exits(const detail::SharedMasks::ClassKey& key,
                                           size_t budget = SIZE_MAX) {
    auto it = exit_cache_.find(key);
    if (it != exit_cache_.end()) return it->second;
    const std::vector<uint32_t>* out = nullptr;
    if (broad(key)) {
      detail::SharedMasks& shared = tokens.shared_masks();
      std::lock_guard<std::mutex> lock(shared.mu);
      auto sit = shared.exits.find(key);
      if (sit != shared.exits.end()) {
        out = sit->second.get();
      } else if (shared.exits.size() < detail::SharedMasks::kMaxExitClasses) {
        if (budget != SIZE_MAX) {
          ExitRent& rent = exit_rent_[key];
          if (rent.build_nodes == 0) rent.build_nodes = exits_build_nodes(key) + 1;
          rent.asked += budget;
          if (rent.build_nodes > rent.asked) return nullptr;
        }
        out = build_class_exits(key, shared);
      }
    }
    exit_cache_.emplace(key, out);
    return out;
  }
  // Per class not built yet: the nodes its build looks at (+1, 0 while unknown) and the
  // budgets asked of it so far.
  struct ExitRent {
    size_t build_nodes = 0, asked = 0;
  };
  std::unordered_map<detail::SharedMasks::ClassKey, ExitRent, detail::SharedMasks::ClassKeyHash>
      exit_rent_{};
  // The trie nodes at depth two or more whose code point is in the class (through the
  // token index's code-point groups): what build_class_exits looks at for the complement of
  // a run's class, and how rare a label is (find_labels).
  size_t class_nodes(const detail::SharedMasks::ClassKey& cls) const {
    const auto& goff = tokens.cp_group_offsets();
    size_t n = 0;
    // (By the class's bits, or those it leaves out where it holds most of ASCII: a live
    // search asks once per set it queues, mostly of a string's broad class.)
    const bool most = bit_count(cls.ascii[0]) + bit_count(cls.ascii[1]) > 64;
    for (uint32_t half = 0; half < 2; ++half) {
      for (uint64_t b = most ? ~cls.ascii[half] : cls.ascii[half]; b != 0; b &= b - 1) {
        const uint32_t g = half * 64 + static_cast<uint32_t>(__builtin_ctzll(b));
        n += goff[g + 1] - goff[g];
      }
    }
    if (most) n = (goff[128] - goff[0]) - n;
    if (takes_high_cps(cls)) n += goff[129] - goff[128];
    return n;
  }
  // The nodes an exits build of `key` looks at: for a class without ASCII code points,
  // those inside it; else the entries of the code-point pairs it marks (those of a group
  // above ASCII counted whole where the class has holes) and a pass over the node bitmap
  // (build_class_exits).
  size_t exits_build_nodes(const detail::SharedMasks::ClassKey& key) const {
    if ((key.ascii[0] | key.ascii[1]) == 0) return class_nodes(key);
    const auto& poff = tokens.cp_pair_offsets();
    constexpr uint32_t kG = TokenIndex::kCpGroups;
    size_t n = tokens.trie().size() / 64;
    for (uint32_t g = 0; g <= 128; ++g) {
      if (!group_leaves(key, g)) continue;
      for (uint32_t pg = 0; pg <= 128; ++pg) {
        if (group_holds(key, pg)) n += poff[g * kG + pg + 1] - poff[g * kG + pg];
      }
    }
    return n;
  }
  // Whether a code-point group has a code point outside the class, and inside it (group
  // 128: some code point from 128 on, as far as the class's flag and holes tell).
  static bool group_leaves(const detail::SharedMasks::ClassKey& key, uint32_t g) {
    return g < 128 ? !in_class(key, g) : !key.non_ascii || key.holes != 0;
  }
  static bool group_holds(const detail::SharedMasks::ClassKey& key, uint32_t g) {
    return g < 128 ? in_class(key, g) : key.non_ascii || key.holes != 0;
  }
  // A node walked costs about this many nodes looked at by an exits build.
  static constexpr size_t kExitBuildPerWalkedNode = 4;
  // Called with shared.mu held. Only the nodes whose code point is outside the class are
  // looked at (through the token index's code-point groups), marked in a bitmap over the
  // nodes, and read back in trie order: tens of microseconds for a string's class.
  const std::vector<uint32_t>* build_class_exits(const detail::SharedMasks::ClassKey& key,
                                                 detail::SharedMasks& shared) {
    const auto& trie = tokens.trie();
    const auto& groups = tokens.cp_groups();
    const auto& goff = tokens.cp_group_offsets();
    std::vector<uint64_t>& bits = exit_bits_;
    bits.assign((trie.size() + 63) / 64, 0);
    size_t count = 0;
    bool worth = true;
    auto mark = [&](uint32_t b) {
      bits[b >> 6] |= uint64_t{1} << (b & 63);
      ++count;
    };
    // A class without ASCII code points (CJK ranges, `[^\x00-\x7F]`): most nodes lie outside
    // it, so the build reads the children of the nodes inside it instead (the root's children
    // and the nodes from 128 on).
    // (Each child's code point read beside its id, not from its trie node.) `from` skips
    // the children below it, which the pairs mark.
    const auto& coff = tokens.child_offsets();
    const auto& kids = tokens.child_nodes();
    const auto& kid_cps = tokens.child_cps();
    auto mark_children_outside = [&](uint32_t p, uint32_t from = 0) {
      for (uint32_t k = coff[p]; k < coff[p + 1]; ++k) {
        if (kid_cps[k] >= from && !in_class(key, kid_cps[k])) mark(kids[k]);
      }
    };
    const bool from_inside = (key.ascii[0] | key.ascii[1]) == 0;
    if (from_inside && !key.non_ascii && key.holes != 0) {
      // Ranges above ASCII alone (CJK): the children outside of their nodes, found from the
      // sorted high nodes (the scan below read the trie node of every node from 128 on: 550
      // µs on qwen2).
      high_nodes_in_holes(key,
                          [&](const TokenIndex::HighNode& h) { mark_children_outside(h.node); });
      worth = count * 8 <= trie.size();
    } else if (from_inside) {
      for (uint32_t j : tokens.root_children()) {
        if (in_class(key, trie[j].cp)) mark_children_outside(j);
      }
      worth = count * 8 <= trie.size();
      for (uint32_t k = goff[128]; k < goff[129] && worth; ++k) {
        const uint32_t p = groups[k].node;
        if (in_class(key, trie[p].cp)) mark_children_outside(p);
        worth = count * 8 <= trie.size();
      }
    }
    // Otherwise the pairs of a group outside the class and a parent's group inside it, read
    // whole; entry by entry only where a group >= 128 is split by holes.
    const auto& pairs = tokens.cp_pairs();
    const auto& poff = tokens.cp_pair_offsets();
    constexpr uint32_t kG = TokenIndex::kCpGroups;
    // With holes, the nodes of group 128 outside the class come from the sorted high nodes.
    const uint32_t last_group = key.holes != 0 ? 127 : 128;
    for (uint32_t g = 0; g <= last_group && worth && !from_inside; ++g) {
      if (!group_leaves(key, g)) continue;
      for (uint32_t pg = 0; pg <= 128; ++pg) {
        if (!group_holds(key, pg)) continue;
        const uint32_t* o = poff.data() + g * kG + pg;
        if (pg < 128 || key.holes == 0) {
          for (uint32_t k = o[0]; k < o[1]; ++k) mark(pairs[k].node);
          continue;
        }
        for (uint32_t k = o[0]; k < o[1]; ++k) {
          if (in_class(key, pairs[k].parent_cp)) mark(pairs[k].node);
        }
      }
      worth = count * 8 <= trie.size();
    }
    if (key.holes != 0 && worth && !from_inside) {
      if (key.non_ascii) {
        // The holes' nodes whose parent is inside the class.
        high_nodes_in_holes(key, [&](const TokenIndex::HighNode& h) {
          if (h.parent_cp != TokenIndex::kRootParent && in_class(key, h.parent_cp)) mark(h.node);
        });
      } else {
        // Every node from 128 on below an ASCII parent inside the class but those the class
        // holds; and the children from 128 on outside it of the nodes it holds.
        for (uint32_t pg = 0; pg < 128; ++pg) {
          if (!group_holds(key, pg)) continue;
          const uint32_t* o = poff.data() + 128 * kG + pg;
          for (uint32_t k = o[0]; k < o[1]; ++k) mark(pairs[k].node);
        }
        high_nodes_in_holes(key, [&](const TokenIndex::HighNode& h) {
          if (h.parent_cp < 128 && in_class(key, h.parent_cp)) {
            bits[h.node >> 6] &= ~(uint64_t{1} << (h.node & 63));
            --count;
          }
          mark_children_outside(h.node, 128);
        });
      }
      worth = count * 8 <= trie.size();
    }
    std::unique_ptr<std::vector<uint32_t>> exits;
    if (worth) {
      exits = std::make_unique<std::vector<uint32_t>>();
      exits->reserve(count);
      for (size_t w = 0; w < bits.size(); ++w) {
        for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
          exits->push_back(static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(b))));
        }
      }
    }
    const size_t bytes = exits ? exits->capacity() * 4 : 0;
    if (shared.bytes + bytes > detail::SharedMasks::kMaxBytes) return nullptr;
    shared.bytes += bytes;
    const std::vector<uint32_t>* out = exits.get();
    shared.exits.emplace(key, std::move(exits));
    return out;
  }
  std::vector<uint64_t> exit_bits_{};

  // A frame c at node j with one live set (inside the context with nothing past its end,
  // or past the end with nothing inside: `past_end`) whose run is of a broad class: every
  // path below j stays in the run up to its first code point outside the run's class, or
  // up to the run's depth when it is bounded (`x{0,12}`). The tokens before such a code
  // point, and not deeper than the run, are taken at once (accepted inside the context,
  // uncertain past its end), in ranges of trie order found from the class exits and the
  // nodes one past the run's depth (its cuts), and the walk goes on only at those nodes:
  // a few thousand where a string's characters would visit every node.
  bool skip_region(uint32_t j, const Frame& c, bool past_end) {
    // Cheap tests first: a run's class lies within what its set can consume next, and a
    // set's run is computed on first use (a step on each ASCII code point), which only a
    // large subtree pays back past the context's end, where sets are many.
    const CharSet* first = past_end ? c.ffirst : c.first;
    if (first == nullptr || !broad(*first)) return false;
    const uint32_t n_nodes = tokens.trie()[j].end - j;
    if (past_end && n_nodes < kMinPastEndSkipNodes) return false;
    const uint32_t set = past_end ? c.fset : c.set;
    const auto& sc = tokens.subtree_chars()[j];
    const WalkStates::Run r = states.run(set, sc.height);
    // A run shorter than the subtree: the nodes one past its depth are where it ends.
    const bool cut = r.depth < sc.height;
    if (cut && (r.depth == 0 || n_nodes < kMinCutSkipNodes)) return false;
    const std::vector<uint32_t>* exits = class_exits(r, size_t{n_nodes} * kExitBuildPerWalkedNode);
    if (exits == nullptr) return false;
    if (tolerant_ && !past_end_dies(r)) return false;
    if (!past_end) note_run(set, sc.height);
    const auto& trie = tokens.trie();
    const auto& depth_of = tokens.node_depth();
    const std::vector<uint32_t>* cuts = nullptr;
    const CharSet* cut_first = nullptr;  // what the set after the run takes (null: all)
    uint32_t cut_set = set;
    const uint32_t cut_depth = depth_of[j] + r.depth + 1u;  // (when cut)
    if (cut) {
      cuts = &depth_nodes(cut_depth);
      cut_set = set_along(set, r.depth);
      if ((!c.pending || past_end) && !tolerant_) {
        cut_first = cut_set != 0 ? &states.first(cut_set) : &kNothing;
      }
    }
    // A cut node whose code point the set after the run cannot take goes nowhere.
    auto cut_lives = [&](uint32_t b) {
      if (cut_first == nullptr) return true;
      const uint32_t cp = trie[b].cp;
      return cut_first->match(cp) || (cp >= 128 && cut_set != 0 && states.uniform(cut_set));
    };
    std::vector<Token>& out = past_end ? uncertain : accepted;
    std::vector<Token>* rest = !past_end && c.pending ? &uncertain : nullptr;
    // A bounded cover holds the tokens between the stops too: they are no longer than its run.
    const bool cov = !past_end && covered(j, set, c.depth, c.pending);
    region_exits_.clear();
    uint64_t live[2];
    if (cov && cut_first != nullptr && few_live_cuts(*cut_first, live)) {
      // Only the stops matter: found from the exits and the nodes of the live code points.
      live_stops(j, class_key(r), *exits, cut_depth, live);
      take_partials_between_stops(j, cut_depth, set, c.depth);
    } else {
      class_region(
          j, class_key(r), *exits, cuts,
          [&](uint32_t tb, uint32_t te) { take_in_run(tb, te, set, c.depth, out, rest, cov); },
          [&](uint32_t b, bool is_cut) {
            if (!is_cut || cut_lives(b)) region_exits_.push_back(b);
          });
    }
    queue_stops(depth_of[j], set, c, past_end);
    return true;
  }
  // Each stop in region_exits_ (below a node at depth `top`, whose frame is c and run's set
  // `set`) is walked on from the run's set at its parent: one frame per depth. Pushed in
  // reverse so that they are visited in trie order.
  void queue_stops(uint32_t top, uint32_t set, const Frame& c, bool past_end) {
    const auto& depth_of = tokens.node_depth();
    run_frames_.clear();
    for (size_t k = region_exits_.size(); k-- > 0;) {
      const uint32_t b = region_exits_[k];
      const uint32_t rel = depth_of[b] - 1u - top;  // run code points before b
      if (run_frames_.size() <= rel) run_frames_.resize(rel + 1, kNoFrame);
      if (run_frames_[rel] == kNoFrame) {
        // (tolerant: the context may end before b)
        const auto [s, exited] = follow_runs(set, rel, c.exited);
        run_frames_[rel] = static_cast<uint32_t>(frames.size());
        frames.push_back(past_end    ? make_frame(0, s, c.depth + rel, false, false, false)
                         : tolerant_ ? make_frame(s, 0, c.depth + rel, exited, false, false)
                                     : make_frame(s, 0, c.depth + rel, false, false, c.pending));
      }
      todo.push_back({b, run_frames_[rel]});
    }
  }
  // Whether the cuts of a bounded run that go on are those of a few ASCII code points
  // (live[]): the set after the run takes no code point above ASCII (a code point there
  // steps a uniform set all the same in step_on, and dies), and at most kMaxLiveCutCps.
  static bool few_live_cuts(const CharSet& cut_first, uint64_t live[2]) {
    if (cut_first.any || cut_first.negated ||
        (!cut_first.ranges.empty() && cut_first.ranges.back().hi >= 128)) {
      return false;
    }
    live[0] = cut_first.ascii[0];
    live[1] = cut_first.ascii[1];
    return bit_count(live[0]) + bit_count(live[1]) <= kMaxLiveCutCps;
  }
  static constexpr int kMaxLiveCutCps = 8;
  // Adds the code points of `also` to live[] where they are a few ASCII ones as well.
  static bool add_live(const CharSet& also, uint64_t live[2]) {
    uint64_t more[2];
    if (!few_live_cuts(also, more)) return false;
    live[0] |= more[0];
    live[1] |= more[1];
    return bit_count(live[0]) + bit_count(live[1]) <= kMaxLiveCutCps;
  }

  // The stops of a bounded run below node j (as class_region finds them, less the cuts that
  // go nowhere) without visiting its cuts: the children of j outside the class (when j's
  // own code point is), the class exits above the cut depth, and the nodes at the cut depth
  // of the live code points (through the token index's code-point groups), in trie order,
  // less those below another stop. A string's last characters (`char{0,3}` then `"`) have
  // tens of thousands of cuts, each a trie node read at random (0.7 ms a context), and a
  // few hundred live ones.
  void live_stops(uint32_t j, const detail::SharedMasks::ClassKey& cls,
                  const std::vector<uint32_t>& exits, uint32_t cut_depth, const uint64_t live[2]) {
    const auto& trie = tokens.trie();
    const auto& depth_of = tokens.node_depth();
    const uint32_t lo = j + 1, hi = trie[j].end;
    clear_stop_cands();
    if (!in_class(cls, trie[j].cp)) {
      const auto& off = tokens.child_offsets();
      const auto& kids = tokens.child_nodes();
      const auto& kid_cps = tokens.child_cps();
      for (uint32_t k = off[j]; k < off[j + 1]; ++k) {
        if (!in_class(cls, kid_cps[k])) stop_cands_.push_back(kids[k]);
      }
    }
    end_stop_run();
    for (auto it = std::lower_bound(exits.begin(), exits.end(), lo); it != exits.end() && *it < hi;
         ++it) {
      if (depth_of[*it] < cut_depth) stop_cands_.push_back(*it);
    }
    end_stop_run();
    add_live_cuts(live, cut_depth, lo, hi, [](uint32_t) { return true; });
    keep_outer_stops();
  }
  // Onto stop_cands_: the nodes in [lo, hi) at the cut depth of the live code points (from
  // the code-point groups) that `keep` accepts.
  template <class Keep>
  void add_live_cuts(const uint64_t live[2], uint32_t cut_depth, uint32_t lo, uint32_t hi,
                     Keep keep) {
    const auto& depth_of = tokens.node_depth();
    const auto& groups = tokens.cp_groups();
    const auto& goff = tokens.cp_group_offsets();
    for (int w = 0; w < 2; ++w) {
      for (uint64_t bits = live[w]; bits != 0; bits &= bits - 1) {
        const uint32_t cp = static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits));
        auto it = std::lower_bound(
            groups.begin() + goff[cp], groups.begin() + goff[cp + 1], lo,
            [](const TokenIndex::NodeWithParent& e, uint32_t v) { return e.node < v; });
        for (; it != groups.begin() + goff[cp + 1] && it->node < hi; ++it) {
          if (depth_of[it->node] == cut_depth && keep(it->node)) stop_cands_.push_back(it->node);
        }
        end_stop_run();
      }
    }
  }
  std::vector<uint32_t> stop_cands_{};
  // Where each run of stop_cands_ ends: the candidates come as a few runs, each in trie
  // order (the children outside the class, the exits, the cut nodes of each live code point).
  std::vector<size_t> stop_runs_{};
  static constexpr size_t kMaxMergedStopRuns = 8, kMinMergedStops = 64;
  std::vector<uint32_t> stop_merged_{};
  void clear_stop_cands() {
    stop_cands_.clear();
    stop_runs_.clear();
  }
  void end_stop_run() {
    const size_t start = stop_runs_.empty() ? 0 : stop_runs_.back();
    if (stop_cands_.size() > start) stop_runs_.push_back(stop_cands_.size());
  }
  // The candidates in trie order, each dropped when it lies below one kept before it, onto
  // region_exits_.
  void keep_outer_stops() {
    const auto& trie = tokens.trie();
    // The runs merged into one, each into the ones before it (through a scratch list kept
    // across calls): a sort of the whole list was a tenth of a `[^\n]{1,40}` line's walk
    // (1,600 candidates per context). A short list, or one of many runs (many live code
    // points), is sorted.
    end_stop_run();
    if (stop_runs_.size() > 1) {
      if (stop_cands_.size() <= kMinMergedStops || stop_runs_.size() > kMaxMergedStopRuns) {
        std::sort(stop_cands_.begin(), stop_cands_.end());
      } else {
        const auto at = [&](size_t k) {
          return stop_cands_.begin() + static_cast<std::ptrdiff_t>(k);
        };
        stop_merged_.resize(stop_cands_.size());
        for (size_t r = 1; r < stop_runs_.size(); ++r) {
          std::merge(at(0), at(stop_runs_[r - 1]), at(stop_runs_[r - 1]), at(stop_runs_[r]),
                     stop_merged_.begin());
          std::copy(stop_merged_.begin(),
                    stop_merged_.begin() + static_cast<std::ptrdiff_t>(stop_runs_[r]), at(0));
        }
      }
    }
    uint32_t skip_end = 0;
    for (uint32_t b : stop_cands_) {
      if (b < skip_end) continue;  // below a stop found before
      region_exits_.push_back(b);
      skip_end = trie[b].end;
    }
  }

  // Under a cover, what the run takes below node j between its stops (region_exits_, in
  // trie order) is the tokens with a partial UTF-8 tail (take_in_run): those above the cut
  // depth and below no stop.
  void take_partials_between_stops(uint32_t j, uint32_t cut_depth, uint32_t set, uint32_t depth) {
    size_t s = 0;
    take_partials_outside_stops(tok_begin_of(j + 1), tok_begin_of(tokens.trie()[j].end), cut_depth,
                                set, depth, &s);
  }
  // The same for the trie tokens [tb, te), *s the first stop of region_exits_ that may still
  // hold one (the ranges of several calls come in trie order).
  void take_partials_outside_stops(uint32_t tb, uint32_t te, uint32_t cut_depth, uint32_t set,
                                   uint32_t depth, size_t* s, bool exited0 = false) {
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const auto& pt = tokens.partial_trie_tokens();
    for (auto it = std::lower_bound(pt.begin(), pt.end(), tb); it != pt.end() && *it < te; ++it) {
      const uint32_t k = *it;
      while (*s < region_exits_.size() && tok_begin_of(trie[region_exits_[*s]].end) <= k) ++*s;
      if (*s < region_exits_.size() && trie[region_exits_[*s]].tok_begin <= k) continue;
      size_t ncp;
      tokens.code_points(tt[k].id, &ncp);
      if (ncp >= cut_depth) continue;  // below a cut
      take_in_run(k, k + 1, set, depth, accepted, nullptr, true, exited0);
    }
  }

  // The tokens below node j up to where a class ends, in trie order: take(tb, te) for each
  // range of trie tokens whose code points past j lie in the class, stop(b, is_cut) for each
  // node b where it ends: an exit (outside the class, its parent inside), a child of j
  // outside it, or one of `cuts` (nodes one past a bounded run's depth; may be null).
  template <class Take, class Stop>
  void class_region(uint32_t j, const detail::SharedMasks::ClassKey& cls,
                    const std::vector<uint32_t>& exits, const std::vector<uint32_t>* cuts,
                    Take take, Stop stop) const {
    const auto& trie = tokens.trie();
    // Nodes [lo, hi) under a node inside the class: the tokens up to each exit or cut, then
    // past its subtree.
    auto scan = [&](uint32_t lo, uint32_t hi) {
      uint32_t cur = lo;
      auto it = std::lower_bound(exits.begin(), exits.end(), cur);
      std::vector<uint32_t>::const_iterator ct;
      if (cuts != nullptr) ct = std::lower_bound(cuts->begin(), cuts->end(), cur);
      while (cur < hi) {
        it = gallop(it, exits.end(), cur);
        uint32_t b = it != exits.end() && *it < hi ? *it : hi;
        bool is_cut = false;
        if (cuts != nullptr) {
          ct = gallop(ct, cuts->end(), cur);
          if (ct != cuts->end() && *ct < b) {
            b = *ct;
            is_cut = true;
          }
        }
        take(trie[cur].tok_begin, tok_begin_of(b));
        if (b == hi) break;
        stop(b, is_cut);
        cur = trie[b].end;
      }
    };
    if (in_class(cls, trie[j].cp)) {
      scan(j + 1, trie[j].end);
      return;
    }
    const auto& off = tokens.child_offsets();
    const auto& kids = tokens.child_nodes();
    const auto& kid_cps = tokens.child_cps();
    for (uint32_t k = off[j]; k < off[j + 1]; ++k) {
      const uint32_t n = kids[k];
      if (!in_class(cls, kid_cps[k])) {
        stop(n, false);
        continue;
      }
      take(trie[n].tok_begin, trie[n].tok_end);
      scan(n + 1, trie[n].end);
    }
  }

  // The first element of the sorted [first, last) not below v, searched forward from first
  // in doubling steps: the stops of a scan are found in trie order, mostly close together
  // (a bounded run's cuts, thousands per region).
  static std::vector<uint32_t>::const_iterator gallop(std::vector<uint32_t>::const_iterator first,
                                                      std::vector<uint32_t>::const_iterator last,
                                                      uint32_t v) {
    if (first == last || *first >= v) return first;
    ptrdiff_t step = 1;
    while (step < last - first && first[step] < v) {
      first += step;
      step *= 2;
    }
    return std::lower_bound(first + 1, first + std::min(step, last - first), v);
  }
  // Below this many nodes a walk through a bounded run costs less than finding its cuts.
  static constexpr uint32_t kMinCutSkipNodes = 64;
  inline static const CharSet kNothing{};

  // The trie nodes at depth d in trie order (SharedMasks::nodes_by_depth), shared by every
  // grammar of the token index.
  const std::vector<uint32_t>& depth_nodes(uint32_t d) {
    if (by_depth_ == nullptr) {
      detail::SharedMasks& shared = tokens.shared_masks();
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.nodes_by_depth.empty()) {
        const auto& depth_of = tokens.node_depth();
        std::vector<std::vector<uint32_t>> by(1);
        for (uint32_t n = 1; n < depth_of.size(); ++n) {
          if (by.size() <= depth_of[n]) by.resize(depth_of[n] + 1u);
          by[depth_of[n]].push_back(n);
        }
        shared.bytes += depth_of.size() * 4;
        shared.nodes_by_depth = std::move(by);
      }
      by_depth_ = &shared.nodes_by_depth;
    }
    static const std::vector<uint32_t> none;
    return d < by_depth_->size() ? (*by_depth_)[d] : none;
  }
  const std::vector<std::vector<uint32_t>>* by_depth_ = nullptr;
  static constexpr uint32_t kNoFrame = 0xFFFFFFFFu;
  std::vector<uint32_t> region_exits_{}, run_frames_{};

  // Queues the children of a node (child_nodes()[cb, ce)) whose code point is in cs and
  // not in skip, for frame f. Pushed in reverse so that they are visited in trie order.
  void queue_matching(uint32_t cb, uint32_t ce, const CharSet& cs, const CharSet* skip,
                      uint32_t f) {
    const auto& kids = tokens.child_nodes();
    const auto& kid_cps = tokens.child_cps();
    auto take = [&](uint32_t k) {
      const uint32_t cp = kid_cps[k];
      if (cs.match(cp) && (skip == nullptr || !skip->match(cp))) todo.push_back({kids[k], f});
    };
    if (cs.any || cs.negated || cs.ranges.size() * 8 > ce - cb) {
      for (uint32_t k = ce; k-- > cb;) take(k);
      return;
    }
    // Few ranges, many children: binary-search each range.
    for (size_t ri = cs.ranges.size(); ri-- > 0;) {
      const auto& r = cs.ranges[ri];
      const auto past = std::upper_bound(kid_cps.begin() + cb, kid_cps.begin() + ce, r.hi);
      for (auto k = static_cast<uint32_t>(past - kid_cps.begin()); k-- > cb && kid_cps[k] >= r.lo;)
        take(k);
    }
  }

  // Queues the children of node j that may lead somewhere from frame f: those the frame's
  // sets can consume, and what may follow a rule after the part past the end was left;
  // every child while pending.
  void queue_children(uint32_t j, uint32_t f) {
    const auto& off = tokens.child_offsets();
    const uint32_t cb = off[j], ce = off[j + 1];
    const Frame& fr = frames[f];
    const auto& kids = tokens.child_nodes();
    if (fr.pending || (exit_any && fr.exited)) {
      for (uint32_t k = ce; k-- > cb;) todo.push_back({kids[k], f});
      return;
    }
    if (fr.fexited) {
      const auto& kid_cps = tokens.child_cps();
      for (uint32_t k = ce; k-- > cb;) {
        const uint32_t cp = kid_cps[k];
        if (leave_follow->match(cp) || (fr.first != nullptr && fr.first->match(cp)) ||
            (fr.ffirst != nullptr && fr.ffirst->match(cp))) {
          todo.push_back({kids[k], f});
        }
      }
      return;
    }
    if (fr.ffirst != nullptr) queue_matching(cb, ce, *fr.ffirst, fr.first, f);
    if (fr.first != nullptr) queue_matching(cb, ce, *fr.first, nullptr, f);
  }

  // One step of `set` on the code point of a trie node: (next set << 1) | left.
  uint32_t step_on(uint32_t set, const CharSet* first, uint32_t cp) {
    if (first == nullptr || set == 0) return 0;
    // Above ASCII, a set that treats all such code points alike needs no range search.
    if ((cp >= 128 && states.uniform(set)) || first->match(cp)) return states.step(set, cp);
    return 0;
  }

  Frame make_frame(uint32_t set, uint32_t fset, uint32_t depth, bool exited, bool fexited,
                   bool pending) {
    if (obs_base != kNoObserve && set != 0) note_low(set_low(set));
    const uint32_t fnext = exited ? merge(fset, after_end) : fset;
    return {set,
            fset,
            fnext,
            depth,
            exited,
            fexited,
            pending,
            set != 0 ? &states.first(set) : nullptr,
            fnext != 0 ? &states.first(fnext) : nullptr};
  }

  void all_uncertain_below(uint32_t j) {
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const uint32_t end = trie[j].end;
    const uint32_t te = end < trie.size() ? trie[end].tok_begin : static_cast<uint32_t>(tt.size());
    if (uncertain.size() + (te - trie[j].tok_end) > uncertain_cap) {
      uncertain.resize(uncertain_cap + 1);  // over the cap: the walk stops, nothing is kept
      return;
    }
    for (uint32_t k = trie[j].tok_end; k < te; ++k) {
      if (no_text.empty() || !no_text[static_cast<size_t>(tt[k].id)]) uncertain.push_back(tt[k].id);
    }
  }

  // The frame after code point cp from `parent`.
  Frame child(const Frame& parent, uint32_t cp) {
    const uint32_t v = step_on(parent.set, parent.first, cp);
    const uint32_t fv = step_on(parent.fnext, parent.ffirst, cp);
    // Past the stacks the context returns to, what comes next depends on the real stack.
    const bool pending = parent.pending || (parent.fexited && leave_follow->match(cp)) ||
                         (exit_any && parent.exited);
    return make_frame(v >> 1, fv >> 1, parent.depth + 1, v & 1u, fv & 1u, pending);
  }

  // When set, classify_list sorts nothing: it clears (*settle_taken)[i] for each token i
  // that the stacks do not take, where the stacks past the end (after_end) are one call
  // site's returns with what lies below it unknown (ContextClassifier::settle): taken, a
  // token ends inside the context, where it ends, or inside those returns (not below them).
  std::vector<uint8_t>* settle_taken = nullptr;
  bool takes(const Frame& fr, PartialUtf8 p) {
    if (p.n_remain == 0) return fr.set != 0 || fr.exited || fr.fset != 0;
    return (fr.set != 0 && partial_ok(fr.set, p)) || (fr.fset != 0 && partial_ok(fr.fset, p));
  }

  // How far classify_list reads ahead for where a token's code points lie (trie order:
  // the ids, and so those places, lie at random).
  static constexpr size_t kReadAhead = 8;  // tokens
  // Sorts the tokens `ids` (in trie order) from the stack `chain` like a walk would, along
  // each token's own code points, reusing the frames of the previous token's prefix.
  void classify_list(uint32_t chain, const std::vector<Token>& ids) {
    accepted.clear();
    uncertain.clear();
    cover_bits = nullptr;
    std::vector<uint32_t> m{chain};
    path.clear();
    path.push_back(make_frame(states.intern(m), 0, 0, false, false, false));
    const uint32_t* prev = nullptr;
    size_t prev_n = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      tick();
      const Token t = ids[i];
      if (i + kReadAhead < ids.size()) tokens.prefetch_token(ids[i + kReadAhead]);
      size_t n;
      const uint32_t* cps = tokens.code_points(t, &n);
      size_t l = 0;
      while (l < prev_n && l < n && l + 1 < path.size() && cps[l] == prev[l]) ++l;
      path.resize(l + 1);
      prev = cps;
      bool dead = false;
      for (size_t d = l; d < n; ++d) {
        const Frame c = child(path[d], cps[d]);
        if (c.set == 0 && !c.exited && c.fset == 0 && !c.fexited && !c.pending) {
          dead = true;
          break;
        }
        path.push_back(c);
      }
      prev_n = path.size() - 1;
      if (settle_taken != nullptr) {
        if (dead || !takes(path[n], tokens.partial(t))) (*settle_taken)[i] = 0;
        continue;
      }
      if (dead) continue;
      const Frame& fr = path[n];
      sort_token(t, tokens.partial(t), fr.set, fr.exited, fr.fset, fr.pending || fr.fexited);
    }
  }

  // Label walks. Inside a string whose state is a small automaton over its characters (a
  // `pattern` with a `maxLength`: hex digit or not, times the length left), runs find no
  // class that keeps one successor long enough to skip through (the run's class has exits at
  // every other node), so the walk went node by node through the string's class (3-12 ms a
  // first-use mask). When the sets reachable from a context's start through a class C of
  // code points treat C as k <= kMaxLabels labels (every member's character set is a union
  // of labels, and no code point of C leaves the context), a token of C* is decided by its
  // sequence of labels alone. The walk runs a local automaton (sets x labels) along the
  // partition's label trie (SharedMasks::LabelTrie, built on the partition's first use and
  // shared: a few thousand to tens of thousands of nodes where the trie has hundreds of
  // thousands), and then walks on only from the trie nodes where a token leaves
  // C, each from the set its labels reached. A set that would split C into more labels is
  // cut off by dropping the rarest label on its way from the start (a backslash before `u`,
  // not the `u`); a label on which a set leaves the context is dropped from C.
  // A label: its ASCII code points, and whether it holds every code point >= 128.
  using Label = detail::SharedMasks::ClassKey;
  static constexpr size_t kMaxLabels = 8;
  static constexpr size_t kMaxLabelSets = 1024;
  static constexpr int kMaxLabelRounds = 32;
  static constexpr size_t kMaxLiveLabels = 40;
  static constexpr size_t kMaxLiveSets = 256;
  static constexpr size_t kMaxLiveSteps = 512;  // set steps over every round
  static constexpr uint32_t kMaxLiveMembers = 128;
  std::vector<Label> labels_{};
  size_t label_steps_ = 0;  // the set steps of the last live find_labels
  // The most set steps a live search may take (live_region lowers it for a small subtree,
  // which a lazy walk serves for less: lazy_region), and whether the last one stopped there.
  size_t live_step_budget_ = kMaxLiveSteps;
  bool label_budget_hit_ = false;
  static constexpr uint32_t kNoState = 0xFFFFFFFFu;
  // The sets reachable from set0 through C: the local automaton's states (state q is
  // label_queue_[q].set) and label_next_[q * k + l]. Each with the rarest label on the way
  // from set0 to it (the fewest trie nodes, the latest on a tie) and its node count; set0's
  // is empty, of SIZE_MAX nodes.
  struct QueuedSet {
    uint32_t set;
    Label rarest;
    size_t rarest_nodes;
  };
  std::vector<QueuedSet> label_queue_{};
  // Set -> its local state, for the sets of one round of the search: open addressing over
  // a table kept per thread, emptied slot by slot after each round. (A hash map was a fifth
  // of the search's own time in first-key masks; a table indexed by set id, made per
  // grammar, cost more than it saved on the schemas whose masks are all fast.) The table
  // is as small as the search allows (512 slots, doubled while more than half full, up to
  // 4,096: a search holds at most kMaxLabelSets + 1 sets): at 4,096 slots (32 KB) each new
  // set's slot missed the cache, a quarter of the search's own time in first-key masks,
  // where most searches hold under a hundred sets.
  class LabelStates {
   public:
    void clear() {
      if (bits_ > kMinBits && used_.size() <= (size_t{1} << kMinBits) / 4) {
        slots_.assign(size_t{1} << kMinBits, 0);  // back to the small table
        bits_ = kMinBits;
      } else {
        for (uint32_t i : used_) slots_[i] = 0;
      }
      used_.clear();
    }
    size_t size() const { return used_.size(); }
    // Adds set -> q unless the set has a state already (false then).
    bool add(uint32_t set, uint32_t q) {
      if (slots_.empty()) slots_.assign(size_t{1} << bits_, 0);
      const uint32_t mask = (1u << bits_) - 1;
      for (uint32_t i = slot_of(set);; i = (i + 1) & mask) {
        if (slots_[i] == 0) {
          slots_[i] = (uint64_t{set} + 1) << 32 | q;
          used_.push_back(i);
          if (used_.size() * 2 > slots_.size()) grow();
          return true;
        }
        if ((slots_[i] >> 32) == uint64_t{set} + 1) return false;
      }
    }
    uint32_t at(uint32_t set) const {
      const uint32_t mask = (1u << bits_) - 1;
      for (uint32_t i = slot_of(set);; i = (i + 1) & mask) {
        if ((slots_[i] >> 32) == uint64_t{set} + 1) return static_cast<uint32_t>(slots_[i]);
      }
    }

   private:
    static constexpr uint32_t kMinBits = 9;
    uint32_t slot_of(uint32_t set) const { return (set * 0x9E3779B1u) >> (32 - bits_); }
    void grow() {
      std::vector<uint64_t> old(size_t{2} << bits_, 0);
      old.swap(slots_);
      ++bits_;
      const uint32_t mask = (1u << bits_) - 1;
      used_.clear();
      for (uint64_t v : old) {
        if (v == 0) continue;
        uint32_t i = slot_of(static_cast<uint32_t>((v >> 32) - 1));
        while (slots_[i] != 0) i = (i + 1) & mask;
        slots_[i] = v;
        used_.push_back(i);
      }
    }
    uint32_t bits_ = kMinBits;
    std::vector<uint64_t> slots_;  // (set + 1) << 32 | local state; 0: empty
    std::vector<uint32_t> used_;
  };
  static LabelStates& label_states() {
    static thread_local LabelStates states;
    return states;
  }
  std::vector<uint32_t> label_next_{};
  // find_labels with `stops`: per local state and label of C, whether the set dies there
  // (label_next_ holds kNoState); empty where no set does.
  std::vector<uint8_t> label_dies_{};
  uint8_t label_of_rep_[128] = {};  // C's label by its ASCII code point (label_rep)
  std::vector<uint32_t> label_set_at_{}, label_touched_{};
  // Per queued set q, its own labels and the set each leads to (0: none; its local state
  // + 1 once the search has found the automaton), in local_[local_off_[q], local_off_[q +
  // 1]); local_scratch_: the labels being found.
  struct LocalLabel {
    Label label;
    uint32_t next;  // the set (kDiesNext: find_labels' stops, the set dies on it)
  };
  static constexpr uint32_t kDiesNext = 0xFFFFFFFEu;
  // ASCII letters and digits (the code points of a name's letters), as a Label's bits.
  static constexpr uint64_t kAlnum[2] = {
      uint64_t{0x3FF} << '0',
      (uint64_t{0x3FFFFFF} << ('A' - 64)) | (uint64_t{0x3FFFFFF} << ('a' - 64))};
  std::vector<LocalLabel> local_{};
  std::vector<uint32_t> local_off_{};
  std::vector<Label> local_scratch_{};
  std::vector<std::pair<uint32_t, uint32_t>> label_stack_{};

  uint32_t label_rep(const Label& l) const {
    if (l.ascii[0] != 0) return static_cast<uint32_t>(__builtin_ctzll(l.ascii[0]));
    if (l.ascii[1] != 0) return 64u + static_cast<uint32_t>(__builtin_ctzll(l.ascii[1]));
    return label_high_;
  }
  // Live automata over sets whose members treat code points >= 128 differently within a
  // few ranges (a pattern's `.` leaves out U+2028 and U+2029; `\s` takes a few spaces):
  // those ranges (label_holes_) lie outside C, where the walk meets them as exits, and
  // every other code point >= 128 steps like label_high_, the first of them.
  uint16_t label_holes_ = 0;
  uint32_t label_high_ = 0x100;
  void set_label_holes(uint16_t holes) {
    label_holes_ = holes;
    label_high_ = holes == 0 ? 0x100 : first_high_outside(detail::class_holes(holes));
  }
  // Whether label l holds code point cp (a label's representative: an ASCII code point, or
  // label_high_ for those from 128 on).
  static bool in_label(const Label& l, uint32_t cp) {
    if (cp < 128) return ((l.ascii[cp >> 6] >> (cp & 63)) & 1u) != 0;
    return l.non_ascii;
  }
  static bool label_empty(const Label& l) {
    return l.ascii[0] == 0 && l.ascii[1] == 0 && !l.non_ascii;
  }
  // Splits every label of `labels` by the code points the set `cs` holds (its code points
  // >= 128 alike).
  void refine_labels(const CharSet& cs, std::vector<Label>& labels) const {
    if (cs.any) return;
    const std::array<uint64_t, 2> in = ascii_taken(cs);
    const bool high_in = cs.match(label_high_);
    const size_t n = labels.size();
    for (size_t i = 0; i < n; ++i) {
      const Label l = labels[i];
      // (Holes only with the flag: without it a class's holes are its high code points.)
      const bool high_inside = l.non_ascii && high_in, high_outside = l.non_ascii && !high_in;
      const Label inside{{l.ascii[0] & in[0], l.ascii[1] & in[1]},
                         high_inside,
                         high_inside ? label_holes_ : uint16_t{0}};
      const Label outside{{l.ascii[0] & ~in[0], l.ascii[1] & ~in[1]},
                          high_outside,
                          high_outside ? label_holes_ : uint16_t{0}};
      if (label_empty(inside) || label_empty(outside)) continue;
      labels[i] = inside;
      labels.push_back(outside);
    }
  }
  bool large_live_set_ = false;  // (tests) a set of more than 32 members was queued
  // Finds C and its labels from set0 (labels_, and the automaton on them: label_queue_,
  // label_next_); false where none fits.
  // `live` (live_walk): also a label on which some set dies is dropped from C, up to
  // `max_labels` labels, and C stays broad or nothing is found.
  // `dead0` (live): ASCII code points on which set0 alone dies stay in C (set0 has no
  // transition on them; dead0_ holds them), where they were dropped from it.
  // `stops` (live): a label of one ASCII letter or digit on which a set other than set0
  // dies (a key automaton's last letter of a name the key must not contain) stays in C too:
  // label_dies_ marks it, and the walk clears the tokens below the nodes where a path takes
  // it there (die_stops). (Not a class: the hex digits on which a search for 32 of them dies
  // after 31 have nodes everywhere, and such a walk was slower than the cover's.)
  uint64_t dead0_[2] = {0, 0};
  // The round of find_labels in which C's labels were last refined by each character set.
  std::vector<uint32_t> refined_at_{};
  uint32_t refine_stamp_ = 0;
  bool stop_seen_ = false;  // find_labels kept a label on which a set dies, in some round
  bool find_labels(uint32_t set0, size_t max_labels = kMaxLabels, bool live = false,
                   bool dead0 = false, bool stops = false) {
    large_live_set_ = false;
    stop_seen_ = false;
    label_budget_hit_ = false;
    LabelStates& label_state_of = label_states();
    Label excl{{0, 0}, false};
    uint16_t holes = 0;  // live: the code points >= 128 left out of C (set_label_holes)
    label_steps_ = 0;
    for (int round = 0; round < kMaxLabelRounds; ++round) {
      set_label_holes(holes);
      const Label c_label{
          {~excl.ascii[0], ~excl.ascii[1]}, !excl.non_ascii, excl.non_ascii ? uint16_t{0} : holes};
      labels_.assign(1, c_label);
      if (live && printable_count(labels_[0].ascii) < kMinExitClassPrintable) return false;
      if (refined_at_.size() != g.charsets.size()) refined_at_.assign(g.charsets.size(), 0);
      if (++refine_stamp_ == 0) {
        std::fill(refined_at_.begin(), refined_at_.end(), 0);
        refine_stamp_ = 1;
      }
      label_queue_.clear();
      label_state_of.clear();
      local_off_.assign(1, 0);
      local_.clear();
      dead0_[0] = dead0_[1] = 0;
      bool any_stop = false;
      label_queue_.push_back({set0, Label{{0, 0}, false}, SIZE_MAX});
      label_state_of.add(set0, 0);
      bool again = false;
      for (size_t qi = 0; qi < label_queue_.size() && !again; ++qi) {
        const uint32_t s = label_queue_[qi].set;
        // The rarest label on the way from set0 to s (the fewest trie nodes): a set that
        // splits too many labels is reached through an escape (`\u00`), whose backslash
        // leaves C better than the `u` after it.
        // Kept per queued set: following the path back from each set cost a class count
        // per label on it, quadratic in the sets (27 ms a failed search in o366's schema).
        const Label in = label_queue_[qi].rarest;
        const size_t in_nodes = label_queue_[qi].rarest_nodes;
        // Leaves C: the label this set was entered by, or fails at the context's start.
        auto drop = [&](const Label& l) {
          if (label_empty(l)) return false;
          excl.ascii[0] |= l.ascii[0];
          excl.ascii[1] |= l.ascii[1];
          excl.non_ascii = excl.non_ascii || l.non_ascii;
          again = true;
          return true;
        };
        bool fits = states.uniform(s);
        if (!fits && live && !excl.non_ascii) {
          // Alike outside a few ranges: those leave C (a new one starts the round again).
          const uint16_t h = states.high_holes(s);
          if (h != 0 && holes_within(h, holes)) {
            fits = true;
          } else if (h != 0) {
            const uint16_t u = states.union_holes(holes, h);
            // (Not where the union holds every code point from 128 on, as two sets' may.)
            if (u != 0 && first_high_outside(detail::class_holes(u)) <= 0x10FFFF) {
              holes = u;
              again = true;
              break;
            }
          }
        }
        uint32_t n;
        const uint32_t* m = states.members(s, &n);
        // Live: a set of many stacks (an ambiguous pattern's, growing with each step) costs
        // a lot per step and rarely ends in a finite automaton. (128: an unanchored search
        // for a run, a `pattern` of `[A-Fa-f0-9]{64}`, holds one stack per hex digit read,
        // up to 65, in a finite automaton of 66 sets; past 32 it was walked node by node,
        // 9 ms on Github_medium o33928's first character, 0.5 ms live.)
        if (live && n > kMaxLiveMembers) return false;
        if (live && n > 32) large_live_set_ = true;
        // The set is stepped once per label of its own partition of C (the code points its
        // members take alike), and C's labels (every set's partitions together) are refined
        // alongside: stepping each set on every label of C cost a step per set and label
        // (a key automaton's letters: 69 sets, 23 labels, 1,170 steps for one name's
        // states), where most sets tell two or three labels apart.
        local_scratch_.assign(1, c_label);
        for (uint32_t i = 0; i < n && fits; ++i) {
          const Elem& e = g.elems[pool.pos(m[i])];
          if (e.kind != detail::kChars) {
            fits = false;
            break;
          }
          // C's labels, once refined by a character set, stay so as they split further:
          // each set's members refine them once a round (a key automaton's sets share
          // their quote, escapes, letters and `[^...]` classes; refining by each of them
          // again, a pass over every label, was most of a search).
          if (refined_at_[e.arg] != refine_stamp_) {
            refine_labels(g.charsets[e.arg], labels_);
            refined_at_[e.arg] = refine_stamp_;
          }
          refine_labels(g.charsets[e.arg], local_scratch_);
          fits = labels_.size() <= max_labels;
        }
        if (!fits) {
          if (!drop(in)) return false;
          break;
        }
        if (live && (label_steps_ += local_scratch_.size()) > live_step_budget_) {
          label_budget_hit_ = live_step_budget_ < kMaxLiveSteps;
          return false;
        }
        for (const Label& l : local_scratch_) {
          const uint32_t v = states.step(s, label_rep(l));
          if (dead0 && qi == 0 && v == 0 && !l.non_ascii) {
            dead0_[0] |= l.ascii[0];
            dead0_[1] |= l.ascii[1];
            local_.push_back({l, 0});
            continue;
          }
          if (stops && v == 0 && !l.non_ascii && (l.ascii[0] & ~kAlnum[0]) == 0 &&
              (l.ascii[1] & ~kAlnum[1]) == 0 &&
              bit_count(l.ascii[0]) + bit_count(l.ascii[1]) == 1) {
            local_.push_back({l, kDiesNext});
            any_stop = stop_seen_ = true;
            continue;
          }
          // Some member leaves the context on this label (live: or the set dies on it).
          if ((v & 1u) != 0 || (live && v == 0)) {
            // Live: the rarer of that label and the rarest one on the way here (the
            // backslash before an escape's letters, not the letters).
            drop(live && !label_empty(in) && in_nodes < class_nodes(l) ? in : l);
            break;
          }
          const uint32_t next = v >> 1;
          local_.push_back({l, next});
          if (next != 0 && label_state_of.add(next, static_cast<uint32_t>(label_queue_.size()))) {
            if (label_state_of.size() > (live ? kMaxLiveSets : kMaxLabelSets)) return false;
            const size_t nodes = class_nodes(l);
            label_queue_.push_back(nodes <= in_nodes ? QueuedSet{next, l, nodes}
                                                     : QueuedSet{next, in, in_nodes});
          }
        }
        local_off_.push_back(static_cast<uint32_t>(local_.size()));
      }
      if (!again) {
        if (labels_.size() == 1 && label_empty(labels_[0])) return false;
        // A set that comes back to set0 would meet its dead code points past the start.
        if ((dead0_[0] | dead0_[1]) != 0) {
          for (const LocalLabel& e : local_) {
            if (e.next == set0) return false;
          }
        }
        // The automaton on local states (0: set0): label_next_[q * k + l], read from each
        // set's own labels, which partition C, each a union of C's labels. Each local
        // label's next set is looked up once (per set and label of C, those lookups were a
        // fifth of a search's own time), and the cells it fills are found from its bits
        // through the code point of each of C's labels (label_of_rep_): testing every
        // local label against every one of C's labels was a fifth of find_labels' own time.
        const size_t k = labels_.size();
        label_next_.assign(label_queue_.size() * k, kNoState);
        uint64_t reps[2] = {0, 0};
        int high_label = -1;
        for (size_t l = 0; l < k; ++l) {
          const uint32_t rep = label_rep(labels_[l]);
          if (rep < 128) {
            reps[rep >> 6] |= uint64_t{1} << (rep & 63);
            label_of_rep_[rep] = static_cast<uint8_t>(l);
          } else {
            high_label = static_cast<int>(l);
          }
        }
        for (LocalLabel& e : local_) {
          if (e.next != 0 && e.next != kDiesNext) {
            e.next = label_state_of.at(e.next) + 1;  // (0 stays none)
          }
        }
        label_dies_.clear();
        if (any_stop) label_dies_.assign(label_next_.size(), 0);
        for (size_t q = 0; q < label_queue_.size(); ++q) {
          for (uint32_t i = local_off_[q]; i < local_off_[q + 1]; ++i) {
            const LocalLabel& e = local_[i];
            if (e.next == 0) continue;
            auto set_cell = [&](size_t l) {
              if (e.next == kDiesNext) {
                label_dies_[q * k + l] = 1;
              } else {
                label_next_[q * k + l] = e.next - 1;
              }
            };
            for (uint32_t half = 0; half < 2; ++half) {
              for (uint64_t b = e.label.ascii[half] & reps[half]; b != 0; b &= b - 1) {
                set_cell(label_of_rep_[half * 64 + static_cast<uint32_t>(__builtin_ctzll(b))]);
              }
            }
            if (e.label.non_ascii && high_label >= 0) set_cell(static_cast<size_t>(high_label));
          }
        }
        return true;
      }
    }
    return false;
  }
  // The label of each code point (-1: outside C), for walking code points through the
  // automaton on labels: label walks' label trie and live walks' paths.
  struct LabelTable {
    int8_t ascii[128];   // per ASCII code point
    int8_t high = -1;    // the code points >= 128
    uint16_t holes = 0;  // but those (live automata: outside C)
    int label(uint32_t cp) const {
      if (cp < 128) return ascii[cp];
      return holes != 0 && detail::in_class_holes(holes, cp) ? -1 : high;
    }
  };
  LabelTable label_table() const {
    LabelTable t;
    std::fill(t.ascii, t.ascii + 128, int8_t{-1});
    for (size_t i = 0; i < labels_.size(); ++i) {
      for (uint32_t c = 0; c < 128; ++c) {
        if (in_class(labels_[i], c)) t.ascii[c] = static_cast<int8_t>(i);
      }
      if (labels_[i].non_ascii) t.high = static_cast<int8_t>(i);
    }
    t.holes = label_holes_;
    return t;
  }
  // C: the union of the labels.
  Label labels_union() const {
    Label u{{0, 0}, false};
    for (const Label& l : labels_) {
      u.ascii[0] |= l.ascii[0];
      u.ascii[1] |= l.ascii[1];
      u.non_ascii = u.non_ascii || l.non_ascii;
    }
    if (u.non_ascii) u.holes = label_holes_;
    return u;
  }

  // The label trie of labels_ (SharedMasks::label_tries); null when the cache is full.
  const detail::SharedMasks::LabelTrie* label_trie() {
    std::vector<uint64_t> key;
    for (const Label& l : labels_) {
      key.push_back(l.ascii[0]);
      key.push_back(l.ascii[1]);
      key.push_back(l.non_ascii ? 1 : 0);
    }
    detail::SharedMasks& shared = tokens.shared_masks();
    std::lock_guard<std::mutex> lock(shared.mu);
    auto it = shared.label_tries.find(key);
    if (it != shared.label_tries.end()) return it->second.get();
    if (shared.label_tries.size() >= detail::SharedMasks::kMaxLabelTries) return nullptr;
    auto lt = build_label_trie();
    const size_t bytes = lt->memory_bytes();
    if (shared.bytes + bytes > detail::SharedMasks::kMaxBytes) return nullptr;
    shared.bytes += bytes;
    const detail::SharedMasks::LabelTrie* out = lt.get();
    shared.label_tries.emplace(std::move(key), std::move(lt));
    return out;
  }
  // One preorder pass over the trie, pruned at code points outside C.
  std::unique_ptr<detail::SharedMasks::LabelTrie> build_label_trie() {
    auto lt = std::make_unique<detail::SharedMasks::LabelTrie>();
    const auto k = static_cast<uint32_t>(labels_.size());
    lt->k = k;
    const LabelTable table = label_table();
    const auto& trie = tokens.trie();
    const auto& depth_of = tokens.node_depth();
    std::vector<uint32_t> at(1, 0);
    std::vector<uint32_t> node_of;  // per trie token: its label node (0: none)
    node_of.assign(tokens.trie_tokens().size(), 0);
    lt->child.assign(k, 0);
    uint32_t n_nodes = 1;
    for (uint32_t j = 1; j < trie.size();) {
      tick();  // (an eager walk past its budget is abandoned here too: nothing is kept)
      const uint32_t cp = trie[j].cp;
      const int l = table.label(cp);
      const uint32_t d = depth_of[j];
      if (l < 0) {
        if (d >= 2) lt->exits.push_back({j, at[d - 1]});
        j = trie[j].end;
        continue;
      }
      const uint32_t u = at[d - 1];
      uint32_t c = lt->child[size_t{u} * k + static_cast<uint32_t>(l)];
      if (c == 0) {
        c = n_nodes++;
        lt->child.resize(size_t{n_nodes} * k, 0);
        lt->child[size_t{u} * k + static_cast<uint32_t>(l)] = c;
      }
      if (at.size() <= d) at.resize(d + 1u, 0);
      at[d] = c;
      for (uint32_t t = trie[j].tok_begin; t < trie[j].tok_end; ++t) node_of[t] = c;
      ++j;
    }
    const auto& tt = tokens.trie_tokens();
    auto slow = [&](uint32_t t) {
      return tt[t].partial.n_remain != 0 || tokens.is_control(tt[t].id);
    };
    lt->tok_off.assign(n_nodes + 1u, 0);
    lt->slow_off.assign(n_nodes + 1u, 0);
    for (uint32_t t = 0; t < node_of.size(); ++t) {
      if (node_of[t] != 0) ++(slow(t) ? lt->slow_off : lt->tok_off)[node_of[t] + 1];
    }
    for (uint32_t u = 0; u < n_nodes; ++u) {
      lt->tok_off[u + 1] += lt->tok_off[u];
      lt->slow_off[u + 1] += lt->slow_off[u];
    }
    lt->ids.resize(lt->tok_off[n_nodes]);
    lt->slow.resize(lt->slow_off[n_nodes]);
    std::vector<uint32_t> fill(lt->tok_off.begin(), lt->tok_off.end() - 1);
    std::vector<uint32_t> fill_slow(lt->slow_off.begin(), lt->slow_off.end() - 1);
    for (uint32_t t = 0; t < node_of.size(); ++t) {
      const uint32_t u = node_of[t];
      if (u == 0) continue;
      if (slow(t)) {
        lt->slow[fill_slow[u]++] = t;
      } else {
        lt->ids[fill[u]++] = tt[t].id;
      }
    }
    lt->child.shrink_to_fit();
    return lt;
  }

  // The label walk of a context from set0 (see above): the tokens of C* are sorted, and the
  // nodes where one leaves C walked on. False (nothing done) where it does not apply.
  // Only for a broad class (a narrow one prunes the walk quickly anyway): printable ASCII
  // or every code point >= 128.
  // And only where the runs cannot skip: the run of set0 has no class exits (its class is
  // narrow, or split so often that its exits would be more than an eighth of the trie: the
  // hex digits of a `pattern` in a string's characters), where the walk went node by node.
  bool label_worth(uint32_t set0) {
    const CharSet& f = states.first(set0);
    if (printable_count(f.ascii) < kMinExitClassPrintable &&
        !(states.uniform(set0) && states.takes_high(set0))) {
      return false;
    }
    const WalkStates::Run r = states.run_class(set0);
    return r.next == 0 || class_exits(r) == nullptr;
  }

  bool label_walk(uint32_t set0) {
    if (!find_labels(set0)) return false;
    // Nothing of C goes on from set0: the plain walk stops at the root's children anyway.
    if (std::all_of(label_next_.begin(), label_next_.begin() + static_cast<long>(labels_.size()),
                    [](uint32_t q) { return q == kNoState; })) {
      return false;
    }
    const detail::SharedMasks::LabelTrie* lt = label_trie();
    if (lt == nullptr) return false;
    walked_ = labels_union();
    const uint32_t k = lt->k;
    const auto& tt = tokens.trie_tokens();
    // The previous walk's entries, cleared at the start (an eager walk past its budget
    // leaves by an exception, WalkAbandoned, with some set).
    for (uint32_t u : label_touched_) label_set_at_[u] = 0;
    label_touched_.clear();
    if (label_set_at_.size() < lt->n_nodes()) label_set_at_.resize(lt->n_nodes(), 0);
    label_stack_.clear();
    label_stack_.push_back({0, 0});  // (label node, local state)
    while (!label_stack_.empty()) {
      tick();
      const auto [u, q] = label_stack_.back();
      label_stack_.pop_back();
      const uint32_t s = label_queue_[q].set;
      label_set_at_[u] = s;
      label_touched_.push_back(u);
      accepted.insert(accepted.end(), lt->ids.begin() + lt->tok_off[u],
                      lt->ids.begin() + lt->tok_off[u + 1]);
      for (uint32_t x = lt->slow_off[u]; x < lt->slow_off[u + 1]; ++x) {
        const auto& t = tt[lt->slow[x]];
        if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) continue;
        if (t.partial.n_remain == 0 || partial_ok(s, t.partial)) accepted.push_back(t.id);
      }
      const uint32_t* next = &label_next_[size_t{q} * k];
      const uint32_t* kids = &lt->child[size_t{u} * k];
      for (uint32_t l = k; l-- > 0;) {
        if (kids[l] != 0 && next[l] != kNoState) label_stack_.push_back({kids[l], next[l]});
      }
    }
    const auto& depth_of = tokens.node_depth();
    const auto& trie = tokens.trie();
    for (const auto& [b, u] : lt->exits) {
      const uint32_t s = label_set_at_[u];
      // Most exits die at once (a quote where the string may not end yet).
      if (s == 0 || over_cap || states.step(s, trie[b].cp) == 0) continue;
      walk_subtree(b, s, depth_of[b] - 1u);
    }
    return true;
  }

  // Live walks. A string whose state is an automaton that never dies on its characters:
  // an unanchored `pattern` (every string that contains a match: before the match and
  // after it, any character goes on), a key where other names are allowed next to a
  // schema's (`patternProperties`, `additionalProperties`). Runs end at every character
  // that moves the automaton (a lowercase letter in `[a-z][a-z0-9]*` searched for; the
  // letters of each name), so the walk went node by node through most of the trie: 5-30 ms
  // a first-use mask. When every set reachable from a set through a broad class C goes on
  // (inside the context) on every code point of C, every token of C* is accepted from it:
  // the walk takes them at once and walks on only at the class's exits (a quote or a
  // backslash after code points of C: about 2,000 nodes for a string's class on
  // llama-bpe), each from the set the path to it reaches, one step of the local automaton
  // per code point (found as for label walks, with up to kMaxLiveLabels labels and no label
  // trie); a token of C* with a partial UTF-8 tail is checked against the set its full code
  // points reach. At a context's start the tokens of C* are the class's shared bitmask (the
  // cover: live_walk); inside a walk, the tokens of a subtree between its exits (live_region).
  struct LiveAuto {
    Label cls;                   // C
    uint64_t dead0[2] = {0, 0};  // code points of C on which the start set dies
    bool dies_at_start() const { return (dead0[0] | dead0[1]) != 0; }
    uint32_t k = 0;              // labels
    std::vector<uint32_t> sets;  // per local state (0: the start)
    std::vector<uint32_t> next;  // next[q * k + label]
    LabelTable table;
    uint32_t step(uint32_t q, uint32_t cp) const {
      const int l = table.label(cp);
      return l < 0 ? kNoState : next[size_t{q} * k + static_cast<uint32_t>(l)];
    }
    // Where a set other than the start dies on a label of C (a key automaton's last letter
    // of a name the key must not contain): dies[q * k + label] (next holds kNoState there;
    // empty where none does), and the trie nodes where a path from the start takes such a
    // label in such a state (die_stops), in trie order: no token below them is taken.
    std::vector<uint8_t> dies;
    std::vector<uint32_t> stops;
    // The local state after cps[from, to) from q (kNoState: one is outside C).
    uint32_t run(uint32_t q, const uint32_t* cps, size_t from, size_t to) const {
      for (size_t d = from; d < to && q != kNoState; ++d) q = step(q, cps[d]);
      return q;
    }
  };
  // Per set (null: not live), until the walk states forget their sets.
  std::unordered_map<uint64_t, std::unique_ptr<LiveAuto>> live_{};  // by set and dead0
  static constexpr size_t kMaxLiveMemo = 4096;
  // And at most this many transitions in all (up to 256 sets x 40 labels each).
  static constexpr size_t kMaxLiveCells = size_t{1} << 21;
  size_t live_cells_ = 0;
  size_t live_costly_ = 0, live_found_ = 0;
  static constexpr size_t kCostlyLiveSteps = 64, kMaxCostlyLive = 4;
  static constexpr int kMaxDeadStart = 80;
  // `dead0`: where set0 is a context's start (live_walk), the code points on which it alone
  // dies may stay in C (find_labels).
  const LiveAuto* live_auto(uint32_t set, bool dead0 = false) {
    const uint64_t key = (uint64_t{set} << 1) | (dead0 ? 1u : 0u);
    auto it = live_.find(key);
    if (it != live_.end()) return it->second.get();
    if (live_.size() >= kMaxLiveMemo || live_cells_ > kMaxLiveCells) {
      live_.clear();
      live_cells_ = 0;
    }
    std::unique_ptr<LiveAuto>& out = live_[key];
    // A grammar whose sets keep failing after many steps (an ambiguous pattern whose sets
    // grow without end, key automata past the bounds) stops trying: each try cost 0.2-1.7 ms.
    if (live_costly_ >= kMaxCostlyLive && live_costly_ > live_found_) return nullptr;
    // (With dead0, C holds the code points on which set dies too: find_labels checks C.
    // But not those from 128 on: where set takes none of them, the label of everything it
    // does not take holds them, and is dropped, so C is what set takes. Most of the searches
    // at a context's start were such (whitespace, a digit, a quote: 176,000 of 200,000 on
    // the slow subset, none live).)
    if (printable_count(states.first(set).ascii) < kMinExitClassPrintable &&
        (!dead0 || !states.takes_high(set))) {
      return nullptr;
    }
    // At a context's start (dead0), a set may die on a letter of C first (die_stops); where
    // that fails, or would stop at too many nodes, C leaves it out.
    auto found = [&](bool stops) {
      return find_labels(set, kMaxLiveLabels, true, dead0, stops) &&
             bit_count(dead0_[0]) + bit_count(dead0_[1]) <= kMaxDeadStart;
    };
    std::unique_ptr<LiveAuto> la;
    if (dead0) {
      const bool ok = found(true);
      if (ok) la = make_live();
      if (la != nullptr && !la->dies.empty() && !die_stops(*la)) la = nullptr;
      if (la == nullptr && stop_seen_ && found(false)) la = make_live();
    } else if (found(false)) {
      la = make_live();
    }
    if (la == nullptr) {
      // Stopped by a lowered budget: not known to fail (a larger subtree may search again).
      // (Only live_region lowers it, for its one search without dead0.)
      if (label_budget_hit_) {
        live_.erase(key);
        return nullptr;
      }
      if (label_steps_ > kCostlyLiveSteps && !live_optional_) ++live_costly_;
      return nullptr;
    }
    ++live_found_;
    live_cells_ += la->next.size();
    out = std::move(la);
    return out.get();
  }
  // The automaton find_labels found.
  std::unique_ptr<LiveAuto> make_live() {
    auto la = std::make_unique<LiveAuto>();
    la->cls = labels_union();  // broad: find_labels checked it in live mode
    la->dead0[0] = dead0_[0];
    la->dead0[1] = dead0_[1];
    if (la->cls.holes != 0) {
      detail::test_walk_counters.live_holes.fetch_add(1, std::memory_order_relaxed);
    }
    la->k = static_cast<uint32_t>(labels_.size());
    if (la->k > 12) {
      detail::test_walk_counters.live_many_labels.fetch_add(1, std::memory_order_relaxed);
    }
    if (large_live_set_) {
      detail::test_walk_counters.live_large_sets.fetch_add(1, std::memory_order_relaxed);
    }
    la->table = label_table();
    la->next = label_next_;
    la->dies = label_dies_;
    for (const auto& e : label_queue_) la->sets.push_back(e.set);
    return la;
  }

  // la.stops: the trie nodes of a letter on which la dies, where the path from the start
  // reaches a state that dies on it (a key's `b` after `githu`, where the key must not
  // contain `github`). Found from the token index's code-point groups, and only the nodes
  // whose path ends in a letter that enters such a state are run through the automaton:
  // where that letter (c1) is one code point and so is the one before it (c2, a name's
  // letters), the nodes of c1 whose parent is c2, and their child of the stopping letter
  // (`hipcha` then `t`: the nodes of a `t` after an `a` are 2,400 on llama-bpe, read at
  // 0.5 µs each). False (none kept) past kMaxStopCandidates of them: a letter on which a
  // set dies from a state entered by most of C has nodes everywhere.
  static constexpr size_t kMaxStopCandidates = 4096;
  // The one ASCII code point of la's label l, or -1.
  static int label_cp(const LiveAuto& la, uint32_t l) {
    if (la.table.high == static_cast<int8_t>(l)) return -1;
    int cp = -1;
    for (int c = 0; c < 128; ++c) {
      if (la.table.ascii[c] != static_cast<int8_t>(l)) continue;
      if (cp >= 0) return -1;
      cp = c;
    }
    return cp;
  }
  bool die_stops(LiveAuto& la) {
    const uint32_t k = la.k;
    const auto n_states = static_cast<uint32_t>(la.sets.size());
    if (n_states > 64) return false;
    // Per state: the labels that enter it; per label: the states that die on it.
    std::vector<uint64_t> enter(n_states, 0);  // (k <= kMaxLiveLabels < 64)
    std::vector<uint64_t> dying(k, 0);
    for (uint32_t q = 0; q < n_states; ++q) {
      for (uint32_t l = 0; l < k; ++l) {
        const uint32_t nx = la.next[size_t{q} * k + l];
        if (nx != kNoState) enter[nx] |= uint64_t{1} << l;
        if (la.dies[size_t{q} * k + l] != 0) dying[l] |= uint64_t{1} << q;
      }
    }
    // The one code point of the labels `ls` (a bit each), or -1.
    auto only_cp = [&](uint64_t ls) {
      return bit_count(ls) == 1 ? label_cp(la, uint32_t(__builtin_ctzll(ls))) : -1;
    };
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const auto& depth_of = tokens.node_depth();
    const auto& groups = tokens.cp_groups();
    const auto& offsets = tokens.cp_group_offsets();
    size_t candidates = 0;
    la.stops.clear();
    // Node b (of a stopping letter, label l): a stop where the path to it reaches a state
    // that dies on l.
    auto candidate = [&](uint32_t b, uint32_t l) {
      size_t n;
      const uint32_t* cps = tokens.code_points(tt[trie[b].tok_begin].id, &n);
      const uint32_t q = la.run(0, cps, 0, depth_of[b] - 1u);
      if (q != kNoState && la.dies[size_t{q} * k + l] != 0) la.stops.push_back(b);
      return ++candidates <= kMaxStopCandidates;
    };
    for (uint32_t cp = 0; cp < 128; ++cp) {
      const int li = la.table.ascii[cp];
      if (li < 0 || dying[static_cast<uint32_t>(li)] == 0) continue;
      const auto l = static_cast<uint32_t>(li);
      // The labels after which a path can be in a state that dies on cp (c1's), and the
      // states it comes from (p1) and the labels before those (c2's). (The start state
      // dies on none: find_labels keeps those code points in dead0.)
      uint64_t before = 0;
      for (uint32_t q = 0; q < n_states; ++q) {
        if ((dying[l] >> q) & 1u) before |= enter[q];
      }
      const int c1 = only_cp(before);
      uint64_t p1 = 0, before2 = 0;
      if (c1 >= 0) {
        const uint32_t l1 = static_cast<uint32_t>(__builtin_ctzll(before));
        for (uint32_t q = 0; q < n_states; ++q) {
          const uint32_t nx = la.next[size_t{q} * k + l1];
          if (nx != kNoState && ((dying[l] >> nx) & 1u) != 0) {
            p1 |= uint64_t{1} << q;
            before2 |= enter[q];
          }
        }
      }
      // (Not where the start state goes to a dying state on c1: a path may then be c1
      // alone, below a root child, which the scan of the dying letter's nodes covers.)
      const int c2 = c1 >= 0 && (p1 & 1u) == 0 ? only_cp(before2) : -1;
      if (c2 >= 0) {
        const auto u1 = static_cast<uint32_t>(c1);
        for (uint32_t i = offsets[u1]; i < offsets[u1 + 1]; ++i) {
          if (groups[i].parent_cp != static_cast<uint32_t>(c2)) continue;
          tick();
          const uint32_t b = child_with(groups[i].node, cp);
          if (b != kNoChild && !candidate(b, l)) return false;
        }
        continue;
      }
      for (uint32_t i = offsets[cp]; i < offsets[cp + 1]; ++i) {
        const int pl = la.table.label(groups[i].parent_cp);
        if (pl < 0 || ((before >> pl) & 1u) == 0) continue;
        tick();
        if (!candidate(groups[i].node, l)) return false;
      }
    }
    std::sort(la.stops.begin(), la.stops.end());
    return true;
  }

  // A token of C* below a node where the automaton is in local state q0, `from` code points
  // deep: accepted, if its partial UTF-8 tail fits the set its full code points reach.
  void live_take(const LiveAuto& la, uint32_t q0, size_t from, const TokenIndex::TrieToken& t) {
    if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) return;
    if (t.partial.n_remain == 0) {
      accepted.push_back(t.id);
      return;
    }
    size_t n;
    const uint32_t* cps = tokens.code_points(t.id, &n);
    const uint32_t q = la.run(q0, cps, from, n);
    if (q != kNoState && partial_ok(la.sets[q], t.partial)) accepted.push_back(t.id);
  }

  // At a context's start (set0): the tokens of C* as the class's bitmask (cover_bits), the
  // exits walked on; false where set0 is not live. walked_ then holds C.
  bool live_walk(uint32_t set0) {
    const LiveAuto* la = live_auto(set0, true);
    if (la == nullptr) return false;
    const std::vector<uint32_t>* exits = class_exits(la->cls);
    if (exits == nullptr) return false;
    if (la->dies_at_start() && exits->size() + la->stops.size() > kMaxLiveInsteadExits) {
      return false;
    }
    const std::vector<uint32_t>* bits = class_tokens(la->cls);
    if (bits == nullptr) return false;
    detail::test_walk_counters.live_walks.fetch_add(1, std::memory_order_relaxed);
    cover_bits = bits;
    cover_clear.clear();
    cover_set = 0;  // (no walked frame is covered: covered() never holds)
    cover_first = la->cls;
    walked_ = la->cls;
    // The code points of C on which set0 dies (the first letters of an object's names, at
    // the start of a key that is none of them, where what follows is a pattern's automaton):
    // their tokens are cleared from the class's, and the root's children there are not
    // walked (walked_ holds them). Before, they were left out of C, whose exits were then
    // every node of those letters below a code point of C: 2-3 ms a first-use mask.
    if (la->dies_at_start()) {
      detail::test_walk_counters.live_dead_starts.fetch_add(1, std::memory_order_relaxed);
      cover_first.ascii[0] &= ~la->dead0[0];
      cover_first.ascii[1] &= ~la->dead0[1];
      clear_root_children(la->dead0);
    }
    // The nodes where a set dies on a letter of C (die_stops): their tokens are cleared
    // from the class's (the exits below them are not walked: their states are none).
    if (!la->stops.empty()) {
      detail::test_walk_counters.live_die_stops.fetch_add(la->stops.size(),
                                                          std::memory_order_relaxed);
      cover_clear.insert(cover_clear.end(), la->stops.begin(), la->stops.end());
    }
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const auto& depth_of = tokens.node_depth();
    // (Those at the root, with no full code point, classify_context sorts apart.)
    const auto& partial = tokens.partial_trie_tokens();
    for (auto it = std::lower_bound(partial.begin(), partial.end(), trie[0].tok_end);
         it != partial.end(); ++it) {
      live_take(*la, 0, 0, tt[*it]);
    }
    // The exits and their sets first: the walks below may find other sets live (live_
    // grows, and la's labels are reused by find_labels).
    // The local state at each exit's parent depends only on the automaton's labels and
    // transitions, which the live sets of many stacks share (the whole-stack masks of a
    // large config schema's values, tsconfig's: each a set of its own, all with one key
    // automaton): found once per automaton (exit_states), where each walk read every exit's
    // code points again (18,000 exits of a key's class on llama-bpe, a fifth of such a
    // schema's mask time).
    // The exits go on in one walk, from a frame per local state and depth (pushed in
    // reverse, so that they are visited in trie order): a walk per exit cost more than its
    // nodes (3,800 exits of a string's characters after a pattern's first class, most of
    // them a leaf `"`: 0.4 ms of a 1.1 ms first mask).
    const std::vector<uint32_t>& at = exit_states(*la, *exits);
    frames.clear();
    todo.clear();
    live_frames_begin(la->sets.size(), 0, tokens.subtree_chars()[0].height + 1u);
    for (size_t i = exits->size(); i-- > 0;) {
      tick();
      if (at[i] == kNoState) continue;  // below a code point outside C: walked from there
      const uint32_t b = (*exits)[i];
      const uint32_t s = la->sets[at[i]];
      if (states.step(s, trie[b].cp) == 0) continue;  // most exits die at once
      todo.push_back({b, live_frame(at[i], s, depth_of[b] - 1u)});
    }
    drain();
    return true;
  }
  // The frames live_walk and live_region start their exits from: one per local state and
  // depth (a frame's depth counts the code points before it: a token's partial tail is
  // checked against the set its runs reach after the code points below the frame).
  // live_frames_[q * stride + depth - base], for depths base .. base + stride - 1; the
  // entries used are reset at the next begin.
  std::vector<uint32_t> live_frames_{}, live_frames_used_{};
  uint32_t live_frames_stride_ = 0, live_frames_base_ = 0;
  void live_frames_begin(size_t n_states, uint32_t base_depth, uint32_t n_depths) {
    for (uint32_t i : live_frames_used_) live_frames_[i] = kNoFrame;
    live_frames_used_.clear();
    live_frames_stride_ = n_depths;
    live_frames_base_ = base_depth;
    if (live_frames_.size() < n_states * n_depths)
      live_frames_.resize(n_states * n_depths, kNoFrame);
  }
  uint32_t live_frame(uint32_t q, uint32_t set, uint32_t depth) {
    const uint32_t i = q * live_frames_stride_ + (depth - live_frames_base_);
    if (live_frames_[i] == kNoFrame) {
      live_frames_[i] = static_cast<uint32_t>(frames.size());
      live_frames_used_.push_back(i);
      frames.push_back(make_frame(set, 0, depth, false, false, false));
    }
    return live_frames_[i];
  }
  std::vector<uint32_t> live_path_{};
  // Per exit of la's class (class_exits, in trie order): the local state of la's automaton
  // at the exit's parent (kNoState: the path leaves C), memoized by the automaton (its class,
  // label table and transitions; not its sets).
  std::map<std::vector<uint32_t>, std::vector<uint32_t>> exit_states_{};
  static constexpr size_t kMaxExitStates = 64;
  const std::vector<uint32_t>& exit_states(const LiveAuto& la, const std::vector<uint32_t>& exits) {
    std::vector<uint32_t> key = {static_cast<uint32_t>(la.cls.ascii[0]),
                                 static_cast<uint32_t>(la.cls.ascii[0] >> 32),
                                 static_cast<uint32_t>(la.cls.ascii[1]),
                                 static_cast<uint32_t>(la.cls.ascii[1] >> 32),
                                 la.cls.non_ascii ? 1u : 0u,
                                 la.cls.holes,
                                 la.k,
                                 static_cast<uint32_t>(la.table.high)};
    for (int8_t l : la.table.ascii) key.push_back(static_cast<uint32_t>(l));
    key.insert(key.end(), la.next.begin(), la.next.end());
    auto it = exit_states_.find(key);
    if (it != exit_states_.end()) {
      detail::test_walk_counters.exit_states_reused.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
    if (exit_states_.size() >= kMaxExitStates) exit_states_.clear();
    std::vector<uint32_t> at(exits.size(), kNoState);
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const auto& depth_of = tokens.node_depth();
    if (la.k == 1) {
      // One label (C itself): the state at an exit's parent is the d-th of the chain q0,
      // next(q0), ..., where d counts the code points before the exit, if they all lie in C.
      // They do unless the exit lies below an earlier exit (outside C) or below a child of
      // the root outside C: any node outside C on the path has one of those two above it or
      // is one. Reading each exit's code points cost 60 ns an exit (4,400 exits of a
      // string's characters: 0.25 ms of a first mask).
      std::vector<uint32_t>& chain = live_path_;
      chain.assign(1, 0);
      const auto& roots = tokens.root_children();
      size_t r = 0;          // the root child whose subtree holds the exit
      uint32_t blocked = 0;  // the end of the last exit's subtree
      for (size_t i = 0; i < exits.size(); ++i) {
        tick();
        const uint32_t b = exits[i];
        const bool inside = b >= blocked;
        blocked = std::max(blocked, trie[b].end);
        if (!inside) continue;
        while (trie[roots[r]].end <= b) ++r;
        if (la.table.label(trie[roots[r]].cp) < 0) continue;
        const size_t d = depth_of[b] - 1u;
        while (chain.size() <= d && chain.back() != kNoState)
          chain.push_back(la.next[chain.back()]);
        at[i] = d < chain.size() ? chain[d] : kNoState;
      }
      detail::test_walk_counters.exit_states_one_label.fetch_add(1, std::memory_order_relaxed);
      return exit_states_.emplace(std::move(key), std::move(at)).first->second;
    }
    std::vector<uint32_t>& path_q = live_path_;  // local states along the previous exit's path
    path_q.assign(1, 0);
    const uint32_t* prev = nullptr;
    for (size_t i = 0; i < exits.size(); ++i) {
      tick();
      const uint32_t b = exits[i];
      size_t n;
      const uint32_t* cps = tokens.code_points(tt[trie[b].tok_begin].id, &n);
      const size_t up = depth_of[b] - 1u;  // code points before b
      size_t l = 0;
      while (l + 1 < path_q.size() && l < up && cps[l] == prev[l]) ++l;
      path_q.resize(l + 1);
      prev = cps;
      for (; l < up && path_q.back() != kNoState; ++l)
        path_q.push_back(la.step(path_q.back(), cps[l]));
      if (path_q.back() == kNoState) {
        path_q.pop_back();
        continue;
      }
      at[i] = path_q.back();
    }
    return exit_states_.emplace(std::move(key), std::move(at)).first->second;
  }
  Label walked_{};  // what live_walk or label_walk took at a context's start
  static constexpr uint32_t kMinLiveNodes = 256;

  // In a walk, a frame c at node j inside the context whose set is live: the tokens of C*
  // below j are taken (those between the class's exits, in trie order), and the walk goes
  // on at the exits, from the sets their paths reach.
  bool live_region(uint32_t j, const Frame& c) {
    const auto& trie = tokens.trie();
    const uint32_t n_nodes = trie[j].end - j;
    if (n_nodes < kMinLiveNodes || obs_base != kNoObserve) return false;
    // A search costs about as much as a lazy walk of kLazyNodesPerStep nodes a set step:
    // a subtree gets at most its share of steps, and none where the rules the set goes
    // on into promise more (an object's names under one letter, each a state per letter).
    live_step_budget_ = std::min(kMaxLiveSteps, size_t{n_nodes} / kLazyNodesPerStep);
    const bool forced = detail::test_lazy_regions.load(std::memory_order_relaxed);
    const size_t forced_budget = detail::test_live_step_budget.load(std::memory_order_relaxed);
    if (forced_budget != 0) live_step_budget_ = forced_budget;
    if (forced || (forced_budget == 0 && live_.find(uint64_t{c.set} << 1) == live_.end() &&
                   size_t{reach_of_set(c.set)} * 3 / 2 > live_step_budget_)) {
      live_step_budget_ = kMaxLiveSteps;
      return lazy_region(j, c);
    }
    label_budget_hit_ = false;
    const LiveAuto* la = live_auto(c.set);
    const bool budget_hit = label_budget_hit_ && la == nullptr;
    live_step_budget_ = kMaxLiveSteps;
    if (budget_hit) return lazy_region(j, c);
    if (la == nullptr) return false;
    const std::vector<uint32_t>* exits =
        class_exits(la->cls, size_t{n_nodes} * kExitBuildPerWalkedNode);
    if (exits == nullptr) return false;
    detail::test_walk_counters.live_regions.fetch_add(1, std::memory_order_relaxed);
    const auto& tt = tokens.trie_tokens();
    const auto& depth_of = tokens.node_depth();
    const size_t from = depth_of[j];  // code points of a token below j before its first in C
    region_exits_.clear();
    class_region(
        j, la->cls, *exits, nullptr,
        [&](uint32_t tb, uint32_t te) {
          for (uint32_t k = tb; k < te; ++k) live_take(*la, 0, from, tt[k]);
        },
        [&](uint32_t b, bool) { region_exits_.push_back(b); });
    // One frame per local state and depth (live_frame), pushed in reverse so that the
    // exits are visited in trie order.
    live_frames_begin(la->sets.size(), c.depth, tokens.subtree_chars()[j].height + 1u);
    for (size_t k = region_exits_.size(); k-- > 0;) {
      const uint32_t b = region_exits_[k];
      size_t n;
      const uint32_t* cps = tokens.code_points(tt[trie[b].tok_begin].id, &n);
      const uint32_t q = la->run(0, cps, from, depth_of[b] - 1u);
      if (q == kNoState) continue;  // (the scan stops at the first code point outside C)
      const uint32_t s = la->sets[q];
      if (states.step(s, trie[b].cp) == 0) continue;
      todo.push_back({b, live_frame(q, s, c.depth + (depth_of[b] - 1u - depth_of[j]))});
    }
    return true;
  }

  // Below node j of frame c (inside the context, nothing past its end, not pending): every
  // node in trie order, its set stepped from its parent's (memoized per set and code
  // point), its tokens sorted; a subtree skipped where the set dies, and the walk handed
  // back to drain (from the parent's frame) where the context may end.
  bool lazy_region(uint32_t j, const Frame& c) {
    detail::test_walk_counters.lazy_regions.fetch_add(1, std::memory_order_relaxed);
    const auto& trie = tokens.trie();
    const auto& depth_of = tokens.node_depth();
    const uint32_t end = trie[j].end, base = depth_of[j];
    lazy_sets_.assign(1, c.set);
    for (uint32_t k = j + 1; k < end;) {
      tick();
      const uint32_t d = depth_of[k] - base;  // (>= 1)
      const uint32_t ps = lazy_sets_[d - 1];
      const uint32_t cp = trie[k].cp;
      const uint32_t v = cp < 128 ? states.step_alike(ps, cp) : step_on(ps, &states.first(ps), cp);
      if (v == 0) {
        k = trie[k].end;
        continue;
      }
      if ((v & 1u) != 0) {
        frames.push_back(make_frame(ps, 0, c.depth + d - 1, false, false, false));
        todo.push_back({k, static_cast<uint32_t>(frames.size() - 1)});
        k = trie[k].end;
        continue;
      }
      const uint32_t s = v >> 1;
      classify_node(trie[k], s, false, 0, false);
      if (lazy_sets_.size() <= d) lazy_sets_.resize(d + 1);
      lazy_sets_[d] = s;
      ++k;
    }
    return true;
  }
  std::vector<uint32_t> lazy_sets_{};
  static constexpr size_t kLazyNodesPerStep = 20;
  // The rules a set's members may go on into (the references in the rest of each member's
  // alternative and every rule those reach), counted up to kMaxLiveSets: how large a live
  // automaton from the set would be, at most.
  uint32_t reach_of_set(uint32_t set) {
    uint32_t n = 0;
    const uint32_t* m = states.members(set, &n);
    if (++reach_stamp_ == 0) {
      std::fill(reach_seen_.begin(), reach_seen_.end(), 0);
      reach_stamp_ = 1;
    }
    if (reach_seen_.size() < g.rule_alt_begin.size())
      reach_seen_.assign(g.rule_alt_begin.size(), 0);
    uint32_t count = 0;
    reach_todo_.clear();
    // The rules referred to from position p to its alternative's end.
    const auto refs_from = [&](uint32_t p) {
      for (; g.elems[p].kind != detail::kEnd; ++p) {
        if (g.elems[p].kind == detail::kRef) reach_todo_.push_back(g.elems[p].arg);
      }
    };
    for (uint32_t i = 0; i < n; ++i) refs_from(pool.pos(m[i]));
    while (!reach_todo_.empty() && count < kMaxLiveSets) {
      const uint32_t r = reach_todo_.back();
      reach_todo_.pop_back();
      if (reach_seen_[r] == reach_stamp_) continue;
      reach_seen_[r] = reach_stamp_;
      ++count;
      for (uint32_t a = g.rule_alt_begin[r]; a < g.rule_alt_begin[r + 1]; ++a) {
        refs_from(g.alt_starts[a]);
      }
    }
    return count;
  }
  std::vector<uint32_t> reach_seen_{}, reach_todo_{};
  uint32_t reach_stamp_ = 0;

  void walk_subtree(uint32_t first, uint32_t root_set, uint32_t root_depth = 0) {
    frames.clear();
    todo.clear();
    frames.push_back(make_frame(root_set, 0, root_depth, false, false, false));
    todo.push_back({first, 0});
    drain();
  }

  // A frame inside the context that takes one ASCII code point next (a key's or a
  // keyword's letters): only that child goes on (literal_run). The ways of taking a
  // subtree at once each need the set's run, and a literal's sets are met once.
  bool literal_step(const Frame& c) const {
    if (c.set == 0 || c.exited || c.fset != 0 || c.fexited || c.pending || obs_base != kNoObserve) {
      return false;
    }
    return ascii_single(*c.first) >= 0;
  }

  // From node j and its frame c (literal_step): where c's set is one stack whose next two
  // elements are one ASCII code point each, the walk follows the literal down the trie
  // without a set per node. Each node on the way takes its tokens that end on a whole
  // code point (a partial tail needs a code point >= 128 next), and the set where the
  // literal's run of such elements ends is made once, from the stack a position further
  // on. (An object's keys made a set per letter of every key, each stepped, interned and
  // given its first code points: most of a key's 3-5 µs.)
  void literal_run(uint32_t j, const Frame& c) {
    uint32_t n = 0;
    const uint32_t stack = *states.members(c.set, &n);
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    uint32_t at = j, depth = c.depth, q = n == 1 ? pool.pos(stack) : 0;
    int cp = n == 1 ? literal_cp(q) : -1;
    for (int next; cp >= 0 && (next = literal_cp(q + 1)) >= 0; cp = next, ++q) {
      const uint32_t k = child_with(at, static_cast<uint32_t>(cp));
      if (k == kNoChild) return;
      tick();
      for (uint32_t t = trie[k].tok_begin; t < trie[k].tok_end; ++t) {
        if (tt[t].partial.n_remain != 0) continue;
        if (!no_text.empty() && no_text[static_cast<size_t>(tt[t].id)]) continue;
        accepted.push_back(tt[t].id);
      }
      if (trie[k].end == k + 1) return;  // a leaf
      at = k;
      ++depth;
    }
    if (at == j) {
      frames.push_back(c);
    } else {
      detail::test_walk_counters.literal_runs.fetch_add(1, std::memory_order_relaxed);
      literal_scratch_.assign(1, pool.make(q, pool.parent(stack)));
      frames.push_back(make_frame(states.intern(literal_scratch_), 0, depth, false, false, false));
    }
    queue_children(at, static_cast<uint32_t>(frames.size() - 1));
  }
  std::vector<uint32_t> literal_scratch_{};
  static constexpr uint32_t kNoChild = 0xFFFFFFFFu;
  // The code point of element q where it is one ASCII code point, else -1.
  int literal_cp(uint32_t q) const {
    const auto& e = g.elems[q];
    return e.kind == detail::kChars ? ascii_single(g.charsets[e.arg]) : -1;
  }
  // The one code point of cs where it is an ASCII one, else -1.
  static int ascii_single(const CharSet& cs) {
    const int64_t cp = cs.single();
    return cp >= 0 && cp < 128 ? static_cast<int>(cp) : -1;
  }
  // Node j's child of code point cp, or kNoChild.
  uint32_t child_with(uint32_t j, uint32_t cp) const {
    const auto& off = tokens.child_offsets();
    const auto& cps = tokens.child_cps();
    const auto end = cps.begin() + off[j + 1];
    const auto it = std::lower_bound(cps.begin() + off[j], end, cp);
    return it != end && *it == cp ? tokens.child_nodes()[static_cast<size_t>(it - cps.begin())]
                                  : kNoChild;
  }

  // Walks the nodes queued in `todo`, each from its frame.
  void drain() {
    const auto& trie = tokens.trie();
    while (!todo.empty()) {
      tick();
      const auto [j, f] = todo.back();
      todo.pop_back();
      const Frame parent = frames[f];
      const auto& node = trie[j];
      const Frame c = child(parent, node.cp);
      if (c.set == 0 && !c.exited && c.fset == 0 && !c.fexited && !c.pending) continue;
      classify_node(node, c.set, c.exited, c.fset, c.pending || c.fexited);
      if (node.end == j + 1) continue;  // a leaf
      // The subtree taken at once: inside the context only (a pending walk still accepts
      // what the context takes), past its end only, or every token below uncertain when
      // nothing below can stay in the context.
      // With nothing past the context's end (a whole stack, or a chain whose rule returns
      // nowhere), ending it there only accepts the tokens that end at this node: the tokens
      // below are taken at once all the same (one with a partial UTF-8 tail is then refused
      // where the context cannot take it: the empty stack takes none).
      // Where the context may end, only runs of broad classes: a narrow class's runs are
      // short, and computing them (a step per code point of each set) cost more than the
      // walk they saved (a 253-word alternation: 3.5x the mask time).
      if (literal_step(c)) {
        literal_run(j, c);
        continue;
      }
      const bool wide = c.first != nullptr && broad(*c.first);
      const bool quiet_exit = !c.exited || (quiet() && wide);
      bool taken =
          (c.set != 0 && quiet_exit && c.fset == 0 && !c.fexited &&
           (bulk_accept(j, c.set, c.depth, c.pending) ||
            (!c.exited && !c.pending && !covered(j, c.set, c.depth, false) && live_region(j, c)) ||
            skip_region(j, c, false))) ||
          (c.set == 0 && !c.exited && c.fset != 0 && !c.fexited && !c.pending &&
           skip_region(j, c, true));
      if (!taken && wide && c.set != 0 && c.exited && after_end != 0 && !exit_any && c.fset == 0 &&
          !c.fexited && !c.pending) {
        taken = tolerant_take(j, c);
      }
      if (!taken && wide && c.set != 0 && after_end == 0 && c.fset == 0 && !c.fexited &&
          states.mode() != WalkStates::kQuiet && (!exit_any || c.exited)) {
        Frame p = c;
        p.pending = c.pending || exit_any;
        taken = quiet_take(j, p);
      }
      if (!taken && c.set == 0 && (c.pending || (exit_any && c.exited))) {
        all_uncertain_below(j);
        taken = true;
      }
      if (taken) {
        if (uncertain.size() > uncertain_cap) {
          over_cap = true;
          todo.clear();
          return;
        }
        continue;
      }
      frames.push_back(c);
      queue_children(j, static_cast<uint32_t>(frames.size() - 1));
    }
  }

  // Nothing lies past the context's end (a whole stack, or a chain whose rule returns
  // nowhere), and leaving it does not make longer tokens uncertain: ending the context only
  // accepts the tokens that end there (WalkStates::kQuiet).
  // Not while a walk is observed for a repetition family (family_chain): longer runs note
  // lower levels of the family, and the mask is then shared with fewer levels.
  bool quiet() const { return after_end == 0 && !exit_any && obs_base == kNoObserve; }

  void classify_context(uint32_t chain) {
    accepted.clear();
    uncertain.clear();
    states.set_mode(quiet() ? WalkStates::kQuiet : WalkStates::kStrict);
    std::vector<uint32_t> m{chain};
    const uint32_t set0 = states.intern(m);
    const auto& trie = tokens.trie();
    // Tokens with no full code point (only a partial sequence) sit at the root; the set
    // may take none of them (hundreds of tokens skipped per context).
    if (states.takes_high(set0)) classify_node(trie[0], set0, false, 0, false);
    const CharSet& top = g.charsets[g.elems[pool.pos(chain)].arg];
    setup_cover(set0);
    // Children of the root wholly in the cover are not walked (in_cover); the cover's set is
    // noted once for an observed walk.
    if (cover_bits != nullptr && obs_base != kNoObserve) note_low(set_low(cover_set));
    // Without a cover, a string whose state is an automaton over its characters that never
    // dies on them, or a small one.
    const bool no_cover = cover_bits == nullptr && obs_base == kNoObserve;
    // (Not where the chain starts with one ASCII code point: set0 takes that one alone, so
    // a live automaton from it would need a C of at most kMaxDeadStart + 1 code points, and
    // a label walk a broad first class. The search for one was a tenth of a key's
    // context; where a letter is followed by a rule, as in the first letters of an
    // object's key automaton, none of 190,000 such searches over the slow subset found
    // one. The walk looks for an automaton below the letter, live_region.)
    const uint32_t p0 = pool.pos(chain);
    const bool literal_start = literal_cp(p0) >= 0;
    const bool labelled =
        no_cover && !literal_start && (live_walk(set0) || (label_worth(set0) && label_walk(set0)));
    // (A memo asked for once is not kept: most chains have no other of their kind, and
    // keeping every child's tokens cost more than a walk of thousands of small children.
    // Nor without a cover, which holds most tokens as a bitmask: the children's own lists
    // were then most of the vocabulary, 0.4 -> 0.6 ms to keep for a URL's characters.)
    KidMemo* memo =
        labelled || obs_base != kNoObserve || cover_bits == nullptr ? nullptr : kid_memo;
    if (memo != nullptr && (++memo->uses < 2 || !memo_fits(*memo))) memo = nullptr;
    // (An unbounded cover's children go through their memo where there is one: read back,
    // they cost less than the batch.)
    const bool batch = !labelled && root_stops_apply() && (memo == nullptr || !cover_unbounded());
    root_batch_.clear();
    auto walk_child = [&](const TokenIndex::RootChild& rc) {
      const uint32_t j = rc.node;
      if (labelled && in_class(walked_, rc.cp)) return;  // walked by live_walk or label_walk
      if (cover_bits != nullptr && in_class(cover_first, rc.cp)) {
        if (in_cover(rc)) return;
        if (batch) {
          root_batch_.push_back(j);
          return;
        }
      }
      if (memo != nullptr) {
        walk_kid(*memo, j, set0);
        return;
      }
      walk_subtree(j, set0);
    };
    // A cover that takes every code point >= 128 holds the root's leaves there that have no
    // partial tail (in_cover), which need not be visited.
    const bool high_held = cover_bits != nullptr && cover_first.non_ascii && cover_first.holes == 0;
    const auto& kids = high_held ? tokens.root_kids_but_high_leaves() : tokens.root_kids();
    if (!top.any && !top.negated) {
      for (const auto& r : top.ranges) {
        auto it =
            std::lower_bound(kids.begin(), kids.end(), r.lo,
                             [](const TokenIndex::RootChild& k, uint32_t v) { return k.cp < v; });
        for (; it != kids.end() && it->cp <= r.hi && !over_cap; ++it) walk_child(*it);
      }
    } else {
      for (size_t k = 0; k < kids.size() && !over_cap; ++k) walk_child(kids[k]);
    }
    if (!root_batch_.empty() && !over_cap) walk_root_stops();
  }

  // Whether a kid memo's results hold under this context's cover (the first context to
  // use it sets the cover they hold under).
  bool memo_fits(KidMemo& m) const {
    if (!m.cover_known) {
      m.cover_known = true;
      m.cover_class = cover_class_;
      m.cover_len = cover_len_;
      m.cover_mode = cover_mode_;
      return true;
    }
    return m.cover_class == cover_class_ && m.cover_len == cover_len_ &&
           m.cover_mode == cover_mode_;
  }
  // walk_subtree(j, set0) through the memo: the child's tokens as a walk found them before,
  // else walked and kept.
  void walk_kid(KidMemo& m, uint32_t j, uint32_t set0) {
    const uint32_t cp = tokens.trie()[j].cp;
    // (A child whose code point the start set does not take adds nothing.)
    const uint32_t v = step_on(set0, &states.first(set0), cp);
    if (v == 0) return;
    const bool cov = in_class(cover_first, cp) && (v >> 1) == cover_set;  // (memos need a cover)
    const uint64_t key = (uint64_t{j} << 2) | (cov ? 2u : 0u) | (v & 1u);
    if (auto it = m.kids.find(key); it != m.kids.end()) {
      detail::test_walk_counters.kid_memo_hits.fetch_add(1, std::memory_order_relaxed);
      const KidMemo::Slice& sl = it->second;
      accepted.insert(accepted.end(), m.acc.begin() + sl.acc, m.acc.begin() + sl.acc + sl.n_acc);
      uncertain.insert(uncertain.end(), m.unc.begin() + sl.unc, m.unc.begin() + sl.unc + sl.n_unc);
      if (uncertain.size() > uncertain_cap) over_cap = true;
      return;
    }
    const size_t a0 = accepted.size(), u0 = uncertain.size();
    walk_subtree(j, set0);
    const size_t n = accepted.size() - a0 + uncertain.size() - u0;
    if (over_cap || kid_memo_tokens + n > kMaxKidMemoTokens) return;
    kid_memo_tokens += n;
    m.kids.emplace(key, KidMemo::Slice{static_cast<uint32_t>(m.acc.size()),
                                       static_cast<uint32_t>(accepted.size() - a0),
                                       static_cast<uint32_t>(m.unc.size()),
                                       static_cast<uint32_t>(uncertain.size() - u0)});
    m.acc.insert(m.acc.end(), accepted.begin() + static_cast<std::ptrdiff_t>(a0), accepted.end());
    m.unc.insert(m.unc.end(), uncertain.begin() + static_cast<std::ptrdiff_t>(u0), uncertain.end());
  }

  // Root stops: under a bounded cover whose run ends in a set that takes a few ASCII code
  // points (a string's last characters, then `"`; the last levels of `.{0,50} "<END>"`),
  // the root's children that the cover does not hold whole (tokens longer than the run)
  // were each walked on their own, and their skips (skip_region's live stops) found the
  // same few stops: ten thousand children and more, each a frame, a run lookup and a few
  // searches. Their stops are found once for all of them instead (the class exits above
  // the cut depth and the nodes of the live code points at it, below a child of the
  // batch), their partial tails taken, and the walk goes on from the stops. Applies where
  // walk_subtree would skip each child that way: a cover found in the walk's own mode (a
  // child's frame is then the cover's set, inside the context: in a strict walk a code
  // point after which the context may end lies outside every run, and a quiet walk has
  // nothing past the end).
  // Also for a tolerant cover in a strict walk (a context that may end after each code
  // point, with something past its end: the last characters of the last line of
  // `line ("\n" line){0,8}`, whose children were each walked node by node, 57,000 nodes and
  // 6-10 ms a mask on gemma-4), as a tolerant take would: where what follows the context's
  // end can take no code point of the cover's class (a path that ends the context dies at
  // its next code point), and its own first code points are a few ASCII ones, live at the
  // cut as well.
  bool root_stops_apply() {
    root_tolerant_ = cover_mode_ == WalkStates::kTolerant && states.mode() == WalkStates::kStrict &&
                     after_end != 0 && !exit_any;
    if (cover_bits == nullptr || cover_set == 0 || obs_base != kNoObserve || tolerant_ ||
        (cover_mode_ != states.mode() && !root_tolerant_)) {
      return false;
    }
    // An unbounded cover (a string's characters, the first character of a key that is none
    // of the names): the stops are the class exits alone, those where the run's set dies
    // (a control character) kept only to leave out the partial tails below them.
    if (cover_unbounded()) {
      return !root_tolerant_ && cover_mode_ == states.mode() &&
             class_exits(cover_class_) != nullptr;
    }
    const WalkStates::ModeScope mode(states, cover_mode_);
    const uint32_t s = set_along(cover_set, cover_len_ > 0 ? cover_len_ - 1 : 0);
    const CharSet& f = s != 0 ? states.first(s) : kNothing;
    if (!few_live_cuts(f, root_live_) || class_exits(cover_class_) == nullptr) return false;
    return !root_tolerant_ || (past_end_dies(states.run_class(cover_set)) &&
                               add_live(states.first(after_end), root_live_));
  }
  bool root_tolerant_ = false;

  void walk_root_stops() {
    const auto& trie = tokens.trie();
    const auto& depth_of = tokens.node_depth();
    const auto& kids = tokens.root_children();
    const std::vector<uint32_t>& exits = *class_exits(cover_class_);
    const uint32_t cut_depth = cover_unbounded() ? UINT32_MAX : cover_len_ + 1;
    // The batch's children by index among the root's children (for a node's child: the
    // last root child at or before it).
    batched_kid_.assign(kids.size(), 0);
    for (uint32_t j : root_batch_) {
      batched_kid_[static_cast<size_t>(std::lower_bound(kids.begin(), kids.end(), j) -
                                       kids.begin())] = 1;
    }
    // The nodes asked about come in runs of trie order (the exits, then the cut nodes of each
    // live code point): the root child is found by stepping on from the last one, by a search
    // only past a few steps or when a new run starts (a search per node was half of this
    // batch's own time on a line's 1,600 exits).
    size_t kid = 0;
    uint32_t last = 0;
    auto in_batch = [&](uint32_t b) {
      if (kids.empty()) return false;
      if (b < last) kid = 0;
      last = b;
      for (int step = 0; kid + 1 < kids.size() && kids[kid + 1] <= b; ++step) {
        if (step == kMaxKidSteps) {
          kid =
              static_cast<size_t>(
                  std::upper_bound(kids.begin() + static_cast<std::ptrdiff_t>(kid), kids.end(), b) -
                  kids.begin()) -
              1;
          break;
        }
        ++kid;
      }
      return kids[kid] <= b && batched_kid_[kid] != 0;
    };
    clear_stop_cands();
    for (uint32_t b : exits) {
      if (depth_of[b] < cut_depth && in_batch(b)) stop_cands_.push_back(b);
    }
    end_stop_run();
    if (!cover_unbounded()) {
      add_live_cuts(root_live_, cut_depth, 0, static_cast<uint32_t>(trie.size()), in_batch);
    }
    region_exits_.clear();
    keep_outer_stops();
    // The tokens with a partial UTF-8 tail (the cover holds none), a child's own included,
    // outside the stops and shorter than the cut.
    frames.clear();
    todo.clear();
    {
      // (A tolerant cover: its runs, and frames that know where the context may end.)
      const WalkStates::ModeScope mode(states, cover_mode_);
      const ScopedSet<bool> tolerant(tolerant_, root_tolerant_);
      const ScopedSet<uint32_t> steps(
          exit_after_steps_, root_tolerant_ && cover_final_exit_ ? cover_len_ - 1 : UINT32_MAX);
      size_t st = 0;
      for (uint32_t j : root_batch_) {
        take_partials_outside_stops(trie[j].tok_begin, tok_begin_of(trie[j].end), cut_depth,
                                    cover_set, 1, &st, root_tolerant_ && cover_first_exits_);
      }
      // (Unbounded: the stops whose code point the run's set there cannot take go nowhere.)
      if (cover_unbounded()) {
        detail::test_walk_counters.unbounded_root_stops.fetch_add(1, std::memory_order_relaxed);
        drop_dead_stops(cover_set);
      }
      // Each stop is walked on from the run's set at its parent, as skip_region does: the
      // children's frames are the cover's set at depth 1, inside the context (which may end
      // there in a tolerant cover).
      queue_stops(1, cover_set,
                  make_frame(cover_set, 0, 1, root_tolerant_ && cover_first_exits_, false, false),
                  false);
    }
    drain();
  }
  // Drops from region_exits_ the stops whose code point the run's set at their parent (from
  // `set` at depth 1) cannot take: walked on, each would end there.
  void drop_dead_stops(uint32_t set) {
    const auto& trie = tokens.trie();
    const auto& depth_of = tokens.node_depth();
    dead_sets_.clear();
    size_t out = 0;
    for (uint32_t b : region_exits_) {
      const uint32_t rel = depth_of[b] - 2u;  // run code points before b, past the first
      while (dead_sets_.size() <= rel) {
        dead_sets_.push_back(dead_sets_.empty() ? set : set_along(dead_sets_.back(), 1));
      }
      const uint32_t s = dead_sets_[rel];
      if (s != 0 && states.step(s, trie[b].cp) != 0) region_exits_[out++] = b;
    }
    region_exits_.resize(out);
  }
  std::vector<uint32_t> dead_sets_{};
  static constexpr int kMaxKidSteps = 8;
  std::vector<uint32_t> root_batch_{};
  std::vector<uint8_t> batched_kid_{};
  uint64_t root_live_[2] = {0, 0};
};

}  // namespace

namespace detail {

// The walk machinery of one compiled grammar, kept after compile while some context masks
// are still to be computed on first use.
class ContextClassifier {
 public:
  explicit ContextClassifier(const CompiledData& d)
      : d_(d),
        walk_pool_(&d.g, nullptr, false),
        states_(walk_pool_, d.g, d.options.max_walk_states,
                std::min(d.options.max_walk_states, d.options.max_mask_set_stacks)),
        cl_{.tokens = *d.tokens,
            .g = d.g,
            .pool = walk_pool_,
            .states = states_,
            .no_text = d.no_text},
        after_end_(d.g.rule_alt_begin.size() - 1, kUnset),
        returns_(d.g.rule_alt_begin.size() - 1),
        seen_(d.g.rule_alt_begin.size() - 1, 0) {
    // What may follow once the stacks past a context's end are left too: any code point
    // of the grammar. (The union of the rules' follow sets would be tighter, but its fixed
    // point cost a millisecond of every compile; a wider set only leaves a few more tokens
    // to the run-time check.)
    RangeSet any;
    for (const CharSet& cs : d.g.charsets) {
      const RangeSet r = charset_ranges(cs);
      any.insert(any.end(), r.begin(), r.end());
    }
    leave_follow_ = detail::make_charset(false, false, normalize(std::move(any)));
    cl_.leave_follow = &leave_follow_;
    // Call sites of every rule, and the calling rules within its cycle (compute_classes).
    callers_.resize(d.g.rule_alt_begin.size() - 1);
    cycle_callers_.resize(d.g.rule_alt_begin.size() - 1);
    for (uint32_t p = 0; p + 1 < d.g.elems.size(); ++p) {
      if (d.g.elems[p].kind != detail::kRef) continue;
      const uint32_t callee = d.g.elems[p].arg, caller = d.g.elem_rule[p];
      callers_[callee].push_back(p);
      if (d.g.rule_comp[callee] == d.g.rule_comp[caller] &&
          d.g.comp_cyclic[d.g.rule_comp[callee]]) {
        cycle_callers_[callee].push_back(caller);
      }
    }
  }

  // Walks from here on are abandoned at `deadline` or after `max_nodes` trie nodes
  // (Classifier::tick); clear_deadline() turns that off again.
  void set_deadline(Clock::time_point deadline, uint64_t max_nodes) {
    cl_.has_deadline = true;
    cl_.deadline = deadline;
    cl_.nodes_left = max_nodes;
    cl_.stride_left = Classifier::kDeadlineStride;
  }
  void clear_deadline() { cl_.has_deadline = false; }
  // The grammar's structural classes, which the first mask of any grammar needs (every
  // context's key is made of them): computed when the grammar is compiled, so that the
  // first mask does not pay for them (0.4-1 ms of it for a large schema's grammar, most of
  // the first mask of WashingtonPost wp_8, wp_105, wp_124 and Github_hard o58639).
  void prepare_classes() {
    if (pos_class_.empty()) compute_classes();
  }

  // The mask of context n; null when it has none (see below). *fresh tells whether it was
  // walked for n, or is the mask of an equal chain computed before (shared, not copied: a
  // large schema's 100,000 contexts copied 16 KB bitmasks by the gigabyte).
  std::shared_ptr<const ContextMask> compute(uint32_t n, bool* fresh) {
    reset_states_if_full();
    const StackPool& pool = d_.contexts;
    chain_pos_.clear();
    for (uint32_t c = n; c != StackPool::kEmpty; c = pool.parent(c))
      chain_pos_.push_back(pool.pos(c));
    // The rule of the chain's bottom decides where a token that leaves the context goes on.
    const int64_t max_after = detail::test_max_after_stacks.load(std::memory_order_relaxed);
    const uint32_t after = after_end(d_.g.elem_rule[chain_pos_.back()],
                                     max_after >= 0 ? size_t(max_after) : kMaxAfterStacks);
    if (after != kTooMany) {
      // A mask with more uncertain tokens than the deep threshold is never read: each of
      // its stacks takes a whole-stack mask instead (MatcherState::fill). So the walk stops
      // there and the context gets no mask, which sends its stacks the same way. (A
      // one-character rule left by nearly every token, clang-format's `key-other-v12`,
      // listed 119,000 of llama-bpe's tokens as uncertain: 3.5 ms, a 476 KB list, unused.)
      WalkMode capped(cl_, d_.deep_threshold(), false);
      std::shared_ptr<const ContextMask> cm = compute_for(after, after, fresh);
      if (cm == nullptr && *fresh) {
        detail::test_walk_counters.capped_walks.fetch_add(1, std::memory_order_relaxed);
      }
      return cm;
    }
    detail::test_walk_counters.leave_walks.fetch_add(1, std::memory_order_relaxed);
    // Where that is many stacks (a rule called from hundreds of places: whitespace, a
    // value in a large schema), each step past the context's end costs a step of each of
    // them (a 17 ms walk for a schema's `ws`). The tokens that leave such a context are
    // left uncertain instead (checked against the real stack at run time, memoized per
    // stack); where that is too many of them (a context most tokens leave at once), the
    // context gets no mask (null) and each of its stacks gets a whole-stack mask, whose
    // walk knows what follows. "Too many" is n_vocab/128 (1,002 tokens on llama-bpe): a
    // stack's check of a few thousand such tokens cost more than its whole-stack walk,
    // which the walk's trie prunes after the context (n_vocab/32 before; /64 and /128
    // each measured faster on the dev set, /256 slower).
    const size_t cap = detail::test_leave_cap.load(std::memory_order_relaxed);
    WalkMode leave(cl_, cap != 0 ? cap : d_.tokens->n_vocab() / 128, true);
    return compute_for(kUnset, 0, fresh);
  }

  // The mask of the chain in chain_pos_ going on with the stacks `after` past its end;
  // key_after stands for them in the keys of shared walks. Null when the walk passed the
  // classifier's cap on uncertain tokens.
  std::shared_ptr<const ContextMask> compute_for(uint32_t key_after, uint32_t after, bool* fresh) {
    // Chains of equal classes with the same continuation past their end have equal masks
    // (whitespace before an expression in two alternatives, a digit in each copy of a
    // number): one walk serves them all.
    // A chain through a repetition family (a word of `(\S+\s+){0,99}`) is shared with the
    // chains at other levels of the family that a token cannot tell apart.
    std::vector<uint32_t> ckey = classes_of(chain_pos_.size());
    push_after_key(ckey, key_after);
    // Its uncertain tokens may then be settled by the returns of each call site (see
    // settle): the settled mask is kept under the key and those returns, the walk's under
    // the key alone (chains of other rules with the same continuation share the walk).
    const std::vector<uint32_t>* groups =
        key_after == kUnset ? nullptr : return_groups(d_.g.elem_rule[chain_pos_.back()]);
    std::vector<uint32_t> skey;
    if (groups != nullptr) {
      skey = ckey;
      skey.push_back(kSettleMarker);
      skey.insert(skey.end(), groups->begin(), groups->end());
      if (const auto* known = chains_.lookup(skey)) {
        *fresh = false;
        return *known;
      }
    }
    std::shared_ptr<const ContextMask> cm;
    if (const auto* known = chains_.lookup(ckey)) {
      *fresh = false;
      cm = *known;
    } else {
      *fresh = true;
      std::vector<uint32_t> fkey;
      if (family_key(chain_pos_, &fkey)) {
        push_after_key(fkey, key_after);
        cm = family_chain(chain_pos_, std::move(fkey), after, fresh);
      } else {
        // A level of a large family beside references to other families, or of a small
        // family: no observed walk (its sharing was little, and it goes without root
        // stops), but derived from a higher level's mask where it can be.
        LevelMasks* levels = nullptr;
        uint32_t level = 0;
        if (family_key(chain_pos_, &fkey, true)) {
          push_after_key(fkey, key_after);
          levels = &families_[std::move(fkey)].levels;
          level = flevel_;
        }
        std::unique_ptr<ContextMask> walked = compute_chain(after, levels, level);
        if (!past_cap(*walked)) cm = same_mask(std::move(walked), fresh);
        if (levels != nullptr && cm != nullptr) levels->emplace(level, cm);
      }
      chains_.add(std::move(ckey), cm);
    }
    if (groups == nullptr) return cm;
    if (cm != nullptr) {
      if (std::unique_ptr<ContextMask> settled = settle(*cm, *groups)) {
        *fresh = true;
        cm = same_mask(std::move(settled), fresh);
      }
    }
    chains_.add(std::move(skey), cm);
    return cm;
  }

  // A token that leaves the context and goes on past its end is uncertain: the union of
  // the returns of every call site of the chain's bottom rule takes it, but the real stack
  // returns to one of them. Where every call site's returns take it alone (it ends within
  // them, never below them: what lies below is unknown), any real stack does, and it is
  // accepted. (An S-expression's item: after an atom, a token of spaces and a newline is
  // whitespace wherever the item was called, while one of closing parentheses reads the
  // stack further down. deep_recursion's item contexts left 1,160 tokens to the run-time
  // check, 763 of them of the first kind.) The run-time check costs one step per code
  // point past the shared prefix, at each new stack; this costs as much per call site, once
  // per context, so only lists of kMinSettle tokens or more are settled.
  // Null when it settles none.
  static constexpr size_t kMinSettle = 64;
  static constexpr size_t kSettleSample = 64, kSettleSampleShare = 8;  // (at least 1/8 taken)
  std::unique_ptr<ContextMask> settle(const ContextMask& cm, const std::vector<uint32_t>& groups) {
    const size_t n = cm.uncertain_ids.size();
    const size_t forced = detail::test_min_settle.load(std::memory_order_relaxed);
    if (n == 0 || n < (forced != SIZE_MAX ? forced : kMinSettle)) return nullptr;
    const uint32_t w = walk_stack(chain_pos_);
    std::vector<uint8_t> taken(n, 1);
    // (Every walk sets after_end before it starts; only the list mode is undone here.)
    struct Restore {
      Classifier& c;
      ~Restore() { c.settle_taken = nullptr; }
    } restore{cl_};
    // Where the sites are followed by different things (a JSON value's `,` then a key in
    // an object, `,` then a value in an array), few tokens are taken by all of them, and
    // settling is a walk per site for nothing (json.gbnf: 21 lists of 551 tokens, 3
    // settled in each, 0.4 ms of a 3 ms compile). A long list is tried first on a sample
    // of kSettleSample tokens spread over it, against the first site's returns alone.
    if (n > 2 * kSettleSample) {
      std::vector<Token> sample(kSettleSample);
      for (size_t i = 0; i < kSettleSample; ++i)
        sample[i] = cm.uncertain_ids[i * n / kSettleSample];
      std::vector<uint8_t> sample_taken(kSettleSample, 1);
      cl_.settle_taken = &sample_taken;
      cl_.after_end = groups[0];
      cl_.classify_list(w, sample);
      const auto hits = std::count(sample_taken.begin(), sample_taken.end(), 1);
      if (static_cast<size_t>(hits) * kSettleSampleShare < kSettleSample) return nullptr;
    }
    cl_.settle_taken = &taken;
    for (uint32_t g : groups) {
      cl_.after_end = g;
      cl_.classify_list(w, cm.uncertain_ids);
      if (std::find(taken.begin(), taken.end(), 1) == taken.end()) return nullptr;
    }
    std::vector<Token> settled, rest;  // both still in trie order
    for (size_t i = 0; i < n; ++i) (taken[i] != 0 ? settled : rest).push_back(cm.uncertain_ids[i]);
    auto out = std::make_unique<ContextMask>();
    accept_more(cm, settled, *out);
    out->uncertain_ids = std::move(rest);
    detail::test_walk_counters.settled_tokens.fetch_add(settled.size(), std::memory_order_relaxed);
    return out;
  }
  // The returns of each call site of rule r, as sets of walk stacks without the empty stack
  // (what lies below), in call-site order. A tail call site (one that returns nowhere but
  // below) stands for the call sites of its caller's rule, in turn. Null when some real
  // stack of r may return to none of them: r (or a caller through tail calls) is the root,
  // below whose frame nothing may lie; or r has no call site; and where r returns to more
  // than kMaxSettleGroups places, or through more than kMaxSettleSites call sites. Memoized per
  // rule (reset with the walk pool).
  static constexpr size_t kMaxSettleGroups = 4;
  // At most this many call sites are looked at, tail call sites' callers included: a rule
  // that a value rule tail-calls in a large schema reached 8,000 sites through 1,000 rules
  // (1 ms, for each such rule, in JSON Schema Store's eslintrc).
  static constexpr size_t kMaxSettleSites = 32;
  static constexpr uint32_t kSettleMarker = 0xFFFFFFFDu;
  const std::vector<uint32_t>* return_groups(uint32_t r) {
    RuleReturns& rr = returns_[r];
    if (!rr.groups_known) {
      rr.groups_known = true;
      std::vector<uint32_t> rules{r}, members, groups;
      bool ok = true;
      size_t n_sites = 0;
      for (size_t k = 0; ok && k < rules.size(); ++k) {
        const uint32_t q = rules[k];
        const auto& sites = callers_[q];
        n_sites += sites.size();
        ok = q != d_.g.root && !sites.empty() && n_sites <= kMaxSettleSites;
        for (size_t i = 0; ok && i < sites.size(); ++i) {
          members.clear();
          site_returns(sites[i], members);
          if (members.empty()) {
            const uint32_t caller = d_.g.elem_rule[sites[i]];
            if (std::find(rules.begin(), rules.end(), caller) == rules.end())
              rules.push_back(caller);
            continue;
          }
          const uint32_t set = states_.intern(members);
          if (std::find(groups.begin(), groups.end(), set) == groups.end()) groups.push_back(set);
          ok = groups.size() <= kMaxSettleGroups;
        }
      }
      if (ok) rr.groups = std::move(groups);
    }
    return rr.groups.empty() ? nullptr : &rr.groups;
  }

  // A chain that refers to level L (= flevel_) of a family: walks entering levels L, L-1,
  // ..., L-D all see the same shape (X r_{j-1} | "") as long as L-D >= 2, so a mask whose
  // walk went D levels down serves every chain of the same key at a level L' >= D + 2.
  // The walk tells D: entering r_j means leaving an X called from r_{j+1}, so a position
  // of r_{j+1} was on some stack of the walk.
  // Null when the walk passed the cap on uncertain tokens; *fresh as for compute().
  std::shared_ptr<const ContextMask> family_chain(const std::vector<uint32_t>& positions,
                                                  std::vector<uint32_t> key, uint32_t after,
                                                  bool* fresh) {
    FamilyWalks& walks = families_[key];
    bool below = false;
    for (const auto& [depth, mask] : walks.shared) {
      if (flevel_ >= depth + 2) {
        *fresh = false;
        return mask;
      }
      below = true;
    }
    *fresh = true;
    // A level too low for a known walk of this key (L < D + 2, where its tokens went D
    // levels down), or no higher than one whose walk reached the base, would be walked as
    // far down by the same tokens: into the base, which ends the observation anyway. The
    // walk is then not observed at all, and keeps what observed walks go without (root
    // stops, quiet and tolerant takes): the last characters of a `[^\n]{1,40}` line on qwen2,
    // whose longest tokens reach the base from any level, took 0.3-0.9 ms a context
    // observed (each level observed anew: nothing was kept to say it fails), 0.15 ms not.
    // Its mask is derived from a higher level's where it can be (derive_level; not in
    // place of an observed walk, which may serve many levels at once).
    if (below || flevel_ <= walks.failed_level) {
      std::unique_ptr<ContextMask> walked = derive_level(walks.levels, flevel_, positions, after);
      if (walked == nullptr) {
        test_walk_counters.unobserved_family_walks.fetch_add(1, std::memory_order_relaxed);
        walked = classify(positions, after);
      }
      if (past_cap(*walked)) return nullptr;
      std::shared_ptr<const ContextMask> cm = same_mask(std::move(walked), fresh);
      walks.levels.emplace(flevel_, cm);
      return cm;
    }
    struct Observe {
      Classifier& c;
      Observe(Classifier& cl, uint32_t base) : c(cl) { c.observe(base); }
      ~Observe() { c.obs_base = Classifier::kNoObserve; }
    };
    std::unique_ptr<ContextMask> walked;
    uint32_t low;
    {
      cl_.fam_level = &fam_level_;
      cl_.fam_base = &fam_base_;
      Observe obs(cl_, fbase_);
      walked = classify(positions, after);
      // The lowest level of this family on a stack of the walk (L + 1: the chain's own).
      low = std::min(cl_.obs_low, flevel_ + 1);
    }
    if (past_cap(*walked)) return nullptr;
    std::shared_ptr<const ContextMask> cm = same_mask(std::move(walked), fresh);
    walks.levels.emplace(flevel_, cm);
    // Levels entered: L down to low - 1, all above the base when low >= 3.
    if (low >= Classifier::kMinSharedLow) {
      walks.shared.emplace_back(flevel_ - (low - 1), cm);
    } else {
      walks.failed_level = std::max(walks.failed_level, flevel_);
    }
    return cm;
  }
  uint32_t flevel_ = 0, fbase_ = 0;

  // A level's mask from the mask of the nearest level above it of the same key. The chain
  // at level L takes at most L more X's where the one at level L' > L takes L', and
  // otherwise the two are alike (r_j ::= X r_{j-1} | "": each level's strings are the next
  // one's with at most j X's). So a token that L' refuses, L refuses. And a token of at
  // most L code points (a partial UTF-8 tail counted as one) never needs more than L X's,
  // even at level L' (an X that takes none of its code points can be left out): its
  // answer at L' holds at L. Only the longer tokens that L' does not refuse are followed
  // from the chain itself (classify_list): a few dozen, where a walk visits the whole
  // class. The title of a schema (`char{0,60}`) on qwen2, whose longest tokens reach the
  // family's base from any level, walked each level afresh, 90-140 us a mask.
  // Null where no level above has a mask, or where L' takes a bitmask and more than
  // kMaxDerivedScan tokens are longer than L - 1 code points (the low levels of a broad
  // class), or more than kMaxDerivedLong tokens are to be followed.
  static constexpr size_t kMaxDerivedScan = 16384, kMaxDerivedLong = 512;
  using LevelMasks = std::map<uint32_t, std::shared_ptr<const ContextMask>>;  // by level
  std::unique_ptr<ContextMask> derive_level(const LevelMasks& levels, uint32_t level,
                                            const std::vector<uint32_t>& positions,
                                            uint32_t after) {
    const auto above = levels.upper_bound(level);
    if (above == levels.end()) return nullptr;
    const ContextMask* hi = above->second.get();
    const size_t forced = detail::test_max_derived_long.load(std::memory_order_relaxed);
    const size_t most = forced != SIZE_MAX ? forced : kMaxDerivedLong;
    if (most == 0) return nullptr;
    const uint32_t n = level - 1;  // the code points of a token whose answer L' gives
    // The higher level's answers for the tokens of at most n code points (kept), and the
    // longer tokens it does not refuse, to be followed from the chain itself.
    ContextMask kept;
    std::vector<Token>& longer = derive_longer_;
    longer.clear();
    bool over = false;
    const auto split = [&](const std::vector<Token>& from, std::vector<Token>& short_to,
                           bool long_too) {
      for (Token t : from) {
        if (cl_.full_cps(t) <= n) {
          short_to.push_back(t);
        } else if (!long_too) {
          continue;
        } else if (longer.size() == most) {
          over = true;
          return;
        } else {
          longer.push_back(t);
        }
      }
    };
    if (!hi->accepted_bits.empty()) {
      std::vector<uint32_t>& taken = derive_taken_;
      taken = hi->accepted_bits;
      for (Token t : hi->uncertain_ids) bitmask_set(taken.data(), t);
      const size_t scan = forced != SIZE_MAX ? d_.tokens->n_vocab() : kMaxDerivedScan;
      if (!cl_.tokens_longer(n, taken, scan, most, &longer)) return nullptr;
      const std::vector<uint32_t>* shorter = cl_.tokens_up_to(n);
      if (shorter == nullptr) return nullptr;
      kept.accepted_bits = hi->accepted_bits;
      for (size_t w = 0; w < kept.accepted_bits.size(); ++w) kept.accepted_bits[w] &= (*shorter)[w];
      split(hi->uncertain_ids, kept.uncertain_ids, false);  // (the longer ones are in `longer`)
    } else {
      // Lists: read as they are (a few hundred tokens at the low levels of a family of
      // digits or spaces, where a bitmask of what L' takes cost more than their walk).
      split(hi->accepted_ids, kept.accepted_ids, true);
      split(hi->uncertain_ids, kept.uncertain_ids, true);
      if (over) return nullptr;
      std::sort(longer.begin(), longer.end(), cl_.trie_order());
    }
    cl_.after_end = after;
    cl_.classify_list(walk_stack(positions), longer);
    auto out = std::make_unique<ContextMask>();
    accept_more(kept, cl_.accepted, *out);
    // Both lists in trie order, merged so (the run-time check reuses shared prefixes).
    out->uncertain_ids.resize(kept.uncertain_ids.size() + cl_.uncertain.size());
    std::merge(kept.uncertain_ids.begin(), kept.uncertain_ids.end(), cl_.uncertain.begin(),
               cl_.uncertain.end(), out->uncertain_ids.begin(), cl_.trie_order());
    if (past_cap(*out)) return nullptr;
    test_walk_counters.derived_levels.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
  std::vector<uint32_t> derive_taken_{};
  std::vector<Token> derive_longer_{};

  // Walks that stop past `cap` uncertain tokens, and in which (`leave`) leaving the context
  // makes every longer token uncertain; the mode before is restored on every way out
  // (exceptions included; a prefix's walk runs inside a chain's).
  struct WalkMode {
    Classifier& c;
    bool exit_any, over_cap;
    size_t cap;
    WalkMode(Classifier& cl, size_t cap_, bool leave)
        : c(cl), exit_any(cl.exit_any), over_cap(cl.over_cap), cap(cl.uncertain_cap) {
      c.exit_any = leave;
      c.uncertain_cap = cap_;
      c.over_cap = false;
    }
    ~WalkMode() {
      c.exit_any = exit_any;
      c.uncertain_cap = cap;
      c.over_cap = over_cap;
    }
  };
  // Past this many stacks after a context's end, the tokens that leave it are left uncertain
  // (checked against the real stack at run time, the answer shared by the top frames it
  // read). A JSON string's closing quote returns to every place a string is called from: on
  // a schema's first string value its walk stepped 114 tokens through up to 256 stacks, 0.6-0.8
  // ms; a check reads one stack. 256 before: 16 measured best on the dev set (8 slower).
  static constexpr size_t kMaxAfterStacks = 16;

  // The sets of all walks so far are kept for the next ones (most of a grammar's walks meet
  // the same sets), up to half of CompileOptions::max_walk_states; past that, before a walk,
  // they are all forgotten. (A large schema, detekt's, used to reach the bound after a
  // few hundred walks, and every later context then had no mask.)
  void reset_states_if_full() {
    if (states_.n_sets() <= d_.options.max_walk_states / 2) return;
    detail::test_walk_counters.state_resets.fetch_add(1, std::memory_order_relaxed);
    states_.reset();
    walk_pool_ = StackPool(&d_.g, nullptr, false);  // the sets' stacks
    cl_.forget_sets();
    std::fill(after_end_.begin(), after_end_.end(), kUnset);
    std::fill(returns_.begin(), returns_.end(), RuleReturns{});
    // Chains and families keyed by an `after` set, whose id now stands for another set, are
    // keyed by the generation too: the old ones are never found again. They are kept
    // rather than freed (one entry per context computed at most, as without resets):
    // freeing tens of thousands of them took 12-26 ms inside one of jsconfig's masks.
    ++generation_;
  }
  // What stands for the stacks past a chain's end in the keys of chains_ and families_:
  // the `after` set and the states' generation; kUnset (every leaving token uncertain)
  // means the same in every generation.
  void push_after_key(std::vector<uint32_t>& key, uint32_t key_after) const {
    key.push_back(key_after);
    key.push_back(key_after == kUnset ? 0 : generation_);
  }
  uint32_t generation_ = 0;
  // Whether the walk that made cm passed the cap on uncertain tokens (cm is then partial).
  bool past_cap(const ContextMask& cm) const {
    return cl_.over_cap || cm.uncertain_ids.size() > cl_.uncertain_cap;
  }
  // Family chains by key: (levels their walk went down, mask), and the highest level whose
  // observed walk reached the base (0: none).
  struct FamilyWalks {
    std::vector<std::pair<uint32_t, std::shared_ptr<const ContextMask>>> shared;
    uint32_t failed_level = 0;
    LevelMasks levels;  // every level's mask computed so far (derive_level)
  };
  std::map<std::vector<uint32_t>, FamilyWalks> families_;

  // The mask of the chain in chain_pos_, from a prefix's mask or by a walk of the chain.
  // Where no prefix serves, a chain at `level` of a family is derived from the
  // masks of its key's higher levels (`levels`, when not null; derive_level).
  std::unique_ptr<ContextMask> compute_chain(uint32_t after, const LevelMasks* levels = nullptr,
                                             uint32_t level = 0) {
    // Many chains share their top frames (a string's characters inside every property that
    // holds a string): the tokens decided by the top frames alone are classified once per
    // such prefix, and only the few that leave it are followed through the whole chain.
    // A grammar whose prefixes keep being left by too many tokens (C's whitespace before
    // any word) stops trying them: each failed try is a partial walk.
    const bool worth = prefix_failed_ < 16 || prefix_failed_ < 4 * prefix_used_;
    int tries = 0;
    for (size_t len = 1; worth && len < chain_pos_.size() && tries < kMaxPrefixTries; ++len) {
      if (d_.g.rule_generated[d_.g.elem_rule[chain_pos_[len - 1]]]) continue;
      ++tries;
      const ContextMask* base = prefix_mask(len);
      if (base != nullptr) {
        ++prefix_used_;
        return compose(*base, after);
      }
    }
    if (tries > 0) ++prefix_failed_;
    if (levels != nullptr) {
      if (std::unique_ptr<ContextMask> cm = derive_level(*levels, level, chain_pos_, after))
        return cm;
    }
    return classify(chain_pos_, after);
  }

  // The mask of a whole stack: nothing lies below it, so no token is uncertain. Stacks of
  // equal classes share one walk; *fresh tells whether this one walked.
  std::shared_ptr<const ContextMask> stack_mask(const std::vector<uint32_t>& positions,
                                                bool* fresh) {
    reset_states_if_full();
    std::vector<uint32_t> key = classes_of(positions, positions.size());
    if (const auto* known = stacks_.lookup(key)) {
      *fresh = false;
      return *known;
    }
    std::shared_ptr<const ContextMask> cm;
    if (std::vector<uint32_t> fkey; family_key(positions, &fkey)) {
      cm = family_chain(positions, std::move(fkey), 0, fresh);
    } else {
      *fresh = true;
      cm = same_mask(classify(positions, 0), fresh);
    }
    stacks_.add(std::move(key), cm);
    return cm;
  }

 private:
  // A mask equal to one computed before (the positions of `[a-z]{162}`, a family's levels
  // past what a token spans, the same string in two places) is that one: the memory is
  // held once, and a matcher whose stacks share it sets its accepted tokens once a step
  // (MatcherState::fill), where it OR-ed 160 copies of one 16 KB bitmask for a search.
  // *fresh turns false when an earlier mask serves.
  std::shared_ptr<const ContextMask> same_mask(std::unique_ptr<ContextMask> cm, bool* fresh) {
    const auto hash_of = [](const auto& v, uint64_t seed) {
      // (Token ids are int32_t: read as their unsigned variant.)
      return hash_ids(reinterpret_cast<const uint32_t*>(v.data()), v.size()) ^
             (seed * 0x9E3779B97F4A7C15ull);
    };
    // Accepted ids in any order (same_ids): a sum of their mixed values.
    uint64_t ids_sum = cm->accepted_ids.size();
    for (Token t : cm->accepted_ids) {
      const uint64_t x =
          (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 1) * 0x9E3779B97F4A7C15ull;
      ids_sum += x ^ (x >> 29);
    }
    const uint64_t h = hash_of(cm->accepted_bits, hash_of(cm->uncertain_ids, 1)) ^ ids_sum;
    auto range = masks_by_hash_.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
      const ContextMask& o = *it->second;
      if (o.accepted_bits == cm->accepted_bits && o.uncertain_ids == cm->uncertain_ids &&
          same_ids(o.accepted_ids, cm->accepted_ids)) {
        detail::test_walk_counters.same_masks.fetch_add(1, std::memory_order_relaxed);
        *fresh = false;
        return it->second;
      }
    }
    std::shared_ptr<const ContextMask> out = std::move(cm);
    masks_by_hash_.emplace(h, out);
    return out;
  }

  // Walks run on full (uncut) stacks: a copy of the chain with the empty stack below it, so
  // that popping below the chain is the only way to leave it; `after` is the set of stacks
  // parsing goes on with then (see after_end).
  uint32_t walk_stack(const std::vector<uint32_t>& positions) {
    uint32_t w = StackPool::kEmpty;
    for (size_t k = positions.size(); k-- > 0;) w = walk_pool_.make(positions[k], w);
    return w;
  }
  std::unique_ptr<ContextMask> classify(const std::vector<uint32_t>& positions, uint32_t after) {
    const uint32_t w = walk_stack(positions);
    cl_.after_end = after;
    cl_.kid_memo = kid_memo_for(positions, after);
    cl_.classify_context(w);
    cl_.kid_memo = nullptr;
    auto cm = std::make_unique<ContextMask>();
    const size_t n_vocab = d_.tokens->n_vocab();
    if (cl_.cover_bits != nullptr) {
      cl_.cover_into(cm->accepted_bits);
      for (Token t : cl_.accepted) bitmask_set(cm->accepted_bits.data(), t);
    } else if (cl_.accepted.size() * 32 > n_vocab) {
      cm->accepted_bits.assign(bitmask_words(n_vocab), 0);
      for (Token t : cl_.accepted) bitmask_set(cm->accepted_bits.data(), t);
    } else {
      cm->accepted_ids = cl_.accepted;  // in walk order (see same_ids)
    }
    // Uncertain tokens stay in trie order: neighbours share prefixes, which the run-time
    // check reuses.
    cm->uncertain_ids = cl_.uncertain;
    return cm;
  }

  // The kid memo of a chain whose top element is a class of more than one code point:
  // its children's walks depend on what follows that element (the rest of the chain, by
  // structural class), on the stacks past the end and on the walk's mode, which key it.
  Classifier::KidMemo* kid_memo_for(const std::vector<uint32_t>& positions, uint32_t after) {
    const Elem& e = d_.g.elems[positions[0]];
    if (e.kind != detail::kChars) return nullptr;
    if (d_.g.charsets[e.arg].single() >= 0) return nullptr;  // one code point: one child
    // (The top by what follows its element: its children are walked from after it.)
    std::vector<uint32_t> key = classes_of(positions, positions.size());
    key[0] = pos_class(positions[0] + 1);
    append_after_classes(key, after);
    key.push_back(cl_.exit_any ? 1u : 0u);
    key.push_back(static_cast<uint32_t>(std::min<size_t>(cl_.uncertain_cap, UINT32_MAX)));
    return &kid_memos_[std::move(key)];
  }
  // The stacks past a chain's end by structural class (each stack's classes, frame by
  // frame, the stacks in order of those): where two rules are called from places alike (the
  // keys of two objects that take any property), their chains walk alike past the end.
  void append_after_classes(std::vector<uint32_t>& key, uint32_t after) {
    key.push_back(0xFFFFFFFFu);
    if (after == 0) return;
    if (after_classes_gen_ != generation_) {
      after_classes_.clear();
      after_classes_gen_ = generation_;
    }
    if (after_classes_.size() <= after) after_classes_.resize(after + 1);
    std::vector<uint32_t>& known = after_classes_[after];
    if (known.empty()) {
      uint32_t n = 0;
      const uint32_t* m = states_.members(after, &n);
      std::vector<std::vector<uint32_t>> stacks(n);
      for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t c = m[i]; c != StackPool::kEmpty; c = walk_pool_.parent(c)) {
          stacks[i].push_back(pos_class(walk_pool_.pos(c)));
        }
      }
      std::sort(stacks.begin(), stacks.end());
      for (const auto& st : stacks) {
        known.push_back(static_cast<uint32_t>(st.size()));
        known.insert(known.end(), st.begin(), st.end());
      }
    }
    key.insert(key.end(), known.begin(), known.end());
  }
  std::vector<std::vector<uint32_t>> after_classes_{};
  uint32_t after_classes_gen_ = 0;

  struct IdsHash {
    size_t operator()(const std::vector<uint32_t>& v) const {
      return static_cast<size_t>(hash_ids(v.data(), v.size()));
    }
  };
  std::unordered_map<std::vector<uint32_t>, Classifier::KidMemo, IdsHash> kid_memos_{};

  // Whether two lists of distinct token ids hold the same ids, in any order. Accepted ids
  // stay in the order the walk found them: sorting them was 4% of the slow subset's mask
  // time, for a list only read to set bits. Equal masks from two walks mostly list them in
  // one order; otherwise through a scratch bitset over the vocabulary.
  bool same_ids(const std::vector<Token>& a, const std::vector<Token>& b) {
    if (a.size() != b.size()) return false;
    if (a == b) return true;
    if (id_bits_.empty()) id_bits_.assign(bitmask_words(d_.tokens->n_vocab()), 0);
    for (Token t : a) bitmask_set(id_bits_.data(), t);
    bool same = true;
    for (Token t : b) same = same && bitmask_test(id_bits_.data(), t);
    for (Token t : a) id_bits_[static_cast<uint32_t>(t) >> 5] = 0;
    return same;
  }
  std::vector<uint32_t> id_bits_;

  static constexpr int kMaxPrefixTries = 3;
  size_t prefix_used_ = 0, prefix_failed_ = 0;  // contexts composed from a prefix, or not

  // The mask of the top `len` positions of chain_pos_ alone, where leaving them makes a
  // longer token uncertain; null when too many tokens leave them. Memoized per prefix, and
  // across grammars by the rules the prefix reaches (CompileOptions::share_masks).
  const ContextMask* prefix_mask(size_t len) {
    // Memoized by classes: prefixes at different positions with the same rest (one rule
    // called from two places) share one walk.
    std::vector<uint32_t> ckey = classes_of(len);
    const ContextMask* known;
    if (prefixes_.find(ckey, &known)) return known;
    std::vector<uint32_t> key(chain_pos_.begin(), chain_pos_.begin() + static_cast<long>(len));
    SharedMasks& shared = d_.tokens->shared_masks();
    std::string skey;
    if (d_.options.share_masks) skey = prefix_key(key);
    if (!skey.empty()) {
      std::lock_guard<std::mutex> lock(shared.mu);
      auto it = shared.masks.find(skey);
      if (it != shared.masks.end()) {
        const ContextMask* m = it->second.get();
        prefixes_.add(std::move(ckey), it->second);
        return m;
      }
    }
    std::shared_ptr<const ContextMask> sm;
    {
      WalkMode mode(cl_, d_.tokens->n_vocab() / 32, true);
      // A prefix at a level of a family: derived from its higher levels' where it
      // can be (the cells of a table row, `(cell "|"){2,6}`, each level's prefix composed
      // into every row and column).
      LevelMasks* levels = nullptr;
      uint32_t level = 0;
      std::unique_ptr<ContextMask> cm;
      if (std::vector<uint32_t> fkey; family_key(key, &fkey, true)) {
        fkey.push_back(kPrefixMarker);
        levels = &families_[std::move(fkey)].levels;
        level = flevel_;
        cm = derive_level(*levels, level, key, 0);
      }
      if (cm == nullptr) cm = classify(key, 0);
      // Too many tokens leave the prefix for it to be worth it: remembered as unusable.
      if (!cl_.over_cap) sm = std::move(cm);
      if (levels != nullptr && sm != nullptr) levels->emplace(level, sm);
    }
    if (!skey.empty()) {
      std::lock_guard<std::mutex> lock(shared.mu);
      const size_t bytes = skey.size() + (sm ? sm->memory_bytes() : 0);
      if (shared.bytes + bytes <= detail::SharedMasks::kMaxBytes &&
          shared.masks.emplace(skey, sm).second) {
        shared.bytes += bytes;
      }
    }
    const ContextMask* m = sm.get();
    prefixes_.add(std::move(ckey), std::move(sm));
    return m;
  }

  // A byte string that determines the token classes of a prefix walked alone: the rest of
  // each position's alternative, with character sets and token ids spelled out and each
  // rule it calls named by the id of that rule's closure (closure_id), plus the options that
  // change classes. Equal keys mean equal masks, in any grammar over the same TokenIndex.
  // Empty when a closure could not be named (the shared tables are full): not shared.
  std::string prefix_key(const std::vector<uint32_t>& positions) {
    std::string out;
    out.push_back(d_.no_text.empty() ? 'T' : 'C');
    put_word(out, static_cast<uint32_t>(positions.size()));
    for (uint32_t p : positions) {
      if (!put_alt(out, p, [&](uint32_t r) { return closure_id(r); })) return {};
    }
    return out;
  }

  static void put_word(std::string& out, uint32_t v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  // The alternative from position p to its end, each rule it calls written as rule_id(rule);
  // false when rule_id gives kNoClosure.
  template <class RuleId>
  bool put_alt(std::string& out, uint32_t p, RuleId&& rule_id) const {
    const auto& g = d_.g;
    for (;; ++p) {
      const Elem& e = g.elems[p];
      out.push_back(static_cast<char>(e.kind));
      if (e.kind == detail::kEnd) return true;
      if (e.kind == detail::kRef) {
        const uint32_t id = rule_id(e.arg);
        if (id == kNoClosure) return false;
        put_word(out, id);
      } else if (e.kind == detail::kChars) {
        const CharSet& cs = g.charsets[e.arg];
        out.push_back(static_cast<char>((cs.any ? 1 : 0) | (cs.negated ? 2 : 0)));
        put_word(out, static_cast<uint32_t>(cs.ranges.size()));
        for (const auto& r : cs.ranges) {
          put_word(out, r.lo);
          put_word(out, r.hi);
        }
      } else {
        put_word(out, e.arg);
      }
    }
  }

  // A number for rule r and every rule it reaches, the same in every grammar compiled over
  // this TokenIndex for the same rules up to their names: the rules are written in the order
  // of first use from r, each call as that order's number, and the text is interned in the
  // shared tables. Made once per rule per compile: a prefix key used to write out every rule
  // it reaches, again for each prefix (json.gbnf: 40 prefixes each writing most of the
  // grammar, 9% of its compile with every mask eager).
  static constexpr uint32_t kNoClosure = UINT32_MAX;
  uint32_t closure_id(uint32_t r) {
    const auto& g = d_.g;
    if (closure_ids_.empty()) closure_ids_.assign(g.rule_alt_begin.size() - 1, kUnknownClosure);
    if (closure_ids_[r] != kUnknownClosure) return closure_ids_[r];
    std::string text;
    std::unordered_map<uint32_t, uint32_t> order;
    std::vector<uint32_t> queue;
    auto local = [&](uint32_t q) {
      auto [it, fresh] = order.emplace(q, static_cast<uint32_t>(order.size()));
      if (fresh) queue.push_back(q);
      return it->second;
    };
    local(r);
    for (size_t k = 0; k < queue.size(); ++k) {
      const uint32_t q = queue[k];
      text.push_back('R');
      put_word(text, g.rule_alt_begin[q + 1] - g.rule_alt_begin[q]);
      for (uint32_t a = g.rule_alt_begin[q]; a < g.rule_alt_begin[q + 1]; ++a) {
        put_alt(text, g.alt_starts[a], local);
      }
    }
    SharedMasks& shared = d_.tokens->shared_masks();
    uint32_t id = kNoClosure;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      auto it = shared.closures.find(text);
      if (it != shared.closures.end()) {
        id = it->second;
      } else if (shared.bytes + text.size() <= detail::SharedMasks::kMaxBytes &&
                 shared.closures.size() < kNoClosure - 1) {
        id = static_cast<uint32_t>(shared.closures.size());
        shared.bytes += text.size();
        shared.closures.emplace(std::move(text), id);
      }
    }
    closure_ids_[r] = id;
    return id;
  }
  static constexpr uint32_t kUnknownClosure = UINT32_MAX - 1;
  std::vector<uint32_t> closure_ids_;  // per rule: its closure_id, or kUnknownClosure

  // The mask of the whole chain from a prefix's mask: its accepted tokens, and its
  // uncertain ones followed through the whole chain.
  std::unique_ptr<ContextMask> compose(const ContextMask& base, uint32_t after) {
    cl_.after_end = after;
    cl_.classify_list(walk_stack(chain_pos_), base.uncertain_ids);
    auto cm = std::make_unique<ContextMask>();
    accept_more(base, cl_.accepted, *cm);
    cm->uncertain_ids = cl_.uncertain;  // still in trie order
    return cm;
  }
  // out's accepted tokens: base's and `more` (others than base's: they were uncertain in
  // it), as a bitmask where base has one or where they pass n_vocab/32, else as ids.
  void accept_more(const ContextMask& base, const std::vector<Token>& more, ContextMask& out) {
    const size_t n_vocab = d_.tokens->n_vocab();
    if (!base.accepted_bits.empty() || (base.accepted_ids.size() + more.size()) * 32 > n_vocab) {
      if (!base.accepted_bits.empty()) {
        out.accepted_bits = base.accepted_bits;
      } else {
        out.accepted_bits.assign(bitmask_words(n_vocab), 0);
        for (Token t : base.accepted_ids) bitmask_set(out.accepted_bits.data(), t);
      }
      for (Token t : more) bitmask_set(out.accepted_bits.data(), t);
    } else {
      out.accepted_ids.reserve(base.accepted_ids.size() + more.size());
      out.accepted_ids.assign(base.accepted_ids.begin(), base.accepted_ids.end());
      out.accepted_ids.insert(out.accepted_ids.end(), more.begin(), more.end());
    }
  }

  const CompiledData& d_;
  // The set of stacks (in the walk pool, with the empty stack standing for what lies below)
  // where parsing goes on after a frame of rule r ends: the positions after each call of r,
  // and, where the rest of the caller may be empty or the call is a tail call, the same for
  // the caller's rule. kTooMany where that is more than `limit` stacks: walks do not go on
  // past such a rule's end, so the rest of the set is not built (a large schema's value
  // rule, called from thousands of places, built 2,000-16,000 stacks in 14-38 ms, and
  // past max_mask_set_stacks threw, for every context of the rule again). Memoized per
  // rule, with the limit of its first call (the limit only changes in tests).
  uint32_t after_end(uint32_t r, size_t limit) {
    if (after_end_[r] != kUnset) return after_end_[r];
    if (++seen_stamp_ == 0) {
      std::fill(seen_.begin(), seen_.end(), 0);
      seen_stamp_ = 1;
    }
    std::vector<uint32_t> rules{r}, members;
    seen_[r] = seen_stamp_;
    size_t next_check = limit;  // members may repeat: counted apart past the limit
    while (!rules.empty()) {
      const uint32_t cur = rules.back();
      rules.pop_back();
      const RuleReturns& rr = returns_of(cur, limit);
      if (rr.too_many) return after_end_[r] = kTooMany;
      members.insert(members.end(), rr.members.begin(), rr.members.end());
      if (members.size() > next_check) {
        sort_unique(members);
        if (members.size() > limit) return after_end_[r] = kTooMany;
        next_check = std::max(limit, 2 * members.size());
      }
      for (uint32_t caller : rr.tail_callers) {
        if (seen_[caller] != seen_stamp_) {
          seen_[caller] = seen_stamp_;
          rules.push_back(caller);
        }
      }
    }
    after_end_[r] = states_.intern(members);
    return after_end_[r];
  }

  // Where a frame of rule r returns to, one level up: the stacks after each call of r that
  // go on within the caller (members), and the rules whose rest may be empty after such a
  // call (tail_callers), whose own returns follow. Shared by the after_end of every rule
  // whose returns pass through r: the closure above walked every call site of every rule
  // it passed, again for each rule (jsconfig: 2,235 closures over 2.8 million call sites,
  // 46% of its contexts' time). too_many past `limit` members (the rest not built).
  struct RuleReturns {
    bool known = false, too_many = false;
    std::vector<uint32_t> members, tail_callers;
    bool groups_known = false;
    std::vector<uint32_t> groups;  // return_groups
  };
  // Appends to `members` the stacks a frame returns to after call site p, within the caller;
  // true when the caller's rest may be empty there (it returns below as well).
  bool site_returns(uint32_t p, std::vector<uint32_t>& members) {
    site_out_.clear();
    walk_pool_.start(p + 1, StackPool::kEmpty, site_out_);
    bool below = false;
    for (uint32_t o : site_out_) {
      if (o == StackPool::kEmpty) {
        below = true;
      } else {
        members.push_back(o);
      }
    }
    return below;
  }
  std::vector<uint32_t> site_out_;
  const RuleReturns& returns_of(uint32_t r, size_t limit) {
    RuleReturns& rr = returns_[r];
    if (rr.known) return rr;
    rr.known = true;
    size_t next_check = limit;
    for (uint32_t p : callers_[r]) {
      if (site_returns(p, rr.members)) rr.tail_callers.push_back(d_.g.elem_rule[p]);
      if (rr.members.size() > next_check) {
        sort_unique(rr.members);
        if (rr.members.size() > limit) {
          rr.too_many = true;
          rr.members.clear();
          rr.tail_callers.clear();
          return rr;
        }
        next_check = std::max(limit, 2 * rr.members.size());
      }
    }
    sort_unique(rr.members);
    sort_unique(rr.tail_callers);
    return rr;
  }
  static void sort_unique(std::vector<uint32_t>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  static constexpr uint32_t kUnset = 0xFFFFFFFFu, kTooMany = 0xFFFFFFFEu;
  StackPool walk_pool_;
  WalkStates states_;
  Classifier cl_;
  std::vector<uint32_t> chain_pos_;
  std::vector<uint32_t> after_end_;
  std::vector<RuleReturns> returns_;  // per rule; members are walk-pool stacks (reset with it)
  std::vector<uint32_t> seen_;        // per rule: seen_stamp_ when after_end reached it
  uint32_t seen_stamp_ = 0;
  CharSet leave_follow_;
  std::vector<std::vector<uint32_t>> callers_;
  // Per rule, the rules within its cycle that call it (one entry per call).
  std::vector<std::vector<uint32_t>> cycle_callers_;
  MasksByPositions prefixes_;  // by the classes of the prefix's positions
  MasksByPositions chains_;    // by the classes of a chain's positions and its `after`
  MasksByPositions stacks_;    // whole stacks (deep masks) by the classes of their positions
  // Every mask same_mask has seen, by a hash of its content.
  std::unordered_multimap<uint64_t, std::shared_ptr<const ContextMask>> masks_by_hash_{};

  // Structural classes of grammar positions: two positions are in one class when the rest
  // of their alternatives match element by element, with equal character sets, equal
  // tokens, and calls of rules in one class. Rules are in one class when their
  // alternatives, in order, are. The coarsest such partition is found by refinement from
  // a single class; walks from positions of one class classify every token alike.
  // A position's class is found on first use (a chain's few positions; all of detekt's
  // 311k took 7 ms): kUnset until then.
  std::vector<uint32_t> pos_class_;
  detail::IdSeqs pos_ids_;  // (element kind, its argument's class, the next position's class)

  // The classes of the first len positions (of chain_pos_ by default).
  std::vector<uint32_t> classes_of(size_t len) { return classes_of(chain_pos_, len); }
  std::vector<uint32_t> classes_of(const std::vector<uint32_t>& positions, size_t len) {
    if (pos_class_.empty()) compute_classes();
    std::vector<uint32_t> out(len);
    for (size_t k = 0; k < len; ++k) out[k] = pos_class(positions[k]);
    return out;
  }
  // The class of position p: its element and the class of the position after it.
  uint32_t pos_class(uint32_t p) {
    if (pos_class_[p] != kUnset) return pos_class_[p];
    const GrammarTables& g = d_.g;
    auto intern = [&](uint32_t q, uint32_t next) {
      const Elem& e = g.elems[q];
      const bool end = e.kind == detail::kEnd;
      const uint32_t key[3] = {uint32_t(e.kind), end ? 0 : arg_class(e), end ? 0u : next};
      pos_class_[q] = pos_ids_.intern(key, 3);
    };
    uint32_t q = p;  // the first position of p's rest with a class, or its end
    while (pos_class_[q] == kUnset && g.elems[q].kind != detail::kEnd) ++q;
    if (pos_class_[q] == kUnset) intern(q, 0);
    while (q-- > p) intern(q, pos_class_[q + 1]);
    return pos_class_[p];
  }
  uint32_t arg_class(const Elem& e) const {
    if (e.kind == detail::kRef) return rule_class_[e.arg];
    if (e.kind == detail::kChars) return cs_class_[e.arg];
    return e.arg;
  }

  void compute_classes() {
    const GrammarTables& g = d_.g;
    const size_t nr = g.rule_alt_begin.size() - 1;
    detail::IdSeqs cs_ids;
    cs_class_.assign(g.charsets.size(), 0);
    std::vector<uint32_t> sig;
    for (size_t i = 0; i < g.charsets.size(); ++i) {
      const CharSet& cs = g.charsets[i];
      sig.assign(1, (cs.any ? 1u : 0u) | (cs.negated ? 2u : 0u));
      for (const auto& r : cs.ranges) {
        sig.push_back(r.lo);
        sig.push_back(r.hi);
      }
      cs_class_[i] = cs_ids.intern(sig);
    }
    find_families(cs_class_);
    // Rules are classed callees first, one strongly connected component of the call graph
    // at a time. A rule on no cycle is classed by its signature (its elements, with the
    // classes of the rules it calls), in one pass. The rules of a cycle are refined among
    // themselves from a single class, their calls out of the component read as the
    // callees' classes, and get classes of their own component. That is a stable
    // partition (rules of one class have equal signatures under it), finer than the
    // coarsest one only where two cycles in different components are alike; it costs one
    // pass instead of a refinement of the whole grammar, which took rounds as deep as its
    // longest chain of calls (kb_662: 13 rounds over 30k positions, 1.2 ms on its first
    // mask; detekt's schema: 25 rounds over 311k).
    // (The components were found with the boundaries, at compile time.)
    const Components components =
        group_components(g.rule_comp, static_cast<uint32_t>(g.comp_cyclic.size()));
    const std::vector<uint32_t>& comp = components.comp;
    const uint32_t n_comp = components.size();
    const std::vector<uint32_t>& comp_begin = components.begin;
    const std::vector<uint32_t>& by_comp = components.members;
    constexpr uint32_t kAcyclic = 0, kCyclic = 1, kFamily = 0xFFFFFFFFu;
    std::vector<uint32_t> color(nr, kUnset), local(nr, 0), index_in_comp(nr, 0);
    // Class ids are handed out in order. A rule on no cycle is found among the earlier ones
    // by the hash of its signature, and equal to one only if that one's signature, made
    // again, is equal: storing every rule's signature (most of a large grammar's elements)
    // to compare with, in fresh memory copied on each growth, was a quarter of computing
    // the classes, itself nine tenths of such a grammar's first mask.
    uint32_t next_class = 0;
    std::unordered_multimap<uint64_t, uint32_t> acyclic_by_hash;  // signature hash -> rule
    std::vector<uint32_t> again_sig;
    detail::IdSeqs local_ids;  // the signatures of one round of a cycle's refinement
    // A component's refinement: callers of each member within it (by member index), the
    // members of each local class, the classes to sign again, the members moved this round,
    // and the class each of the round's signatures goes to.
    std::vector<uint32_t> caller_off, callers, todo_classes;
    std::vector<std::pair<uint32_t, uint32_t>> moved;  // (member, its new class)
    std::vector<std::vector<uint32_t>> class_members;
    std::vector<uint8_t> class_dirty;
    std::vector<uint32_t> sid_class;  // by signature id of the round
    // The signature of rule r; calls into its own component read local classes (tagged).
    auto sign_into = [&](std::vector<uint32_t>& out, uint32_t r, uint32_t k) {
      // Members of repetition families above the base keep classes of their own: they
      // differ only in depth, which refinement would take one round per level to see
      // (x{0,99}); chains through them are shared by level instead (family_key). (The
      // marker cannot be an element kind.)
      if (fam_level_[r] >= 2) out.insert(out.end(), {kFamily, r});
      for (uint32_t a = g.rule_alt_begin[r]; a < g.rule_alt_begin[r + 1]; ++a) {
        for (uint32_t p = g.alt_starts[a];; ++p) {
          const Elem& e = g.elems[p];
          out.push_back(e.kind);
          if (e.kind == detail::kEnd) break;
          if (e.kind == detail::kRef && comp[e.arg] == k) {
            out.insert(out.end(), {kCyclic, local[e.arg]});
          } else if (e.kind == detail::kRef) {
            out.insert(out.end(), {kAcyclic, color[e.arg]});
          } else {
            out.push_back(arg_class(e));
          }
        }
      }
    };
    auto sign = [&](uint32_t r, uint32_t k) { sign_into(sig, r, k); };
    for (uint32_t k = 0; k < n_comp; ++k) {
      const uint32_t* mb = by_comp.data() + comp_begin[k];
      const uint32_t n = comp_begin[k + 1] - comp_begin[k];
      if (!g.comp_cyclic[k]) {
        const uint32_t r = mb[0];
        sig.clear();
        sign(r, k);
        const uint64_t h = detail::test_collide_rule_hashes.load(std::memory_order_relaxed)
                               ? 0
                               : detail::hash_ids(sig.data(), sig.size());
        auto range = acyclic_by_hash.equal_range(h);
        for (auto it = range.first; it != range.second && color[r] == kUnset; ++it) {
          test_walk_counters.rules_signed_again.fetch_add(1, std::memory_order_relaxed);
          again_sig.clear();
          sign_into(again_sig, it->second, comp[it->second]);
          if (again_sig == sig) color[r] = color[it->second];
        }
        if (color[r] == kUnset) {
          color[r] = next_class++;
          acyclic_by_hash.emplace(h, r);
        }
        continue;
      }
      // Refinement within the component: local classes start as one, and each round signs
      // again only the members of the classes that some member's callee in the component
      // left in the round before (every member in the first), splitting a class by its
      // members' signatures (those of its first member's keep the class). Signing every
      // member every round cost a pass over the component per split: 2 ms of a large
      // schema's first mask (WashingtonPost wp_105: 674 rules, nine rounds, each splitting
      // one class). Stable at the end: each class's members were last signed together,
      // alike, and none of their callees has changed class since.
      for (uint32_t i = 0; i < n; ++i) {
        index_in_comp[mb[i]] = i;
        local[mb[i]] = 0;
      }
      // (Listed with the call sites: scanning the members' elements for calls, twice, was
      // a fifth of computing the classes of a large recursive schema.)
      caller_off.assign(n + 1, 0);
      callers.clear();
      for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t caller : cycle_callers_[mb[i]]) callers.push_back(index_in_comp[caller]);
        caller_off[i + 1] = static_cast<uint32_t>(callers.size());
      }
      class_members.assign(1, {});
      for (uint32_t i = 0; i < n; ++i) class_members[0].push_back(i);
      class_dirty.assign(1, 1);
      bool stable = false;
      for (int round = 0; round < kMaxClassRounds; ++round) {
        todo_classes.clear();
        for (uint32_t c = 0; c < class_dirty.size(); ++c) {
          if (class_dirty[c] != 0 && class_members[c].size() > 1) todo_classes.push_back(c);
          class_dirty[c] = 0;
        }
        if (todo_classes.empty()) {
          stable = true;
          break;
        }
        local_ids.clear();
        sid_class.clear();
        moved.clear();
        for (uint32_t c : todo_classes) {
          std::vector<uint32_t> mem = std::move(class_members[c]);
          class_members[c].clear();
          bool first = true;
          for (uint32_t idx : mem) {
            // (The class leads the signature: signatures of different classes never meet.)
            sig.assign(1, c);
            sign(mb[idx], k);
            const uint32_t sid = local_ids.intern(sig);
            if (sid == sid_class.size()) {  // new this round
              if (first) {
                sid_class.push_back(c);  // the first member's signature keeps the class
              } else {
                sid_class.push_back(static_cast<uint32_t>(class_members.size()));
                class_members.emplace_back();
                class_dirty.push_back(0);
              }
            }
            first = false;
            const uint32_t to = sid_class[sid];
            class_members[to].push_back(idx);
            if (to != c) moved.emplace_back(idx, to);
          }
        }
        // The round's signatures all read the classes as they were when it began.
        for (const auto& [idx, to] : moved) local[mb[idx]] = to;
        for (const auto& [idx, to] : moved) {
          for (uint32_t j = caller_off[idx]; j < caller_off[idx + 1]; ++j) {
            class_dirty[local[mb[callers[j]]]] = 1;
          }
        }
      }
      // Not stable within the bound: every rule its own class (exact, shares less).
      // (Local classes are below n.)
      for (uint32_t i = 0; i < n; ++i) color[mb[i]] = next_class + (stable ? local[mb[i]] : i);
      next_class += n;
    }
    pos_class_.assign(g.elems.size(), kUnset);  // found on first use (pos_class)
    rule_class_ = std::move(color);
  }
  static constexpr int kMaxClassRounds = 64;
  std::vector<uint32_t> rule_class_, cs_class_;

  // Repetition families, the shape of x{m,n}'s expansion: r_1 ::= X | "" and, for j >= 2,
  // r_j ::= X r_{j-1} | "" with the same elements X. fam_level_[r] = j (0: none);
  // fam_base_[r] = r_1.
  std::vector<uint32_t> fam_level_, fam_base_, fam_size_;  // fam_size_: by base, top level

  void find_families(const std::vector<uint32_t>& cs_class) {
    const GrammarTables& g = d_.g;
    const size_t nr = g.rule_alt_begin.size() - 1;
    fam_level_.assign(nr, 0);
    fam_base_.assign(nr, 0);
    fam_size_.assign(nr, 0);
    // [first element, end) of alternative 0 when r has exactly that and an empty one.
    auto shape = [&](uint32_t r, uint32_t* b, uint32_t* e) {
      if (g.rule_alt_begin[r + 1] - g.rule_alt_begin[r] != 2) return false;
      if (g.elems[g.alt_starts[g.rule_alt_begin[r] + 1]].kind != detail::kEnd) return false;
      *b = *e = g.alt_starts[g.rule_alt_begin[r]];
      while (g.elems[*e].kind != detail::kEnd) ++*e;
      return *e > *b;
    };
    auto same = [&](uint32_t p, uint32_t q, uint32_t n) {
      for (uint32_t i = 0; i < n; ++i) {
        const Elem& x = g.elems[p + i];
        const Elem& y = g.elems[q + i];
        if (x.kind != y.kind) return false;
        if (x.kind == detail::kChars ? cs_class[x.arg] != cs_class[y.arg] : x.arg != y.arg)
          return false;
      }
      return true;
    };
    std::vector<uint32_t> path;
    std::vector<uint8_t> done(nr, 0);
    for (uint32_t r0 = 0; r0 < nr; ++r0) {
      if (done[r0]) continue;
      // Follow r -> its tail rule while each pair has the shape with the same X.
      path.clear();
      uint32_t r = r0, base = 0, base_level = 0;
      bool ok = false;
      while (true) {
        uint32_t b, e, b2, e2;
        if (done[r] || !shape(r, &b, &e)) break;
        path.push_back(r);
        done[r] = 1;
        const Elem& last = g.elems[e - 1];
        if (e - b < 2 || last.kind != detail::kRef || last.arg == r) break;
        const uint32_t t = last.arg, n = e - 1 - b;
        if (!shape(t, &b2, &e2) || !same(b, b2, n)) break;
        if (e2 - b2 == n) {  // t is the base: t ::= X | ""
          base = t;
          base_level = 1;
          ok = true;
          break;
        }
        if (e2 - b2 != n + 1 || g.elems[e2 - 1].kind != detail::kRef) break;
        if (fam_level_[t] >= 2) {  // joins a family already found
          base = fam_base_[t];
          base_level = fam_level_[t];
          ok = true;
          break;
        }
        r = t;
      }
      if (!ok) continue;
      fam_level_[base] = 1;
      fam_base_[base] = base;
      done[base] = 1;
      for (size_t k = path.size(); k-- > 0;) {
        fam_level_[path[k]] = ++base_level;
        fam_base_[path[k]] = base;
      }
      fam_size_[base] = std::max(fam_size_[base], base_level);
    }
    // Per element: whether the rest of its alternative refers to a member of a large family
    // at a high level (kLargeRefAfter), or to the next level of its own family
    // (kNextLevelRefAfter): family_key's derivation keys, looked for only there.
    const size_t ne = g.elems.size();
    ref_after_.assign(ne + 1, 0);
    for (size_t p = ne; p-- > 0;) {
      const Elem& e = g.elems[p];
      if (e.kind == detail::kEnd) continue;
      const bool large = e.kind == detail::kRef && large_member(e.arg);
      ref_after_[p] =
          static_cast<uint8_t>((large ? kLargeRefAfter : 0) |
                               (next_level_ref(p, e) ? kNextLevelRefAfter : 0) | ref_after_[p + 1]);
    }
  }
  static constexpr uint8_t kLargeRefAfter = 1, kNextLevelRefAfter = 2;
  std::vector<uint8_t> ref_after_;
  // Whether rule r is a member of a large family (kMinFamilySize) at a high level
  // (kMinFamilyLevel).
  bool large_member(uint32_t r) const {
    return fam_level_[r] >= kMinFamilyLevel && fam_size_[fam_base_[r]] >= kMinFamilySize;
  }
  // Whether element e at position p is a family member's reference to the next level down
  // (r_j ::= X r_{j-1}, j > 2: not to the base).
  bool next_level_ref(uint32_t p, const Elem& e) const {
    if (e.kind != detail::kRef || fam_level_[e.arg] < 2) return false;
    const uint32_t r = d_.g.elem_rule[p];
    return fam_level_[r] >= 2 && fam_base_[r] == fam_base_[e.arg];
  }

  // The key of a chain (or stack) with its one direct reference to a family member above
  // the base abstracted to the family (the member's level in flevel_, its base in fbase_):
  // false when the rests of its positions refer to no such member or to more than one.
  // With `derive`, the key for derive_level alone: the one reference to a member of a large
  // family at a high level (kMinFamilySize, kMinFamilyLevel) abstracted, references to any
  // other member kept exact (a line's level inside each level of `("\n" line){0,8}`); where
  // the rests refer to no such member, the first family member's reference to its next
  // level, of a family of any size (the levels of json.gbnf's `[ \t]{0,20}` and
  // `[0-9]{0,15}`, each walked anew: half of its eager compile). (A reference from outside a
  // family is to its top level, which has no level above it to derive from.)
  bool family_key(const std::vector<uint32_t>& positions, std::vector<uint32_t>* key,
                  bool derive = false) {
    if (pos_class_.empty()) compute_classes();
    if (!derive) return abstract_family(positions, key, kAbstractLarge, false);
    // (The flags cover the same rests the key reads: where some rest refers to a large
    // member, the large key is made or none is.)
    uint8_t refs = 0;
    for (uint32_t p : positions) refs |= ref_after_[p];
    if ((refs & kLargeRefAfter) != 0) {
      return abstract_family(positions, key, kAbstractLargeOnly, true);
    }
    return (refs & kNextLevelRefAfter) != 0 &&
           abstract_family(positions, key, kAbstractNextLevel, true);
  }
  enum Abstract { kAbstractLarge, kAbstractLargeOnly, kAbstractNextLevel };
  // family_key's keys: with kAbstractLarge, the one reference to any member (found only
  // where it is of a large family at a high level); with kAbstractLargeOnly, the one to a
  // large family's member at a high level, others kept exact; with kAbstractNextLevel, the
  // first member's reference to its next level, others kept exact.
  bool abstract_family(const std::vector<uint32_t>& positions, std::vector<uint32_t>* key,
                       Abstract which, bool marked) {
    const GrammarTables& g = d_.g;
    key->clear();
    if (marked) key->push_back(kLargeFamilyMarker);
    int found = 0;
    uint32_t ref = 0;  // the member abstracted
    const auto abstracted = [&](uint32_t p, const Elem& e) {
      if (e.kind != detail::kRef || fam_level_[e.arg] < 2) return false;
      if (which == kAbstractNextLevel) return found == 0 && next_level_ref(p, e);
      return which != kAbstractLargeOnly || large_member(e.arg);
    };
    for (uint32_t p0 : positions) {
      for (uint32_t p = p0;; ++p) {
        const Elem& e = g.elems[p];
        key->push_back(e.kind);
        if (e.kind == detail::kEnd) break;
        if (abstracted(p, e)) {
          if (++found > 1) return false;
          ref = e.arg;
          flevel_ = fam_level_[ref];
          fbase_ = fam_base_[ref];
          key->push_back(0xFFFFFFFFu);
          key->push_back(rule_class_[fbase_]);
        } else {
          key->push_back(arg_class(e));
        }
      }
    }
    // Small families (json's [0-9]{0,15}, ws{0,20}) and low levels are mostly told apart by
    // tokens anyway: exact classes serve them without the cost of an observed walk.
    return found == 1 && (which == kAbstractNextLevel || large_member(ref));
  }
  static constexpr uint32_t kMinFamilyLevel = 8, kMinFamilySize = 24;
  static constexpr uint32_t kLargeFamilyMarker = 0xFFFFFFFCu, kPrefixMarker = 0xFFFFFFFBu;
};

CompiledData::CompiledData() = default;
CompiledData::~CompiledData() = default;

const ContextMask* CompiledData::compute_mask(uint32_t ctx) const {
  std::lock_guard<std::mutex> lock(lazy_mu);
  const ContextMask* m = slots[ctx].load(std::memory_order_acquire);
  if (m != nullptr || failed[ctx] || !classifier) return m;
  std::shared_ptr<const ContextMask> cm;
  bool fresh = false;
  try {
    if (masks_bytes_.load() > options.max_memory_bytes) {
      throw GrammarLimitError("grammar tables exceed " + std::to_string(options.max_memory_bytes) +
                              " bytes (CompileOptions::max_memory_bytes)");
    }
    cm = classifier->compute(ctx, &fresh);
  } catch (const GrammarLimitError&) {
    cm = nullptr;
  }
  m = publish(ctx, std::move(cm), fresh);
  if (m != nullptr && n_computed_ == n_masked_ && !keep_classifier) {
    classifier.reset();  // every mask is known
  }
  return m;
}

const ContextMask* CompiledData::publish(uint32_t ctx, std::shared_ptr<const ContextMask> cm,
                                         bool fresh) const {
  if (cm == nullptr) {
    leave_without_mask(ctx);
    return nullptr;
  }
  const ContextMask* m = cm.get();
  if (fresh) {
    masks_bytes_ += m->memory_bytes();
    owned.push_back(std::move(cm));
  }
  if (m->uncertain_ids.size() > deep_threshold()) keep_classifier = true;
  slots[ctx].store(m, std::memory_order_release);
  ++n_computed_;
  return m;
}

namespace {
// A check kept under a stack's top frames (CompiledData::find_checked) is keyed by their
// positions, a marker that no position is (the top frames of one stack, or the whole of
// it), and the stack's context, whose uncertain tokens are the ones checked. (An uncertain
// token leaves its context, so its check reads every frame of the context and one below:
// the positions read already tell the context. The key says it all the same, rather than
// leaning on that.)
constexpr uint32_t kTopFramesMarker = 0xFFFFFFFFu;
constexpr uint32_t kWholeStackMarker = 0xFFFFFFFEu;
void top_frames_key(const std::vector<uint32_t>& positions, size_t frames, uint32_t ctx,
                    std::vector<uint32_t>& key) {
  const bool whole = frames > positions.size();
  key.assign(positions.begin(),
             positions.begin() + static_cast<std::ptrdiff_t>(whole ? positions.size() : frames));
  key.push_back(whole ? kWholeStackMarker : kTopFramesMarker);
  key.push_back(ctx);
}
}  // namespace

const CompiledData::Checked* CompiledData::checked_entry(const std::vector<uint32_t>& key,
                                                         uint64_t h) const {
  auto range = checked.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.key == key) return &it->second;
  }
  return nullptr;
}

void CompiledData::keep_checked(Checked e) const {
  const size_t n = e.accepted.size() + e.refused.size() + e.all.size() + e.key.size();
  // Full: later stacks are checked by each matcher on its own (as before sharing).
  if (checked_tokens + n > kMaxCheckedTokens) return;
  const uint64_t h = hash_ids(e.key.data(), e.key.size());
  if (checked_entry(e.key, h) != nullptr) return;  // another matcher was first
  checked_tokens += n;
  checked.emplace(h, std::move(e));
}

bool CompiledData::find_checked(const std::vector<uint32_t>& positions, uint32_t ctx,
                                const Token* ids, size_t n, std::vector<Token>& out,
                                std::vector<uint8_t>& decided) const {
  size_t known = 0;
  std::vector<uint32_t> key;
  // The answers kept under one key; a token answered by two entries (a level kept under the
  // whole stack, then listed) is taken once.
  auto take = [&](size_t frames) {
    top_frames_key(positions, frames, ctx, key);
    const Checked* c = checked_entry(key, hash_ids(key.data(), key.size()));
    if (c == nullptr) return false;
    for (uint32_t i : c->accepted) {
      if (decided[i] != 0) continue;
      decided[i] = 1;
      ++known;
      out.push_back(ids[i]);
    }
    for (uint32_t i : c->refused) {
      if (decided[i] == 0) ++known;
      decided[i] = 1;
    }
    return true;
  };
  std::lock_guard<std::mutex> lock(checked_mu);
  take(kWholeStack);
  auto fit = checked_frames.find(ctx);
  if (fit != checked_frames.end()) {
    for (uint32_t frames : fit->second) {
      if (known == n) break;
      if (frames > positions.size()) continue;
      if (take(frames)) test_walk_counters.top_frame_checks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return known == n;
}

void CompiledData::add_checked(const std::vector<uint32_t>& positions, uint32_t ctx,
                               const std::vector<CheckedToken>& tokens) const {
  // Levels in the order of the tokens' first use; one entry per level.
  std::vector<size_t> levels;
  for (const CheckedToken& t : tokens) {
    if (std::find(levels.begin(), levels.end(), t.level) == levels.end()) levels.push_back(t.level);
  }
  const size_t forced = test_max_checked_levels.load(std::memory_order_relaxed);
  const size_t max_listed = forced != SIZE_MAX ? forced : kMaxCheckedFrames;
  std::lock_guard<std::mutex> lock(checked_mu);
  std::vector<uint32_t>& listed = checked_frames[ctx];
  Checked whole;  // levels not listed (past max_listed), and tokens that ended the stack
  top_frames_key(positions, kWholeStack, ctx, whole.key);
  for (size_t level : levels) {
    Checked e;
    const bool in_stack = level <= positions.size() && ctx != StackPool::kUnknown;
    const bool was_listed =
        in_stack && std::find(listed.begin(), listed.end(), level) != listed.end();
    const bool top = was_listed || (in_stack && listed.size() < max_listed);
    if (in_stack && !top) {
      test_walk_counters.levels_kept_whole.fetch_add(1, std::memory_order_relaxed);
    }
    Checked& into = top ? e : whole;
    for (const CheckedToken& t : tokens) {
      if (t.level != level) continue;
      (t.accepted ? into.accepted : into.refused).push_back(t.index);
    }
    if (!top) continue;
    if (!was_listed) listed.push_back(static_cast<uint32_t>(level));
    top_frames_key(positions, level, ctx, e.key);
    keep_checked(std::move(e));
  }
  if (!whole.accepted.empty() || !whole.refused.empty()) keep_checked(std::move(whole));
}

bool CompiledData::find_checked_all(const std::vector<uint32_t>& positions,
                                    std::vector<Token>& out) const {
  std::vector<uint32_t> key;
  top_frames_key(positions, kWholeStack, StackPool::kUnknown, key);
  std::lock_guard<std::mutex> lock(checked_mu);
  const Checked* c = checked_entry(key, hash_ids(key.data(), key.size()));
  if (c != nullptr) out.insert(out.end(), c->all.begin(), c->all.end());
  return c != nullptr;
}

void CompiledData::add_checked_all(const std::vector<uint32_t>& positions, const Token* accepted,
                                   size_t n) const {
  Checked e;
  top_frames_key(positions, kWholeStack, StackPool::kUnknown, e.key);
  e.all.assign(accepted, accepted + n);
  std::lock_guard<std::mutex> lock(checked_mu);
  keep_checked(std::move(e));
}

void warm_shared_tables(const std::shared_ptr<const TokenIndex>& tokens) {
  static const char* const kWarm = R"g(root ::= "{" ws "\"" char* "\"" ws ":" ws value ws "}"
value ::= "\"" char{0,40} "\"" | "-"? [0-9]+ | "[" ws ("\"" char* "\"" ws)? "]"
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
ws ::= [ \t\n\r]{0,20})g";
  CompileOptions options;
  options.eager_ms = -1;
  options.share_masks = false;  // tables only: no grammar's masks are kept
  CompiledGrammar::compile(parse_gbnf(kWarm), tokens, options);
}

const ContextMask* CompiledData::deep_mask(const std::vector<uint32_t>& positions) const {
  std::lock_guard<std::mutex> lock(lazy_mu);
  const ContextMask* known;
  if (deep.find(positions, &known)) return known;
  if (!classifier) return nullptr;
  std::shared_ptr<const ContextMask> cm;
  try {
    if (masks_bytes_.load() > options.max_memory_bytes) return nullptr;
    bool fresh = false;
    cm = classifier->stack_mask(positions, &fresh);
    if (fresh && cm != nullptr) masks_bytes_ += cm->memory_bytes();
  } catch (const GrammarLimitError&) {
    cm = nullptr;  // remembered: the caller checks the uncertain tokens instead
  }
  const ContextMask* m = cm.get();
  masks_bytes_ += positions.size() * 4;
  deep.add(positions, std::move(cm));
  return m;
}

}  // namespace detail

CompiledGrammar::~CompiledGrammar() = default;

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(
    const Grammar& grammar, std::shared_ptr<const TokenIndex> token_index,
    const CompileOptions& options) {
  const auto t0 = Clock::now();
  grammar.validate();
  return compile_impl(grammar, token_index, options, t0);
}

namespace {

// Every context chain of the grammar in pool: start from the root's alternatives and every
// position of a reachable boundary rule, close under successors. False when the pool passes
// `limit` nodes.
bool close_contexts(const GrammarTables& g, const std::vector<uint8_t>& reachable, size_t limit,
                    StackPool& pool) {
  // Every node the pool reaches is stepped once below, one call or one terminal at a time,
  // so a seed only needs its own node.
  auto seed = [&](uint32_t pos) {
    if (g.elems[pos].kind != detail::kEnd) pool.make(pos, StackPool::kEmpty);
  };
  for (uint32_t a = g.rule_alt_begin[g.root]; a < g.rule_alt_begin[g.root + 1]; ++a) {
    seed(g.alt_starts[a]);
  }
  for (uint32_t p = 0; p < g.elems.size(); ++p) {
    if (g.elems[p].kind == detail::kEnd || !g.rule_boundary[g.elem_rule[p]] ||
        !reachable[g.elem_rule[p]]) {
      continue;
    }
    seed(p);
  }
  // The closure, one step per node: a call makes its return position and the first
  // position of each alternative of the callee; a terminal makes the position after it.
  // Every node an expansion would reach is made this way (a frame marker or a finished
  // alternative pops to a parent, which is a node already), each exactly once, where
  // expanding every node in full walked each callee's alternatives again for every caller.
  for (uint32_t n = 1; n < pool.size(); ++n) {
    const uint32_t pos = pool.pos(n);
    const detail::Elem& e = g.elems[pos];
    if (e.kind == detail::kEnd) continue;  // a frame marker: popping it leaves the chain
    if (e.kind == detail::kRef) {
      const uint32_t base = pool.call_base(n);
      for (uint32_t a = g.rule_alt_begin[e.arg]; a < g.rule_alt_begin[e.arg + 1]; ++a) {
        if (g.elems[g.alt_starts[a]].kind != detail::kEnd) pool.make(g.alt_starts[a], base);
      }
    } else if (g.elems[pos + 1].kind != detail::kEnd) {
      pool.make(pos + 1, pool.parent(n));
    }
    if (pool.size() > limit) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile_impl(
    const Grammar& grammar, std::shared_ptr<const TokenIndex> token_index,
    const CompileOptions& options, std::chrono::steady_clock::time_point t0) {
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  cg->data_ = std::make_unique<CompiledData>();
  CompiledData& d = *cg->data_;
  d.options = options;
  d.tokens = token_index;
  flatten(grammar, token_index.get(), options, d.g);
  const auto& g = d.g;
  int mode = options.inline_rules ? kInline : kRulesButSmall;
  if (mode == kRulesButSmall && !options.inline_small_rules) mode = kRules;
  if (!token_index) {
    mark_boundaries(d.g, mode);
    d.contexts = StackPool(&d.g, nullptr, true);
    d.compile_ms = ms_since(t0);
    return cg;
  }
  const TokenIndex& tokens = *token_index;
  const size_t n_vocab = tokens.n_vocab();
  if (!options.special_tokens_as_text) {
    if (!tokens.control_tokens().empty()) {
      d.no_text.assign(n_vocab, 0);
      for (Token t : tokens.control_tokens()) d.no_text[static_cast<size_t>(t)] = 1;
    }
  }
  // Rules the root cannot reach have no contexts worth a walk.
  std::vector<uint8_t> reachable(g.rule_alt_begin.size() - 1, 0);
  std::vector<uint32_t> rq{g.root};
  reachable[g.root] = 1;
  while (!rq.empty()) {
    const uint32_t r = rq.back();
    rq.pop_back();
    for (uint32_t a = g.rule_alt_begin[r]; a < g.rule_alt_begin[r + 1]; ++a) {
      for (uint32_t p = g.alt_starts[a]; g.elems[p].kind != detail::kEnd; ++p) {
        if (g.elems[p].kind == detail::kRef && !reachable[g.elems[p].arg]) {
          reachable[g.elems[p].arg] = 1;
          rq.push_back(g.elems[p].arg);
        }
      }
    }
  }
  // Too many chains across rules: one context per rule frame, first with the small rules
  // still inlined, then every written rule on its own. The contexts of each mode are
  // counted first (count_contexts), so only the mode that fits is closed.
  StackPool& pool = d.contexts;
  for (;; ++mode) {
    if (mode == kRulesButSmall && !options.inline_small_rules) continue;
    mark_boundaries(d.g, mode);
    const size_t limit = mode == kRules
                             ? options.max_contexts
                             : std::min(options.max_contexts, options.max_inline_contexts);
    const uint64_t counted =
        count_contexts(g, reachable, std::min<uint64_t>(limit, uint64_t{1} << 62));
    if (counted == kCountUnknown || counted <= limit) {
      pool = StackPool(&d.g, nullptr, true);
      // Room for every node up front instead of growing the node list and rehashing the
      // table as they come (when not counted: schema grammars have about ten contexts per
      // grammar position).
      pool.reserve(
          counted != kCountUnknown
              ? counted
              : std::min<size_t>(8 * g.elems.size(),
                                 std::min(options.max_contexts, options.max_inline_contexts)));
      if (close_contexts(g, reachable, limit, pool)) {
        assert(counted == kCountUnknown || counted == pool.size());
        break;
      }
    }
    if (mode == kRules) {
      throw GrammarLimitError("grammar too large: more than " +
                              std::to_string(options.max_contexts) +
                              " grammar contexts (CompileOptions::max_contexts)");
    }
  }
  const size_t n_nodes = pool.size();
  d.has_mask.assign(n_nodes, 0);
  d.slots = std::make_unique<std::atomic<const detail::ContextMask*>[]>(n_nodes);
  d.failed.assign(n_nodes, 0);
  for (uint32_t n = 1; n < n_nodes; ++n) {
    if (d.g.elems[pool.pos(n)].kind != detail::kChars) continue;
    d.has_mask[n] = 1;
    ++d.n_masked_;
  }
  // Only a token negation (!<...>) needs the text tokens.
  const bool any_tok_not = std::any_of(d.g.elems.begin(), d.g.elems.end(),
                                       [](const Elem& e) { return e.kind == detail::kTokNot; });
  if (any_tok_not) d.text_tokens_bitset.assign(bitmask_words(n_vocab), 0);
  for (size_t t = 0; any_tok_not && t < n_vocab; ++t) {
    if (tokens.kind(static_cast<Token>(t)) != TokenIndex::Kind::kText) continue;
    if (!d.no_text.empty() && d.no_text[t]) continue;
    size_t ncp;
    tokens.code_points(static_cast<Token>(t), &ncp);
    if (ncp > 0) bitmask_set(d.text_tokens_bitset.data(), static_cast<Token>(t));
  }
  if (d.n_masked_ == 0) {
    d.compile_ms = ms_since(t0);
    return cg;
  }
  d.classifier = std::make_unique<detail::ContextClassifier>(d);
  d.classifier->prepare_classes();
  // Masks computed now, within the eager budget (every one when it is negative); the rest
  // on first use. Limits found now are errors; limits found later fall back to checking
  // tokens one by one.
  // A walk still running when the budget ends is abandoned: nothing of it is kept (what it
  // memoized on the way, parse-state steps and complete prefix masks, holds regardless).
  const bool all = options.eager_ms < 0;
  if (!all) {
    const uint64_t nodes = detail::test_eager_walk_nodes.load();
    // (A budget of days is no deadline: the clock's nanoseconds would overflow.)
    d.classifier->set_deadline(
        options.eager_ms < 1e9
            ? t0 + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double, std::milli>(options.eager_ms))
            : Clock::time_point::max(),
        nodes != 0 ? nodes : UINT64_MAX);
  }
  for (uint32_t n = 1; n < n_nodes && (all || ms_since(t0) < options.eager_ms); ++n) {
    if (!d.has_mask[n]) continue;
    std::shared_ptr<const detail::ContextMask> cm;
    bool fresh = false;
    try {
      cm = d.classifier->compute(n, &fresh);
    } catch (const detail::WalkAbandoned&) {
      break;
    } catch (const GrammarLimitError&) {
      cm = nullptr;
    }
    d.publish(n, std::move(cm), fresh);  // as on first use
    if (ms_since(t0) > options.max_compile_ms) {
      throw GrammarLimitError("grammar compile exceeded " + std::to_string(options.max_compile_ms) +
                              " ms (CompileOptions::max_compile_ms)");
    }
    if (d.masks_bytes_.load() > options.max_memory_bytes) {
      throw GrammarLimitError("grammar tables exceed " + std::to_string(options.max_memory_bytes) +
                              " bytes (CompileOptions::max_memory_bytes)");
    }
  }
  // Kept even when every mask is known: freeing its memos cost literal_alternation's
  // compile 2-10 ms past its 50 ms budget; it goes with the grammar instead.
  d.classifier->clear_deadline();
  d.compile_ms = ms_since(t0);
  return cg;
}

size_t CompiledGrammar::memory_bytes() const {
  const CompiledData& d = *data_;
  return sizeof(CompiledData) + d.g.elems.capacity() * sizeof(Elem) +
         d.g.alt_starts.capacity() * 4 + d.g.rule_alt_begin.capacity() * 4 +
         d.g.elem_rule.capacity() * 4 + d.g.rule_owner.capacity() * 4 +
         d.g.rule_generated.capacity() + d.g.charsets.capacity() * sizeof(CharSet) +
         d.contexts.memory_bytes() + d.has_mask.capacity() + d.failed.capacity() +
         d.contexts.size() * sizeof(void*) + d.masks_memory_bytes() +
         d.text_tokens_bitset.capacity() * 4 + d.no_text.capacity();
}
double CompiledGrammar::compile_ms() const {
  return data_->compile_ms;
}
size_t CompiledGrammar::n_vocab() const {
  return data_->tokens ? data_->tokens->n_vocab() : 0;
}
const std::shared_ptr<const TokenIndex>& CompiledGrammar::token_index() const {
  return data_->tokens;
}
const CompileOptions& CompiledGrammar::options() const {
  return data_->options;
}
size_t CompiledGrammar::n_contexts() const {
  return data_->n_masked_contexts();
}
size_t CompiledGrammar::n_contexts_computed() const {
  return data_->n_computed();
}

}  // namespace lacuna
