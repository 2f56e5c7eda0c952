// generator.cpp — the constrained decode loop: forced-token skipping with deferred batch
// fill, verified forced strings (speculative acceptance), tier-2 jump-forward, stats.
#include "lacuna/generator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>

#include "decode/forced_string.h"

namespace lacuna {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void check_config(const GeneratorConfig& c, llama_context* ctx) {
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("GeneratorConfig: " + what);
  };
  if (std::isnan(c.temp) || std::isinf(c.temp)) bad("temp must be a finite number");
  if (std::isnan(c.top_p)) bad("top_p must be a number");
  if (std::isnan(c.min_p)) bad("min_p must be a number");
  if (c.temp > 0 && c.top_p <= 0) bad("top_p must be > 0");
  if (c.seq < 0 || static_cast<uint32_t>(c.seq) >= llama_n_seq_max(ctx)) {
    bad("seq " + std::to_string(c.seq) + " outside the context's " +
        std::to_string(llama_n_seq_max(ctx)) + " sequences");
  }
  for (const auto& s : c.stop_strings) {
    if (s.empty()) bad("empty stop string");
  }
}

}  // namespace

Generator::Generator(llama_context* ctx, GeneratorConfig config,
                     std::unique_ptr<Constraint> constraint)
    : ctx_(ctx), config_(std::move(config)) {
  if (ctx_ == nullptr) throw std::invalid_argument("Generator: null llama_context");
  check_config(config_, ctx_);
  vocab_ = llama_model_get_vocab(llama_get_model(ctx_));
  n_vocab_ = llama_vocab_n_tokens(vocab_);
  n_ctx_ = llama_n_ctx(ctx_);
  n_batch_ = static_cast<int32_t>(llama_n_batch(ctx_));
  if (n_batch_ < 2) throw std::invalid_argument("Generator: the context's n_batch must be >= 2");
  set_constraint(std::move(constraint));

  const size_t words = bitmask_words(static_cast<size_t>(n_vocab_));
  mask_.assign(words, 0);
  eog_mask_.assign(words, 0);
  for (Token t = 0; t < n_vocab_; ++t) {
    if (llama_vocab_is_eog(vocab_, t)) {
      bitmask_set(eog_mask_.data(), t);
      eog_tokens_.push_back(t);
    }
  }
  cur_.reserve(static_cast<size_t>(n_vocab_));
  batch_ = llama_batch_init(n_batch_, 0, 1);

  if (config_.temp > 0) {
    shape_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (config_.top_k > 0) llama_sampler_chain_add(shape_, llama_sampler_init_top_k(config_.top_k));
    if (config_.top_p < 1.0f)
      llama_sampler_chain_add(shape_, llama_sampler_init_top_p(config_.top_p, 1));
    if (config_.min_p > 0)
      llama_sampler_chain_add(shape_, llama_sampler_init_min_p(config_.min_p, 1));
    llama_sampler_chain_add(shape_, llama_sampler_init_temp(config_.temp));
    dist_ = llama_sampler_init_dist(config_.seed);
    accept_rng_.seed(config_.seed ^ 0x5bd1e995u);
  }
  for (const auto& s : config_.stop_strings) max_stop_len_ = std::max(max_stop_len_, s.size());
  drafts_.reserve(config_.decode.max_draft + 1);
  step_tokens_.reserve(config_.decode.max_forced + config_.decode.max_draft + 2);
  text_.reserve(1024);

  const llama_pos pos_max = llama_memory_seq_pos_max(llama_get_memory(ctx_), config_.seq);
  n_past_ = pos_max < 0 ? 0 : pos_max + 1;
}

Generator::~Generator() {
  llama_batch_free(batch_);
  if (shape_ != nullptr) llama_sampler_free(shape_);
  if (dist_ != nullptr) llama_sampler_free(dist_);
}

void Generator::set_constraint(std::unique_ptr<Constraint> constraint) {
  if (constraint && constraint->n_vocab() != static_cast<size_t>(n_vocab_)) {
    throw std::invalid_argument(
        "Generator: the constraint is built for " + std::to_string(constraint->n_vocab()) +
        " tokens but the model's vocabulary has " + std::to_string(n_vocab_));
  }
  constraint_ = std::move(constraint);
  mask_valid_ = false;
}

