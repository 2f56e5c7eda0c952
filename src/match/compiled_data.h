// compiled_data.h — private data of a CompiledGrammar: the flattened grammar, character
// sets, persistent parse-stack pools and the per-context token classification tables.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
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
  // Stacks starting at `pos` above `parent` (pos may be an end marker: then parent's).
  void start(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out);

  size_t memory_bytes() const;
  const GrammarTables& tables() const { return *g_; }

 private:
  struct Node {
    uint32_t pos;
    uint32_t parent;
    uint32_t ctx;
    uint32_t succ_off;
    uint32_t succ_len;
  };
  bool keep_parent(uint32_t pos, uint32_t parent) const;
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
};

// The token classification of one context (a chain with a character-set top).
struct ContextMask {
  uint32_t accepted_off = 0;  // into bitset words or accepted ids
  uint32_t accepted_len = 0;
  bool accepted_bitset = false;
  uint32_t uncertain_off = 0;  // into uncertain ids
  uint32_t uncertain_len = 0;
};

struct CompiledData {
  CompileOptions options;
  std::shared_ptr<const TokenIndex> tokens;
  GrammarTables g;
  StackPool contexts;              // local pool: every context chain
  std::vector<uint32_t> ctx_mask;  // context node -> index into masks (or kNone)
  std::vector<ContextMask> masks;
  std::vector<uint32_t> bitset_words;
  std::vector<Token> accepted_ids;
  std::vector<Token> uncertain_ids;
  std::vector<uint32_t> text_tokens_bitset;  // kText tokens with >= 1 code point (for !<...>)
  std::vector<uint8_t> no_text;              // per token: 1 = control token not matched as text
  double compile_ms = 0;
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
};

}  // namespace lacuna::detail
