// token_trie.h — the token-trie constraint: a closed set of token sequences (action names,
// enum values) as a Constraint, its JSON payload parser and its shared LRU cache.
//
// Semantics are written down in docs/token_trie.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lacuna/constraint.h"
#include "lacuna/constraint_ext.h"

namespace lacuna {

// ---- payload ------------------------------------------------------------------------------

struct TrieLeaf {
  std::string name;
  std::vector<Token> tokens;
};

struct TrieDescriptor {
  std::string path;  // informational, e.g. "action" or "parameters.fieldName"; selects a trie
  std::vector<TrieLeaf> leaves;
};

struct TriePayload {
  std::string model_id;
  std::vector<TrieDescriptor> descriptors;
};

// Limits enforced while parsing a payload; every one gives a clear error when exceeded.
struct TriePayloadLimits {
  size_t max_payload_bytes = 4u << 20;  // whole JSON text
  size_t max_nesting_depth = 16;        // arrays/objects; a valid payload needs 5
  size_t max_leaves = 200000;           // over all descriptors
  size_t max_leaf_tokens = 4096;        // tokens of one leaf
};

enum class TrieErrc {
  kTooLarge,       // payload longer than max_payload_bytes
  kTooDeep,        // nesting deeper than max_nesting_depth
  kSyntax,         // not JSON
  kSchema,         // JSON, but not the payload shape
  kEmptyLeafSet,   // no descriptors, or a descriptor without leaves
  kTokenRange,     // token id < 0 or >= n_vocab
  kDuplicate,      // duplicate leaf name, token sequence or descriptor path
  kLimit,          // too many leaves or tokens
  kModelMismatch,  // modelId differs from the caller's expected id
  kUnknownPath,    // no descriptor has the requested path
};

// Every payload problem is reported with this exception; what() names the place as a JSON
// pointer (e.g. "/descriptors/0/leaves/3/tokens/1: token id 200000 out of range [0, 128256)").
class TrieError : public std::runtime_error {
 public:
  TrieError(TrieErrc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  TrieErrc code() const { return code_; }

 private:
  TrieErrc code_;
};

// Parses and validates a payload against a vocabulary of n_vocab tokens. Throws TrieError.
TriePayload parse_trie_payload(std::string_view json, size_t n_vocab,
                               const TriePayloadLimits& limits = {});

// ---- the immutable trie ---------------------------------------------------------------------

// One descriptor's leaves as a trie of tokens. Immutable once built; shared by threads.
// Per node: its children's tokens, sorted, in one flat array (mask = clear + set those bits).
class TokenTrie {
 public:
  using NodeId = uint32_t;
  static constexpr NodeId kRoot = 0;
  static constexpr NodeId kNoNode = UINT32_MAX;

  // Throws TrieError (kEmptyLeafSet, kTokenRange, kDuplicate) on a bad descriptor.
  static std::shared_ptr<const TokenTrie> build(const TrieDescriptor& descriptor, size_t n_vocab);

  size_t n_vocab() const { return n_vocab_; }
  const std::string& path() const { return path_; }
  size_t n_nodes() const { return nodes_.size(); }
  size_t n_leaves() const { return leaf_names_.size(); }
  size_t max_depth() const { return max_depth_; }
  size_t max_children() const { return max_children_; }

  // Children of `node`, their tokens sorted ascending.
  std::span<const Token> child_tokens(NodeId node) const {
    const Node& n = nodes_[node];
    return {child_tokens_.data() + n.first_child, n.n_children};
  }
  NodeId child_node(NodeId node, size_t i) const {
    return child_nodes_[nodes_[node].first_child + i];
  }
  // The child reached by `token`, or kNoNode.
  NodeId child(NodeId node, Token token) const;
  // Index of the leaf ending at `node`, or -1.
  int32_t leaf_at(NodeId node) const { return nodes_[node].leaf; }
  const std::string& leaf_name(size_t leaf) const { return leaf_names_[leaf]; }

  // Heap bytes held by this trie (nodes, edges, names).
  size_t memory_bytes() const;

 private:
  struct Node {
    uint32_t first_child = 0;
    uint32_t n_children = 0;
    int32_t leaf = -1;
  };
  size_t n_vocab_ = 0;
  std::string path_;
  std::vector<Node> nodes_;
  std::vector<Token> child_tokens_;
  std::vector<NodeId> child_nodes_;
  std::vector<std::string> leaf_names_;
  size_t max_depth_ = 0;
  size_t max_children_ = 0;
};

// All tries of one payload.
struct TrieSet {
  std::string model_id;
  std::vector<std::shared_ptr<const TokenTrie>> tries;  // in payload order

