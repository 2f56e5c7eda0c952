// compiler.cpp — CompiledGrammar::compile: flattens the grammar, enumerates every grammar
// context (the part of a parse stack known from its top) and classifies every token in each
// context as accepted / rejected / uncertain by one walk of the vocabulary trie.
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
    const uint64_t key = (uint64_t(set) << 32) | cp;
    auto it = other_.find(key);
    if (it != other_.end()) return it->second;
    uint32_t v = compute(set, cp);
    other_.emplace(key, v);
    return v;
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

  // Which code points keep `set` unchanged (no exit): an ASCII bitmap, and whether every
  // code point >= 128 does (only decided when all members treat them alike).
  struct Loop {
    uint64_t ascii[2];
    bool non_ascii;
  };
  const Loop& loop(uint32_t set) {
    if (loops_.size() <= set) {
      loops_.resize(sets_.size());
      loop_done_.resize(sets_.size(), 0);
    }
    if (!loop_done_[set]) {
      Loop l{{0, 0}, false};
      for (uint32_t c = 0; c < 128; ++c) {
        if (step(set, c) == (set << 1)) l.ascii[c >> 6] |= 1ull << (c & 63);
      }
      bool uniform = true;
      const auto [off, len] = sets_[set];
      for (uint32_t i = 0; i < len && uniform; ++i) {
        const Elem& e = g_.elems[pool_.pos(data_[off + i])];
        if (e.kind != detail::kChars) continue;
        const CharSet& cs = g_.charsets[e.arg];
        if (cs.any) continue;
        bool none = true, all = false;
        for (const auto& r : cs.ranges) {
          if (r.hi >= 128) none = false;
          if (r.lo <= 128 && r.hi == 0xFFFFFFFFu) all = true;
        }
        uniform = none || all;
      }
      l.non_ascii = uniform && step(set, 0x100) == (set << 1);
      loops_[set] = l;
      loop_done_[set] = 1;
    }
    return loops_[set];
  }

  const uint32_t* members(uint32_t set, uint32_t* n) const {
    *n = sets_[set].second;
    return data_.data() + sets_[set].first;
  }

 private:
  static constexpr uint32_t kUnset = 0xFFFFFFFFu;
  uint32_t compute(uint32_t set, uint32_t cp) {
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
        if (s[k] == StackPool::kEmpty) {
          exited = true;
        } else {
          scratch_.push_back(s[k]);
        }
      }
    }
    std::vector<uint32_t> m = scratch_;
    return (intern(m) << 1) | (exited ? 1u : 0u);
  }

  StackPool& pool_;
  const GrammarTables& g_;
  size_t max_states_;
  std::vector<std::pair<uint32_t, uint32_t>> sets_;
  std::vector<uint32_t> data_;
  std::unordered_multimap<uint64_t, uint32_t> index_;
  std::vector<uint32_t> ascii_;
  std::unordered_map<uint64_t, uint32_t> other_;
  std::vector<uint32_t> scratch_;
  std::deque<CharSet> firsts_;  // a deque: frames keep pointers into it while it grows
  std::vector<uint8_t> first_done_;
  std::vector<Loop> loops_;
  std::vector<uint8_t> loop_done_;
};

struct Classifier {
  const TokenIndex& tokens;
  const GrammarTables& g;
  StackPool& pool;
  WalkStates& states;
  const std::vector<uint8_t>& no_text;
  std::vector<Token> accepted, uncertain;

  struct Frame {
    uint32_t end;
    uint32_t set;
    bool exited;
    bool pending;
    const CharSet* first;  // what the frame's set can consume next (null: nothing)
  };
  std::vector<Frame> frames;

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

  // When every code point below node j keeps the parse state `set` as it is, each token
  // below is accepted (if its partial tail fits) without walking the subtree.
  bool bulk_accept(uint32_t j, uint32_t set) {
    const auto& sc = tokens.subtree_chars()[j];
    const auto& l = states.loop(set);
    if ((sc.ascii[0] & ~l.ascii[0]) != 0 || (sc.ascii[1] & ~l.ascii[1]) != 0) return false;
    if (sc.non_ascii && !l.non_ascii) return false;
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const uint32_t end = trie[j].end;
    const uint32_t tb = trie[j].tok_end;
    const uint32_t te = end < trie.size() ? trie[end].tok_begin : static_cast<uint32_t>(tt.size());
    for (uint32_t k = tb; k < te; ++k) {
      const auto& t = tt[k];
      if (!no_text.empty() && no_text[static_cast<size_t>(t.id)]) continue;
      if (t.partial.n_remain == 0 || partial_ok(set, t.partial)) accepted.push_back(t.id);
    }
    return true;
  }

