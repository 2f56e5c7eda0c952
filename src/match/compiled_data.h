// compiled_data.h — private data of a CompiledGrammar: the flattened grammar, character
// sets, persistent parse-stack pools and the per-context token classification tables.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/token_index.h"

namespace lacuna::detail {

enum ElemKind : uint8_t { kEnd = 0, kChars, kRef, kTok, kTokNot };

struct Elem {
  ElemKind kind;
  uint32_t arg;  // kChars: charset index; kRef: rule; kTok/kTokNot: token id (or -1: unresolved)
};

// A hash of a run of ids (grammar positions, stack nodes): FNV-1a steps on four interleaved
// chains, mixed at the end; the hash of interned sets and of the position lists that key
// memoized masks.
inline uint64_t hash_ids(const uint32_t* ids, size_t n) {
  // Four independent multiply chains, mixed at the end: one chain waited on a multiply per
  // id (a large grammar's class signatures hash 250,000 ids on its first mask).
  constexpr uint64_t kMul = 1099511628211ull;
  uint64_t h0 = 1469598103934665603ull, h1 = 0x9E3779B97F4A7C15ull, h2 = 0xC2B2AE3D27D4EB4Full,
           h3 = 0x165667B19E3779F9ull;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    h0 = (h0 ^ ids[i]) * kMul;
    h1 = (h1 ^ ids[i + 1]) * kMul;
    h2 = (h2 ^ ids[i + 2]) * kMul;
    h3 = (h3 ^ ids[i + 3]) * kMul;
  }
  for (; i < n; ++i) h0 = (h0 ^ ids[i]) * kMul;
  uint64_t h = h0 ^ (h1 << 21 | h1 >> 43) ^ (h2 << 42 | h2 >> 22) ^ (h3 << 11 | h3 >> 53) ^ n;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

// Sets of code points >= 128 that a class leaves out of "every code point from 128 on"
// (SharedMasks::ClassKey::holes): interned for the whole process, so that equal sets have
// equal ids in every grammar and token index. Id 0 is the empty set; intern_class_holes
// returns 0 for more than kMaxClassHoleRanges ranges or once kMaxClassHoleSets are known.
constexpr size_t kMaxClassHoleRanges = 1024, kMaxClassHoleSets = 1024;
uint16_t intern_class_holes(const std::vector<CharRange>& ranges);
// The ranges of a hole set (sorted, merged).
const std::vector<CharRange>& class_holes(uint16_t id);
// Whether cp (>= 128) is in hole set `id`.
bool in_class_holes(uint16_t id, uint32_t cp);

// Dense ids for sequences of ids, stored end to end and found by hash: the interned sets of
// a context walk, the signatures of the grammar's class refinement.
class IdSeqs {
 public:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  size_t size() const { return spans_.size(); }
  size_t total() const { return data_.size(); }  // ids stored, over all sequences
  // The id of [ids, ids + n) with hash h (hash_ids), or kNone when it has none yet.
  uint32_t find(const uint32_t* ids, size_t n, uint64_t h) const {
    if (slots_.empty()) return kNone;
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(h) & mask;; i = (i + 1) & mask) {
      const uint32_t v = slots_[i];
      if (v == 0) return kNone;
      const uint32_t id = v - 1;
      const auto [off, len] = spans_[id];
      if (hashes_[id] == h && len == n && std::equal(ids, ids + n, data_.begin() + off)) return id;
    }
  }
  // Adds a sequence find() does not know.
  uint32_t add(const uint32_t* ids, size_t n, uint64_t h) {
    const uint32_t id = static_cast<uint32_t>(spans_.size());
    spans_.push_back({static_cast<uint32_t>(data_.size()), static_cast<uint32_t>(n)});
    data_.insert(data_.end(), ids, ids + n);
    hashes_.push_back(h);
    if (spans_.size() * 2 > slots_.size()) {
      slots_.assign(std::max<size_t>(16, slots_.size() * 2), 0);
      for (uint32_t k = 0; k <= id; ++k) place(k);
    } else {
      place(id);
    }
    return id;
  }
  uint32_t intern(const uint32_t* ids, size_t n) {
    const uint64_t h = hash_ids(ids, n);
    const uint32_t id = find(ids, n, h);
    return id != kNone ? id : add(ids, n, h);
  }
  uint32_t intern(const std::vector<uint32_t>& ids) { return intern(ids.data(), ids.size()); }
  // Forgets every sequence, keeping the memory (a table reused many times over).
  void clear() {
    spans_.clear();
    data_.clear();
    hashes_.clear();
    slots_.assign(std::min<size_t>(slots_.size(), 16), 0);
  }
  const uint32_t* at(uint32_t id, uint32_t* n) const {
    *n = spans_[id].second;
    return data_.data() + spans_[id].first;
  }

