// matcher.cpp — GrammarMatcher: a set of persistent parse stacks per sequence, token masks
// from the precomputed context tables plus run-time checks of the few uncertain tokens.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "lacuna/matcher.h"
#include "match/compiled_data.h"

namespace lacuna {

using detail::CompiledData;
using detail::Elem;
using detail::StackPool;

namespace detail {
class MatcherState {
 public:
  explicit MatcherState(const CompiledData* data)
      : d_(data), pool_(&data->g, &data->contexts, false) {
    reset();
  }

  void reset() {
    history_.clear();
    sets_.clear();
    scratch_.clear();
    const auto& g = d_->g;
    for (uint32_t a = g.rule_alt_begin[g.root]; a < g.rule_alt_begin[g.root + 1]; ++a) {
      pool_.start(g.alt_starts[a], StackPool::kEmpty, scratch_);
    }
    push_step(scratch_.data(), scratch_.size(), {}, false);
  }

  struct Step {
    uint32_t off;
    uint32_t len;
    PartialUtf8 partial;
    bool terminated;
  };

  const Step& cur() const { return history_.back(); }
  const uint32_t* stacks() const { return sets_.data() + cur().off; }
  size_t n_stacks() const { return cur().len; }
  size_t history_size() const { return history_.size() - 1; }

  bool rollback(size_t n) {
    if (n > history_size()) return false;
    for (size_t i = 0; i < n; ++i) {
      sets_.resize(history_.back().off);
      history_.pop_back();
    }
    return true;
  }

  bool is_completed() const {
    if (cur().terminated) return true;
    if (cur().partial.n_remain != 0) return false;
    return has_empty();
  }
  bool is_terminated() const { return cur().terminated; }
  bool in_partial_utf8() const { return cur().partial.n_remain > 0; }

  bool has_empty() const {
    const uint32_t* s = stacks();
    for (size_t i = 0; i < n_stacks(); ++i) {
      if (s[i] == StackPool::kEmpty) return true;
    }
    return false;
  }

  // Runs one token (or raw code points when id < 0) over the stacks `from`. Returns whether
  // it is allowed (llama.cpp's mask rule); when `out` is given, appends the resulting stacks
  // (llama.cpp's accept rule).
  bool run(const uint32_t* from, size_t nfrom, int64_t id, bool boundary, bool as_text,
           const uint32_t* cps, size_t n, PartialUtf8 end, std::vector<uint32_t>* out) {
    const auto& g = d_->g;
    bool allowed = false;
    a_.clear();
    uint32_t stamp = next_stamp();
    for (size_t i = 0; i < nfrom; ++i) {
      const uint32_t s = from[i];
      if (s == StackPool::kEmpty) continue;
      const Elem& e = g.elems[pool_.pos(s)];
      if (e.kind == detail::kTok || e.kind == detail::kTokNot) {
        if (!boundary || id < 0 || n == 0) continue;
        const bool hit = e.kind == detail::kTok ? e.arg == static_cast<uint32_t>(id)
                                                : e.arg != static_cast<uint32_t>(id);
        if (!hit) continue;
        allowed = true;
        if (out == nullptr) return true;
        uint32_t k;
        const uint32_t* sc = pool_.succ(s, &k);
        for (uint32_t j = 0; j < k; ++j) add_out(*out, sc[j]);
        continue;
      }
      if (as_text && mark(s, stamp)) a_.push_back(s);
    }
    for (size_t i = 0; i < n && !a_.empty(); ++i) {
      b_.clear();
      step_code_point(a_, 0, a_.size(), cps[i], b_);
      check_stack_count(b_.size());
      a_.swap(b_);
    }
    if (ends_token(a_.data(), a_.size(), end)) allowed = true;
    if (out != nullptr && allowed) {
      for (uint32_t s : a_) add_out(*out, s);
    }
    return allowed;
  }