  void walk_subtree(uint32_t first, uint32_t root_set, const CharSet& follow) {
    const auto& trie = tokens.trie();
    frames.clear();
    frames.push_back({trie[first].end, root_set, false, false, &states.first(root_set)});
    uint32_t j = first;
    const uint32_t stop = trie[first].end;
    while (j < stop) {
      while (j >= frames.back().end) frames.pop_back();
      const Frame& parent = frames.back();
      const auto& node = trie[j];
      // Most children fail at once: test the code point before the (memoized) step.
      const uint32_t v = parent.first != nullptr && parent.first->match(node.cp)
                             ? states.step(parent.set, node.cp)
                             : 0;
      const uint32_t set = v >> 1;
      const bool exited = v & 1u;
      const bool pending = parent.pending || (parent.exited && follow.match(node.cp));
      if (set == 0 && !exited && !pending) {
        j = node.end;
        continue;
      }
      classify_node(node, set, exited, pending);
      if (set != 0 && !exited && !pending && node.end > j + 1 && bulk_accept(j, set)) {
        j = node.end;
        continue;
      }
      frames.push_back({node.end, set, exited, pending, set != 0 ? &states.first(set) : nullptr});
      ++j;
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
  const std::vector<CharSet> follow = follow_sets(d.g);
  // Walks run on full (uncut) stacks: a copy of the context chain with the empty stack
  // below it, so that popping below the chain is the only way to leave the context.
  StackPool walk_pool(&d.g, nullptr, false);
  WalkStates states(walk_pool, d.g, options.max_walk_states);
  Classifier cl{tokens, d.g, walk_pool, states, d.no_text, {}, {}, {}};
  std::vector<uint32_t> chain_pos;
  const size_t words = bitmask_words(n_vocab);
  d.ctx_mask.assign(pool.size(), CompiledData::kNone);
  const size_t n_nodes = pool.size();
  for (uint32_t n = 1; n < n_nodes; ++n) {
    const Elem& e = d.g.elems[pool.pos(n)];
    if (e.kind != detail::kChars) continue;
    // The chain's bottom decides what may follow when the token leaves the context.
    chain_pos.clear();
    for (uint32_t c = n; c != StackPool::kEmpty; c = pool.parent(c))
      chain_pos.push_back(pool.pos(c));
    uint32_t w = StackPool::kEmpty;
    for (size_t k = chain_pos.size(); k-- > 0;) w = walk_pool.make(chain_pos[k], w);
    cl.classify_context(w, follow[d.g.elem_rule[chain_pos.back()]]);
    detail::ContextMask cm;
    if (cl.accepted.size() * 32 > n_vocab) {
      cm.accepted_bitset = true;
      cm.accepted_off = static_cast<uint32_t>(d.bitset_words.size());
      cm.accepted_len = static_cast<uint32_t>(words);
      d.bitset_words.resize(d.bitset_words.size() + words, 0);
      uint32_t* w = d.bitset_words.data() + cm.accepted_off;
      for (Token t : cl.accepted) bitmask_set(w, t);
    } else {
      std::sort(cl.accepted.begin(), cl.accepted.end());
      cm.accepted_off = static_cast<uint32_t>(d.accepted_ids.size());
      cm.accepted_len = static_cast<uint32_t>(cl.accepted.size());
      d.accepted_ids.insert(d.accepted_ids.end(), cl.accepted.begin(), cl.accepted.end());
    }
    // Uncertain tokens stay in trie order: neighbours share prefixes, which the run-time
    // check reuses.
    cm.uncertain_off = static_cast<uint32_t>(d.uncertain_ids.size());
    cm.uncertain_len = static_cast<uint32_t>(cl.uncertain.size());
    d.uncertain_ids.insert(d.uncertain_ids.end(), cl.uncertain.begin(), cl.uncertain.end());
    d.ctx_mask[n] = static_cast<uint32_t>(d.masks.size());
    d.masks.push_back(cm);
    if ((n & 15) == 0) {
      if (ms_since(t0) > options.max_compile_ms) {
        throw GrammarLimitError("grammar compile exceeded " +
                                std::to_string(options.max_compile_ms) +
                                " ms (CompileOptions::max_compile_ms)");
      }
      const size_t mem =
          d.bitset_words.size() * 4 + d.accepted_ids.size() * 4 + d.uncertain_ids.size() * 4;
      if (mem > options.max_memory_bytes) {
        throw GrammarLimitError("grammar tables exceed " +
                                std::to_string(options.max_memory_bytes) +
                                " bytes (CompileOptions::max_memory_bytes)");
      }
    }
  }
  d.text_tokens_bitset.assign(words, 0);
  for (size_t t = 0; t < n_vocab; ++t) {
    if (tokens.kind(static_cast<Token>(t)) != TokenIndex::Kind::kText) continue;
    if (!d.no_text.empty() && d.no_text[t]) continue;
    size_t ncp;
    tokens.code_points(static_cast<Token>(t), &ncp);
    if (ncp > 0) bitmask_set(d.text_tokens_bitset.data(), static_cast<Token>(t));
  }
  d.compile_ms = ms_since(t0);
  return cg;
}

size_t CompiledGrammar::memory_bytes() const {
  const CompiledData& d = *data_;
  return sizeof(CompiledData) + d.g.elems.capacity() * sizeof(Elem) +
         d.g.alt_starts.capacity() * 4 + d.g.rule_alt_begin.capacity() * 4 +
         d.g.elem_rule.capacity() * 4 + d.g.rule_owner.capacity() * 4 +
         d.g.rule_generated.capacity() + d.g.charsets.capacity() * sizeof(CharSet) +
         d.contexts.memory_bytes() + d.ctx_mask.capacity() * 4 +
         d.masks.capacity() * sizeof(detail::ContextMask) + d.bitset_words.capacity() * 4 +
         d.accepted_ids.capacity() * 4 + d.uncertain_ids.capacity() * 4 +
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
  return data_->masks.size();
}

}  // namespace lacuna
