// compiler.cpp — CompiledGrammar::compile: flattens the grammar, enumerates every grammar
// context (the part of a parse stack known from its top) and classifies every token in each
// context as accepted / rejected / uncertain by one walk of the vocabulary trie, at compile
// time or on the context's first use.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <unordered_map>

#include "lacuna/matcher.h"
#include "match/compiled_data.h"

namespace lacuna {

using detail::CharSet;
using detail::CompiledData;
using detail::Elem;
using detail::GrammarTables;
using detail::StackPool;

namespace {

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

bool merge_into(RangeSet& dst, const RangeSet& src) {
  if (src.empty()) return false;
  RangeSet m = dst;
  m.insert(m.end(), src.begin(), src.end());
  m = normalize(std::move(m));
  if (m == dst) return false;
  dst = std::move(m);
  return true;
}

void flatten(const Grammar& grammar, const TokenIndex* tokens, const CompileOptions& opt,
             GrammarTables& g) {
  const auto& rules = grammar.rules();
  std::map<std::tuple<bool, bool, std::vector<std::pair<uint32_t, uint32_t>>>, uint32_t> cs_ids;
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
            std::vector<std::pair<uint32_t, uint32_t>> key;
            for (const auto& cr : el.ranges) key.push_back({cr.lo, cr.hi});
            auto k = std::make_tuple(el.any, el.negated, key);
            auto it = cs_ids.find(k);
            if (it == cs_ids.end()) {
              it = cs_ids.emplace(k, static_cast<uint32_t>(g.charsets.size())).first;
              g.charsets.push_back(detail::make_charset(el.any, el.negated, el.ranges));
            }
            e = {detail::kChars, it->second};
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

// Boundary rules: every rule in a strongly connected component of the call graph that
// has a call inside the component which pushes a return address (so stacks can grow
// without bound through it). With `inline_rules` false, every user-written rule too.
void mark_boundaries(GrammarTables& g, bool inline_rules) {
  const uint32_t nr = static_cast<uint32_t>(g.rule_alt_begin.size() - 1);
  std::vector<std::vector<std::pair<uint32_t, bool>>> calls(nr);  // (callee, pushes)
  for (uint32_t p = 0; p + 1 < g.elems.size(); ++p) {
    if (g.elems[p].kind != detail::kRef) continue;
    calls[g.elem_rule[p]].push_back({g.elems[p].arg, g.elems[p + 1].kind != detail::kEnd});
  }
  // Iterative Tarjan.
  std::vector<uint32_t> index(nr, UINT32_MAX), low(nr, 0), comp(nr, UINT32_MAX);
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
  std::vector<uint8_t> comp_grows(n_comp, 0);
  for (uint32_t r = 0; r < nr; ++r) {
    for (auto [callee, pushes] : calls[r]) {
      if (pushes && comp[callee] == comp[r]) comp_grows[comp[r]] = 1;
    }
  }
  g.rule_boundary.assign(nr, 0);
  for (uint32_t r = 0; r < nr; ++r) {
    g.rule_boundary[r] = comp_grows[comp[r]] || (!inline_rules && !g.rule_generated[r]);
  }
}

// FOLLOW(rule) as code-point sets: what may come right after the rule ends.
std::vector<CharSet> follow_sets(const GrammarTables& g) {
  const size_t nr = g.rule_alt_begin.size() - 1;
  std::vector<char> nullable(nr, 0);
  std::vector<RangeSet> first(nr), follow(nr);
  auto alt_end = [&](uint32_t p) {
    while (g.elems[p].kind != detail::kEnd) ++p;
    return p;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < nr; ++r) {
      for (uint32_t a = g.rule_alt_begin[r]; a < g.rule_alt_begin[r + 1]; ++a) {
        uint32_t p = g.alt_starts[a];
        bool all_nullable = true;
        for (; g.elems[p].kind != detail::kEnd; ++p) {
          const Elem& e = g.elems[p];
          if (e.kind == detail::kChars) {
            changed |= merge_into(first[r], charset_ranges(g.charsets[e.arg]));
            all_nullable = false;
            break;
          }
          if (e.kind == detail::kRef) {
            changed |= merge_into(first[r], first[e.arg]);
            if (!nullable[e.arg]) {
              all_nullable = false;
              break;
            }
            continue;
          }
          all_nullable = false;  // token elements
          break;
        }
        if (all_nullable && !nullable[r]) {
          nullable[r] = 1;
          changed = true;
        }
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < nr; ++r) {
      for (uint32_t a = g.rule_alt_begin[r]; a < g.rule_alt_begin[r + 1]; ++a) {
        const uint32_t s = g.alt_starts[a];
        const uint32_t end = alt_end(s);
        for (uint32_t p = s; p < end; ++p) {
          if (g.elems[p].kind != detail::kRef) continue;
          const uint32_t callee = g.elems[p].arg;
          bool rest_nullable = true;
          for (uint32_t q = p + 1; q < end; ++q) {
            const Elem& e = g.elems[q];
            if (e.kind == detail::kChars) {
              changed |= merge_into(follow[callee], charset_ranges(g.charsets[e.arg]));
              rest_nullable = false;
              break;
            }
            if (e.kind == detail::kRef) {
              changed |= merge_into(follow[callee], first[e.arg]);
              if (!nullable[e.arg]) {
                rest_nullable = false;
                break;
              }
              continue;
            }
            rest_nullable = false;
            break;
          }
          if (rest_nullable) changed |= merge_into(follow[callee], follow[r]);
        }
      }
    }
  }
  std::vector<CharSet> out;
  out.reserve(nr);
  for (uint32_t r = 0; r < nr; ++r) out.push_back(detail::make_charset(false, false, follow[r]));
  return out;
}

// Interned sets of chains and memoized transitions, shared by all context walks.
class WalkStates {
 public:
  WalkStates(StackPool& pool, const GrammarTables& g, size_t max_states)
      : pool_(pool), g_(g), max_states_(max_states) {
    sets_.push_back({0, 0});  // set 0: empty
    ascii_.assign(128, kUnset);
  }

  uint32_t intern(std::vector<uint32_t>& members) {
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    if (members.empty()) return 0;
    uint64_t h = 1469598103934665603ull;
    for (uint32_t m : members) h = (h ^ m) * 1099511628211ull;
    auto range = index_.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
      const auto& s = sets_[it->second];
      if (s.second == members.size() &&
          std::equal(members.begin(), members.end(), data_.begin() + s.first)) {
        return it->second;
      }
    }
    const uint32_t id = static_cast<uint32_t>(sets_.size());
    if (id > max_states_) {
      throw GrammarLimitError(
          "grammar too ambiguous: more than " + std::to_string(max_states_) +
          " parse-state sets while precomputing masks (CompileOptions::max_walk_states)");
    }
    sets_.push_back({static_cast<uint32_t>(data_.size()), static_cast<uint32_t>(members.size())});
    data_.insert(data_.end(), members.begin(), members.end());
    index_.emplace(h, id);
    ascii_.resize(sets_.size() * 128, kUnset);
    return id;
  }

  // (next set << 1) | exited
  uint32_t step(uint32_t set, uint32_t cp) {
    if (set == 0) return 0;
    if (cp < 128) {
      uint32_t& slot = ascii_[size_t(set) * 128 + cp];
      if (slot != kUnset) return slot;
      uint32_t v = compute(set, cp);
      ascii_[size_t(set) * 128 + cp] = v;  // (ascii_ may have grown)
      return v;
    }
    // Most sets treat every code point >= 128 alike: one memo entry serves them all.
    if (cp != 0x100 && uniform(set)) return step(set, 0x100);
    const uint64_t key = (uint64_t(set) << 32) | cp;
    auto it = other_.find(key);
    if (it != other_.end()) return it->second;
    uint32_t v = compute(set, cp);
    other_.emplace(key, v);
    return v;
  }

  // Whether every member treats all code points >= 128 alike (memoized).
  bool uniform(uint32_t set) {
    if (uniform_.size() <= set) uniform_.resize(sets_.size(), kUnset);
    if (uniform_[set] == kUnset) uniform_[set] = is_uniform(set) ? 1 : 0;
    return uniform_[set] == 1;
  }

  // The code points some member can consume next (union of the members' character sets).
  const CharSet& first(uint32_t set) {
    if (firsts_.size() <= set) {
      firsts_.resize(sets_.size());
      first_done_.resize(sets_.size(), 0);
    }
    if (!first_done_[set]) {
      RangeSet u;
      const auto [off, len] = sets_[set];
      for (uint32_t i = 0; i < len; ++i) {
        const Elem& e = g_.elems[pool_.pos(data_[off + i])];
        if (e.kind == detail::kChars) merge_into(u, charset_ranges(g_.charsets[e.arg]));
      }
      firsts_[set] = detail::make_charset(false, false, std::move(u));
      first_done_[set] = 1;
    }
    return firsts_[set];
  }

  // A run of a set: the code points that all lead to one same successor `next` (non-empty,
  // without leaving the context), and how many code points in a row the run goes on
  // (`depth`): every string of up to `depth` code points from the run's class is consumed
  // without leaving the context, the k-th one ending in next^k(set). A set that loops on
  // its class (next == set) has unbounded depth. This lets a walk accept a whole trie
  // subtree at once: repetitions like `[a-z]*` and bounded ones like `char{0,24}`.
  struct Run {
    uint64_t ascii[2];
    bool non_ascii;  // every code point >= 128 belongs to the class
    uint32_t next;
    uint32_t depth;
  };
  static constexpr uint32_t kUnbounded = 1u << 30;

  Run run(uint32_t set) {
    grow_runs();
    if (run_state_[set] == 2) return runs_[set];
    // Follow the chain of successors until a known depth, a break, or the cap; then fill
    // the depths backwards.
    chain_.clear();
    uint32_t cur = set;
    uint32_t tail_depth = 0;
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
      const Run nb = run_base(r.next);
      const bool covers = (r.ascii[0] & ~nb.ascii[0]) == 0 && (r.ascii[1] & ~nb.ascii[1]) == 0 &&
                          (!r.non_ascii || nb.non_ascii);
      if (!covers || chain_.size() >= kMaxChain) {
        tail_depth = 1;
        break;
      }
      if (run_state_[r.next] == 2) {
        tail_depth = std::min(kUnbounded, runs_[r.next].depth + 1);
        break;
      }
      chain_.push_back(cur);
      cur = r.next;
    }
    runs_[cur].depth = tail_depth;
    run_state_[cur] = 2;
    for (size_t i = chain_.size(); i-- > 0;) {
      const uint32_t s = chain_[i];
      runs_[s].depth = std::min(kUnbounded, runs_[runs_[s].next].depth + 1);
      run_state_[s] = 2;
    }
    return runs_[set];
  }