 private:
  static size_t slot_of(uint64_t h) { return static_cast<size_t>(h ^ (h >> 31)); }
  void place(uint32_t id) {
    const size_t mask = slots_.size() - 1;
    size_t i = slot_of(hashes_[id]) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = id + 1;
  }
  std::vector<std::pair<uint32_t, uint32_t>> spans_;  // (offset, length) in data_
  std::vector<uint32_t> data_;
  std::vector<uint64_t> hashes_;  // by id
  std::vector<uint32_t> slots_;   // open addressing: id + 1, 0 empty; at most half full
};

// A set of code points with llama.cpp's matching semantics (including partial sequences).
struct CharSet {
  bool any = false;
  bool negated = false;
  uint64_t ascii[2] = {0, 0};     // membership of 0..127 in `ranges` (before negation)
  std::vector<CharRange> ranges;  // sorted, merged

  bool contains_raw(uint32_t cp) const;
  bool match(uint32_t cp) const { return any || (contains_raw(cp) != negated); }
  bool match_partial(PartialUtf8 p) const;
  // The single code point this set matches, or -1.
  int64_t single() const;
};

CharSet make_charset(bool any, bool negated, std::vector<CharRange> ranges);

// The grammar flattened like llama.cpp's rules: each alternative is a run of elements
// ended by a kEnd element; a position is an index into `elems`.
struct GrammarTables {
  std::vector<Elem> elems;
  std::vector<uint32_t> alt_starts;      // all alternatives, grouped by rule
  std::vector<uint32_t> rule_alt_begin;  // rules + 1 offsets into alt_starts
  std::vector<uint32_t> elem_rule;       // rule of each position
  std::vector<uint32_t> rule_owner;
  std::vector<uint8_t> rule_generated;
  // Context boundaries: a context chain runs from a stack's top down to (and including) the
  // first position in a boundary rule. Every cycle of calls that grows the stack passes
  // through a boundary rule, so chains are finite.
  std::vector<uint8_t> rule_boundary;
  // The call graph's strongly connected components: each rule's, numbered after every
  // component it calls; whether a component is a cycle (more than one rule, or a rule that
  // calls itself). Set with the boundaries (mark_boundaries), read by the class refinement.
  std::vector<uint32_t> rule_comp;
  std::vector<uint8_t> comp_cyclic;
  std::vector<CharSet> charsets;
  uint32_t root = 0;
};

// Hash-consed persistent stacks: node = (position, parent node). Node 0 is the empty stack.
// `local` pools (used at compile time) cut a chain below a boundary rule's position, so
// that a chain is the part of a stack that decides its token classification.
class StackPool {
 public:
  static constexpr uint32_t kEmpty = 0;
  static constexpr uint32_t kUnknown = 0xFFFFFFFFu;

  StackPool() = default;
  StackPool(const GrammarTables* g, const StackPool* contexts, bool local);

  uint32_t make(uint32_t pos, uint32_t parent);
  // Room for n nodes without growing (call on a fresh pool).
  void reserve(size_t n);
  // Lookup without insertion (kUnknown when absent).
  uint32_t find(uint32_t pos, uint32_t parent) const;
  uint32_t pos(uint32_t n) const { return nodes_[n].pos; }
  uint32_t parent(uint32_t n) const { return nodes_[n].parent; }
  uint32_t ctx(uint32_t n) const { return nodes_[n].ctx; }
  size_t size() const { return nodes_.size(); }

  // Expands a stack whose top may be a rule reference into stacks whose tops are
  // terminals (or the empty stack); appends them to out, without duplicates.
  void expand(uint32_t node, std::vector<uint32_t>& out);
  // The stacks after the terminal on top of `node` matched: cached.
  const uint32_t* succ(uint32_t node, uint32_t* n);
  // The stack a call on top of `node` (a rule reference) puts its callee's alternatives on:
  // its return position above the caller's parent, or the parent alone for a tail call.
  uint32_t call_base(uint32_t node);
  // Stacks starting at `pos` above `parent` (pos may be an end marker: then parent's).
  void start(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out);

