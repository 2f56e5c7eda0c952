// token_trie.cpp — builds the immutable TokenTrie from a descriptor (sort, then one
// breadth-first pass so every node's children sit contiguously and sorted).
#include "lacuna/token_trie.h"

#include <algorithm>
#include <numeric>

namespace lacuna {

std::shared_ptr<const TokenTrie> TokenTrie::build(const TrieDescriptor& descriptor,
                                                  size_t n_vocab) {
  const auto& leaves = descriptor.leaves;
  if (leaves.empty()) {
    throw TrieError(TrieErrc::kEmptyLeafSet,
                    "descriptor \"" + descriptor.path + "\": empty leaf set");
  }
  size_t total_tokens = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto& leaf = leaves[i];
    if (leaf.tokens.empty()) {
      throw TrieError(TrieErrc::kEmptyLeafSet, "leaf \"" + leaf.name + "\" has no tokens");
    }
    for (Token t : leaf.tokens) {
      if (t < 0 || static_cast<size_t>(t) >= n_vocab) {
        throw TrieError(TrieErrc::kTokenRange, "leaf \"" + leaf.name + "\": token id " +
                                                   std::to_string(t) + " out of range [0, " +
                                                   std::to_string(n_vocab) + ")");
      }
    }
    total_tokens += leaf.tokens.size();
  }

  std::vector<uint32_t> order(leaves.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return leaves[a].tokens < leaves[b].tokens; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (leaves[order[i - 1]].tokens == leaves[order[i]].tokens) {
      throw TrieError(TrieErrc::kDuplicate, "leaves \"" + leaves[order[i - 1]].name + "\" and \"" +
                                                leaves[order[i]].name +
                                                "\" have the same token sequence");
    }
  }

  auto trie = std::make_shared<TokenTrie>();
  trie->n_vocab_ = n_vocab;
  trie->path_ = descriptor.path;
  trie->leaf_names_.reserve(leaves.size());
  for (const auto& leaf : leaves) trie->leaf_names_.push_back(leaf.name);
  trie->nodes_.reserve(total_tokens + 1);
  trie->child_tokens_.reserve(total_tokens);
  trie->child_nodes_.reserve(total_tokens);

  // Work item: node `id` at `depth` covers sorted leaves [lo, hi), all sharing the first
  // `depth` tokens. Processed in creation order (BFS), so node ids grow with depth.
  struct Item {
    uint32_t lo, hi, depth;
  };
  std::vector<Item> items;
  items.reserve(total_tokens + 1);
  items.push_back({0, static_cast<uint32_t>(order.size()), 0});
  trie->nodes_.push_back({});
  for (size_t id = 0; id < items.size(); ++id) {
    const Item it = items[id];
    uint32_t lo = it.lo;
    // The shortest sequence sorts first; a leaf ends here iff it has exactly `depth` tokens.
    if (leaves[order[lo]].tokens.size() == it.depth) {
      trie->nodes_[id].leaf = static_cast<int32_t>(order[lo]);
      ++lo;
    }
    trie->max_depth_ = std::max<size_t>(trie->max_depth_, it.depth);
    trie->nodes_[id].first_child = static_cast<uint32_t>(trie->child_tokens_.size());
    uint32_t n_children = 0;
    while (lo < it.hi) {
      const Token t = leaves[order[lo]].tokens[it.depth];
      uint32_t hi = lo + 1;
      while (hi < it.hi && leaves[order[hi]].tokens[it.depth] == t) ++hi;
      const auto child = static_cast<NodeId>(trie->nodes_.size());
      trie->nodes_.push_back({});
      items.push_back({lo, hi, it.depth + 1});
      trie->child_tokens_.push_back(t);
      trie->child_nodes_.push_back(child);
      ++n_children;
      lo = hi;
    }
    trie->nodes_[id].n_children = n_children;
    trie->max_children_ = std::max<size_t>(trie->max_children_, n_children);
  }
  trie->nodes_.shrink_to_fit();
  trie->child_tokens_.shrink_to_fit();
  trie->child_nodes_.shrink_to_fit();
  return trie;
}

TokenTrie::NodeId TokenTrie::child(NodeId node, Token token) const {
  const auto kids = child_tokens(node);
  const auto it = std::lower_bound(kids.begin(), kids.end(), token);
  if (it == kids.end() || *it != token) return kNoNode;
  return child_node(node, static_cast<size_t>(it - kids.begin()));
}

size_t TokenTrie::memory_bytes() const {
  size_t bytes = sizeof(*this) + nodes_.capacity() * sizeof(Node) +
                 child_tokens_.capacity() * sizeof(Token) +
                 child_nodes_.capacity() * sizeof(NodeId) +
                 leaf_names_.capacity() * sizeof(std::string) + path_.capacity();
  for (const auto& name : leaf_names_) {
    if (name.capacity() > 15) bytes += name.capacity() + 1;  // beyond the small-string buffer
  }
  return bytes;
}

std::shared_ptr<const TokenTrie> TrieSet::find(std::string_view path) const {
  if (tries.empty()) return nullptr;
  if (path.empty()) return tries.front();
  for (const auto& t : tries) {
    if (t->path() == path) return t;
  }
  return nullptr;
}

size_t TrieSet::memory_bytes() const {
  size_t bytes = sizeof(*this) + model_id.capacity();
  for (const auto& t : tries) bytes += t->memory_bytes();
  return bytes;
}

std::shared_ptr<const TrieSet> build_trie_set(std::string_view json, size_t n_vocab,
                                              const TriePayloadLimits& limits) {
  TriePayload payload = parse_trie_payload(json, n_vocab, limits);
  auto set = std::make_shared<TrieSet>();
  set->model_id = std::move(payload.model_id);
  set->tries.reserve(payload.descriptors.size());
  for (size_t d = 0; d < payload.descriptors.size(); ++d) {
    try {
      set->tries.push_back(TokenTrie::build(payload.descriptors[d], n_vocab));
    } catch (const TrieError& e) {
      throw TrieError(e.code(), "/descriptors/" + std::to_string(d) + ": " + e.what());
    }
  }
  return set;
}

}  // namespace lacuna