  const uint32_t* members(uint32_t set, uint32_t* n) const {
    *n = sets_[set].second;
    return data_.data() + sets_[set].first;
  }

 private:
  static constexpr uint32_t kUnset = 0xFFFFFFFFu;
  static constexpr size_t kMaxChain = 256;

  void grow_runs() {
    runs_.resize(sets_.size());
    run_state_.resize(sets_.size(), 0);
  }

  // The class and successor of a run (depth not yet known). Successors are computed
  // without interning them: only the chosen one becomes a set, so asking for runs does not
  // grow the number of sets beyond what walks need (CompileOptions::max_walk_states).
  Run run_base(uint32_t set) {
    grow_runs();
    if (run_state_[set] != 0) return runs_[set];
    cands_.clear();
    int32_t cand_of[128];
    const CharSet& f = first(set);
    for (uint32_t c = 0; c < 128; ++c) {
      cand_of[c] = (f.ascii[c >> 6] >> (c & 63)) & 1u ? probe(set, c) : -1;
    }
    int32_t best = -1;
    uint32_t best_n = 0;
    for (size_t k = 0; k < cands_.size(); ++k) {
      if (cands_[k].count > best_n) {
        best = static_cast<int32_t>(k);
        best_n = cands_[k].count;
      }
    }
    // Code points >= 128 belong to the class only when every member treats them alike.
    bool non_ascii = false;
    if (uniform(set)) {
      const int32_t k = probe(set, 0x100);
      if (k >= 0 && (best < 0 || k == best)) {
        best = k;
        non_ascii = true;
      }
    }
    Run r{{0, 0}, non_ascii, 0, 0};
    if (best >= 0) {
      members_ = cands_[static_cast<size_t>(best)].members;
      r.next = intern(members_);
      for (uint32_t c = 0; c < 128; ++c) {
        if (cand_of[c] == best) r.ascii[c >> 6] |= 1ull << (c & 63);
      }
    }
    grow_runs();  // intern() may have added a set
    runs_[set] = r;
    run_state_[set] = 1;
    return r;
  }