  void fill(uint32_t* words) {
    const size_t nw = bitmask_words(d_->tokens->n_vocab());
    std::memset(words, 0, nw * sizeof(uint32_t));
    if (cur().terminated) return;
    const TokenIndex& tokens = *d_->tokens;
    if (cur().partial.n_remain != 0) {
      fill_after_partial(words);
      return;
    }
    const auto& g = d_->g;
    bool allow_eog = false;
    const uint32_t* st = stacks();
    const size_t ns = n_stacks();
    ored_.clear();
    for (size_t i = 0; i < ns; ++i) {
      const uint32_t s = st[i];
      if (s == StackPool::kEmpty) {
        allow_eog = true;
        continue;
      }
      const Elem& e = g.elems[pool_.pos(s)];
      if (e.kind == detail::kTok) {
        if (e.arg < tokens.n_vocab() &&
            tokens.kind(static_cast<Token>(e.arg)) == TokenIndex::Kind::kText) {
          size_t ncp;
          tokens.code_points(static_cast<Token>(e.arg), &ncp);
          if (ncp > 0) bitmask_set(words, static_cast<Token>(e.arg));
        }
        continue;
      }
      if (e.kind == detail::kTokNot) {
        const bool had = e.arg < tokens.n_vocab() && bitmask_test(words, static_cast<Token>(e.arg));
        const uint32_t* tb = d_->text_tokens_bitset.data();
        for (size_t w = 0; w < nw; ++w) words[w] |= tb[w];
        if (e.arg < tokens.n_vocab() && !had) {
          words[e.arg >> 5] &= ~(1u << (e.arg & 31));
        }
        continue;
      }
      const detail::ContextMask* cm = d_->mask(pool_.ctx(s));
      // No mask for this context (ContextClassifier::compute), or too many uncertain tokens
      // to check one by one: the mask of the whole stack, whose walk knows what follows the
      // context; where it has none either, every token against the stack.
      if (cm == nullptr || cm->uncertain_ids.size() > d_->deep_threshold()) {
        const detail::ContextMask* deep = deep_mask(s);
        if (deep != nullptr) {
          or_accepted_once(*deep, words);
          continue;
        }
      }
      if (cm == nullptr) {
        memo_into(s, words, nullptr);
        continue;
      }
      or_accepted_once(*cm, words);
      if (!cm->uncertain_ids.empty() && !context_is_whole_stack(s)) memo_into(s, words, cm);
    }
    if (allow_eog) {
      for (Token t : tokens.eog_tokens()) bitmask_set(words, t);
    }
  }

  bool accept_token(Token t) {
    if (cur().terminated || d_->tokens == nullptr) return false;
    const TokenIndex& tokens = *d_->tokens;
    if (t < 0 || static_cast<size_t>(t) >= tokens.n_vocab()) return false;
    const auto kind = tokens.kind(t);
    if (kind == TokenIndex::Kind::kEog) {
      if (cur().partial.n_remain != 0 || !has_empty()) return false;
      scratch_.assign(stacks(), stacks() + n_stacks());
      push_step(scratch_.data(), scratch_.size(), cur().partial, true);
      return true;
    }
    if (kind == TokenIndex::Kind::kNever) return false;
    const bool as_text = d_->no_text.empty() || !d_->no_text[static_cast<size_t>(t)];
    const PartialUtf8 start = cur().partial;
    const bool boundary = start.n_remain == 0;
    const uint32_t* cps;
    size_t ncp;
    PartialUtf8 end;
    if (boundary) {
      if (kind == TokenIndex::Kind::kInvalid) return false;
      cps = tokens.code_points(t, &ncp);
      end = tokens.partial(t);
    } else {
      cps_.clear();
      end = decode_utf8_like_llama(tokens.token_bytes(t), start, cps_);
      if (end.n_remain < 0) return false;
      cps = cps_.data();
      ncp = cps_.size();
    }
    scratch_.clear();
    if (!run(stacks(), n_stacks(), t, boundary, as_text, cps, ncp, end, &scratch_)) return false;
    push_step(scratch_.data(), scratch_.size(), end, false);
    return true;
  }

