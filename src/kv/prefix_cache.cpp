// prefix_cache.cpp — in-memory prefix cache: a tree of chained token blocks whose KV lives in
// reserved "holder" sequences of a unified KV cache; LRU eviction of unpinned leaves.
#include <algorithm>
#include <string>

#include "lacuna/kv.h"
#include "lacuna/log.h"

namespace lacuna::kv {

PrefixCache::PrefixCache(llama_context* ctx, std::vector<SeqId> holder_seqs, uint32_t block_size,
                         size_t max_cached_tokens)
    : ctx_(ctx), mem_(nullptr), block_size_(block_size), max_tokens_(max_cached_tokens) {
  if (ctx_ == nullptr) throw KvError("PrefixCache: null context");
  if (block_size_ == 0) throw KvError("PrefixCache: block size must be > 0");
  if (holder_seqs.empty()) throw KvError("PrefixCache: needs at least one holder sequence");
  mem_ = llama_get_memory(ctx_);
  if (mem_ == nullptr) throw KvError("PrefixCache: the context has no memory");
  const llama_model* model = llama_get_model(ctx_);
  if (llama_model_is_recurrent(model) || llama_model_is_hybrid(model)) {
    throw KvError(
        "PrefixCache: recurrent/hybrid memory cannot keep partial prefixes; use Session "
        "without a prefix cache");
  }
  const auto n_seq = static_cast<SeqId>(llama_n_seq_max(ctx_));
  std::sort(holder_seqs.begin(), holder_seqs.end());
  if (std::adjacent_find(holder_seqs.begin(), holder_seqs.end()) != holder_seqs.end()) {
    throw KvError("PrefixCache: holder sequence ids must be distinct");
  }
  for (SeqId s : holder_seqs) {
    if (s < 0 || s >= n_seq) {
      throw KvError("PrefixCache: holder sequence " + std::to_string(s) + " is outside [0, " +
                    std::to_string(n_seq) + ")");
    }
    llama_memory_seq_rm(mem_, s, -1, -1);
    holders_.push_back(Holder{s, -1});
  }
  // A unified KV cache stores one stream: the state of an empty sequence is then
  // magic + seq id + n_stream + one zero cell count = 16 bytes. Sequences in different
  // streams cannot share cells, and copying a part of one is not supported.
  if (n_seq > 1 && llama_state_seq_get_size(ctx_, holders_.front().seq) != 16) {
    throw KvError(
        "PrefixCache: the context's KV cache is not unified (set "
        "llama_context_params::kv_unified = true)");
  }
  if (max_tokens_ == 0) max_tokens_ = llama_n_ctx(ctx_) / 2;
  root_ = root_hash(block_size_, 0);
}

PrefixCache::~PrefixCache() {
  for (const Holder& h : holders_) llama_memory_seq_rm(mem_, h.seq, -1, -1);
}

bool PrefixCache::owns_seq(SeqId s) const {
  return std::any_of(holders_.begin(), holders_.end(), [s](const Holder& h) { return h.seq == s; });
}

PrefixCache::Holder* PrefixCache::holder_of(SeqId s) {
  for (Holder& h : holders_) {
    if (h.seq == s) return &h;
  }
  return nullptr;
}

PrefixCache::Holder* PrefixCache::free_holder() {
  for (Holder& h : holders_) {
    if (h.tip < 0) return &h;
  }
  return nullptr;
}

int32_t PrefixCache::find_child(int32_t parent, BlockHash h, std::span<const Token> block) const {
  const auto it = by_hash_.find(h);
  if (it == by_hash_.end()) return -1;
  const Node& n = nodes_[static_cast<size_t>(it->second)];
  // A hash collision (different parent or tokens) is a miss.
  if (n.parent != parent) return -1;
  if (!std::equal(n.tokens.begin(), n.tokens.end(), block.begin(), block.end())) return -1;
  return it->second;
}

PrefixCache::Match PrefixCache::lookup(std::span<const Token> tokens, size_t max_tokens) {
  Match m;
  const size_t limit = std::min(tokens.size(), max_tokens) / block_size_;
  BlockHash h = root_;
  int32_t parent = -1;
  ++clock_;
  for (size_t i = 0; i < limit; ++i) {
    const auto block = tokens.subspan(i * block_size_, block_size_);
    h = chain_block(h, block);
    const int32_t child = find_child(parent, h, block);
    if (child < 0) break;
    nodes_[static_cast<size_t>(child)].last_use = clock_;
    parent = child;
  }
  if (parent >= 0) {
    const Node& n = nodes_[static_cast<size_t>(parent)];
    m.node = parent;
    m.n_tokens = static_cast<size_t>(n.depth + 1) * block_size_;
    m.holder = n.holder;
  }
  return m;
}

void PrefixCache::copy_to(const Match& m, SeqId dst, Pos from) {
  if (m.node < 0 || static_cast<size_t>(from) >= m.n_tokens) return;
  if (owns_seq(dst)) throw KvError("PrefixCache::copy_to: destination is a holder sequence");
  llama_memory_seq_cp(mem_, m.holder, dst, from, static_cast<Pos>(m.n_tokens));
}

int32_t PrefixCache::new_node() {
  int32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[static_cast<size_t>(id)];
  n = Node{};
  n.live = true;
  ++n_nodes_;
  return id;
}

int32_t PrefixCache::insert(std::span<const Token> tokens, SeqId src) {
  if (owns_seq(src)) throw KvError("PrefixCache::insert: source is a holder sequence");
  size_t n_blocks = tokens.size() / block_size_;
  if (n_blocks == 0) return -1;
  ++clock_;
  // Walk what is already cached.
  BlockHash h = root_;
  int32_t parent = -1;
  size_t i = 0;
  for (; i < n_blocks; ++i) {
    const auto block = tokens.subspan(i * block_size_, block_size_);
    const BlockHash hc = chain_block(h, block);
    const int32_t child = find_child(parent, hc, block);
    if (child < 0) break;
    nodes_[static_cast<size_t>(child)].last_use = clock_;
    parent = child;
    h = hc;
  }
  if (i == n_blocks) return parent;
  // A hash that is present but did not verify is a collision: do not cache past it.
  {
    const auto block = tokens.subspan(i * block_size_, block_size_);
    if (by_hash_.count(chain_block(h, block)) != 0) return parent;
  }
  // Keep room for the new blocks: the budget counts tokens; pinning protects the parent.
  if (parent >= 0) pin(parent);
  size_t new_tokens = (n_blocks - i) * block_size_;
  evict_to(max_tokens_ > new_tokens ? max_tokens_ - new_tokens : 0);
  // Pinned paths may keep the cache above that: then cache only the blocks that fit.
  const size_t room = max_tokens_ > cached_tokens() ? max_tokens_ - cached_tokens() : 0;
  if (new_tokens > room) {
    n_blocks = i + room / block_size_;
    new_tokens = (n_blocks - i) * block_size_;
  }
  if (n_blocks == i) {
    if (parent >= 0) unpin(parent);
    return parent;
  }
  // Choose the holder: extend the parent's holder when the parent is its tip, else a free one.
  Holder* holder = nullptr;
  if (parent >= 0) {
    Holder* ph = holder_of(nodes_[static_cast<size_t>(parent)].holder);
    if (ph != nullptr && ph->tip == parent) holder = ph;
  }
  while (holder == nullptr) {
    holder = free_holder();
    if (holder != nullptr) break;
    if (!evict_one()) break;
  }
  if (parent >= 0) unpin(parent);
  if (holder == nullptr) {
    log_message(LogLevel::debug, "prefix cache: no free holder sequence, not caching");
    return parent;
  }
  const Pos from = holder->tip == parent && parent >= 0 ? static_cast<Pos>(i * block_size_) : 0;
  if (holder->tip < 0) llama_memory_seq_rm(mem_, holder->seq, -1, -1);
  llama_memory_seq_cp(mem_, src, holder->seq, from, static_cast<Pos>(n_blocks * block_size_));
  for (; i < n_blocks; ++i) {
    const auto block = tokens.subspan(i * block_size_, block_size_);
    h = chain_block(h, block);
    const int32_t id = new_node();
    Node& n = nodes_[static_cast<size_t>(id)];
    n.hash = h;
    n.parent = parent;
    n.depth = static_cast<uint32_t>(i);
    n.holder = holder->seq;
    n.last_use = clock_;
    n.tokens.assign(block.begin(), block.end());
    if (parent >= 0) ++nodes_[static_cast<size_t>(parent)].n_children;
    by_hash_.emplace(h, id);
    parent = id;
  }
  holder->tip = parent;
  return parent;
}

void PrefixCache::pin(int32_t node) {
  if (node < 0 || static_cast<size_t>(node) >= nodes_.size() || !nodes_[node].live) {
    throw KvError("PrefixCache::pin: no such node");
  }
  ++nodes_[static_cast<size_t>(node)].refs;
}

void PrefixCache::unpin(int32_t node) {
  if (node < 0 || static_cast<size_t>(node) >= nodes_.size() || !nodes_[node].live ||
      nodes_[node].refs == 0) {
    throw KvError("PrefixCache::unpin: node is not pinned");
  }
  --nodes_[static_cast<size_t>(node)].refs;
}

bool PrefixCache::evict_one() {
  int32_t victim = -1;
  uint64_t oldest = UINT64_MAX;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.live || n.n_children != 0 || n.refs != 0) continue;
    if (n.last_use < oldest) {
      oldest = n.last_use;
      victim = static_cast<int32_t>(i);
    }
  }
  if (victim < 0) return false;
  evict_node(victim);
  return true;
}