void Generator::prefill(std::span<const Token> prompt) {
  for (Token t : prompt) {
    if (t < 0 || t >= n_vocab_) {
      throw std::invalid_argument("Generator::prefill: token " + std::to_string(t) +
                                  " outside the vocabulary of " + std::to_string(n_vocab_));
    }
  }
  if (prompt.empty() && pending_.empty()) {
    throw std::invalid_argument("Generator::prefill: empty prompt");
  }
  if (static_cast<size_t>(n_past_) + pending_.size() + prompt.size() >= n_ctx_) {
    throw std::runtime_error("Generator::prefill: " + std::to_string(prompt.size()) +
                             " prompt tokens do not fit in the context (" +
                             std::to_string(n_past_) + " used of " + std::to_string(n_ctx_) + ")");
  }
  const DecodeOptions& opt = config_.decode;
  // The generation's clock starts before a cost measurement, so that prefill_ms and
  // total_ms include it.
  const auto t_begin = Clock::now();
  const bool cost_used = (opt.verify_strings && opt.draft_policy == DraftPolicy::adaptive) ||
                         (opt.skip_forced && opt.split_pending);
  if (opt.measure_cost && cost_used && !cost_measured_) {
    // Before the prompt is decoded: the measurement overwrites the context's logits. Cached
    // per process, model and thread count, so only the first generator pays for it (counted
    // in its prefill_ms).
    config_.decode.cost = cached_decode_cost(ctx_, config_.seq);
    cost_measured_ = true;
  }
  out_tokens_.clear();
  text_.clear();
  step_tokens_.clear();
  step_text_begin_ = 0;
  stop_ = StopReason::none;
  stats_ = GenerationStats{};
  stats_.prompt_tokens = prompt.size();
  mask_valid_ = false;  // the caller may have moved the constraint in between
  draft_len_ = config_.decode.max_draft;
  accept_trials_ = 0;
  accept_hits_ = 0;
  t_start_ = t_begin;

  pending_.insert(pending_.end(), prompt.begin(), prompt.end());
  drafts_.clear();
  decode_pending(drafts_);
  stats_.prefill_ms = ms_between(t_start_, Clock::now());
  stats_.forward_passes = 0;
  stats_.decode_ms = 0;
  stats_.tokens_batch_filled = 0;
  stats_.tokens_filled_alone = 0;
  prefilled_ = true;
}

// Decodes pending_ followed by `drafts`, with logits for the last pending token and for
// every draft token. Long pending runs go first in chunks of n_batch without logits.
void Generator::decode_pending(std::span<const Token> drafts) {
  if (pending_.empty()) throw std::logic_error("Generator: nothing to decode");
  const size_t n_pend = pending_.size();
  const size_t n_draft = drafts.size();
  const size_t cap = static_cast<size_t>(n_batch_);
  if (n_draft + 1 > cap) throw std::logic_error("Generator: too many draft tokens for a batch");

  auto run = [&](const char* what) {
    const auto t0 = Clock::now();
    const int32_t rc = llama_decode(ctx_, batch_);
    stats_.decode_ms += ms_between(t0, Clock::now());
    ++stats_.forward_passes;
    if (rc != 0) {
      throw std::runtime_error(std::string("Generator: llama_decode failed (") + what +
                               ", status " + std::to_string(rc) + ")");
    }
  };

  size_t i = 0;
  while ((n_pend - i) + n_draft > cap) {
    batch_.n_tokens = 0;
    const size_t end = std::min(n_pend - 1, i + cap);
    for (; i < end; ++i) {
      const int32_t k = batch_.n_tokens++;
      batch_.token[k] = pending_[i];
      batch_.pos[k] = n_past_++;
      batch_.n_seq_id[k] = 1;
      batch_.seq_id[k][0] = config_.seq;
      batch_.logits[k] = 0;
    }
    run("prefix chunk");
  }
  // Where the cost table says a pass of one token without logits (no output projection)
  // per pending token is cheaper than one batch of them all (llama.cpp's matrix-matrix
  // kernels can cost more per token than its matrix-vector one), the pending tokens but the
  // last go alone. Their KV is then computed exactly as the plain path computes it.
  if (config_.decode.split_pending && config_.decode.cost.split_pending(n_pend - i, n_draft)) {
    for (; i + 1 < n_pend; ++i) {
      batch_.n_tokens = 1;
      batch_.token[0] = pending_[i];
      batch_.pos[0] = n_past_++;
      batch_.n_seq_id[0] = 1;
      batch_.seq_id[0][0] = config_.seq;
      batch_.logits[0] = 0;
      run("pending token");
      ++stats_.tokens_filled_alone;
    }
  }
  batch_.n_tokens = 0;
  for (; i < n_pend; ++i) {
    const int32_t k = batch_.n_tokens++;
    batch_.token[k] = pending_[i];
    batch_.pos[k] = n_past_++;
    batch_.n_seq_id[k] = 1;
    batch_.seq_id[k][0] = config_.seq;
    batch_.logits[k] = i + 1 == n_pend ? 1 : 0;
  }
  logits_idx_ = batch_.n_tokens - 1;
  for (Token d : drafts) {
    const int32_t k = batch_.n_tokens++;
    batch_.token[k] = d;
    batch_.pos[k] = n_past_++;
    batch_.n_seq_id[k] = 1;
    batch_.seq_id[k][0] = config_.seq;
    batch_.logits[k] = 1;
  }
  run("decode");
  // Tokens decoded here other than the one whose logits were wanted had their KV filled
  // in a batch after they were emitted.
  stats_.tokens_batch_filled += n_pend - 1;
  pending_.clear();
  logits_valid_ = true;
}