  bool accept_string(std::string_view bytes) {
    if (cur().terminated) return false;
    if (bytes.empty()) {
      scratch_.assign(stacks(), stacks() + n_stacks());
      push_step(scratch_.data(), scratch_.size(), cur().partial, false);
      return true;
    }
    cps_.clear();
    PartialUtf8 end = decode_utf8_like_llama(bytes, cur().partial, cps_);
    if (end.n_remain < 0) return false;
    if (bytes.find('\0') != std::string_view::npos) return false;
    scratch_.clear();
    if (!run(stacks(), n_stacks(), -1, false, true, cps_.data(), cps_.size(), end, &scratch_))
      return false;
    push_step(scratch_.data(), scratch_.size(), end, false);
    return true;
  }

  // The code points every continuation must start with, as UTF-8.
  std::string jump_forward() {
    std::string outs;
    if (cur().terminated || cur().partial.n_remain != 0) return outs;
    const auto& g = d_->g;
    a_.assign(stacks(), stacks() + n_stacks());
    for (size_t steps = 0; steps < 4096 && !a_.empty(); ++steps) {
      int64_t cp = -1;
      for (uint32_t s : a_) {
        if (s == StackPool::kEmpty) return outs;
        const Elem& e = g.elems[pool_.pos(s)];
        if (e.kind != detail::kChars) return outs;
        const int64_t c = g.charsets[e.arg].single();
        if (c < 0 || (cp >= 0 && c != cp)) return outs;
        cp = c;
      }
      append_utf8(outs, static_cast<uint32_t>(cp));
      b_.clear();
      const uint32_t stamp = next_stamp();
      for (uint32_t s : a_) {
        uint32_t k;
        const uint32_t* sc = pool_.succ(s, &k);
        for (uint32_t j = 0; j < k; ++j) {
          if (mark(sc[j], stamp)) b_.push_back(sc[j]);
        }
      }
      a_.swap(b_);
    }
    return outs;
  }

  const CompiledData* data() const { return d_; }

 private:
  static void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | ((cp >> 18) & 0x07));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  void push_step(const uint32_t* s, size_t n, PartialUtf8 partial, bool terminated) {
    Step st{static_cast<uint32_t>(sets_.size()), static_cast<uint32_t>(n), partial, terminated};
    sets_.insert(sets_.end(), s, s + n);
    history_.push_back(st);
  }

  uint32_t next_stamp() {
    if (++stamp_now_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      stamp_now_ = 1;
    }
    return stamp_now_;
  }
  bool mark(uint32_t n, uint32_t stamp) {
    if (n >= stamp_.size()) stamp_.resize(std::max<size_t>(n + 1, pool_.size()) * 2, 0);
    if (stamp_[n] == stamp) return false;
    stamp_[n] = stamp;
    return true;
  }
  void add_out(std::vector<uint32_t>& out, uint32_t s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }

  // Many stacks of one step may share a mask (ContextClassifier::same_mask: the positions
  // of `[a-z]{162}`, the levels of a repetition family): its accepted tokens are set once
  // per fill (a bitmask is 16 KB on a 128k vocabulary; the 160 stacks of a search for
  // `[a-z]{162}` OR-ed 2.5 MB a step).
  // (Bitmasks only: the search is bounded by the OR-ing it saves.)
  void or_accepted_once(const detail::ContextMask& cm, uint32_t* words) {
    if (!cm.accepted_bits.empty()) {
      if (std::find(ored_.begin(), ored_.end(), &cm) != ored_.end()) return;
      ored_.push_back(&cm);
    }
    or_accepted(cm, words);
  }
  std::vector<const detail::ContextMask*> ored_{};

  void or_accepted(const detail::ContextMask& cm, uint32_t* words) const {
    if (!cm.accepted_bits.empty()) {
      const uint32_t* src = cm.accepted_bits.data();
      const size_t nw = cm.accepted_bits.size();
      for (size_t w = 0; w < nw; ++w) words[w] |= src[w];
    } else {
      for (Token t : cm.accepted_ids) bitmask_set(words, t);
    }
  }

  // The positions of stack s from the top down (the key of what matchers of one grammar
  // share about a stack), in a scratch list valid until the next call.
  const std::vector<uint32_t>& positions_of(uint32_t s) {
    pos_scratch_.clear();
    for (uint32_t c = s; c != StackPool::kEmpty; c = pool_.parent(c))
      pos_scratch_.push_back(pool_.pos(c));
    return pos_scratch_;
  }

