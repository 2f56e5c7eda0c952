// stack_pool.cpp — character sets with llama.cpp's matching rules, and hash-consed
// persistent parse stacks (expansion of rule references, successors after a terminal).
#include <algorithm>

#include "match/compiled_data.h"

namespace lacuna::detail {

bool CharSet::contains_raw(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1u;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CharRange& r) { return v < r.lo; });
  if (it == ranges.begin()) return false;
  --it;
  return cp <= it->hi;
}

bool CharSet::match_partial(PartialUtf8 p) const {
  // Same rule as llama.cpp: some completion of the partial sequence could match.
  if (p.n_remain < 0 || (p.n_remain == 1 && p.value < 2)) return false;
  const int shift = p.n_remain * 6;
  uint32_t low = p.value << shift;
  uint32_t high = low | ((1u << shift) - 1);
  if (low == 0) {
    if (p.n_remain == 2) low = 1u << 11;
    if (p.n_remain == 3) low = 1u << 16;
  }
  if (any) return true;
  // (Ranges are sorted and merged: the first that ends at or after `low`.)
  auto it = std::lower_bound(ranges.begin(), ranges.end(), low,
                             [](const CharRange& r, uint32_t v) { return r.hi < v; });
  if (it != ranges.end() && it->lo <= high) return !negated;
  return negated;
}

int64_t CharSet::single() const {
  if (any || negated || ranges.size() != 1 || ranges[0].lo != ranges[0].hi) return -1;
  return ranges[0].lo;
}

