// token_index.cpp — builds the per-vocabulary token facts and the code-point trie of tokens.
#include "lacuna/token_index.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

#include "llama.h"
#include "match/compiled_data.h"

namespace lacuna {

PartialUtf8 decode_utf8_like_llama(std::string_view bytes, PartialUtf8 start,
                                   std::vector<uint32_t>& out) {
  static const int kLookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
  const size_t base = out.size();
  size_t i = 0;
  const size_t n = bytes.size();
  auto byte_at = [&](size_t k) -> uint8_t {
    return k < n ? static_cast<uint8_t>(bytes[k]) : uint8_t{0};
  };
  uint32_t value = start.value;
  int n_remain = start.n_remain;
  // Continue a pending sequence.
  while (byte_at(i) != 0 && n_remain > 0) {
    uint8_t b = byte_at(i);
    if ((b >> 6) != 2) {
      out.resize(base);
      return {0, -1};
    }
    value = (value << 6) + (b & 0x3F);
    ++i;
    --n_remain;
  }
  if (start.n_remain > 0 && n_remain == 0) out.push_back(value);
  // Decode the rest; the last sequence may be incomplete.
  while (byte_at(i) != 0) {
    uint8_t first = byte_at(i);
    n_remain = kLookup[first >> 4] - 1;
    if (n_remain < 0) {
      out.resize(base);
      return {0, -1};
    }
    uint8_t mask = static_cast<uint8_t>((1 << (7 - n_remain)) - 1);
    value = first & mask;
    ++i;
    while (byte_at(i) != 0 && n_remain > 0) {
      value = (value << 6) + (byte_at(i) & 0x3F);
      ++i;
      --n_remain;
    }
    if (n_remain == 0) out.push_back(value);
  }
  return {value, n_remain};
}

std::string_view TokenIndex::token_bytes(Token t) const {
  if (t < 0 || static_cast<size_t>(t) >= n_vocab()) {
    throw std::out_of_range("token id " + std::to_string(t) + " outside the vocabulary");
  }
  return std::string_view(bytes_).substr(byte_off_[t], byte_off_[t + 1] - byte_off_[t]);
}

const uint32_t* TokenIndex::code_points(Token t, size_t* n) const {
  const CpSpan sp = cp_spans_[static_cast<size_t>(t)];
  *n = sp.n;
  return cps_.data() + sp.off;
}

std::optional<Token> TokenIndex::find_piece(std::string_view text) const {
  std::optional<Token> plain;
  for (size_t t = 0; t < n_vocab(); ++t) {
    if (token_bytes(static_cast<Token>(t)) != text) continue;
    if (control_[t]) return static_cast<Token>(t);
    if (!plain) plain = static_cast<Token>(t);
  }
  return plain;
}

size_t TokenIndex::memory_bytes() const {
  return sizeof(*this) + bytes_.capacity() + byte_off_.capacity() * 4 + kinds_.capacity() +
         control_.capacity() + eog_.capacity() * 4 + cps_.capacity() * 4 +
         cp_spans_.capacity() * sizeof(CpSpan) + partials_.capacity() * sizeof(PartialUtf8) +
         trie_.capacity() * sizeof(TrieNode) + trie_tokens_.capacity() * sizeof(TrieToken) +
         root_children_.capacity() * 4 +
         (root_rest_.capacity() + root_kids_.capacity()) * sizeof(RootChild) +
         subtree_chars_.capacity() * sizeof(SubtreeChars) + node_depth_.capacity() * 2 +
         (cp_groups_.capacity() + cp_pairs_.capacity()) * sizeof(NodeWithParent) +
         (cp_group_offsets_.capacity() + cp_pair_offsets_.capacity()) * 4 +
         cp_token_bits_.capacity() * 4 + high_nodes_.capacity() * sizeof(HighNode) +
         continuation_.capacity() * 4 +
         (child_offsets_.capacity() + child_nodes_.capacity() + child_cps_.capacity()) * 4 +
         control_list_.capacity() * 4 + partial_trie_tokens_.capacity() * 4;
}

std::shared_ptr<const TokenIndex> TokenIndex::build(const llama_vocab* vocab) {
  if (vocab == nullptr) throw std::invalid_argument("TokenIndex::build: null vocabulary");
  auto t0 = std::chrono::steady_clock::now();
  const int32_t n = llama_vocab_n_tokens(vocab);
  std::shared_ptr<TokenIndex> idx(new TokenIndex());
  idx->byte_off_.reserve(static_cast<size_t>(n) + 1);
  idx->byte_off_.push_back(0);
  idx->control_.resize(static_cast<size_t>(n));
  std::vector<char> buf(256);
  for (int32_t t = 0; t < n; ++t) {
    int32_t len =
        llama_token_to_piece(vocab, t, buf.data(), static_cast<int32_t>(buf.size()), 0, true);
    if (len < 0) {
      buf.resize(static_cast<size_t>(-len));
      len = llama_token_to_piece(vocab, t, buf.data(), static_cast<int32_t>(buf.size()), 0, true);
      if (len < 0)
        throw std::runtime_error("llama_token_to_piece failed for token " + std::to_string(t));
    }
    idx->bytes_.append(buf.data(), static_cast<size_t>(len));
    idx->byte_off_.push_back(static_cast<uint32_t>(idx->bytes_.size()));
    if (llama_vocab_is_eog(vocab, t)) idx->eog_.push_back(t);
    idx->control_[static_cast<size_t>(t)] = llama_vocab_is_control(vocab, t) ? 1 : 0;
  }
  idx->finish();
  detail::warm_shared_tables(idx);
  idx->build_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return idx;
}

std::shared_ptr<const TokenIndex> TokenIndex::from_pieces(std::vector<std::string> pieces,
                                                          std::vector<Token> eog,
                                                          std::vector<Token> control) {
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<TokenIndex> idx(new TokenIndex());
  idx->byte_off_.push_back(0);
  for (const auto& p : pieces) {
    idx->bytes_ += p;
    idx->byte_off_.push_back(static_cast<uint32_t>(idx->bytes_.size()));
  }
  idx->control_.assign(pieces.size(), 0);
  for (Token t : eog) {
    if (t < 0 || static_cast<size_t>(t) >= pieces.size())
      throw std::out_of_range("eog token id out of range");
    idx->eog_.push_back(t);
  }
  for (Token t : control) {
    if (t < 0 || static_cast<size_t>(t) >= pieces.size())
      throw std::out_of_range("control token id out of range");
    idx->control_[static_cast<size_t>(t)] = 1;
  }
  std::sort(idx->eog_.begin(), idx->eog_.end());
  idx->eog_.erase(std::unique(idx->eog_.begin(), idx->eog_.end()), idx->eog_.end());
  idx->finish();
  idx->build_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return idx;
}

void TokenIndex::finish() {
  shared_masks_ = std::make_shared<detail::SharedMasks>();
  const size_t n = byte_off_.size() - 1;
  kinds_.assign(n, Kind::kText);
  for (Token t : eog_) kinds_[static_cast<size_t>(t)] = Kind::kEog;
  // The code points decoded in id order (by_id[cp_off[t], cp_off[t + 1])), until the trie's
  // order is known and cps_ lays them out in it.
  std::vector<uint32_t> by_id, cp_off(1, 0);
  partials_.assign(n, {});
  for (size_t t = 0; t < n; ++t) {
    std::string_view piece = token_bytes(static_cast<Token>(t));
    if (kinds_[t] != Kind::kEog) {
      if (piece.empty() || piece[0] == '\0') {
        kinds_[t] = Kind::kNever;
      } else {
        PartialUtf8 p = decode_utf8_like_llama(piece, {}, by_id);
        partials_[t] = p;
        if (p.n_remain < 0) kinds_[t] = Kind::kInvalid;
        auto b = static_cast<uint8_t>(piece[0]);
        if ((b & 0xC0) == 0x80) continuation_.push_back(static_cast<Token>(t));
      }
    }
    cp_off.push_back(static_cast<uint32_t>(by_id.size()));
  }
  // Trie over kText tokens, sorted by (code points, partial).
  std::vector<Token> order;
  for (size_t t = 0; t < n; ++t) {
    if (kinds_[t] == Kind::kText) order.push_back(static_cast<Token>(t));
  }
  auto cp_span = [&](Token t) {
    return std::pair<const uint32_t*, const uint32_t*>(by_id.data() + cp_off[t],
                                                       by_id.data() + cp_off[t + 1]);
  };
  std::sort(order.begin(), order.end(), [&](Token a, Token b) {
    auto [a0, a1] = cp_span(a);
    auto [b0, b1] = cp_span(b);
    if (std::lexicographical_compare(a0, a1, b0, b1)) return true;
    if (std::lexicographical_compare(b0, b1, a0, a1)) return false;
    return a < b;
  });
  trie_.clear();
  trie_tokens_.clear();
  trie_.push_back({0, 0, 0, 0});
  std::vector<uint32_t> parent{0};
  std::vector<uint32_t> path{0};  // node index at each depth
  std::vector<uint32_t> path_cp;  // code point at each depth >= 1
  for (Token t : order) {
    auto [c0, c1] = cp_span(t);
    const size_t len = static_cast<size_t>(c1 - c0);
    size_t common = 0;
    while (common < path_cp.size() && common < len && path_cp[common] == c0[common]) ++common;
    while (path_cp.size() > common) {
      trie_[path.back()].end = static_cast<uint32_t>(trie_.size());
      path.pop_back();
      path_cp.pop_back();
    }
    for (size_t k = common; k < len; ++k) {
      uint32_t id = static_cast<uint32_t>(trie_.size());
      trie_.push_back({c0[k], 0, static_cast<uint32_t>(trie_tokens_.size()),
                       static_cast<uint32_t>(trie_tokens_.size())});
      parent.push_back(path.back());
      path.push_back(id);
      path_cp.push_back(c0[k]);
    }
    TrieNode& node = trie_[path.back()];
    if (node.tok_begin == node.tok_end) node.tok_begin = static_cast<uint32_t>(trie_tokens_.size());
    trie_tokens_.push_back({t, partials_[static_cast<size_t>(t)]});
    node.tok_end = static_cast<uint32_t>(trie_tokens_.size());
  }
  while (!path.empty()) {
    trie_[path.back()].end = static_cast<uint32_t>(trie_.size());
    path.pop_back();
  }
  {
    // The code points again, in trie order (then the tokens outside the trie by id).
    cps_.clear();
    cps_.reserve(by_id.size());
    cp_spans_.assign(n, CpSpan{0, 0});
    auto lay = [&](Token t) {
      auto [c0, c1] = cp_span(t);
      cp_spans_[static_cast<size_t>(t)] = {static_cast<uint32_t>(cps_.size()),
                                           static_cast<uint32_t>(c1 - c0)};
      cps_.insert(cps_.end(), c0, c1);
    };
    for (const TrieToken& tt : trie_tokens_) lay(tt.id);
    for (size_t t = 0; t < n; ++t) {
      if (kinds_[t] != Kind::kText) lay(static_cast<Token>(t));
    }
  }
  partial_trie_tokens_.clear();
  for (size_t k = 0; k < trie_tokens_.size(); ++k) {
    if (trie_tokens_[k].partial.n_remain != 0)
      partial_trie_tokens_.push_back(static_cast<uint32_t>(k));
  }
  control_list_.clear();
  for (size_t t = 0; t < n && t < control_.size(); ++t) {
    if (control_[t]) control_list_.push_back(static_cast<Token>(t));
  }
  subtree_chars_.assign(trie_.size(), SubtreeChars{{0, 0}, false, 0});
  for (size_t i = trie_.size(); i-- > 1;) {
    SubtreeChars& p = subtree_chars_[parent[i]];
    const SubtreeChars& c = subtree_chars_[i];
    p.ascii[0] |= c.ascii[0];
    p.ascii[1] |= c.ascii[1];
    p.non_ascii = p.non_ascii || c.non_ascii;
    p.height = std::max(p.height, c.height + 1);
    const uint32_t cp = trie_[i].cp;
    if (cp < 128) {
      p.ascii[cp >> 6] |= 1ull << (cp & 63);
    } else {
      p.non_ascii = true;
    }
  }
  node_depth_.assign(trie_.size(), 0);
  for (size_t i = 1; i < trie_.size(); ++i) {
    node_depth_[i] =
        static_cast<uint16_t>(std::min<uint32_t>(node_depth_[parent[i]] + 1u, 0xFFFFu));
  }
  cp_group_offsets_.assign(130, 0);
  auto group_of = [](uint32_t cp) { return cp < 128 ? cp : 128u; };
  for (size_t i = 1; i < trie_.size(); ++i) {
    if (parent[i] != 0) ++cp_group_offsets_[group_of(trie_[i].cp) + 1];
  }
  for (size_t g = 1; g < cp_group_offsets_.size(); ++g)
    cp_group_offsets_[g] += cp_group_offsets_[g - 1];
  cp_groups_.assign(cp_group_offsets_.back(), NodeWithParent{0, 0});
  {
    std::vector<uint32_t> fill(cp_group_offsets_.begin(), cp_group_offsets_.end() - 1);
    for (size_t i = 1; i < trie_.size(); ++i) {
      if (parent[i] == 0) continue;
      cp_groups_[fill[group_of(trie_[i].cp)]++] = {static_cast<uint32_t>(i), trie_[parent[i]].cp};
    }
  }
  root_children_.clear();
  for (uint32_t i = 1; i < trie_.size(); i = trie_[i].end) root_children_.push_back(i);
  root_rest_.clear();
  root_kids_.clear();
  {
    size_t k = 0;  // partial_trie_tokens_ before the child's tokens
    for (uint32_t i : root_children_) {
      const uint32_t tb = trie_[i].tok_begin;
      const uint32_t te = trie_[i].end < trie_.size() ? trie_[trie_[i].end].tok_begin
                                                      : static_cast<uint32_t>(trie_tokens_.size());
      while (k < partial_trie_tokens_.size() && partial_trie_tokens_[k] < tb) ++k;
      const bool partial = k < partial_trie_tokens_.size() && partial_trie_tokens_[k] < te;
      const SubtreeChars& sc = subtree_chars_[i];
      const RootChild rc{
          i,      trie_[i].cp, trie_[i].end, sc.height, {sc.ascii[0], sc.ascii[1]}, sc.non_ascii,
          partial};
      root_kids_.push_back(rc);
      if (trie_[i].cp < 128 || trie_[i].end != i + 1 || partial) root_rest_.push_back(rc);
    }
  }
  child_offsets_.assign(trie_.size() + 1, 0);
  child_nodes_.clear();
  child_nodes_.reserve(trie_.size());
  child_cps_.clear();
  child_cps_.reserve(trie_.size());
  for (uint32_t j = 0; j < trie_.size(); ++j) {
    child_offsets_[j] = static_cast<uint32_t>(child_nodes_.size());
    for (uint32_t c = j + 1; c < trie_[j].end; c = trie_[c].end) {
      child_nodes_.push_back(c);
      child_cps_.push_back(trie_[c].cp);
    }
  }
  child_offsets_[trie_.size()] = static_cast<uint32_t>(child_nodes_.size());
  // Last, so that the tables the walks read are laid out as before them.
  // The pairs: a counting sort of the groups' entries (each in trie order) by pair.
  cp_pair_offsets_.assign(size_t{kCpGroups} * kCpGroups + 1, 0);
  auto pair_of = [&](const NodeWithParent& e) {
    return group_of(trie_[e.node].cp) * kCpGroups + group_of(e.parent_cp);
  };
  for (const NodeWithParent& e : cp_groups_) ++cp_pair_offsets_[pair_of(e) + 1];
  for (size_t k = 1; k < cp_pair_offsets_.size(); ++k)
    cp_pair_offsets_[k] += cp_pair_offsets_[k - 1];
  cp_pairs_.assign(cp_groups_.size(), NodeWithParent{0, 0});
  {
    std::vector<uint32_t> fill(cp_pair_offsets_.begin(), cp_pair_offsets_.end() - 1);
    for (const NodeWithParent& e : cp_groups_) cp_pairs_[fill[pair_of(e)]++] = e;
  }
  high_nodes_.clear();
  for (size_t i = 1; i < trie_.size(); ++i) {
    if (trie_[i].cp < 128) continue;
    high_nodes_.push_back({trie_[i].cp, static_cast<uint32_t>(i),
                           parent[i] == 0 ? kRootParent : trie_[parent[i]].cp});
  }
  std::sort(high_nodes_.begin(), high_nodes_.end(), [](const HighNode& a, const HighNode& b) {
    return a.cp != b.cp ? a.cp < b.cp : a.node < b.node;
  });
  // Each trie token's code points, by group; then the ASCII blocks' unions.
  {
    const size_t words = (n + 31) / 32;
    cp_token_bits_.assign((size_t{kCpGroups} + 4) * words, 0);
    for (const TrieToken& t : trie_tokens_) {
      const CpSpan sp = cp_spans_[static_cast<size_t>(t.id)];
      for (uint32_t k = sp.off; k < sp.off + sp.n; ++k) {
        bitmask_set(cp_token_bits_.data() + size_t{group_of(cps_[k])} * words, t.id);
      }
    }
    for (uint32_t b = 0; b < 4; ++b) {
      uint32_t* u = cp_token_bits_.data() + (size_t{kCpGroups} + b) * words;
      for (uint32_t c = 32 * b; c < 32 * b + 32; ++c) {
        const uint32_t* g = cp_token_bits_.data() + size_t{c} * words;
        for (size_t w = 0; w < words; ++w) u[w] |= g[w];
      }
    }
  }
}

}  // namespace lacuna