  // The shared deep mask of stack s (null: not available), memoized per stack.
  const detail::ContextMask* deep_mask(uint32_t s) {
    auto it = deep_memo_.find(s);
    if (it != deep_memo_.end()) return it->second;
    const detail::ContextMask* m = d_->deep_mask(positions_of(s));
    deep_memo_.emplace(s, m);
    return m;
  }

  // Sets the bits of the tokens that stack s accepts among the uncertain tokens of its
  // context cm, or among every token where the context has no mask and s no whole-stack mask
  // (cm null; which of the two is fixed by s's positions). The answer depends on s alone (a
  // hash-consed stack: the same id is the same stack for the life of this matcher), so it
  // is memoized per stack: a string's characters, a number's digits, the items of an array
  // come back to the same stack step after step.
  void memo_into(uint32_t s, uint32_t* words, const detail::ContextMask* cm) {
    auto it = memo_.find(s);
    if (it == memo_.end()) {
      if (memo_tokens_.size() > kMemoMaxTokens) {
        memo_.clear();
        memo_tokens_.clear();
      }
      const uint32_t off = static_cast<uint32_t>(memo_tokens_.size());
      // Other matchers of this grammar (the next request with the same schema) meet the same
      // stacks: the answer is shared by the stack's positions, each token's by the top
      // frames it read.
      const std::vector<uint32_t>& key = positions_of(s);
      if (cm == nullptr) {
        if (!d_->find_checked_all(key, memo_tokens_)) {
          check_all_tokens(s, memo_tokens_);
          d_->add_checked_all(key, memo_tokens_.data() + off, memo_tokens_.size() - off);
        }
      } else {
        const Token* ids = cm->uncertain_ids.data();
        const size_t n = cm->uncertain_ids.size();
        decided_.assign(n, 0);
        if (!d_->find_checked(key, pool_.ctx(s), ids, n, memo_tokens_, decided_)) {
          if (std::find(decided_.begin(), decided_.end(), 1) != decided_.end()) {
            detail::test_walk_counters.partly_kept_checks.fetch_add(1, std::memory_order_relaxed);
          }
          rest_.clear();
          rest_index_.clear();
          for (size_t i = 0; i < n; ++i) {
            if (decided_[i] != 0) continue;
            rest_.push_back(ids[i]);
            rest_index_.push_back(static_cast<uint32_t>(i));
          }
          check_uncertain(s, rest_.data(), static_cast<uint32_t>(rest_.size()), memo_tokens_);
          for (auto& t : checked_) t.index = rest_index_[t.index];
          d_->add_checked(key, pool_.ctx(s), checked_);
        }
      }
      it = memo_.emplace(s, MemoRange{off, static_cast<uint32_t>(memo_tokens_.size() - off)}).first;
    }
    const Token* t = memo_tokens_.data() + it->second.off;
    for (uint32_t k = 0; k < it->second.len; ++k) bitmask_set(words, t[k]);
  }
  std::vector<uint8_t> decided_;
  std::vector<Token> rest_;
  std::vector<uint32_t> rest_index_;
  std::vector<detail::CompiledData::CheckedToken> checked_;  // check_uncertain's answers

  // Whether stack s is its context's chain alone (nothing below it): a context's uncertain
  // tokens are those that only the stack below can take (they leave the chain and go on, or
  // end inside a code point where it may end), so the empty stack refuses them all and
  // there is nothing to check. (The last line of `line ("\n" line){0,8}`, whose line may
  // return to nine places: 1,500 tokens that end a line and go on, each checked, 0.1-0.2 ms.)
  bool context_is_whole_stack(uint32_t s) const {
    uint32_t c = s;
    while (pool_.keep_parent(pool_.pos(c), pool_.parent(c))) c = pool_.parent(c);
    return pool_.parent(c) == StackPool::kEmpty;
  }