  // The successor of `set` on cp as a candidate index into cands_ (counted), or -1 when it
  // is empty or leaves the context. Does not intern anything.
  int32_t probe(uint32_t set, uint32_t cp) {
    if (successors(set, cp, true)) return -1;
    if (scratch_.empty()) return -1;
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
    for (size_t k = 0; k < cands_.size(); ++k) {
      if (cands_[k].members == scratch_) {
        if (cp < 128) ++cands_[k].count;
        return static_cast<int32_t>(k);
      }
    }
    cands_.push_back({scratch_, cp < 128 ? 1u : 0u});
    return static_cast<int32_t>(cands_.size() - 1);
  }

  // Whether every member treats all code points >= 128 alike (so 0x100 stands for them).
  bool is_uniform(uint32_t set) const {
    const auto [off, len] = sets_[set];
    for (uint32_t i = 0; i < len; ++i) {
      const Elem& e = g_.elems[pool_.pos(data_[off + i])];
      if (e.kind != detail::kChars) continue;
      const CharSet& cs = g_.charsets[e.arg];
      if (cs.any) continue;
      bool none = true, all = false;
      for (const auto& r : cs.ranges) {
        if (r.hi >= 128) none = false;
        if (r.lo <= 128 && r.hi == 0xFFFFFFFFu) all = true;
      }
      if (!none && !all) return false;
    }
    return true;
  }