  // The trie for `path`; the first one when path is empty. nullptr when unknown.
  std::shared_ptr<const TokenTrie> find(std::string_view path) const;
  size_t memory_bytes() const;
};

// Parses and builds every descriptor. Throws TrieError.
std::shared_ptr<const TrieSet> build_trie_set(std::string_view json, size_t n_vocab,
                                              const TriePayloadLimits& limits = {});

// ---- the cache ----------------------------------------------------------------------------

// Built trie sets keyed by a hash of (payload bytes, n_vocab): the payload bytes hold the
// modelId and the leaf sets, so identical payloads skip parsing and building. LRU with a
// fixed capacity; entries are shared_ptr (reference-counted), so an evicted trie lives on
// while a constraint still uses it. All members are safe to call from many threads.
class TrieCache {
 public:
  static constexpr size_t kDefaultCapacity = 128;

  explicit TrieCache(size_t capacity = kDefaultCapacity);
  TrieCache(const TrieCache&) = delete;
  TrieCache& operator=(const TrieCache&) = delete;

  // The process-wide cache used by the C ABI.
  static TrieCache& global();

  // Returns the cached set or parses and builds it (throws TrieError; failures are not
  // cached). Payloads over limits.max_payload_bytes fail before hashing.
  std::shared_ptr<const TrieSet> get(std::string_view json, size_t n_vocab,
                                     const TriePayloadLimits& limits = {});

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t parses = 0;  // payloads parsed (== builds attempted)
    uint64_t evictions = 0;
    size_t entries = 0;
  };
  Stats stats() const;
  size_t capacity() const { return capacity_; }
  void clear();

 private:
  struct Entry {
    std::string payload;
    size_t n_vocab;
    std::shared_ptr<const TrieSet> set;
  };
  using List = std::list<Entry>;

  size_t capacity_;
  mutable std::mutex mutex_;
  List lru_;  // front = most recently used
  std::unordered_multimap<uint64_t, List::iterator> index_;
  Stats stats_;
};

// ---- the constraint -----------------------------------------------------------------------

struct TrieOptions {
  // Tokens that end the span at a leaf node (e.g. EOS/EOT, or a closing quote). Allowed only
  // where a leaf ends; accepting one terminates the constraint. When empty, reaching a leaf
  // without children terminates at once, and a leaf that prefixes longer leaves only reports
  // is_completed() so the caller can hand over (e.g. to a grammar).
  std::vector<Token> end_tokens;
  // Safety bound: after this many tokens in the span without finishing, the constraint
  // deactivates (allows every token) and sets warning(). 0 disables the bound.
  size_t max_span_tokens = 500;
  // Token bytes; needed only for accept_bytes() and jump_forward_string().
  TokenPieceFn piece;
};

// A cursor over one trie of a TrieSet. Cheap to create and fork (shares the trie).
class TokenTrieConstraint : public Constraint, public SparseAllowed, public ByteAcceptor {
 public:
  // Selects the descriptor by `path` (empty = first). Throws TrieError(kUnknownPath).
  TokenTrieConstraint(std::shared_ptr<const TrieSet> set, TrieOptions options,
                      std::string_view path = {});

  // Switches to another descriptor of the same payload and resets. Throws TrieError
  // (kUnknownPath) and then keeps the current descriptor and state.
  void select(std::string_view path);
  const TokenTrie& trie() const { return *trie_; }
  const TrieSet& trie_set() const { return *set_; }

  // The name of the leaf ending at the current node (the chosen leaf once the span ended),
  // or nullptr when no leaf ends here.
  const std::string* chosen_leaf() const;
  bool deactivated() const { return deactivated_; }
  // Non-empty once the safety bound fired.
  const std::string& warning() const { return warning_; }
  size_t span_tokens() const { return path_.size() - 1 + (end_accepted_ ? 1 : 0) + extra_; }

  // Constraint
  size_t n_vocab() const override { return trie_->n_vocab(); }
  void fill_next_token_bitmask(uint32_t* words) override;
  bool accept_token(Token token) override;
  bool rollback(size_t n) override;
  std::unique_ptr<Constraint> fork() const override;
  void reset() override;
  bool is_completed() const override;
  bool is_terminated() const override;
  size_t forced_tokens(std::vector<Token>& out, size_t max_tokens = 64) const override;
  std::string jump_forward_string() const override;

  // SparseAllowed
  AllowedTokens allowed_tokens() override;
  // ByteAcceptor: walks child tokens whose bytes are a prefix of `bytes` (needs
  // options.piece); succeeds only when the bytes end on a token boundary in the trie.
  bool accept_bytes(std::string_view bytes) override;

 private:
  TokenTrie::NodeId node() const { return path_.back(); }
  bool is_end_token(Token t) const;
  bool terminated_at(TokenTrie::NodeId node, bool end_accepted) const;
  size_t n_allowed_at(TokenTrie::NodeId node) const;

  std::shared_ptr<const TrieSet> set_;
  std::shared_ptr<const TokenTrie> trie_;
  TrieOptions options_;
  std::vector<TokenTrie::NodeId> path_;  // path_[0] = root; one entry per accepted token
  std::vector<Token> scratch_;           // merged children + end tokens
  bool end_accepted_ = false;
  bool deactivated_ = false;
  size_t extra_ = 0;  // tokens accepted while deactivated
  std::string warning_;
};

}  // namespace lacuna