  size_t memory_bytes() const;
  const GrammarTables& tables() const { return *g_; }
  // Whether a frame at `pos` above `parent` has that parent in its context's chain: the
  // chain runs down to a boundary rule's position or to the bottom of the stack.
  bool keep_parent(uint32_t pos, uint32_t parent) const {
    return parent != kEmpty && !g_->rule_boundary[g_->elem_rule[pos]];
  }

 private:
  struct Node {
    uint32_t pos;
    uint32_t parent;
    uint32_t ctx;
    uint32_t succ_off;
    uint32_t succ_len;
  };
  void grow_table();

  const GrammarTables* g_ = nullptr;
  const StackPool* contexts_ = nullptr;  // runtime pools: resolves each node's context
  bool local_ = false;
  std::vector<Node> nodes_;
  std::vector<uint32_t> table_;  // open addressing, node ids (0 = free slot)
  std::vector<uint32_t> succ_store_;
  std::vector<uint32_t> stamp_;
  uint32_t stamp_now_ = 0;
  std::vector<uint32_t> work_;
  std::vector<uint32_t> succ_tmp_;
};

// Whether a token whose full code points leave the stacks s[0, n) may end there with the
// partial UTF-8 tail p: some stack's top is a character set that may take p's code point.
// The empty stack takes none.
inline bool stacks_take_partial(const GrammarTables& g, const StackPool& pool, const uint32_t* s,
                                size_t n, PartialUtf8 p) {
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == StackPool::kEmpty) continue;
    const Elem& e = g.elems[pool.pos(s[i])];
    if (e.kind == kChars && g.charsets[e.arg].match_partial(p)) return true;
  }
  return false;
}

// The token classification of one context (a chain with a character-set top): tokens
// accepted whatever lies below the chain, and tokens that need a run-time check.
struct ContextMask {
  std::vector<uint32_t> accepted_bits;  // a bitmask over the vocabulary, or empty
  std::vector<Token> accepted_ids;      // in walk order (used when accepted_bits is empty)
  std::vector<Token> uncertain_ids;     // in trie order
  size_t memory_bytes() const {
    return sizeof(ContextMask) + accepted_bits.capacity() * 4 + accepted_ids.capacity() * 4 +
           uncertain_ids.capacity() * 4;
  }
};

// Masks keyed by a list of grammar positions (a whole stack, or a chain's top positions;
// top first). An entry's mask may be null: remembered as not computable or not of use.
class MasksByPositions {
 public:
  // Whether `positions` has an entry; its mask in *mask.
  bool find(const std::vector<uint32_t>& positions, const ContextMask** mask) const {
    const auto* entry = lookup(positions);
    if (entry == nullptr) return false;
    *mask = entry->get();
    return true;
  }
  // The stored mask (possibly null) of `positions`, or null when there is no entry.
  const std::shared_ptr<const ContextMask>* lookup(const std::vector<uint32_t>& positions) const {
    auto range = map_.equal_range(hash_ids(positions.data(), positions.size()));
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second.positions == positions) return &it->second.mask;
    }
    return nullptr;
  }
  void add(std::vector<uint32_t> positions, std::shared_ptr<const ContextMask> mask) {
    const uint64_t h = hash_ids(positions.data(), positions.size());
    map_.emplace(h, Entry{std::move(positions), std::move(mask)});
  }

 private:
  struct Entry {
    std::vector<uint32_t> positions;
    std::shared_ptr<const ContextMask> mask;
  };
  std::unordered_multimap<uint64_t, Entry> map_;
};

// Token classes of rule prefixes, shared across the grammars compiled against one
// TokenIndex: key = the exact rules a prefix can reach (see prefix_key in compiler.cpp,
// which names them by their closures below),
// value = its mask, or null when too many tokens leave the prefix for it to be of use.
struct SharedMasks {
  static constexpr size_t kMaxBytes = size_t{256} << 20;
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const ContextMask>> masks;  // guarded by mu
  size_t bytes = 0;                                                           // guarded by mu
  // Rule closures (see closure_id() in compiler.cpp): the text of a rule and of every rule it
  // reaches, numbered by first use, -> a number that prefix keys name the rule by.
  std::unordered_map<std::string, uint32_t> closures;  // guarded by mu