  // Fills scratch_ with the successors of the members of `set` that consume cp. Returns
  // whether some member leaves the context (stopping there when stop_at_exit).
  bool successors(uint32_t set, uint32_t cp, bool stop_at_exit) {
    scratch_.clear();
    bool exited = false;
    const auto [off, len] = sets_[set];
    for (uint32_t i = 0; i < len; ++i) {
      const uint32_t c = data_[off + i];
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

  uint32_t compute(uint32_t set, uint32_t cp) {
    const bool exited = successors(set, cp, false);
    members_.assign(scratch_.begin(), scratch_.end());
    return (intern(members_) << 1) | (exited ? 1u : 0u);
  }

  StackPool& pool_;
  const GrammarTables& g_;
  size_t max_states_;
  std::vector<std::pair<uint32_t, uint32_t>> sets_;
  std::vector<uint32_t> data_;
  std::unordered_multimap<uint64_t, uint32_t> index_;
  std::vector<uint32_t> ascii_;
  std::unordered_map<uint64_t, uint32_t> other_;
  std::vector<uint32_t> uniform_;  // per set: 1 = all code points >= 128 alike, 0 = not
  std::vector<uint32_t> scratch_, members_;
  std::deque<CharSet> firsts_;  // a deque: frames keep pointers into it while it grows
  std::vector<uint8_t> first_done_;
  std::vector<Run> runs_;
  std::vector<uint8_t> run_state_;  // 0: unknown, 1: class and successor, 2: with depth
  std::vector<uint32_t> chain_;
  struct Candidate {
    std::vector<uint32_t> members;
    uint32_t count;  // ASCII code points leading to it
  };
  std::vector<Candidate> cands_;
};

struct Classifier {
  const TokenIndex& tokens;
  const GrammarTables& g;
  StackPool& pool;
  WalkStates& states;
  const std::vector<uint8_t>& no_text;
  std::vector<Token> accepted, uncertain;

  // The parse state after a trie node's code points.
  struct Frame {
    uint32_t set;
    uint32_t depth;  // code points consumed from the context's start
    bool exited;
    bool pending;
    const CharSet* first;  // what the frame's set can consume next (null: nothing)
  };
  std::vector<Frame> frames;
  std::vector<std::pair<uint32_t, uint32_t>> todo;  // (trie node, parent frame)

  bool partial_ok(uint32_t set, PartialUtf8 p) {
    uint32_t n;
    const uint32_t* m = states.members(set, &n);
    for (uint32_t i = 0; i < n; ++i) {
      const Elem& e = g.elems[pool.pos(m[i])];
      if (e.kind == detail::kChars && g.charsets[e.arg].match_partial(p)) return true;
    }
    return false;
  }

  void classify_node(const TokenIndex::TrieNode& node, uint32_t set, bool exited, bool pending) {
    const auto& tt = tokens.trie_tokens();
    for (uint32_t k = node.tok_begin; k < node.tok_end; ++k) {
      const auto& t = tt[k];
      if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) continue;
      bool acc;
      if (t.partial.n_remain == 0) {
        acc = set != 0 || exited;
      } else {
        acc = set != 0 && partial_ok(set, t.partial);
      }
      if (acc) {
        accepted.push_back(t.id);
      } else if (pending || exited) {
        uncertain.push_back(t.id);
      }
    }
  }

  // When every string below node j (at depth `depth`, parse state `set`) stays inside one
  // run of `set`, each token below is accepted (if its partial tail fits) without walking
  // the subtree.
  bool bulk_accept(uint32_t j, uint32_t set, uint32_t depth) {
    const auto& sc = tokens.subtree_chars()[j];
    const WalkStates::Run r = states.run(set);
    if (sc.height > r.depth) return false;
    if ((sc.ascii[0] & ~r.ascii[0]) != 0 || (sc.ascii[1] & ~r.ascii[1]) != 0) return false;
    if (sc.non_ascii && !r.non_ascii) return false;
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const uint32_t end = trie[j].end;
    const uint32_t tb = trie[j].tok_end;
    const uint32_t te = end < trie.size() ? trie[end].tok_begin : static_cast<uint32_t>(tt.size());
    for (uint32_t k = tb; k < te; ++k) {
      const auto& t = tt[k];
      if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) continue;
      if (t.partial.n_remain == 0) {
        accepted.push_back(t.id);
        continue;
      }
      // A partial tail: check it against the set the token's full code points end in.
      size_t ncp;
      tokens.code_points(t.id, &ncp);
      uint32_t s = set;
      for (size_t d = depth; d < ncp; ++d) s = states.run(s).next;
      if (partial_ok(s, t.partial)) accepted.push_back(t.id);
    }
    return true;
  }