  // Appends to `out` the stacks after code point cp of the stacks in[begin, end), each once.
  // `in` may be `out`: it is read by index, so growing it is safe.
  void step_code_point(const std::vector<uint32_t>& in, size_t begin, size_t end, uint32_t cp,
                       std::vector<uint32_t>& out) {
    const auto& g = d_->g;
    const uint32_t stamp = next_stamp();
    for (size_t i = begin; i < end; ++i) {
      const uint32_t c = in[i];
      if (c == StackPool::kEmpty) continue;
      const Elem& e = g.elems[pool_.pos(c)];
      if (e.kind != detail::kChars || !g.charsets[e.arg].match(cp)) continue;
      uint32_t k;
      const uint32_t* sc = pool_.succ(c, &k);
      for (uint32_t j = 0; j < k; ++j) {
        if (mark(sc[j], stamp)) out.push_back(sc[j]);
      }
    }
  }

  // Whether a token whose full code points leave the stacks s[0, n) may end there: any
  // stack does (the empty one included) when nothing of a UTF-8 sequence is left over;
  // otherwise a stack whose character set may take the leftover bytes' code point.
  bool ends_token(const uint32_t* s, size_t n, PartialUtf8 p) const {
    if (p.n_remain == 0) return n > 0;
    return detail::stacks_take_partial(d_->g, pool_, s, n, p);
  }

  void check_stack_count(size_t n) const {
    if (n > d_->options.max_stacks) {
      throw GrammarLimitError("grammar too ambiguous: more than " +
                              std::to_string(d_->options.max_stacks) +
                              " parse stacks (CompileOptions::max_stacks)");
    }
  }

  // Appends to `found` the tokens of `ids` (a context's uncertain tokens, in trie order)
  // that the real stack s accepts, and to checked_ each token's answer and level (the top
  // frames of s its steps read; its index is k, the token's place in ids). The parse
  // frontier after each code point is kept per depth and reused by the next token as far as
  // the two share a prefix, with the frames read up to that depth.
  static constexpr uint32_t kReadAhead = 8;  // tokens
  void check_uncertain(uint32_t s, const Token* ids, uint32_t count, std::vector<Token>& found) {
    const TokenIndex& tokens = *d_->tokens;
    checked_.clear();
    fb_.clear();
    depth_off_.clear();
    depth_read_.clear();
    fb_.push_back(s);
    depth_off_.push_back(0);
    depth_off_.push_back(1);
    depth_read_.push_back(begin_frames_read(s));
    const uint32_t* built = nullptr;  // code points the frontiers were built for
    size_t built_depth = 0;           // frontiers exist for depths 0..built_depth
    for (uint32_t k = 0; k < count; ++k) {
      const Token t = ids[k];
      // (The ids lie at random: their code points' places and partial tails are read ahead.)
      if (k + kReadAhead < count) tokens.prefetch_token(ids[k + kReadAhead]);
      size_t n;
      const uint32_t* cps = tokens.code_points(t, &n);
      size_t l = 0;
      while (l < built_depth && l < n && cps[l] == built[l]) ++l;
      depth_off_.resize(l + 2);
      depth_read_.resize(l + 1);
      fb_.resize(depth_off_[l + 1]);
      built = cps;
      built_depth = l;
      bool dead = depth_off_[l + 1] == depth_off_[l];
      for (size_t dpt = l; dpt < n && !dead; ++dpt) {
        const size_t before = fb_.size();
        step_code_point(fb_, depth_off_[dpt], depth_off_[dpt + 1], cps[dpt], fb_);
        depth_read_.push_back(frames_read(before, depth_read_[dpt]));
        depth_off_.push_back(static_cast<uint32_t>(fb_.size()));
        built_depth = dpt + 1;
        dead = depth_off_[dpt + 2] == depth_off_[dpt + 1];
      }
      const bool ok = !dead && built_depth == n &&
                      ends_token(fb_.data() + depth_off_[n], depth_off_[n + 1] - depth_off_[n],
                                 tokens.partial(t));
      if (ok) found.push_back(t);
      checked_.push_back({k, ok, depth_read_[built_depth]});
    }
  }