  // Class exits (see class_exits() in compiler.cpp): for a class of code points, the trie
  // nodes outside it whose parent is inside it, in trie order; null where there are too
  // many to be worth it. Keyed by the class's ASCII bitmap and its flag for code points
  // >= 128. Entries live as long as the token index.
  struct ClassKey {
    uint64_t ascii[2];
    bool non_ascii;
    // With non_ascii: the code points >= 128 left out of the class after all (class_holes;
    // 0: none), as a string's `.` leaves out U+2028 and U+2029.
    uint16_t holes = 0;
    bool operator==(const ClassKey&) const = default;
  };
  struct ClassKeyHash {
    size_t operator()(const ClassKey& k) const {
      return static_cast<size_t>((k.ascii[0] * 0x9E3779B97F4A7C15ull) ^
                                 (k.ascii[1] + k.non_ascii + (size_t{k.holes} << 1)));
    }
  };
  static constexpr size_t kMaxExitClasses = 4096;
  std::unordered_map<ClassKey, std::unique_ptr<const std::vector<uint32_t>>, ClassKeyHash>
      exits;  // guarded by mu

  // Class tokens (see class_tokens() in compiler.cpp): a bitmask over the vocabulary of the
  // tokens all of whose code points are in a class, without a partial UTF-8 tail, and
  // without control tokens unless `controls_as_text`.
  struct ClassTokensKey {
    ClassKey cls;
    bool controls_as_text;
    bool operator==(const ClassTokensKey&) const = default;
  };
  struct ClassTokensKeyHash {
    size_t operator()(const ClassTokensKey& k) const {
      return ClassKeyHash()(k.cls) * 2 + k.controls_as_text;
    }
  };
  std::unordered_map<ClassTokensKey, std::unique_ptr<const std::vector<uint32_t>>,
                     ClassTokensKeyHash>
      class_tokens;  // guarded by mu

  // Label tries (see label_walk() in compiler.cpp): the vocabulary trie seen through a
  // partition of a class C of code points into k labels, each node a distinct sequence of
  // labels that starts some token of C*. Keyed by the labels (per label: its ASCII bitmap's
  // two words, then 1 when it holds every code point >= 128), in the order of their ids.
  struct LabelTrie {
    uint32_t k = 0;
    std::vector<uint32_t> child;  // [node * k + label]: the child (0: none); node 0 is the root
    // Per node + 1: the tokens ending at node u are ids[tok_off[u], tok_off[u + 1]) (text
    // tokens without a partial UTF-8 tail) and slow[slow_off[u], slow_off[u + 1]) (trie_tokens()
    // indices of the others: a partial tail, or a control token).
    std::vector<uint32_t> tok_off, slow_off;
    std::vector<Token> ids;
    std::vector<uint32_t> slow;
    // The trie nodes outside C whose ancestors (below the root) are all in C, in trie order,
    // with the label node of their parent: where a token leaves C.
    std::vector<std::pair<uint32_t, uint32_t>> exits;
    size_t n_nodes() const { return tok_off.empty() ? 0 : tok_off.size() - 1; }
    size_t memory_bytes() const {
      return sizeof(LabelTrie) +
             (child.capacity() + tok_off.capacity() + slow_off.capacity() + ids.capacity() +
              slow.capacity()) *
                 4 +
             exits.capacity() * 8;
    }
  };
  static constexpr size_t kMaxLabelTries = 256;
  std::map<std::vector<uint64_t>, std::unique_ptr<const LabelTrie>> label_tries;  // guarded by mu

  // The trie nodes of each depth, in trie order (see depth_nodes() in compiler.cpp): where a
  // bounded run of a class ends inside a subtree. Built once, on first use.
  std::vector<std::vector<uint32_t>> nodes_by_depth;  // guarded by mu
  // Every text token with its number of full code points, longest first (see
  // tokens_by_length() in compiler.cpp): what a bounded run leaves out. Built on first use.
  std::vector<std::pair<uint32_t, Token>> tokens_by_length;  // guarded by mu
  // [token]: its place in the trie's token order (UINT32_MAX: not a text token). Built with
  // tokens_by_length.
  std::vector<uint32_t> trie_rank;  // guarded by mu
  // [n]: a bitmask of the text tokens of at most n full code points (null: not built yet),
  // for the bounded covers of short runs. Built on first use.
  std::vector<std::unique_ptr<const std::vector<uint32_t>>> tokens_up_to;  // guarded by mu
};

