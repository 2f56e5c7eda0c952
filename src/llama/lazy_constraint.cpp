// lazy_constraint.cpp — LazyConstraint: lets every token through until a trigger word, token
// or regex appears in the output, then hands the text after the trigger to the inner
// constraint and constrains from there.
#include <algorithm>
#include <cstring>
#include <stdexcept>

// g++ 12 with -fsanitize=address at -O2 reports -Wmaybe-uninitialized inside libstdc++'s
// <regex> automaton (a known false positive); keep -Werror builds with sanitizers working.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>

#include "lacuna/matcher.h"
#include "lacuna/sampler.h"

namespace lacuna {

struct LazyConstraint::Shared {
  std::vector<std::string> words;
  std::vector<Token> tokens;  // sorted
  struct Pattern {
    std::string text;
    std::regex regex;
    bool whole = false;  // ^...$: must match the whole buffer
  };
  std::vector<Pattern> patterns;
  size_t max_buffer_bytes = 0;
};

LazyConstraint::LazyConstraint(std::unique_ptr<Constraint> inner, LazyTriggers triggers,
                               TokenPieceFn piece)
    : inner_(std::move(inner)), piece_(std::move(piece)) {
  if (!inner_) throw std::invalid_argument("lazy constraint: null inner constraint");
  if (triggers.words.empty() && triggers.tokens.empty() && triggers.patterns.empty()) {
    throw std::invalid_argument("lazy constraint: no trigger words, tokens or patterns");
  }
  if ((!triggers.words.empty() || !triggers.patterns.empty()) && !piece_) {
    throw std::invalid_argument("lazy constraint: trigger words and patterns need token bytes");
  }
  auto shared = std::make_shared<Shared>();
  size_t longest = 0;
  for (size_t i = 0; i < triggers.words.size(); ++i) {
    if (triggers.words[i].empty()) {
      throw std::invalid_argument("lazy constraint: trigger word " + std::to_string(i) +
                                  " is empty");
    }
    longest = std::max(longest, triggers.words[i].size());
  }
  if (triggers.max_buffer_bytes < longest) {
    throw std::invalid_argument(
        "lazy constraint: max_buffer_bytes (" + std::to_string(triggers.max_buffer_bytes) +
        ") is shorter than the longest trigger word (" + std::to_string(longest) + ")");
  }
  for (Token t : triggers.tokens) {
    if (t < 0 || static_cast<size_t>(t) >= inner_->n_vocab()) {
      throw std::invalid_argument("lazy constraint: trigger token " + std::to_string(t) +
                                  " out of range [0, " + std::to_string(inner_->n_vocab()) + ")");
    }
  }
  for (const auto& p : triggers.patterns) {
    Shared::Pattern pat;
    pat.text = p;
    try {
      pat.regex = std::regex(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw std::invalid_argument("lazy constraint: invalid trigger pattern \"" + p +
                                  "\": " + e.what());
    }
    pat.whole = p.size() >= 2 && p.front() == '^' && p.back() == '$';
    shared->patterns.push_back(std::move(pat));
  }
  shared->words = std::move(triggers.words);
  shared->tokens = std::move(triggers.tokens);
  std::sort(shared->tokens.begin(), shared->tokens.end());
  shared->max_buffer_bytes = triggers.max_buffer_bytes;
  shared_ = std::move(shared);
  inner_sparse_ = dynamic_cast<SparseAllowed*>(inner_.get());
  buffer_.reserve(std::min<size_t>(shared_->max_buffer_bytes * 2, 1u << 16));
  history_.reserve(256);
}

LazyConstraint::LazyConstraint(const LazyConstraint& other)
    : inner_(other.inner_->fork()),
      shared_(other.shared_),
      piece_(other.piece_),
      active_(other.active_),
      buffer_(other.buffer_),
      buffer_base_(other.buffer_base_),
      history_(other.history_),
      n_inner_(other.n_inner_),
      last_error_(other.last_error_) {
  inner_sparse_ = dynamic_cast<SparseAllowed*>(inner_.get());
}

void LazyConstraint::fill_next_token_bitmask(uint32_t* words) {
  if (active_) {
    inner_->fill_next_token_bitmask(words);
    return;
  }
  const size_t n_vocab = inner_->n_vocab();
  const size_t n_words = bitmask_words(n_vocab);
  std::memset(words, 0xff, n_words * sizeof(uint32_t));
  if (n_vocab % 32 != 0) words[n_words - 1] = (1u << (n_vocab % 32)) - 1u;
}

AllowedTokens LazyConstraint::allowed_tokens() {
  if (!active_) return {AllowedTokens::Kind::kAll, nullptr, 0};
  if (inner_sparse_ != nullptr) return inner_sparse_->allowed_tokens();
  return {};
}

size_t LazyConstraint::find_trigger(size_t old_size) const {
  size_t best_pos = std::string::npos;
  size_t best_end = std::string::npos;
  for (const auto& w : shared_->words) {
    // Only occurrences that end in the new bytes are new.
    const size_t from = old_size >= w.size() - 1 ? old_size - (w.size() - 1) : 0;
    const size_t pos = buffer_.find(w, from);
    if (pos != std::string::npos && (best_pos == std::string::npos || pos < best_pos)) {
      best_pos = pos;
      best_end = pos + w.size();
    }
  }
  if (best_end != std::string::npos) return best_end;
  for (const auto& p : shared_->patterns) {
    std::smatch m;
    const bool hit =
        p.whole ? std::regex_match(buffer_, m, p.regex) : std::regex_search(buffer_, m, p.regex);
    if (!hit) continue;
    for (size_t g = 1; g < m.size(); ++g) {
      if (m.length(g) > 0) return static_cast<size_t>(m.position(g));
    }
    return static_cast<size_t>(m.position(0) + m.length(0));
  }
  return std::string::npos;
}

bool LazyConstraint::activate(std::string_view residual) {
  if (!residual.empty()) {
    bool ok = false;
    if (auto* bytes = dynamic_cast<ByteAcceptor*>(inner_.get())) {
      ok = bytes->accept_bytes(residual);
    } else if (auto* grammar = dynamic_cast<GrammarMatcher*>(inner_.get())) {
      ok = grammar->accept_string(residual);
    } else {
      last_error_ = "lazy constraint: the inner constraint cannot take the " +
                    std::to_string(residual.size()) +
                    " bytes after the trigger inside the same token";
      return false;
    }
    if (!ok) {
      last_error_ = "lazy constraint: the text after the trigger (\"" + std::string(residual) +
                    "\") is not allowed by the inner constraint";
      return false;
    }
  }
  active_ = true;
  n_inner_ = 0;
  return true;
}

bool LazyConstraint::accept_token(Token token) {
  if (active_) {
    if (!inner_->accept_token(token)) return false;
    ++n_inner_;
    return true;
  }
  const uint64_t abs_before = buffer_base_ + buffer_.size();
  if (std::binary_search(shared_->tokens.begin(), shared_->tokens.end(), token)) {
    if (!activate({})) return false;
    history_.push_back(abs_before);
    return true;
  }
  if (shared_->words.empty() && shared_->patterns.empty()) {
    history_.push_back(abs_before);
    return true;
  }
  const size_t old_size = buffer_.size();
  piece_(token, piece_buf_);
  buffer_ += piece_buf_;
  const size_t start = find_trigger(old_size);
  if (start != std::string::npos) {
    if (!activate(std::string_view(buffer_).substr(start))) {
      buffer_.resize(old_size);
      return false;
    }
    history_.push_back(abs_before);
    return true;
  }
  history_.push_back(abs_before);
  if (buffer_.size() > 2 * shared_->max_buffer_bytes) {
    const size_t drop = buffer_.size() - shared_->max_buffer_bytes;
    buffer_.erase(0, drop);
    buffer_base_ += drop;
  }
  return true;
}

bool LazyConstraint::rollback(size_t n) {
  if (n > n_inner_ + history_.size()) return false;
  const size_t k = std::min(n, n_inner_);
  const size_t rest = n - k;
  if (rest > 0 && history_[history_.size() - rest] < buffer_base_) return false;  // dropped text
  if (k > 0 && !inner_->rollback(k)) return false;
  n_inner_ -= k;
  if (rest == 0) return true;
  if (active_) {
    active_ = false;
    inner_->reset();
  }
  buffer_.resize(static_cast<size_t>(history_[history_.size() - rest] - buffer_base_));
  history_.resize(history_.size() - rest);
  return true;
}

std::unique_ptr<Constraint> LazyConstraint::fork() const {
  return std::make_unique<LazyConstraint>(*this);
}

void LazyConstraint::reset() {
  inner_->reset();
  active_ = false;
  buffer_.clear();
  buffer_base_ = 0;
  history_.clear();
  n_inner_ = 0;
  last_error_.clear();
}

bool LazyConstraint::is_completed() const {
  return !active_ || inner_->is_completed();
}

bool LazyConstraint::is_terminated() const {
  return active_ && inner_->is_terminated();
}

size_t LazyConstraint::forced_tokens(std::vector<Token>& out, size_t max_tokens) const {
  return active_ ? inner_->forced_tokens(out, max_tokens) : 0;
}

std::string LazyConstraint::jump_forward_string() const {
  return active_ ? inner_->jump_forward_string() : std::string();
}

}  // namespace lacuna