void Generator::ensure_mask(size_t& n_allowed, size_t& n_allowed_non_eog) {
  if (!mask_valid_) {
    const auto t0 = Clock::now();
    constraint_->fill_next_token_bitmask(mask_.data());
    size_t n = 0;
    for (uint32_t w : mask_) n += static_cast<size_t>(std::popcount(w));
    size_t n_eog = 0;
    for (Token t : eog_tokens_) n_eog += bitmask_test(mask_.data(), t) ? 1 : 0;
    mask_allowed_ = n;
    mask_allowed_non_eog_ = n - n_eog;
    mask_valid_ = true;
    stats_.mask_ms += ms_between(t0, Clock::now());
  }
  n_allowed = mask_allowed_;
  n_allowed_non_eog = mask_allowed_non_eog_;
}

double Generator::accept_rate() const {
  const DecodeOptions& o = config_.decode;
  const double w = std::max(0.0, o.prior_weight);
  const double denom = accept_trials_ + w;
  return denom > 0 ? (accept_hits_ + w * std::clamp(o.prior_accept_rate, 0.0, 1.0)) / denom : 0.0;
}

Token Generator::first_allowed() const {
  for (size_t w = 0; w < mask_.size(); ++w) {
    if (mask_[w] != 0)
      return static_cast<Token>(w * 32 + static_cast<size_t>(std::countr_zero(mask_[w])));
  }
  return LLAMA_TOKEN_NULL;
}

Token Generator::argmax(const float* logits, bool masked) const {
  Token best = LLAMA_TOKEN_NULL;
  float best_logit = -std::numeric_limits<float>::infinity();
  if (!masked) {
    best = 0;
    best_logit = logits[0];
    for (Token t = 1; t < n_vocab_; ++t) {
      if (logits[t] > best_logit) {
        best_logit = logits[t];
        best = t;
      }
    }
    return best;
  }
  // One pass over the mask words in ascending token order with a strict comparison: the
  // first index wins ties, as llama.cpp's greedy sampler does over a masked candidate
  // array. A zero word skips 32 tokens; a full word is a plain run of 32 logits.
  const size_t n_words = mask_.size();
  for (size_t w = 0; w < n_words; ++w) {
    uint32_t bits = mask_[w];
    if (bits == 0) continue;
    const size_t base = w * 32;
    if (bits == 0xffffffffu && base + 32 <= static_cast<size_t>(n_vocab_)) {
      const float* l = logits + base;
      size_t at = 32;
      float m = best_logit;
      for (size_t i = 0; i < 32; ++i) {
        if (l[i] > m) {
          m = l[i];
          at = i;
        }
      }
      if (at < 32 && (best == LLAMA_TOKEN_NULL || m > best_logit)) {
        best_logit = m;
        best = static_cast<Token>(base + at);
      } else if (best == LLAMA_TOKEN_NULL) {
        // Every logit here is -inf (or NaN): the first allowed token, like the bit loop.
        best = static_cast<Token>(base);
        best_logit = l[0];
      }
      continue;
    }
    while (bits != 0) {
      const Token t = static_cast<Token>(base + static_cast<size_t>(std::countr_zero(bits)));
      bits &= bits - 1;
      if (best == LLAMA_TOKEN_NULL || logits[t] > best_logit) {
        best_logit = logits[t];
        best = t;
      }
    }
  }
  return best;
}