// Builds the per-TokenIndex tables nearly every JSON grammar needs (a string's class tokens
// and exits, tokens by length, nodes by depth) by computing the masks of a small JSON
// grammar, so that the first mask of a process does not pay for them (compiler.cpp).
void warm_shared_tables(const std::shared_ptr<const TokenIndex>& tokens);

// Computes context masks: the vocabulary-trie walk (compiler.cpp). Not thread-safe.
class ContextClassifier;

// Thrown out of a mask walk at compile time once the eager budget (CompileOptions::eager_ms)
// is spent: nothing of the walk is kept, and the context's mask is left to its first use.
struct WalkAbandoned {};
// Tests only: when nonzero, compile's eager masks stop after this many trie nodes walked, as
// if the budget ran out there (the budget's clock cannot be stopped mid-walk on demand).
inline std::atomic<uint64_t> test_eager_walk_nodes{0};
// Tests only: when not negative, the number of stacks past a context's end above which its
// walk leaves the tokens that leave it uncertain (ContextClassifier::compute; otherwise
// 256); when nonzero, the number of such tokens past which the context gets no mask
// (otherwise a 32nd of the vocabulary).
inline std::atomic<int64_t> test_max_after_stacks{-1};
// Tests only: when nonzero, the most ASCII code points of a root cover's loop class outside
// its first class (otherwise 64; see kMaxCoverClear in compiler.cpp): set low, a key's start
// that leaves out many names' first letters takes a live walk instead of the cover.
inline std::atomic<int> test_max_cover_clear{0};
// Tests only: every live region (a subtree below a set that may be a live automaton) is
// walked node by node (lazy_region) rather than searched for its automaton.
inline std::atomic<bool> test_lazy_regions{false};
// Tests only: when nonzero, the most set steps a live region's search may take (otherwise
// its share of the subtree's nodes), past which the region is walked lazily; the search is
// then made whatever the rules promise (512, the most a search takes: every region searched).
inline std::atomic<size_t> test_live_step_budget{0};
inline std::atomic<size_t> test_leave_cap{0};
// Tests only: every rule on no cycle gets one same signature hash in the grammar's class
// refinement (ContextClassifier::compute_classes), so that each is told from the earlier
// ones by its signature made again.
inline std::atomic<bool> test_collide_rule_hashes{false};
// Tests only: context walks in that mode, contexts left without a mask of their own, and
// resets of the walk states (ContextClassifier::reset_states_if_full), counted.
struct WalkCounters {
  std::atomic<uint64_t> leave_walks{0}, no_mask{0}, state_resets{0};
  std::atomic<uint64_t> live_walks{0}, live_regions{0};  // live_walk, live_region taken
  std::atomic<uint64_t> exit_states_reused{0};  // live walks that found their exits' states known
  std::atomic<uint64_t> exit_states_one_label{0};  // exits' states read off a one-label chain
  std::atomic<uint64_t> high_like_sets{0};  // sets whose steps above ASCII share one outside holes
  std::atomic<uint64_t> depth_bounds{0};    // runs whose depth was followed only as far as asked
  std::atomic<uint64_t> capped_walks{0};    // walks stopped past the deep threshold (no mask)
  std::atomic<uint64_t> live_holes{0};      // live automata whose class leaves out high ranges
  std::atomic<uint64_t> live_many_labels{0};      // live automata of more than 12 labels
  std::atomic<uint64_t> live_large_sets{0};       // live automata with a set of more than 32 stacks
  std::atomic<uint64_t> live_dead_starts{0};      // live walks whose start set dies on some of C
  std::atomic<uint64_t> live_over_letters{0};     // live walks taken for letters past a cover's run
  std::atomic<uint64_t> live_die_stops{0};        // nodes where a live walk's set dies on a letter
  std::atomic<uint64_t> kid_memo_hits{0};         // root children answered from a kid memo
  std::atomic<uint64_t> unbounded_root_stops{0};  // root batches of an unbounded cover
  std::atomic<uint64_t> lazy_regions{0};          // live regions walked node by node (lazy_region)
  std::atomic<uint64_t> literal_runs{0};          // literals followed without a set per code point
  std::atomic<uint64_t> same_masks{0};            // masks found equal to one computed before
  std::atomic<uint64_t> top_frame_checks{0};      // stack checks found under their top frames
  std::atomic<uint64_t> partly_kept_checks{0};    // checks of the tokens that kept ones left
  std::atomic<uint64_t> levels_kept_whole{0};     // levels past the list, kept under whole stacks
  std::atomic<uint64_t> settled_tokens{0};        // uncertain tokens every call site's returns take
  std::atomic<uint64_t> unobserved_family_walks{0};  // family levels that could not share
  std::atomic<uint64_t> derived_levels{0};  // family levels' masks derived from a higher level's
  std::atomic<uint64_t> rules_signed_again{0};  // rules whose signature was made again to compare
  std::atomic<uint64_t> high_after_ascii{0};    // runs of code points >= 128 chosen by a lookahead
};
inline WalkCounters test_walk_counters;
// Tests only: every run depth a walk asks for is checked against its chain followed to the
// end (WalkStates::run throws std::logic_error when a lower bound claims too much).
inline std::atomic<bool> test_check_run_depths{false};
// Tests only: contexts with more uncertain tokens than this take whole-stack masks
// (CompiledData::deep_threshold; SIZE_MAX: the default, n_vocab / 16).
inline std::atomic<size_t> test_deep_threshold{SIZE_MAX};
// Tests only: the fewest uncertain tokens a context's returns settle (SIZE_MAX: the
// classifier's own minimum; ContextClassifier::settle).
inline std::atomic<size_t> test_min_settle{SIZE_MAX};
// Tests only: the most tokens longer than a repetition family's level that may be walked
// to derive its mask from a higher level's (SIZE_MAX: the classifier's own limits; 0: never
// derived; any other value also lifts the limit on the longer tokens looked at;
// ContextClassifier::derive_level).
inline std::atomic<size_t> test_max_derived_long{SIZE_MAX};
// Tests only: the most levels of shared checks listed per context (SIZE_MAX: the default,
// CompiledData::kMaxCheckedFrames).
inline std::atomic<size_t> test_max_checked_levels{SIZE_MAX};