void PrefixCache::evict_node(int32_t victim) {
  Node& n = nodes_[static_cast<size_t>(victim)];
  Holder* h = holder_of(n.holder);
  const int32_t parent = n.parent;
  if (h != nullptr) {
    if (parent >= 0 && nodes_[static_cast<size_t>(parent)].holder == h->seq) {
      llama_memory_seq_rm(mem_, h->seq, static_cast<Pos>(n.depth * block_size_), -1);
      h->tip = parent;
    } else {
      llama_memory_seq_rm(mem_, h->seq, -1, -1);
      h->tip = -1;
    }
  }
  if (parent >= 0) --nodes_[static_cast<size_t>(parent)].n_children;
  by_hash_.erase(n.hash);
  n.live = false;
  n.tokens.clear();
  n.tokens.shrink_to_fit();
  free_nodes_.push_back(victim);
  --n_nodes_;
}

bool PrefixCache::forget_from(std::span<const Token> tokens, size_t from_block) {
  // Find the node of block `from_block` on tokens' path.
  const size_t n_blocks = tokens.size() / block_size_;
  if (from_block >= n_blocks) return true;
  BlockHash h = root_;
  int32_t node = -1;
  for (size_t i = 0; i <= from_block; ++i) {
    const auto block = tokens.subspan(i * block_size_, block_size_);
    h = chain_block(h, block);
    node = find_child(node, h, block);
    if (node < 0) return true;  // not cached
  }
  // The subtree below it (a node is inside when its parent chain reaches `node`).
  std::vector<int32_t> sub;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].live) continue;
    for (int32_t p = static_cast<int32_t>(i); p >= 0; p = nodes_[static_cast<size_t>(p)].parent) {
      if (p == node) {
        sub.push_back(static_cast<int32_t>(i));
        break;
      }
      if (nodes_[static_cast<size_t>(p)].depth <= nodes_[static_cast<size_t>(node)].depth) break;
    }
  }
  for (int32_t x : sub) {
    if (nodes_[static_cast<size_t>(x)].refs != 0) return false;
  }
  // Evict deepest first, so each victim is a leaf.
  std::sort(sub.begin(), sub.end(), [this](int32_t a, int32_t b) {
    return nodes_[static_cast<size_t>(a)].depth > nodes_[static_cast<size_t>(b)].depth;
  });
  for (int32_t x : sub) evict_node(x);
  return true;
}

size_t PrefixCache::evict_to(size_t target_tokens) {
  size_t freed = 0;
  while (cached_tokens() > target_tokens && evict_one()) freed += block_size_;
  return freed;
}

void PrefixCache::clear() {
  evict_to(0);
}

size_t PrefixCache::index_bytes() const {
  size_t bytes = sizeof(*this) + nodes_.capacity() * sizeof(Node) +
                 free_nodes_.capacity() * sizeof(int32_t) + holders_.capacity() * sizeof(Holder);
  for (const Node& n : nodes_) bytes += n.tokens.capacity() * sizeof(Token);
  // unordered_map: one heap node (key, value, next pointer, cached hash) per entry + buckets.
  bytes += by_hash_.size() * (sizeof(BlockHash) + sizeof(int32_t) + 2 * sizeof(void*)) +
           by_hash_.bucket_count() * sizeof(void*);
  return bytes;
}

}  // namespace lacuna::kv