  // Queues the children of a node (child_nodes()[cb, ce)) whose code point is in cs and
  // not in skip, for frame f. Pushed in reverse so that they are visited in trie order.
  void queue_matching(uint32_t cb, uint32_t ce, const CharSet& cs, const CharSet* skip,
                      uint32_t f) {
    const auto& trie = tokens.trie();
    const auto& kids = tokens.child_nodes();
    auto take = [&](uint32_t k) {
      const uint32_t cp = trie[kids[k]].cp;
      if (cs.match(cp) && (skip == nullptr || !skip->match(cp))) todo.push_back({kids[k], f});
    };
    if (cs.any || cs.negated || cs.ranges.size() * 8 > ce - cb) {
      for (uint32_t k = ce; k-- > cb;) take(k);
      return;
    }
    // Few ranges, many children: binary-search each range.
    for (size_t ri = cs.ranges.size(); ri-- > 0;) {
      const auto& r = cs.ranges[ri];
      uint32_t lo = cb, hi = ce;
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (trie[kids[mid]].cp <= r.hi) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      for (uint32_t k = lo; k-- > cb && trie[kids[k]].cp >= r.lo;) take(k);
    }
  }

  // Queues the children of node j that may lead somewhere from frame f: those the frame's
  // set can consume, and after an exit those the rule's FOLLOW allows; every child while
  // pending.
  void queue_children(uint32_t j, uint32_t f, const CharSet& follow) {
    const auto& off = tokens.child_offsets();
    const uint32_t cb = off[j], ce = off[j + 1];
    const Frame& fr = frames[f];
    if (fr.pending) {
      const auto& kids = tokens.child_nodes();
      for (uint32_t k = ce; k-- > cb;) todo.push_back({kids[k], f});
      return;
    }
    if (fr.exited) queue_matching(cb, ce, follow, fr.first, f);
    if (fr.first != nullptr) queue_matching(cb, ce, *fr.first, nullptr, f);
  }