struct CompiledData {
  CompiledData();
  ~CompiledData();
  CompiledData(const CompiledData&) = delete;
  CompiledData& operator=(const CompiledData&) = delete;

  CompileOptions options;
  std::shared_ptr<const TokenIndex> tokens;
  GrammarTables g;
  StackPool contexts;                        // local pool: every context chain
  std::vector<uint32_t> text_tokens_bitset;  // kText tokens with >= 1 code point (for !<...>)
  std::vector<uint8_t> no_text;              // per token: 1 = control token not matched as text
  double compile_ms = 0;

  // The mask of a context: computed at compile time, or on first use and then shared by
  // every matcher of this grammar (thread-safe). Null for a node without a mask (not a
  // character-set top) or when computing it hit a limit: the matcher then checks tokens
  // one by one.
  const ContextMask* mask(uint32_t ctx) const;
  // Computes and publishes the mask of ctx (caller holds no lock). Returns it.
  const ContextMask* compute_mask(uint32_t ctx) const;
  // Publishes the mask the classifier computed for ctx (`fresh`: not another context's,
  // owned from here on), or leaves ctx without one (null). Caller holds lazy_mu, or is
  // the compiler before the grammar is shared.
  const ContextMask* publish(uint32_t ctx, std::shared_ptr<const ContextMask> cm, bool fresh) const;
  // The exact mask of one whole stack (its positions from the top down), for stacks whose
  // context leaves too many tokens uncertain (deep_threshold()): one walk of the
  // vocabulary trie with nothing below the stack, shared by every matcher of this grammar.
  // Null when computing it hit a limit (the caller then checks the uncertain tokens).
  const ContextMask* deep_mask(const std::vector<uint32_t>& positions) const;
  // The run-time check of a stack's uncertain tokens (its positions from the top down; no
  // partial UTF-8 sequence pending), shared by every matcher of this grammar. A token's
  // answer depends only on the top frames its steps read (its level: 1 to the stack's depth,
  // or kWholeStack when a step ended the stack), so each check is kept per level, under the
  // stack's top `level` positions and ctx (whose uncertain tokens are the ones checked):
  // the same context deeper in a recursion (the next level of a nested list, whose stacks
  // differ only below what most tokens reach) finds the answers of every token that read
  // no deeper than the frames the two stacks share, and only the others are checked again
  // (tokens of many closing brackets, one more at each new depth).
  static constexpr size_t kWholeStack = SIZE_MAX;
  // One checked token: its index in the context's uncertain list, the frames it read and
  // whether the stack accepts it.
  struct CheckedToken {
    uint32_t index;
    bool accepted;
    size_t level;
  };
  // Appends to `out` the tokens of `ids` (the context's uncertain list, n of them) that kept
  // checks of stacks with the same top frames accept, and sets decided[i] for each token i
  // they answer (decided holds n flags, all clear). Returns true when every token is answered.
  bool find_checked(const std::vector<uint32_t>& positions, uint32_t ctx, const Token* ids,
                    size_t n, std::vector<Token>& out, std::vector<uint8_t>& decided) const;
  // Keeps the answers of `checked` (tokens of ids not answered by find_checked).
  void add_checked(const std::vector<uint32_t>& positions, uint32_t ctx,
                   const std::vector<CheckedToken>& checked) const;
  // A stack whose context has no mask and no whole-stack mask: every token is checked and
  // the answer kept under the whole stack alone.
  bool find_checked_all(const std::vector<uint32_t>& positions, std::vector<Token>& out) const;
  void add_checked_all(const std::vector<uint32_t>& positions, const Token* accepted,
                       size_t n) const;
  static constexpr size_t kMaxCheckedTokens = size_t{1} << 22;
  // Contexts with more uncertain tokens than this use deep masks at run time.
  size_t deep_threshold() const {
    const size_t forced = test_deep_threshold.load(std::memory_order_relaxed);
    if (forced != SIZE_MAX) return forced;
    return tokens ? tokens->n_vocab() / 16 : 0;
  }
  size_t n_masked_contexts() const { return n_masked_; }    // contexts with a character top
  size_t n_computed() const { return n_computed_.load(); }  // masks computed so far
  size_t masks_memory_bytes() const { return masks_bytes_.load(); }