  // How many of stack s's top frames a check read: every position the check reads is the
  // top of a stack it reached (the positions a step pops through are below the stacks it
  // makes), and such a stack t is new frames above one of s's own frames a_i (a_0 = s):
  // then frames a_0 .. a_(i-1) were read, and a_i as well when t is a_i. The empty stack (a
  // token that ends s) reads it whole (kWholeStack). A token's answer depends on the frames
  // it read only, so find_checked keeps it under them (memo_into).
  // begin_frames_read marks s's frames and returns what reading s's top reads.
  size_t begin_frames_read(uint32_t s) {
    if (++chain_now_ == 0) {
      std::fill(chain_stamp_.begin(), chain_stamp_.end(), ChainSlot{0, 0});
      chain_now_ = 1;
    }
    uint32_t i = 0;
    for (uint32_t c = s;; c = pool_.parent(c), ++i) {
      chain_slot(c) = {chain_now_, i};
      if (c == StackPool::kEmpty) break;
    }
    return s == StackPool::kEmpty ? detail::CompiledData::kWholeStack : 1;
  }
  // The frames read once the stacks fb_[from, end) are reached, `read` before them.
  size_t frames_read(size_t from, size_t read) {
    for (size_t k = from; k < fb_.size() && read != detail::CompiledData::kWholeStack; ++k) {
      const uint32_t t = fb_[k];
      if (t == StackPool::kEmpty) return detail::CompiledData::kWholeStack;
      uint32_t c = t;
      while (chain_slot(c).stamp != chain_now_) c = pool_.parent(c);
      read = std::max<size_t>(read, chain_slot(c).index + (c == t ? 1 : 0));
    }
    return read;
  }
  struct ChainSlot {
    uint32_t stamp, index;
  };
  ChainSlot& chain_slot(uint32_t n) {
    if (n >= chain_stamp_.size()) chain_stamp_.resize(std::max<size_t>(n + 1, pool_.size()) * 2);
    return chain_stamp_[n];
  }
  std::vector<ChainSlot> chain_stamp_;
  uint32_t chain_now_ = 0;
  std::vector<size_t> depth_read_;  // frames read up to each depth of the frontier

  // A stack whose context has no mask and that has no whole-stack mask either (a limit was
  // hit): every text token is checked against the stack itself, in one preorder walk of the
  // vocabulary trie. The parse frontier after each depth's code point is kept per depth, so tokens
  // that share a prefix share its steps, and a subtree whose prefix the stack refuses is skipped
  // whole.
  void check_all_tokens(uint32_t s, std::vector<Token>& found) {
    const TokenIndex& tokens = *d_->tokens;
    const auto& trie = tokens.trie();
    const auto& tt = tokens.trie_tokens();
    const auto& depth = tokens.node_depth();
    // The frontier at depth d is fb_[depth_off_[d], depth_off_[d + 1]).
    fb_.assign(1, s);
    depth_off_.assign({0, 1});
    auto take = [&](uint32_t j, uint32_t d) {
      for (uint32_t k = trie[j].tok_begin; k < trie[j].tok_end; ++k) {
        const Token t = tt[k].id;
        if (!d_->no_text.empty() && d_->no_text[static_cast<size_t>(t)]) continue;
        if (ends_token(fb_.data() + depth_off_[d], depth_off_[d + 1] - depth_off_[d],
                       tt[k].partial)) {
          found.push_back(t);
        }
      }
    };
    take(0, 0);
    for (uint32_t j = 1; j < trie.size();) {
      const uint32_t d = depth[j];  // >= 1; the frontier of depth d - 1 is the parent's
      depth_off_.resize(d + 1);
      fb_.resize(depth_off_[d]);
      step_code_point(fb_, depth_off_[d - 1], depth_off_[d], trie[j].cp, fb_);
      const size_t width = fb_.size() - depth_off_[d];
      if (width == 0) {
        j = trie[j].end;  // no token below starts with this prefix
        continue;
      }
      check_stack_count(width);
      depth_off_.push_back(static_cast<uint32_t>(fb_.size()));
      take(j, d);
      ++j;
    }
  }

