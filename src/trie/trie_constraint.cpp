// trie_constraint.cpp — TokenTrieConstraint: a cursor over a TokenTrie implementing
// Constraint (masks, forced chains, end tokens, safety bound, rollback, fork).
#include <algorithm>
#include <cstring>

#include "lacuna/token_trie.h"

namespace lacuna {

TokenTrieConstraint::TokenTrieConstraint(std::shared_ptr<const TrieSet> set, TrieOptions options,
                                         std::string_view path)
    : set_(std::move(set)), options_(std::move(options)) {
  if (!set_ || set_->tries.empty()) {
    throw TrieError(TrieErrc::kEmptyLeafSet, "token trie: no descriptors");
  }
  std::sort(options_.end_tokens.begin(), options_.end_tokens.end());
  options_.end_tokens.erase(std::unique(options_.end_tokens.begin(), options_.end_tokens.end()),
                            options_.end_tokens.end());
  const size_t n_vocab = set_->tries.front()->n_vocab();
  for (Token t : options_.end_tokens) {
    if (t < 0 || static_cast<size_t>(t) >= n_vocab) {
      throw TrieError(
          TrieErrc::kTokenRange,
          "end token " + std::to_string(t) + " out of range [0, " + std::to_string(n_vocab) + ")");
    }
  }
  select(path);
}

void TokenTrieConstraint::select(std::string_view path) {
  auto trie = set_->find(path);
  if (!trie) {
    std::string known;
    for (const auto& t : set_->tries) known += (known.empty() ? "\"" : ", \"") + t->path() + "\"";
    throw TrieError(TrieErrc::kUnknownPath,
                    "no descriptor with path \"" + std::string(path) + "\" (known: " + known + ")");
  }
  trie_ = std::move(trie);
  path_.clear();
  path_.reserve(trie_->max_depth() + 1);
  scratch_.clear();
  scratch_.reserve(trie_->max_children() + options_.end_tokens.size());
  reset();
}

const std::string* TokenTrieConstraint::chosen_leaf() const {
  const int32_t leaf = trie_->leaf_at(node());
  return leaf < 0 ? nullptr : &trie_->leaf_name(static_cast<size_t>(leaf));
}

bool TokenTrieConstraint::is_end_token(Token t) const {
  return std::binary_search(options_.end_tokens.begin(), options_.end_tokens.end(), t);
}

bool TokenTrieConstraint::terminated_at(TokenTrie::NodeId n, bool end_accepted) const {
  if (end_accepted) return true;
  return options_.end_tokens.empty() && trie_->leaf_at(n) >= 0 && trie_->child_tokens(n).empty();
}

// Size of the union of the children and (at a leaf) the end tokens.
size_t TokenTrieConstraint::n_allowed_at(TokenTrie::NodeId n) const {
  const auto kids = trie_->child_tokens(n);
  if (trie_->leaf_at(n) < 0) return kids.size();
  size_t count = kids.size();
  for (Token t : options_.end_tokens) {
    if (!std::binary_search(kids.begin(), kids.end(), t)) ++count;
  }
  return count;
}

void TokenTrieConstraint::fill_next_token_bitmask(uint32_t* words) {
  const size_t n_words = bitmask_words(trie_->n_vocab());
  if (deactivated_) {
    std::memset(words, 0xff, n_words * sizeof(uint32_t));
    const size_t tail = trie_->n_vocab() % 32;
    if (tail != 0) words[n_words - 1] = (1u << tail) - 1u;
    return;
  }
  std::memset(words, 0, n_words * sizeof(uint32_t));
  if (is_terminated()) return;
  for (Token t : trie_->child_tokens(node())) bitmask_set(words, t);
  if (trie_->leaf_at(node()) >= 0) {
    for (Token t : options_.end_tokens) bitmask_set(words, t);
  }
}

AllowedTokens TokenTrieConstraint::allowed_tokens() {
  if (deactivated_) return {AllowedTokens::Kind::kAll, nullptr, 0};
  if (is_terminated()) return {AllowedTokens::Kind::kList, nullptr, 0};
  const auto kids = trie_->child_tokens(node());
  if (trie_->leaf_at(node()) < 0 || options_.end_tokens.empty()) {
    return {AllowedTokens::Kind::kList, kids.data(), kids.size()};
  }
  scratch_.clear();
  std::set_union(kids.begin(), kids.end(), options_.end_tokens.begin(), options_.end_tokens.end(),
                 std::back_inserter(scratch_));
  return {AllowedTokens::Kind::kList, scratch_.data(), scratch_.size()};
}

bool TokenTrieConstraint::accept_token(Token token) {
  if (deactivated_) {
    ++extra_;
    return true;
  }
  if (is_terminated()) return false;
  const TokenTrie::NodeId next = trie_->child(node(), token);
  if (next != TokenTrie::kNoNode) {
    path_.push_back(next);
  } else if (trie_->leaf_at(node()) >= 0 && is_end_token(token)) {
    end_accepted_ = true;
  } else {
    return false;
  }
  if (options_.max_span_tokens != 0 && span_tokens() >= options_.max_span_tokens &&
      !is_terminated()) {
    deactivated_ = true;
    warning_ = "token trie \"" + trie_->path() + "\": no leaf finished after " +
               std::to_string(span_tokens()) +
               " tokens (max_span_tokens); the constraint deactivated and allows every token";
  }
  return true;
}

bool TokenTrieConstraint::rollback(size_t n) {
  if (n > span_tokens()) return false;
  if (deactivated_) {
    const size_t k = std::min(n, extra_);
    extra_ -= k;
    n -= k;
    if (n == 0) return true;
    deactivated_ = false;  // rolling back the token that hit the bound
  }
  if (end_accepted_ && n > 0) {
    end_accepted_ = false;
    --n;
  }
  path_.resize(path_.size() - n);
  return true;
}

std::unique_ptr<Constraint> TokenTrieConstraint::fork() const {
  auto copy = std::make_unique<TokenTrieConstraint>(*this);
  copy->path_.reserve(trie_->max_depth() + 1);
  copy->scratch_.reserve(trie_->max_children() + options_.end_tokens.size());
  return copy;
}

void TokenTrieConstraint::reset() {
  path_.clear();
  path_.push_back(TokenTrie::kRoot);
  end_accepted_ = false;
  deactivated_ = false;
  extra_ = 0;
  warning_.clear();
}

bool TokenTrieConstraint::is_completed() const {
  return deactivated_ || end_accepted_ || trie_->leaf_at(node()) >= 0;
}

bool TokenTrieConstraint::is_terminated() const {
  return !deactivated_ && terminated_at(node(), end_accepted_);
}

size_t TokenTrieConstraint::forced_tokens(std::vector<Token>& out, size_t max_tokens) const {
  if (deactivated_) return 0;
  size_t appended = 0;
  TokenTrie::NodeId n = node();
  while (appended < max_tokens && !terminated_at(n, false) && !(end_accepted_)) {
    if (n_allowed_at(n) != 1) break;
    const auto kids = trie_->child_tokens(n);
    if (!kids.empty()) {
      out.push_back(kids[0]);
      n = trie_->child_node(n, 0);
      ++appended;
    } else {  // a leaf without children and exactly one end token
      out.push_back(options_.end_tokens[0]);
      ++appended;
      break;
    }
  }
  return appended;
}

std::string TokenTrieConstraint::jump_forward_string() const {
  if (!options_.piece) return {};
  std::vector<Token> forced;
  forced_tokens(forced, trie_->max_depth() + 1);
  std::string out, piece;
  for (Token t : forced) {
    if (is_end_token(t)) break;
    options_.piece(t, piece);
    out += piece;
  }
  return out;
}

bool TokenTrieConstraint::accept_bytes(std::string_view bytes) {
  if (bytes.empty()) return true;
  if (deactivated_) return true;
  if (!options_.piece || is_terminated()) return false;
  // Depth-first search over children whose bytes prefix the rest; explicit stack.
  struct Frame {
    TokenTrie::NodeId node;
    size_t offset;
    size_t next_child;
  };
  std::vector<Frame> stack{{node(), 0, 0}};
  std::string piece;
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.offset == bytes.size()) {
      for (size_t i = 1; i < stack.size(); ++i) path_.push_back(stack[i].node);
      return true;
    }
    const auto kids = trie_->child_tokens(f.node);
    if (f.next_child >= kids.size()) {
      stack.pop_back();
      continue;
    }
    const size_t i = f.next_child++;
    options_.piece(kids[i], piece);
    const std::string_view rest = bytes.substr(f.offset);
    if (!piece.empty() && rest.substr(0, piece.size()) == piece) {
      const Frame child{trie_->child_node(f.node, i), f.offset + piece.size(), 0};
      stack.push_back(child);
    }
  }
  return false;
}

}  // namespace lacuna