Token Generator::sample_temp(const float* logits, bool masked, Token draft, bool& accepted) {
  cur_.clear();
  if (masked) {
    for (size_t w = 0; w < mask_.size(); ++w) {
      uint32_t bits = mask_[w];
      while (bits != 0) {
        const Token t = static_cast<Token>(w * 32 + static_cast<size_t>(std::countr_zero(bits)));
        bits &= bits - 1;
        cur_.push_back(llama_token_data{t, logits[t], 0.0f});
      }
    }
  } else {
    for (Token t = 0; t < n_vocab_; ++t) cur_.push_back(llama_token_data{t, logits[t], 0.0f});
  }
  llama_token_data_array arr{cur_.data(), cur_.size(), -1, false};
  llama_sampler_apply(shape_, &arr);
  if (draft != LLAMA_TOKEN_NULL && arr.size > 0) {
    // Speculative acceptance for a deterministic draft: keep it with probability p(draft)
    // under the shaped distribution; otherwise draw from p with the draft removed.
    float max_l = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < arr.size; ++i) max_l = std::max(max_l, arr.data[i].logit);
    double sum = 0.0;
    double p_draft = 0.0;
    size_t draft_at = arr.size;
    for (size_t i = 0; i < arr.size; ++i) {
      const double p = std::exp(static_cast<double>(arr.data[i].logit - max_l));
      sum += p;
      if (arr.data[i].id == draft) {
        p_draft = p;
        draft_at = i;
      }
    }
    p_draft = sum > 0 ? p_draft / sum : 0.0;
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(accept_rng_);
    if (draft_at < arr.size && u < p_draft) {
      accepted = true;
      llama_sampler_accept(shape_, draft);
      return draft;
    }
    if (draft_at < arr.size) {
      arr.data[draft_at] = arr.data[arr.size - 1];
      --arr.size;
      arr.sorted = false;
    }
    if (arr.size == 0) return LLAMA_TOKEN_NULL;  // cannot happen: p(draft) was 1
  }
  llama_sampler_apply(dist_, &arr);
  if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return LLAMA_TOKEN_NULL;
  const Token t = arr.data[arr.selected].id;
  llama_sampler_accept(shape_, t);
  accepted = t == draft;
  return t;
}

// The constraint allows no token: it has ended (completed) or cannot go on (dead end).
void Generator::finish_nothing_allowed() {
  finish(constraint_->is_terminated() || constraint_->is_completed()
             ? StopReason::constraint_completed
             : StopReason::constraint_dead_end);
}

Token Generator::sample(const float* logits, Token draft, bool& accepted) {
  accepted = false;
  bool masked = false;
  if (constraint_) {
    size_t n_allowed = 0;
    size_t n_non_eog = 0;
    ensure_mask(n_allowed, n_non_eog);
    if (n_allowed == 0) {
      finish_nothing_allowed();
      return LLAMA_TOKEN_NULL;
    }
    if (n_non_eog == 0) {
      finish(StopReason::constraint_completed);
      return LLAMA_TOKEN_NULL;
    }
    if (n_allowed == 1) {
      // A forced step: no logits are looked at and no random draw is consumed, with or
      // without skipping, so both paths stay in step.
      const Token t = first_allowed();
      accepted = t == draft;
      return t;
    }
    masked = true;
  }
  const auto t0 = Clock::now();
  Token t;
  if (config_.temp <= 0) {
    t = argmax(logits, masked);
    accepted = t == draft;
  } else {
    t = sample_temp(logits, masked, draft, accepted);
  }
  stats_.sample_ms += ms_between(t0, Clock::now());
  if (t == LLAMA_TOKEN_NULL) {
    finish(StopReason::constraint_dead_end);
    return t;
  }
  if (llama_vocab_is_eog(vocab_, t)) {
    finish(StopReason::eog);
    return LLAMA_TOKEN_NULL;
  }
  return t;
}

size_t Generator::append_piece(Token token) {
  char buf[128];
  int32_t n = llama_token_to_piece(vocab_, token, buf, sizeof(buf), 0, false);
  if (n >= 0) {
    text_.append(buf, static_cast<size_t>(n));
    return static_cast<size_t>(n);
  }
  std::string big(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab_, token, big.data(), static_cast<int32_t>(big.size()), 0, false);
  if (n < 0)
    throw std::runtime_error("llama_token_to_piece failed for token " + std::to_string(token));
  text_.append(big.data(), static_cast<size_t>(n));
  return static_cast<size_t>(n);
}