  // After a token that ended inside a UTF-8 sequence only tokens starting with a
  // continuation byte can be valid; check each of them against all stacks.
  void fill_after_partial(uint32_t* words) {
    const TokenIndex& tokens = *d_->tokens;
    const PartialUtf8 start = cur().partial;
    for (Token t : tokens.continuation_tokens()) {
      if (!d_->no_text.empty() && d_->no_text[static_cast<size_t>(t)]) continue;
      cps_.clear();
      PartialUtf8 end = decode_utf8_like_llama(tokens.token_bytes(t), start, cps_);
      if (end.n_remain < 0) continue;
      if (run(stacks(), n_stacks(), t, false, true, cps_.data(), cps_.size(), end, nullptr)) {
        bitmask_set(words, t);
      }
    }
  }

  const CompiledData* d_;
  StackPool pool_;
  std::vector<Step> history_;
  std::vector<uint32_t> sets_;
  std::vector<uint32_t> scratch_, a_, b_, cps_, fb_, depth_off_;
  std::vector<uint32_t> stamp_;
  uint32_t stamp_now_ = 0;
  // Memo of the checked tokens per stack (see memo_into); cleared when it holds
  // more than kMemoMaxTokens tokens.
  struct MemoRange {
    uint32_t off, len;
  };
  static constexpr size_t kMemoMaxTokens = size_t{1} << 22;
  std::unordered_map<uint32_t, MemoRange> memo_;
  std::unordered_map<uint32_t, const detail::ContextMask*> deep_memo_;
  std::vector<uint32_t> pos_scratch_;
  std::vector<Token> memo_tokens_;
};

}  // namespace detail

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  if (!grammar_) throw std::invalid_argument("GrammarMatcher: null compiled grammar");
  state_ = std::make_unique<detail::MatcherState>(&grammar_->data());
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : Constraint(),
      grammar_(other.grammar_),
      state_(std::make_unique<detail::MatcherState>(*other.state_)) {}

GrammarMatcher::~GrammarMatcher() = default;

size_t GrammarMatcher::n_vocab() const {
  return grammar_->n_vocab();
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* words) {
  if (!grammar_->token_index()) {
    throw std::logic_error(
        "GrammarMatcher: grammar compiled without a TokenIndex has no token masks");
  }
  state_->fill(words);
}

bool GrammarMatcher::accept_token(Token token) {
  return state_->accept_token(token);
}
bool GrammarMatcher::accept_string(std::string_view bytes) {
  return state_->accept_string(bytes);
}
bool GrammarMatcher::rollback(size_t n) {
  return state_->rollback(n);
}
std::unique_ptr<Constraint> GrammarMatcher::fork() const {
  return std::make_unique<GrammarMatcher>(*this);
}
void GrammarMatcher::reset() {
  state_->reset();
}
bool GrammarMatcher::is_completed() const {
  return state_->is_completed();
}
bool GrammarMatcher::is_terminated() const {
  return state_->is_terminated();
}
size_t GrammarMatcher::history_size() const {
  return state_->history_size();
}
size_t GrammarMatcher::n_stacks() const {
  return state_->n_stacks();
}

size_t GrammarMatcher::forced_tokens(std::vector<Token>& out, size_t max_tokens) const {
  if (!grammar_->token_index()) return 0;
  GrammarMatcher probe(*this);
  std::vector<uint32_t> words(bitmask_words(n_vocab()));
  size_t added = 0;
  while (added < max_tokens && !probe.is_terminated()) {
    probe.fill_next_token_bitmask(words.data());
    Token only = -1;
    size_t count = 0;
    for (size_t w = 0; w < words.size() && count < 2; ++w) {
      uint32_t v = words[w];
      while (v != 0 && count < 2) {
        only = static_cast<Token>(w * 32 + static_cast<size_t>(__builtin_ctz(v)));
        v &= v - 1;
        ++count;
      }
    }
    if (count != 1) break;
    out.push_back(only);
    ++added;
    if (!probe.accept_token(only)) break;
  }
  return added;
}

std::string GrammarMatcher::jump_forward_string() const {
  detail::MatcherState probe(*state_);
  return probe.jump_forward();
}

bool GrammarMatcher::in_partial_utf8() const {
  return state_->in_partial_utf8();
}

}  // namespace lacuna