CharSet make_charset(bool any, bool negated, std::vector<CharRange> ranges) {
  CharSet cs;
  cs.any = any;
  cs.negated = negated;
  std::sort(ranges.begin(), ranges.end(),
            [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  for (const auto& r : ranges) {
    if (!cs.ranges.empty() && r.lo <= cs.ranges.back().hi + 1ull) {
      cs.ranges.back().hi = std::max(cs.ranges.back().hi, r.hi);
    } else {
      cs.ranges.push_back(r);
    }
  }
  for (const auto& r : cs.ranges) {
    for (uint32_t c = r.lo; c <= r.hi && c < 128; ++c) cs.ascii[c >> 6] |= 1ull << (c & 63);
  }
  return cs;
}

StackPool::StackPool(const GrammarTables* g, const StackPool* contexts, bool local)
    : g_(g), contexts_(contexts), local_(local) {
  nodes_.push_back({0, 0, kEmpty, 0, 0xFFFFFFFFu});
  table_.assign(1024, 0);
}

static inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

uint32_t StackPool::find(uint32_t pos, uint32_t parent) const {
  const size_t mask = table_.size() - 1;
  size_t h = mix((uint64_t(pos) << 32) | parent) & mask;
  while (true) {
    uint32_t id = table_[h];
    if (id == 0) return kUnknown;
    if (nodes_[id].pos == pos && nodes_[id].parent == parent) return id;
    h = (h + 1) & mask;
  }
}

void StackPool::grow_table() {
  std::vector<uint32_t> t(table_.size() * 2, 0);
  const size_t mask = t.size() - 1;
  for (size_t id = 1; id < nodes_.size(); ++id) {
    size_t h = mix((uint64_t(nodes_[id].pos) << 32) | nodes_[id].parent) & mask;
    while (t[h] != 0) h = (h + 1) & mask;
    t[h] = static_cast<uint32_t>(id);
  }
  table_.swap(t);
}

void StackPool::reserve(size_t n) {
  nodes_.reserve(n);
  size_t slots = table_.size();
  while (slots < 2 * n) slots *= 2;
  if (slots != table_.size() && nodes_.size() <= 1) table_.assign(slots, 0);
}

uint32_t StackPool::make(uint32_t pos, uint32_t parent) {
  if (local_ && !keep_parent(pos, parent)) parent = kEmpty;
  const size_t mask = table_.size() - 1;
  size_t h = mix((uint64_t(pos) << 32) | parent) & mask;
  while (true) {
    uint32_t id = table_[h];
    if (id == 0) break;
    if (nodes_[id].pos == pos && nodes_[id].parent == parent) return id;
    h = (h + 1) & mask;
  }
  const uint32_t id = static_cast<uint32_t>(nodes_.size());
  uint32_t ctx = id;
  if (contexts_ != nullptr) {
    if (keep_parent(pos, parent)) {
      uint32_t pctx = nodes_[parent].ctx;
      ctx = pctx == kUnknown ? kUnknown : contexts_->find(pos, pctx);
    } else {
      ctx = contexts_->find(pos, kEmpty);
    }
  }
  nodes_.push_back({pos, parent, ctx, 0, 0xFFFFFFFFu});
  table_[h] = id;
  if (nodes_.size() * 2 > table_.size()) grow_table();
  return id;
}

void StackPool::expand(uint32_t node, std::vector<uint32_t>& out) {
  // Dedup of visited nodes and outputs within this call, by stamp.
  if (++stamp_now_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    stamp_now_ = 1;
  }
  const uint32_t out_stamp = stamp_now_;
  if (++stamp_now_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    stamp_now_ = 2;
  }
  const uint32_t seen_stamp = stamp_now_;
  // stamp_ holds two stamps per node: [2n] seen, [2n+1] emitted.
  auto mark = [&](uint32_t n, size_t which, uint32_t s) {
    if (stamp_.size() < 2 * nodes_.size()) stamp_.resize(4 * nodes_.size() + 64, 0);
    uint32_t& v = stamp_[2 * n + which];
    if (v == s) return false;
    v = s;
    return true;
  };
  for (uint32_t o : out) mark(o, 1, out_stamp);
  const size_t work_base = work_.size();
  work_.push_back(node);
  while (work_.size() > work_base) {
    uint32_t n = work_.back();
    work_.pop_back();
    if (!mark(n, 0, seen_stamp)) continue;
    if (n == kEmpty) {
      if (mark(n, 1, out_stamp)) out.push_back(n);
      continue;
    }
    const uint32_t p = nodes_[n].pos;
    const Elem& e = g_->elems[p];
    if (e.kind == kEnd) {
      // A frame marker (see below): its rule is done, return to the caller.
      work_.push_back(nodes_[n].parent);
      continue;
    }
    if (e.kind != kRef) {
      if (mark(n, 1, out_stamp)) out.push_back(n);
      continue;
    }
    const uint32_t base = call_base(n);
    for (uint32_t a = g_->rule_alt_begin[e.arg]; a < g_->rule_alt_begin[e.arg + 1]; ++a) {
      const uint32_t start = g_->alt_starts[a];
      work_.push_back(g_->elems[start].kind == kEnd ? base : make(start, base));
    }
  }
}

uint32_t StackPool::call_base(uint32_t node) {
  const uint32_t p = nodes_[node].pos;
  const uint32_t callee = g_->elems[p].arg;
  // A call pushes its return position. A call in last position (a tail call) pushes
  // nothing, except from a boundary rule to a rule that is not one: then it pushes its
  // end marker so that the callee's context chain stops at a boundary position. A callee
  // that is a boundary rule starts its own chain, so nothing is pushed: right recursion
  // like `s ::= "\"" | c s` in per-rule mode would otherwise grow the stack by one end
  // marker per character (every set new, walks from such stacks up to 300 ms).
  const uint32_t parent = nodes_[node].parent;
  if (g_->elems[p + 1].kind != kEnd) return make(p + 1, parent);
  // An end marker on top of the parent only returns to what lies below it. A key
  // automaton's states (`s ::= c* ("\"" | "g" t)`: each a boundary rule tail-calling its
  // group, which tail-calls the next state) pushed one more marker per move, and after that
  // was fixed still kept the marker of the state they came from below their own frames:
  // every set new, or one per state they were entered from, no live automaton found, and
  // each key position walked node by node (3-4 ms a first-use mask). So a marker pushed
  // takes the place of one on top, and a boundary callee, whose chain stops at its own
  // positions, drops one. The chains above are those the compile-time contexts hold (a
  // local pool has cut below a boundary position already).
  const bool on_marker = parent != kEmpty && g_->elems[nodes_[parent].pos].kind == kEnd;
  const uint32_t below = on_marker ? nodes_[parent].parent : parent;
  if (g_->rule_boundary[callee]) return below;
  if (g_->rule_boundary[g_->elem_rule[p]]) return make(p + 1, below);
  return parent;
}

void StackPool::start(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out) {
  expand(g_->elems[pos].kind == kEnd ? parent : make(pos, parent), out);
}

const uint32_t* StackPool::succ(uint32_t node, uint32_t* n) {
  if (nodes_[node].succ_len == 0xFFFFFFFFu) {
    // A scratch list kept across calls: one allocation per node was a tenth of compiling
    // a large grammar.
    succ_tmp_.clear();
    const uint32_t p = nodes_[node].pos;
    start(p + 1, nodes_[node].parent, succ_tmp_);
    nodes_[node].succ_off = static_cast<uint32_t>(succ_store_.size());
    nodes_[node].succ_len = static_cast<uint32_t>(succ_tmp_.size());
    succ_store_.insert(succ_store_.end(), succ_tmp_.begin(), succ_tmp_.end());
  }
  *n = nodes_[node].succ_len;
  return succ_store_.data() + nodes_[node].succ_off;
}

size_t StackPool::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + table_.capacity() * 4 + succ_store_.capacity() * 4 +
         stamp_.capacity() * 4 + work_.capacity() * 4 + succ_tmp_.capacity() * 4;
}

}  // namespace lacuna::detail