bool Generator::emit(Token token, bool in_kv) {
  if (constraint_) {
    const auto t0 = Clock::now();
    mask_valid_ = false;
    const bool ok = constraint_->accept_token(token);
    stats_.mask_ms += ms_between(t0, Clock::now());
    if (!ok) {
      // Only reachable with a constraint whose masks and accept_token disagree.
      finish(StopReason::constraint_dead_end);
      return false;
    }
  }
  out_tokens_.push_back(token);
  step_tokens_.push_back(token);
  ++stats_.tokens_emitted;
  if (!in_kv) {
    pending_.push_back(token);
    logits_valid_ = false;
  }
  const size_t before = text_.size();
  append_piece(token);
  if (max_stop_len_ > 0) {
    const size_t from = before + 1 >= max_stop_len_ ? before + 1 - max_stop_len_ : 0;
    size_t cut = std::string::npos;
    for (const auto& s : config_.stop_strings) {
      const size_t at = text_.find(s, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      text_.resize(cut);
      finish(StopReason::stop_string);
      return false;
    }
  }
  if (config_.max_tokens > 0 && out_tokens_.size() >= config_.max_tokens) {
    finish(StopReason::max_tokens);
    return false;
  }
  return true;
}

void Generator::finish(StopReason reason) {
  if (stop_ != StopReason::none) return;
  stop_ = reason;
  stats_.stop = reason;
  stats_.total_ms = ms_between(t_start_, Clock::now());
  if (config_.print_stats) std::fprintf(stderr, "lacuna stats: %s\n", stats_.to_json().c_str());
}

void Generator::make_drafts(std::string_view forced, std::vector<Token>& drafts) {
  drafts.clear();
  if (forced.empty()) return;
  static thread_local decode::ForcedStringScratch scratch;
  decode::tokenize_forced_string(vocab_, forced, drafts, scratch);
  // Keep the tokens the constraint takes in order (a draft the mask forbids would be
  // rejected anyway), then undo them.
  size_t ok = 0;
  for (Token d : drafts) {
    if (!constraint_->accept_token(d)) break;
    ++ok;
  }
  if (ok > 0 && !constraint_->rollback(ok)) {
    throw std::logic_error("Generator: the constraint cannot roll back " + std::to_string(ok) +
                           " draft tokens");
  }
  drafts.resize(ok);
}

Step Generator::next() {
  if (!prefilled_) throw std::logic_error("Generator::next: call prefill() first");
  step_tokens_.clear();
  step_text_begin_ = text_.size();
  auto make_step = [&]() {
    stats_.total_ms = ms_between(t_start_, Clock::now());
    Step s;
    s.tokens = std::span<const Token>(step_tokens_.data(), step_tokens_.size());
    const size_t b = std::min(step_text_begin_, text_.size());
    s.text = std::string_view(text_).substr(b);
    s.done = stopped();
    s.reason = stop_;
    return s;
  };
  if (stopped()) return make_step();
  const size_t budget = config_.max_tokens == 0
                            ? std::numeric_limits<size_t>::max()
                            : config_.max_tokens - std::min(config_.max_tokens, out_tokens_.size());
  if (budget == 0) {
    finish(StopReason::max_tokens);
    return make_step();
  }
  const DecodeOptions& opt = config_.decode;
  const size_t room =
      n_ctx_ - std::min<size_t>(n_ctx_, static_cast<size_t>(n_past_) + pending_.size());

  if (constraint_ && opt.skip_forced) {
    // Forced tokens are found from the mask itself (one token allowed), so the mask of the
    // first state that is not forced is kept for the sampling step that follows.
    const size_t limit = std::min({opt.max_forced, budget, room > 0 ? room - 1 : 0});
    size_t n_forced = 0;
    while (!stopped()) {
      size_t n_allowed = 0;
      size_t n_non_eog = 0;
      ensure_mask(n_allowed, n_non_eog);
      if (n_allowed == 0) {
        finish_nothing_allowed();
        break;
      }
      if (n_non_eog == 0) {
        // Only end-of-generation may follow: stop without a forward pass.
        finish(StopReason::constraint_completed);
        break;
      }
      if (n_allowed != 1 || n_forced >= limit) break;
      ++n_forced;
      ++stats_.tokens_skipped;
      emit(first_allowed(), false);
    }
    if (n_forced > 0 || stopped()) return make_step();
  }

  if (constraint_ && opt.jump_forward) {
    const auto t0 = Clock::now();
    const std::string forced = constraint_->jump_forward_string();
    make_drafts(forced, drafts_);
    stats_.mask_ms += ms_between(t0, Clock::now());
    // The last token's boundary may merge with what follows: leave it to the model.
    if (drafts_.size() >= 2 && room > drafts_.size()) {
      const size_t n = std::min(drafts_.size() - 1, budget);
      for (size_t i = 0; i < n; ++i) {
        ++stats_.jump_tokens;
        if (!emit(drafts_[i], false)) break;
      }
      drafts_.clear();
      return make_step();
    }
    drafts_.clear();
  }

  // The first token of the forced string when no draft is decoded: the sampler's choice at
  // this position still tells whether a draft would have been kept (a free observation).
  Token undrafted = LLAMA_TOKEN_NULL;
  if (!logits_valid_) {
    drafts_.clear();
    if (constraint_ && opt.verify_strings && opt.max_draft > 0 && budget > 1) {
      const auto t0 = Clock::now();
      const std::string forced = constraint_->jump_forward_string();
      make_drafts(forced, drafts_);
      stats_.mask_ms += ms_between(t0, Clock::now());
      // A pass yields at most one token past its drafts, so budget - 1 drafts suffice.
      size_t limit = std::min({opt.max_draft, budget - 1, static_cast<size_t>(n_batch_) - 1});
      if (room > pending_.size() + 1) {
        limit = std::min(limit, room - pending_.size() - 1);
      } else {
        limit = 0;
      }
      if (opt.draft_policy == DraftPolicy::always) limit = std::min(limit, draft_len_);
      if (!drafts_.empty()) {
        const Token first = drafts_[0];
        if (drafts_.size() > limit) drafts_.resize(limit);
        if (opt.draft_policy == DraftPolicy::adaptive && !drafts_.empty()) {
          drafts_.resize(opt.cost.best_draft(pending_.size(), drafts_.size(), accept_rate()));
          if (drafts_.empty()) ++stats_.draft_declined;
        }
        if (drafts_.empty()) undrafted = first;
      }
    }
    if (room < pending_.size() + 1) {
      finish(StopReason::context_full);
      return make_step();
    }
    decode_pending(drafts_);
    stats_.draft_proposed += drafts_.size();
  }

  // Sample at the current position; then walk the drafts, keeping each one the sampler
  // itself picks, and stop at the first other pick.
  size_t k = 0;
  const size_t n_draft = drafts_.size();
  for (;;) {
    const float* logits = llama_get_logits_ith(ctx_, logits_idx_);
    if (logits == nullptr)
      throw std::runtime_error("Generator: no logits for the current position");
    const Token draft = k < n_draft ? drafts_[k] : LLAMA_TOKEN_NULL;
    bool accepted = false;
    const Token t = sample(logits, draft, accepted);
    if (t != LLAMA_TOKEN_NULL && (draft != LLAMA_TOKEN_NULL || undrafted != LLAMA_TOKEN_NULL)) {
      accept_trials_ += 1;
      if (accepted || t == undrafted) accept_hits_ += 1;
    }
    if (t != LLAMA_TOKEN_NULL && accepted) {
      ++stats_.draft_accepted;
      ++k;
      ++logits_idx_;
      if (!emit(t, true)) break;
      continue;  // the next position's logits are in the same batch
    }
    if (t != LLAMA_TOKEN_NULL) emit(t, false);
    break;
  }
  if (n_draft > 0) {
    // Adapt the draft length to what the model accepts: double it after a fully accepted
    // draft, else propose one more than was accepted. Exactness does not depend on it.
    draft_len_ = k == n_draft ? std::min(opt.max_draft, std::max<size_t>(1, draft_len_ * 2))
                              : std::max<size_t>(1, k + 1);
  }
  if (k < n_draft) {
    // Roll back the KV of the rejected drafts.
    const llama_pos from = n_past_ - static_cast<llama_pos>(n_draft - k);
    llama_memory_seq_rm(llama_get_memory(ctx_), config_.seq, from, -1);
    n_past_ = from;
    logits_valid_ = false;
  }
  drafts_.clear();
  return make_step();
}

StopReason Generator::generate(const std::function<bool(const Step&)>& on_step) {
  for (;;) {
    const Step s = next();
    if (on_step && !on_step(s)) return s.done ? s.reason : StopReason::none;
    if (s.done) return s.reason;
  }
}

}  // namespace lacuna