  // Set up by the compiler.
  size_t n_masked_ = 0;
  std::vector<uint8_t> has_mask;  // per context node: 1 = character-set top
  std::unique_ptr<std::atomic<const ContextMask*>[]> slots;
  mutable std::mutex lazy_mu;
  mutable std::unique_ptr<ContextClassifier> classifier;  // guarded by lazy_mu
  // Every distinct mask computed (contexts of equal chains share one).
  mutable std::vector<std::shared_ptr<const ContextMask>> owned;  // guarded by lazy_mu
  mutable std::vector<uint8_t> failed;                            // guarded by lazy_mu
  mutable bool keep_classifier = false;                           // guarded by lazy_mu: deep masks
  // Context ctx gets no mask of its own (out of the walk's limits, or see
  // ContextClassifier::compute): its stacks get whole-stack masks, so the classifier stays.
  void leave_without_mask(uint32_t ctx) const {
    failed[ctx] = 1;
    keep_classifier = true;
    test_walk_counters.no_mask.fetch_add(1, std::memory_order_relaxed);
  }
  mutable MasksByPositions deep;  // guarded by lazy_mu
  mutable std::mutex checked_mu;
  struct Checked {
    std::vector<uint32_t> key;
    std::vector<uint32_t> accepted, refused;  // indices into the context's uncertain list
    std::vector<Token> all;                   // find_checked_all: the tokens accepted
  };
  mutable std::unordered_multimap<uint64_t, Checked> checked;  // guarded by checked_mu
  // The entry of `checked` under key (hash h), or null. Caller holds checked_mu.
  const Checked* checked_entry(const std::vector<uint32_t>& key, uint64_t h) const;
  // Keeps entry e under its key unless one is there already or the table is full. Caller
  // holds checked_mu.
  void keep_checked(Checked e) const;
  mutable size_t checked_tokens = 0;  // guarded by checked_mu
  // Per context, the levels its shared checks were kept under (a few; past that, a level
  // is kept under the whole stack).
  mutable std::unordered_map<uint32_t, std::vector<uint32_t>> checked_frames;  // checked_mu
  static constexpr size_t kMaxCheckedFrames = 32;
  mutable std::atomic<size_t> n_computed_{0};
  mutable std::atomic<size_t> masks_bytes_{0};
};

inline const ContextMask* CompiledData::mask(uint32_t ctx) const {
  if (ctx >= has_mask.size() || !has_mask[ctx]) return nullptr;
  const ContextMask* m = slots[ctx].load(std::memory_order_acquire);
  return m != nullptr ? m : compute_mask(ctx);
}

}  // namespace lacuna::detail