  void walk_subtree(uint32_t first, uint32_t root_set, const CharSet& follow) {
    const auto& trie = tokens.trie();
    frames.clear();
    todo.clear();
    frames.push_back({root_set, 0, false, false, &states.first(root_set)});
    todo.push_back({first, 0});
    while (!todo.empty()) {
      const auto [j, f] = todo.back();
      todo.pop_back();
      const Frame parent = frames[f];
      const auto& node = trie[j];
      // Above ASCII, a set that treats all such code points alike needs no range search.
      uint32_t v = 0;
      if (parent.first != nullptr &&
          ((node.cp >= 128 && states.uniform(parent.set)) || parent.first->match(node.cp))) {
        v = states.step(parent.set, node.cp);
      }
      const uint32_t set = v >> 1;
      const bool exited = v & 1u;
      const bool pending = parent.pending || (parent.exited && follow.match(node.cp));
      const uint32_t depth = parent.depth + 1;
      if (set == 0 && !exited && !pending) continue;
      classify_node(node, set, exited, pending);
      if (node.end == j + 1) continue;  // a leaf
      if (set != 0 && !exited && !pending && bulk_accept(j, set, depth)) continue;
      frames.push_back({set, depth, exited, pending, set != 0 ? &states.first(set) : nullptr});
      queue_children(j, static_cast<uint32_t>(frames.size() - 1), follow);
    }
  }

  void classify_context(uint32_t chain, const CharSet& follow) {
    accepted.clear();
    uncertain.clear();
    std::vector<uint32_t> m{chain};
    const uint32_t set0 = states.intern(m);
    const auto& trie = tokens.trie();
    // Tokens with no full code point (only a partial sequence) sit at the root.
    classify_node(trie[0], set0, false, false);
    const CharSet& top = g.charsets[g.elems[pool.pos(chain)].arg];
    const auto& kids = tokens.root_children();
    if (!top.any && !top.negated) {
      for (const auto& r : top.ranges) {
        auto it = std::lower_bound(kids.begin(), kids.end(), r.lo,
                                   [&](uint32_t idx, uint32_t v) { return trie[idx].cp < v; });
        for (; it != kids.end() && trie[*it].cp <= r.hi; ++it) walk_subtree(*it, set0, follow);
      }
    } else {
      for (uint32_t k : kids) walk_subtree(k, set0, follow);
    }
  }
};

}  // namespace

