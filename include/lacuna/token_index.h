// token_index.h — the bytes, decoded code points and a code-point trie of every token of a
// vocabulary: built once per vocabulary, immutable, shared across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lacuna/constraint.h"

struct llama_vocab;

namespace lacuna {

namespace detail {
struct SharedMasks;
}

// An incomplete UTF-8 sequence at the end of some bytes, as llama.cpp's grammar keeps it:
// `value` holds the bits seen so far, `n_remain` the continuation bytes still expected
// (0: none pending; -1: the bytes were not valid UTF-8).
struct PartialUtf8 {
  uint32_t value = 0;
  int32_t n_remain = 0;
  bool operator==(const PartialUtf8&) const = default;
};

// Decodes bytes to code points exactly as llama.cpp's grammar does (stops at a NUL byte,
// continues `start`). On invalid input returns no code points and n_remain = -1.
// Appends to `out`; returns the partial sequence left at the end.
PartialUtf8 decode_utf8_like_llama(std::string_view bytes, PartialUtf8 start,
                                   std::vector<uint32_t>& out);

class TokenIndex {
 public:
  enum class Kind : uint8_t {
    kText,     // matched by its code points
    kEog,      // end of generation (EOS, EOT, ...): allowed where the grammar may end
    kNever,    // empty piece or a piece starting with a NUL byte: never allowed
    kInvalid,  // not valid UTF-8 from a code-point boundary (allowed only to complete a
               // pending partial sequence)
  };

  // One node of the code-point trie, in preorder. Children of node i start at i + 1;
  // the subtree of node i ends (exclusive) at `end`.
  struct TrieNode {
    uint32_t cp;
    uint32_t end;
    uint32_t tok_begin;  // tokens whose code points end here: trie_tokens()[tok_begin, tok_end)
    uint32_t tok_end;
  };
  struct TrieToken {
    Token id;
    PartialUtf8 partial;  // bytes after the last full code point
  };

  // Reads every token's piece with llama_token_to_piece(special = true), as llama.cpp's
  // grammar sampler does, and its end-of-generation flag.
  static std::shared_ptr<const TokenIndex> build(const llama_vocab* vocab);

  // A synthetic vocabulary (tests, fuzzers): token i has bytes pieces[i].
  static std::shared_ptr<const TokenIndex> from_pieces(std::vector<std::string> pieces,
                                                       std::vector<Token> eog = {},
                                                       std::vector<Token> control = {});

  size_t n_vocab() const { return kinds_.size(); }
  std::string_view token_bytes(Token t) const;
  Kind kind(Token t) const { return kinds_.at(static_cast<size_t>(t)); }
  bool is_eog(Token t) const { return kind(t) == Kind::kEog; }
  bool is_control(Token t) const { return control_.at(static_cast<size_t>(t)) != 0; }
  const std::vector<Token>& eog_tokens() const { return eog_; }

  // Code points of token t decoded from a code-point boundary, and what is left partial.
  const uint32_t* code_points(Token t, size_t* n) const;
  // A hint for a loop over tokens whose ids lie at random (trie order): where token t's
  // code points are, and its partial tail, are read soon.
  void prefetch_token(Token t) const {
    __builtin_prefetch(cp_spans_.data() + static_cast<size_t>(t));
    __builtin_prefetch(partials_.data() + static_cast<size_t>(t));
  }
  PartialUtf8 partial(Token t) const { return partials_[static_cast<size_t>(t)]; }

  // The token whose piece is exactly `text` (control/special tokens first), if any.
  std::optional<Token> find_piece(std::string_view text) const;

  // The trie over all kText tokens (node 0 is the root, cp unused).
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<TrieToken>& trie_tokens() const { return trie_tokens_; }
  // For each trie node: the code points of its descendants (not its own), as an ASCII
  // bitmap and a flag for any code point >= 128, and the subtree's height. Lets a walk accept a
  // whole subtree at once.
  struct SubtreeChars {
    uint64_t ascii[2];
    bool non_ascii;
    uint32_t height;  // most code points on a path below the node (0 for a leaf)
  };
  const std::vector<SubtreeChars>& subtree_chars() const { return subtree_chars_; }
  // For each trie node: its depth (code points from the root; the root is 0).
  const std::vector<uint16_t>& node_depth() const { return node_depth_; }
  // The trie nodes at depth 2 or more grouped by code point: an ASCII code point c in group
  // c, every other one in group 128; each group in trie order, with its parent's code point.
  // Group g is cp_groups()[cp_group_offsets()[g] .. cp_group_offsets()[g + 1]).
  struct NodeWithParent {
    uint32_t node;
    uint32_t parent_cp;
  };
  const std::vector<NodeWithParent>& cp_groups() const { return cp_groups_; }
  const std::vector<uint32_t>& cp_group_offsets() const { return cp_group_offsets_; }
  // The same nodes grouped by their code point's group g and then their parent's group pg:
  // pair (g, pg) is cp_pairs()[cp_pair_offsets()[g * kCpGroups + pg] .. (that + 1)], each
  // in trie order. A class's exits (the nodes outside it whose parent is inside it) are whole
  // pairs, so finding them reads the exits alone: a string's characters less the lowercase
  // letters has 13,000 exits, where the groups of the code points it leaves out hold 190,000
  // nodes (llama-bpe).
  static constexpr uint32_t kCpGroups = 129;
  const std::vector<NodeWithParent>& cp_pairs() const { return cp_pairs_; }
  const std::vector<uint32_t>& cp_pair_offsets() const { return cp_pair_offsets_; }
  // Every trie node whose code point is >= 128, sorted by code point (then node), with its
  // parent's code point (kRootParent for a root child): the nodes of a class's holes (a
  // regex `.` leaves out U+2028 and U+2029) found by a binary search, where scanning group
  // 128 read the trie node of each of its entries.
  static constexpr uint32_t kRootParent = ~uint32_t{0};
  struct HighNode {
    uint32_t cp;
    uint32_t node;
    uint32_t parent_cp;
  };
  const std::vector<HighNode>& high_nodes() const { return high_nodes_; }
  // The trie's tokens with a code point of group g (as above), as a bitmask over the
  // vocabulary (bitmask_words(n_vocab()) words); g = kCpGroups + b for b < 4: the union of
  // the groups of ASCII block b (code points 32b .. 32b + 31). The tokens of a class are the
  // text tokens less those of the groups outside it: a few hundred kilobytes read, where
  // clearing the tokens below each of the class's exits missed the cache twice an exit.
  const uint32_t* cp_token_bits(uint32_t g) const {
    return cp_token_bits_.data() + size_t{g} * ((n_vocab() + 31) / 32);
  }
  // Indices of the root's children, sorted by code point.
  const std::vector<uint32_t>& root_children() const { return root_children_; }
  // A root child with what a walk from the root reads of it first, in one place: a context
  // whose first code point is a broad class visits thousands of them, and reading each
  // one's node, subtree summary and the next node's first token missed the cache three
  // times (a tenth of a schema's first-key mask).
  struct RootChild {
    uint32_t node;
    uint32_t cp;
    uint32_t end;       // trie()[node].end
    uint32_t height;    // subtree_chars()[node].height
    uint64_t ascii[2];  // subtree_chars()[node].ascii
    bool non_ascii;     // subtree_chars()[node].non_ascii
    bool partial;       // a token of the subtree (its own included) has a partial UTF-8 tail
  };
  // Every root child, and the same less the leaves of a code point >= 128 whose tokens have
  // no partial UTF-8 tail (qwen2 and gemma-4 have 10,000-20,000 of them: CJK characters,
  // symbols), which a walk whose cover takes every code point from 128 on need not visit.
  // Both sorted by code point.
  const std::vector<RootChild>& root_kids() const { return root_kids_; }
  const std::vector<RootChild>& root_kids_but_high_leaves() const { return root_rest_; }
  // Children of every node, sorted by code point: those of node j are
  // child_nodes()[child_offsets()[j] .. child_offsets()[j + 1]).
  const std::vector<uint32_t>& child_offsets() const { return child_offsets_; }
  const std::vector<uint32_t>& child_nodes() const { return child_nodes_; }
  // The code point of each child_nodes() entry, beside it: a search for a child by code
  // point reads this array, where reading each candidate's trie node missed the cache (a
  // literal followed down the trie: a quarter of a walk's own time in first-key masks).
  const std::vector<uint32_t>& child_cps() const { return child_cps_; }
  // kText/kInvalid tokens whose first byte is a UTF-8 continuation byte (0x80-0xBF): the
  // only tokens that can follow a token ending in a partial sequence.
  const std::vector<Token>& continuation_tokens() const { return continuation_; }
  // Control tokens, sorted.
  const std::vector<Token>& control_tokens() const { return control_list_; }
  // Indices into trie_tokens() of the tokens with a partial UTF-8 tail, ascending.
  const std::vector<uint32_t>& partial_trie_tokens() const { return partial_trie_tokens_; }

  double build_ms() const { return build_ms_; }
  size_t memory_bytes() const;

  // Token classes shared by every grammar compiled against this index (matcher internals;
  // thread-safe).
  detail::SharedMasks& shared_masks() const { return *shared_masks_; }

 private:
  TokenIndex() = default;
  void finish();

  std::string bytes_;
  std::vector<uint32_t> byte_off_;  // n_vocab + 1
  std::vector<Kind> kinds_;
  std::vector<uint8_t> control_;
  std::vector<Token> eog_;
  // Every token's code points, laid out in trie order (the tokens outside the trie after
  // them): the walks read them along the trie's tokens, whose ids lie at random.
  std::vector<uint32_t> cps_;
  struct CpSpan {
    uint32_t off, n;
  };
  std::vector<CpSpan> cp_spans_;  // by token id
  std::vector<PartialUtf8> partials_;
  std::vector<TrieNode> trie_;
  std::vector<TrieToken> trie_tokens_;
  std::vector<uint32_t> root_children_;
  std::vector<RootChild> root_rest_;
  std::vector<RootChild> root_kids_;
  std::vector<uint32_t> child_offsets_;
  std::vector<uint32_t> child_nodes_;
  std::vector<uint32_t> child_cps_;
  std::vector<SubtreeChars> subtree_chars_;
  std::vector<uint16_t> node_depth_;
  std::vector<NodeWithParent> cp_groups_;
  std::vector<uint32_t> cp_group_offsets_;
  std::vector<NodeWithParent> cp_pairs_;
  std::vector<uint32_t> cp_pair_offsets_;
  std::vector<uint32_t> cp_token_bits_;
  std::vector<HighNode> high_nodes_;
  std::vector<Token> continuation_;
  std::vector<Token> control_list_;
  std::vector<uint32_t> partial_trie_tokens_;
  double build_ms_ = 0;
  std::shared_ptr<detail::SharedMasks> shared_masks_;
};

}  // namespace lacuna