namespace detail {

// The walk machinery of one compiled grammar, kept after compile while some context masks
// are still to be computed on first use.
class ContextClassifier {
 public:
  explicit ContextClassifier(const CompiledData& d)
      : d_(d),
        follow_(follow_sets(d.g)),
        walk_pool_(&d.g, nullptr, false),
        states_(walk_pool_, d.g, d.options.max_walk_states),
        cl_{*d.tokens, d.g, walk_pool_, states_, d.no_text, {}, {}, {}, {}} {}

  std::unique_ptr<ContextMask> compute(uint32_t n) {
    const StackPool& pool = d_.contexts;
    // Walks run on full (uncut) stacks: a copy of the context chain with the empty stack
    // below it, so that popping below the chain is the only way to leave the context.
    chain_pos_.clear();
    for (uint32_t c = n; c != StackPool::kEmpty; c = pool.parent(c))
      chain_pos_.push_back(pool.pos(c));
    uint32_t w = StackPool::kEmpty;
    for (size_t k = chain_pos_.size(); k-- > 0;) w = walk_pool_.make(chain_pos_[k], w);
    // The chain's bottom decides what may follow when the token leaves the context.
    cl_.classify_context(w, follow_[d_.g.elem_rule[chain_pos_.back()]]);
    auto cm = std::make_unique<ContextMask>();
    const size_t n_vocab = d_.tokens->n_vocab();
    if (cl_.accepted.size() * 32 > n_vocab) {
      cm->accepted_bits.assign(bitmask_words(n_vocab), 0);
      for (Token t : cl_.accepted) bitmask_set(cm->accepted_bits.data(), t);
    } else {
      cm->accepted_ids = cl_.accepted;
      // Sorted: setting the bits in order touches each mask word once.
      std::sort(cm->accepted_ids.begin(), cm->accepted_ids.end());
    }
    // Uncertain tokens stay in trie order: neighbours share prefixes, which the run-time
    // check reuses.
    cm->uncertain_ids = cl_.uncertain;
    return cm;
  }

 private:
  const CompiledData& d_;
  std::vector<CharSet> follow_;
  StackPool walk_pool_;
  WalkStates states_;
  Classifier cl_;
  std::vector<uint32_t> chain_pos_;
};

CompiledData::CompiledData() = default;
CompiledData::~CompiledData() = default;

const ContextMask* CompiledData::compute_mask(uint32_t ctx) const {
  std::lock_guard<std::mutex> lock(lazy_mu);
  const ContextMask* m = slots[ctx].load(std::memory_order_acquire);
  if (m != nullptr || failed[ctx] || !classifier) return m;
  try {
    if (masks_bytes_.load() > options.max_memory_bytes) {
      throw GrammarLimitError("grammar tables exceed " + std::to_string(options.max_memory_bytes) +
                              " bytes (CompileOptions::max_memory_bytes)");
    }
    auto cm = classifier->compute(ctx);
    masks_bytes_ += cm->memory_bytes();
    m = cm.get();
    owned.push_back(std::move(cm));
  } catch (const GrammarLimitError&) {
    // Out of limits: the matcher checks this context's tokens one by one instead.
    failed[ctx] = 1;
    return nullptr;
  }
  slots[ctx].store(m, std::memory_order_release);
  if (++n_computed_ == n_masked_) classifier.reset();  // every mask is known
  return m;
}

}  // namespace detail

CompiledGrammar::~CompiledGrammar() = default;

namespace {
struct InlineTooLarge {};
}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(
    const Grammar& grammar, std::shared_ptr<const TokenIndex> token_index,
    const CompileOptions& options) {
  const auto t0 = Clock::now();
  grammar.validate();
  if (options.inline_rules) {
    try {
      return compile_impl(grammar, token_index, options, true, t0);
    } catch (const InlineTooLarge&) {
      // Too many chains across rules: fall back to one context per rule frame.
    }
  }
  return compile_impl(grammar, token_index, options, false, t0);
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile_impl(
    const Grammar& grammar, std::shared_ptr<const TokenIndex> token_index,
    const CompileOptions& options, bool inline_rules, std::chrono::steady_clock::time_point t0) {
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  cg->data_ = std::make_unique<CompiledData>();
  CompiledData& d = *cg->data_;
  d.options = options;
  d.tokens = token_index;
  flatten(grammar, token_index.get(), options, d.g);
  mark_boundaries(d.g, inline_rules);
  d.contexts = StackPool(&d.g, nullptr, true);
  if (!token_index) {
    d.compile_ms = ms_since(t0);
    return cg;
  }
  const TokenIndex& tokens = *token_index;
  const size_t n_vocab = tokens.n_vocab();
  if (!options.special_tokens_as_text) {
    std::vector<uint8_t> no_text(n_vocab, 0);
    bool anyc = false;
    for (size_t t = 0; t < n_vocab; ++t) {
      if (tokens.is_control(static_cast<Token>(t))) {
        no_text[t] = 1;
        anyc = true;
      }
    }
    if (anyc) d.no_text = std::move(no_text);
  }
  // Every context chain: start from every position, close under successors.
  StackPool& pool = d.contexts;
  std::vector<uint32_t> tmp;
  // Seeds: the initial stacks, and every position of a boundary rule (a chain bottom).
  const auto& g = d.g;
  for (uint32_t a = g.rule_alt_begin[g.root]; a < g.rule_alt_begin[g.root + 1]; ++a) {
    pool.start(g.alt_starts[a], StackPool::kEmpty, tmp);
  }
  for (uint32_t p = 0; p < g.elems.size(); ++p) {
    if (g.elems[p].kind == detail::kEnd || !g.rule_boundary[g.elem_rule[p]]) continue;
    tmp.clear();
    pool.start(p, StackPool::kEmpty, tmp);
  }
  for (uint32_t n = 1; n < pool.size(); ++n) {
    const auto kind = d.g.elems[pool.pos(n)].kind;
    if (kind == detail::kEnd) continue;  // a frame marker: popping it leaves the chain
    if (kind == detail::kRef) {
      // A return address: at run time a pop may land on it and expand it.
      tmp.clear();
      pool.expand(n, tmp);
    } else {
      uint32_t cnt;
      pool.succ(n, &cnt);
    }
    if (inline_rules && pool.size() > std::min(options.max_contexts, options.max_inline_contexts)) {
      throw InlineTooLarge{};
    }
    if (pool.size() > options.max_contexts) {
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
  d.text_tokens_bitset.assign(bitmask_words(n_vocab), 0);
  for (size_t t = 0; t < n_vocab; ++t) {
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
  // Masks computed now, within the eager budget (every one when it is negative); the rest
  // on first use. Limits found now are errors; limits found later fall back to checking
  // tokens one by one.
  const bool all = options.eager_ms < 0;
  for (uint32_t n = 1; n < n_nodes && (all || ms_since(t0) < options.eager_ms); ++n) {
    if (!d.has_mask[n]) continue;
    auto cm = d.classifier->compute(n);
    d.masks_bytes_ += cm->memory_bytes();
    d.slots[n].store(cm.get(), std::memory_order_relaxed);
    d.owned.push_back(std::move(cm));
    ++d.n_computed_;
    if (ms_since(t0) > options.max_compile_ms) {
      throw GrammarLimitError("grammar compile exceeded " + std::to_string(options.max_compile_ms) +
                              " ms (CompileOptions::max_compile_ms)");
    }
    if (d.masks_bytes_.load() > options.max_memory_bytes) {
      throw GrammarLimitError("grammar tables exceed " + std::to_string(options.max_memory_bytes) +
                              " bytes (CompileOptions::max_memory_bytes)");
    }
  }
  if (d.n_computed_ == d.n_masked_) d.classifier.reset();
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
