// generator.cpp — the decoder of one sequence: forced-token skipping with deferred batch
// fill, verified forced strings (speculative acceptance), tier-2 jump-forward, stats; its
// steps run alone (next) or many in one shared batch (step_many), docs/runtime.md.
#include "lacuna/generator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "decode/forced_string.h"
#include "decode/mask_worker.h"
#include "llama/backend_mask.h"
#include "runtime/decode_parts.h"
#include "runtime/log_sum_exp.h"

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
  auto eog_mask = std::make_shared<std::vector<uint32_t>>(words, 0);
  auto eog_tokens = std::make_shared<std::vector<Token>>();
  for (Token t = 0; t < n_vocab_; ++t) {
    if (llama_vocab_is_eog(vocab_, t)) {
      bitmask_set(eog_mask->data(), t);
      eog_tokens->push_back(t);
    }
  }
  eog_mask_ = std::move(eog_mask);
  eog_tokens_ = std::move(eog_tokens);
  build_samplers();
  for (const auto& s : config_.stop_strings) max_stop_len_ = std::max(max_stop_len_, s.size());
  drafts_.reserve(config_.decode.max_draft + 1);
  step_tokens_.reserve(config_.decode.max_forced + config_.decode.max_draft + 2);

  const llama_pos pos_max = llama_memory_seq_pos_max(llama_get_memory(ctx_), config_.seq);
  n_past_ = pos_max < 0 ? 0 : pos_max + 1;
  history_base_ = n_past_;
}

Generator::~Generator() {
  settle_mask();
  detach_backend();
  if (batch_.token != nullptr) llama_batch_free(batch_);
  if (shape_ != nullptr) llama_sampler_free(shape_);
  if (dist_ != nullptr) llama_sampler_free(dist_);
}

void Generator::build_samplers() {
  if (shape_ != nullptr) llama_sampler_free(shape_);
  if (dist_ != nullptr) llama_sampler_free(dist_);
  shape_ = nullptr;
  dist_ = nullptr;
  if (config_.temp > 0) {
    shape_ = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (config_.top_k > 0) llama_sampler_chain_add(shape_, llama_sampler_init_top_k(config_.top_k));
    if (config_.top_p < 1.0f)
      llama_sampler_chain_add(shape_, llama_sampler_init_top_p(config_.top_p, 1));
    if (config_.min_p > 0)
      llama_sampler_chain_add(shape_, llama_sampler_init_min_p(config_.min_p, 1));
    llama_sampler_chain_add(shape_, llama_sampler_init_temp(config_.temp));
    dist_ = llama_sampler_init_dist(config_.seed);
  }
  accept_rng_.seed(config_.seed ^ 0x5bd1e995u);
  if (config_.decode.backend_sampling && !track_surprisal_ && logprobs_top_ < 0) {
    attach_backend(nullptr);
  } else {
    detach_backend();
  }
}

void Generator::set_track_surprisal(bool on) {
  track_surprisal_ = on;
  if (on && backend_chain_ != nullptr) {
    std::fprintf(stderr,
                 "lacuna: surprisal tracking needs the logits on the host; sequence %d samples "
                 "on the CPU\n",
                 config_.seq);
    detach_backend();
  }
}

void Generator::set_logprobs(int top_n) {
  if (top_n > 20) throw std::invalid_argument("Generator::set_logprobs: at most 20 top tokens");
  const int before = logprobs_top_;
  logprobs_top_ = top_n < 0 ? -1 : top_n;
  if (logprobs_top_ < 0) {
    if (before >= 0) {
      config_.decode.skip_forced = decode_before_logprobs_.skip_forced;
      config_.decode.verify_strings = decode_before_logprobs_.verify_strings;
      config_.decode.jump_forward = decode_before_logprobs_.jump_forward;
    }
    return;
  }
  if (before < 0) decode_before_logprobs_ = config_.decode;
  // Every token from logits: a skipped or drafted token has none of its own.
  config_.decode.skip_forced = false;
  config_.decode.verify_strings = false;
  config_.decode.jump_forward = false;
  if (backend_chain_ != nullptr) {
    std::fprintf(stderr,
                 "lacuna: log-probabilities need the logits on the host; sequence %d samples on "
                 "the CPU\n",
                 config_.seq);
    detach_backend();
  }
}

void Generator::detach_backend() {
  if (backend_chain_ == nullptr) return;
  llama_set_sampler(ctx_, config_.seq, nullptr);
  llama_sampler_free(backend_chain_);
  backend_chain_ = nullptr;
  backend_staged_ = nullptr;
  backend_rows_max_ = 1;
  backend_token_ = LLAMA_TOKEN_NULL;
}

void Generator::attach_backend(llama_sampler* chain) {
  detach_backend();
  if (chain == nullptr) {
    chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain,
                            backend::make_staged_mask_sampler(static_cast<size_t>(n_vocab_)));
    if (!bias_.empty()) {
      llama_sampler_chain_add(
          chain, llama_sampler_init_logit_bias(n_vocab_, static_cast<int32_t>(bias_.size()),
                                               bias_.data()));
    }
    if (config_.temp > 0) {
      if (config_.top_k > 0)
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(config_.top_k));
      if (config_.top_p < 1.0f)
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(config_.top_p, 1));
      if (config_.min_p > 0)
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(config_.min_p, 1));
      llama_sampler_chain_add(chain, llama_sampler_init_temp(config_.temp));
      llama_sampler_chain_add(chain, llama_sampler_init_dist(config_.seed));
    } else {
      llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    }
    llama_sampler_chain_add(chain, backend::make_token_only_sampler());
  }
  const int32_t n = llama_sampler_chain_n(chain);
  llama_sampler* staged = llama_sampler_chain_get(chain, 0);
  llama_sampler* tail = llama_sampler_chain_get(chain, n - 1);
  // The token-only tail is initialized only when every member before it runs on the backend.
  if (!llama_set_sampler(ctx_, config_.seq, chain) || !backend::backend_active(staged) ||
      !backend::token_only_active(tail)) {
    llama_set_sampler(ctx_, config_.seq, nullptr);
    llama_sampler_free(chain);
    std::fprintf(stderr,
                 "lacuna: the backend cannot run the sampler chain of sequence %d; sampling on "
                 "the CPU\n",
                 config_.seq);
    return;
  }
  backend_chain_ = chain;
  backend_staged_ = staged;
  backend_rows_max_ = std::max<size_t>(1, backend::backend_max_outputs(staged));
}

void Generator::stage_backend_rows(std::span<const Token> drafts) {
  if (backend_chain_ == nullptr) return;
  if (!constraint_) {
    backend::stage_masks(backend_staged_, {});
    return;
  }
  const auto t0 = Clock::now();
  size_t n_allowed = 0;
  size_t n_non_eog = 0;
  ensure_mask(n_allowed, n_non_eog);
  const size_t words = mask_.size();
  backend_masks_.resize(words * (1 + drafts.size()));
  std::copy(mask_.begin(), mask_.end(), backend_masks_.begin());
  size_t ok = 0;
  for (size_t k = 0; k < drafts.size(); ++k) {
    if (!constraint_->accept_token(drafts[k])) break;
    ++ok;
    constraint_->fill_next_token_bitmask(backend_masks_.data() + (k + 1) * words);
  }
  if (ok > 0 && !constraint_->rollback(ok)) {
    throw std::logic_error("Generator: the constraint cannot roll back " + std::to_string(ok) +
                           " draft tokens");
  }
  backend::stage_masks(backend_staged_,
                       std::span<const uint32_t>(backend_masks_.data(), words * (1 + ok)));
  stats_.mask_ms += ms_between(t0, Clock::now());
}

std::unique_ptr<Generator> Generator::fork(llama_seq_id seq) const {
  if (seq < 0 || static_cast<uint32_t>(seq) >= llama_n_seq_max(ctx_)) {
    throw std::invalid_argument("Generator::fork: seq " + std::to_string(seq) +
                                " outside the context's " + std::to_string(llama_n_seq_max(ctx_)) +
                                " sequences");
  }
  // A private copy without the constructor's per-vocabulary work: the immutable parts
  // (end-of-generation sets, logits until one side writes) are shared.
  std::unique_ptr<Generator> g(new Generator(*this, seq));
  return g;
}

Generator::Generator(const Generator& o, llama_seq_id seq)
    : ctx_(o.ctx_),
      vocab_(o.vocab_),
      config_(o.config_),
      constraint_(o.constraint_ ? o.constraint_->fork() : nullptr),
      n_vocab_(o.n_vocab_),
      n_ctx_(o.n_ctx_),
      n_batch_(o.n_batch_),
      mask_(o.mask_),
      mask_valid_(o.mask_valid_),
      mask_allowed_(o.mask_allowed_),
      mask_allowed_non_eog_(o.mask_allowed_non_eog_),
      eog_mask_(o.eog_mask_),
      eog_tokens_(o.eog_tokens_),
      shape_(o.shape_ != nullptr ? llama_sampler_clone(o.shape_) : nullptr),
      dist_(o.dist_ != nullptr ? llama_sampler_clone(o.dist_) : nullptr),
      accept_rng_(o.accept_rng_),
      bias_(o.bias_),
      n_past_(o.n_past_),
      history_base_(o.history_base_),
      history_(o.history_),
      pending_(o.pending_),
      draft_len_(o.draft_len_),
      accept_trials_(o.accept_trials_),
      accept_hits_(o.accept_hits_),
      logits_(o.logits_),
      logits_valid_(o.logits_valid_),
      prefilled_(o.prefilled_),
      cost_measured_(o.cost_measured_),
      logprobs_top_(o.logprobs_top_),
      decode_before_logprobs_(o.decode_before_logprobs_),
      logprobs_(o.logprobs_),
      track_surprisal_(o.track_surprisal_),
      surprisal_sum_(o.surprisal_sum_),
      surprisal_count_(o.surprisal_count_),
      out_tokens_(o.out_tokens_),
      text_(o.text_),
      step_text_begin_(text_.size()),
      max_stop_len_(o.max_stop_len_),
      stop_(o.stop_),
      stats_(o.stats_),
      t_start_(o.t_start_) {
  config_.seq = seq;
  drafts_.reserve(config_.decode.max_draft + 1);
  step_tokens_.reserve(config_.decode.max_forced + config_.decode.max_draft + 2);
  if (o.backend_chain_ != nullptr) {
    // Sampler state (the seeded draw's RNG) copied; attached to the new sequence.
    attach_backend(llama_sampler_clone(o.backend_chain_));
    backend_token_ = o.backend_token_;
  }
}

void Generator::check_token(Token t, const char* what) const {
  if (t < 0 || t >= n_vocab_) {
    throw std::invalid_argument(std::string(what) + ": token " + std::to_string(t) +
                                " outside the vocabulary of " + std::to_string(n_vocab_));
  }
}

std::unique_ptr<Generator> Generator::fresh(GeneratorConfig config) const {
  check_config(config, ctx_);
  return std::unique_ptr<Generator>(new Generator(*this, std::move(config)));
}

Generator::Generator(const Generator& proto, GeneratorConfig config)
    : ctx_(proto.ctx_),
      vocab_(proto.vocab_),
      config_(std::move(config)),
      n_vocab_(proto.n_vocab_),
      n_ctx_(proto.n_ctx_),
      n_batch_(proto.n_batch_),
      mask_(proto.mask_.size(), 0),
      eog_mask_(proto.eog_mask_),
      eog_tokens_(proto.eog_tokens_) {
  build_samplers();
  for (const auto& s : config_.stop_strings) max_stop_len_ = std::max(max_stop_len_, s.size());
  drafts_.reserve(config_.decode.max_draft + 1);
  step_tokens_.reserve(config_.decode.max_forced + config_.decode.max_draft + 2);
  const llama_pos pos_max = llama_memory_seq_pos_max(llama_get_memory(ctx_), config_.seq);
  n_past_ = pos_max < 0 ? 0 : pos_max + 1;
  history_base_ = n_past_;
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

void Generator::set_sampling(float temp, uint32_t seed, int32_t top_k, float top_p, float min_p) {
  GeneratorConfig c = config_;
  c.temp = temp;
  c.seed = seed;
  c.top_k = top_k;
  c.top_p = top_p;
  c.min_p = min_p;
  check_config(c, ctx_);
  config_ = std::move(c);
  build_samplers();
}

void Generator::reseed(uint32_t seed) {
  config_.seed = seed;
  build_samplers();
}

void Generator::set_logit_bias(std::vector<llama_logit_bias> bias) {
  for (const auto& b : bias) {
    check_token(b.token, "logit bias");
    if (std::isnan(b.bias)) throw std::invalid_argument("logit bias: NaN bias");
  }
  const bool rebuild = backend_chain_ != nullptr && !(bias_.empty() && bias.empty());
  bias_ = std::move(bias);
  if (rebuild) attach_backend(nullptr);
}

void Generator::set_stop_strings(std::vector<std::string> stop_strings) {
  GeneratorConfig c = config_;
  c.stop_strings = std::move(stop_strings);
  check_config(c, ctx_);
  config_ = std::move(c);
  max_stop_len_ = 0;
  for (const auto& s : config_.stop_strings) max_stop_len_ = std::max(max_stop_len_, s.size());
}

void Generator::rewind(llama_pos n_keep) {
  const llama_pos end = n_past_ + static_cast<llama_pos>(pending_.size());
  if (n_keep < history_base_ || n_keep > end) {
    throw std::invalid_argument("Generator::rewind: position " + std::to_string(n_keep) +
                                " outside [" + std::to_string(history_base_) + ", " +
                                std::to_string(end) + "]");
  }
  history_.resize(static_cast<size_t>(n_keep - history_base_));
  if (n_keep <= n_past_) {
    n_past_ = n_keep;
    pending_.clear();
  } else {
    pending_.resize(static_cast<size_t>(n_keep - n_past_));
  }
  logits_valid_ = false;
}

void Generator::adopt(std::span<const Token> tokens) {
  if (!pending_.empty()) throw std::logic_error("Generator::adopt: tokens are pending");
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  n_past_ += static_cast<llama_pos>(tokens.size());
  logits_valid_ = false;
}

void Generator::snapshot_logits(const float* logits) {
  if (logits == nullptr) throw std::runtime_error("Generator: no logits for the current position");
  // Forks share the buffer until one of them writes.
  if (!logits_ || logits_.use_count() > 1) {
    logits_ = std::make_shared<std::vector<float>>(static_cast<size_t>(n_vocab_));
  }
  std::memcpy(logits_->data(), logits, sizeof(float) * static_cast<size_t>(n_vocab_));
  logits_valid_ = true;
}

const float* Generator::logits() const {
  return logits_valid_ && logits_ && backend_chain_ == nullptr ? logits_->data() : nullptr;
}

void Generator::start_generation(std::span<const Token> prompt) {
  const DecodeOptions& opt = config_.decode;
  // The generation's clock starts before a cost measurement, so that prefill_ms and
  // total_ms include it.
  const auto t_begin = Clock::now();
  const bool cost_used = (opt.verify_strings && opt.draft_policy == DraftPolicy::adaptive) ||
                         (opt.skip_forced && opt.split_pending);
  // With backend sampling a decode may carry one output row per sequence only: no measurement.
  if (opt.measure_cost && cost_used && !cost_measured_ && backend_chain_ == nullptr) {
    // Before the prompt is decoded: the measurement overwrites the context's logits. Cached
    // per process, model and thread count, so only the first generator pays for it (counted
    // in its prefill_ms).
    config_.decode.cost = cached_decode_cost(ctx_, config_.seq);
    cost_measured_ = true;
  }
  out_tokens_.clear();
  logprobs_.clear();
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
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  logits_valid_ = false;
  prefilled_ = false;
}

void Generator::mark_decoded(size_t n) {
  n = std::min(n, pending_.size());
  n_past_ += static_cast<llama_pos>(n);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
}

void Generator::decode_failed(int32_t status, size_t n_decoded, const char* what) {
  // The sequence holds what llama.cpp kept; the rest stays pending (a later step tries
  // again).
  mark_decoded(n_decoded);
  logits_valid_ = false;
  throw std::runtime_error(std::string("Generator: llama_decode failed (") + what + ", status " +
                           std::to_string(status) + ": " + runtime::decode_status_text(status) +
                           ")");
}

namespace {

// The shared batch of a step_many/prefill_many/commit_many call: the caller's, or the first
// generator's own (allocated on first use), sized for the context's n_batch.
llama_batch& shared_batch(const Generator::Shared& shared, llama_batch& own, int32_t n_batch) {
  if (shared.batch != nullptr) return *shared.batch;
  if (own.token == nullptr) own = llama_batch_init(n_batch, 0, 1);
  return own;
}

// The generators of one batched call, with one item (prompt, token) each: false when there
// is nothing to do. Throws std::invalid_argument otherwise when they do not fit together.
bool check_batch(std::span<Generator* const> gens, size_t n_items, const char* what) {
  if (gens.size() != n_items) {
    throw std::invalid_argument(std::string("Generator::") + what + ": one item per generator");
  }
  if (gens.empty()) return false;
  for (size_t i = 0; i < gens.size(); ++i) {
    if (gens[i] == nullptr) throw std::invalid_argument("Generator: null generator in a batch");
    if (gens[i]->context() != gens[0]->context()) {
      throw std::invalid_argument("Generator: generators of one batch must share a context");
    }
    for (size_t j = 0; j < i; ++j) {
      if (gens[j]->seq() == gens[i]->seq()) {
        throw std::invalid_argument("Generator: two generators of one batch use sequence " +
                                    std::to_string(gens[i]->seq()));
      }
    }
  }
  return true;
}

}  // namespace

void Generator::prefill(std::span<const Token> prompt) {
  Generator* self = this;
  const std::span<const Token> prompts[1] = {prompt};
  prefill_many(std::span<Generator* const>(&self, 1), prompts);
}

void Generator::after_prefill(size_t n_decoded, int32_t out0) {
  n_past_ += static_cast<llama_pos>(n_decoded);
  pending_.clear();
  if (backend_chain_ != nullptr) {
    backend_token_ = llama_get_sampled_token_ith(ctx_, out0);
    if (backend_token_ == LLAMA_TOKEN_NULL)
      throw std::runtime_error("Generator: the backend sampled no token");
    logits_valid_ = true;
    return;
  }
  snapshot_logits(llama_get_logits_ith(ctx_, out0));
}

void Generator::prefill_many(std::span<Generator* const> gens,
                             std::span<const std::span<const Token>> prompts,
                             const Shared& shared) {
  if (!check_batch(gens, prompts.size(), "prefill_many")) return;
  // Every check before anything changes.
  for (size_t i = 0; i < gens.size(); ++i) {
    Generator& g = *gens[i];
    for (Token t : prompts[i]) {
      g.check_token(t, "Generator::prefill");
    }
    if (prompts[i].empty() && g.pending_.empty()) {
      throw std::invalid_argument("Generator::prefill: empty prompt");
    }
    if (static_cast<size_t>(g.n_past_) + g.pending_.size() + prompts[i].size() >= g.n_ctx_) {
      throw std::runtime_error("Generator::prefill: " + std::to_string(prompts[i].size()) +
                               " prompt tokens do not fit in the context (" +
                               std::to_string(g.n_past_) + " used of " + std::to_string(g.n_ctx_) +
                               ")");
    }
  }
  std::vector<runtime::Part> parts(gens.size());
  for (size_t i = 0; i < gens.size(); ++i) {
    Generator& g = *gens[i];
    g.start_generation(prompts[i]);
    g.stage_backend_rows({});
    parts[i] = runtime::Part{g.config_.seq, g.n_past_, g.pending_, 1};
  }
  Generator& g0 = *gens[0];
  const int32_t rc = runtime::decode_parts(
      g0.ctx_, shared_batch(shared, g0.batch_, g0.n_batch_), g0.n_batch_, parts,
      [&](size_t p, int32_t out0) { gens[p]->after_prefill(parts[p].n_decoded, out0); }, nullptr,
      shared.on_full);
  int32_t failed = -1;
  for (size_t i = 0; i < gens.size(); ++i) {
    Generator& g = *gens[i];
    g.stats_.prefill_ms = ms_between(g.t_start_, Clock::now());
    if (rc == 0 || g.logits_valid_) {
      g.prefilled_ = true;
      continue;
    }
    // Not decoded: the prompt's rest is dropped, the sequence holds what was decoded.
    g.n_past_ += static_cast<llama_pos>(parts[i].n_decoded);
    g.pending_.clear();
    g.history_.resize(static_cast<size_t>(g.n_past_ - g.history_base_));
    failed = static_cast<int32_t>(i);
  }
  if (failed >= 0) {
    throw std::runtime_error(std::string("Generator: llama_decode failed (prefill, status ") +
                             std::to_string(rc) + ": " + runtime::decode_status_text(rc) + ")");
  }
}

void Generator::commit(Token token) {
  Generator* self = this;
  commit_many(std::span<Generator* const>(&self, 1), std::span<const Token>(&token, 1));
}

void Generator::commit_many(std::span<Generator* const> gens, std::span<const Token> tokens,
                            const Shared& shared) {
  if (!check_batch(gens, tokens.size(), "commit_many")) return;
  for (size_t i = 0; i < gens.size(); ++i) {
    Generator& g = *gens[i];
    const Token t = tokens[i];
    if (!g.prefilled_) throw std::logic_error("Generator::commit: call prefill() first");
    g.check_token(t, "Generator::commit");
    if (static_cast<size_t>(g.n_past_) + g.pending_.size() + 1 >= g.n_ctx_) {
      throw std::runtime_error("Generator::commit: the context is full (" +
                               std::to_string(g.n_past_) + " of " + std::to_string(g.n_ctx_) + ")");
    }
    if (g.constraint_) {
      size_t n_allowed = 0;
      size_t n_non_eog = 0;
      g.ensure_mask(n_allowed, n_non_eog);
      if (!bitmask_test(g.mask_.data(), t)) {
        throw std::invalid_argument("Generator::commit: the constraint does not allow token " +
                                    std::to_string(t));
      }
    }
  }
  std::vector<runtime::Part> parts(gens.size());
  for (size_t i = 0; i < gens.size(); ++i) {
    Generator& g = *gens[i];
    g.step_tokens_.clear();
    g.step_text_begin_ = g.text_.size();
    if (g.logits_valid_ && g.backend_chain_ == nullptr) {
      g.count_surprisal(g.logits_->data(), tokens[i]);
      if (g.logprobs_top_ >= 0) g.record_logprob(g.logits_->data(), tokens[i]);
    }
    g.emit(tokens[i], false);
    g.stage_backend_rows({});
    parts[i] = runtime::Part{g.config_.seq, g.n_past_, g.pending_, 1};
  }
  Generator& g0 = *gens[0];
  const int32_t rc = runtime::decode_parts(
      g0.ctx_, shared_batch(shared, g0.batch_, g0.n_batch_), g0.n_batch_, parts,
      [&](size_t p, int32_t out0) {
        Generator& g = *gens[p];
        g.stats_.forward_passes += parts[p].n_calls;
        g.stats_.decode_ms += parts[p].ms;
        g.stats_.tokens_batch_filled += parts[p].tokens.size() - 1;
        g.after_prefill(parts[p].n_decoded, out0);
      },
      nullptr, shared.on_full);
  if (rc != 0) {
    for (size_t i = 0; i < gens.size(); ++i) {
      Generator& g = *gens[i];
      if (g.logits_valid_) continue;
      g.mark_decoded(parts[i].n_decoded);
    }
    throw std::runtime_error(std::string("Generator: llama_decode failed (commit, status ") +
                             std::to_string(rc) + ": " + runtime::decode_status_text(rc) + ")");
  }
}

void Generator::extend(std::span<const Token> tokens, const Shared& shared) {
  if (tokens.empty()) throw std::invalid_argument("Generator::extend: no tokens");
  for (Token t : tokens) {
    check_token(t, "Generator::extend");
  }
  if (static_cast<size_t>(n_past_) + pending_.size() + tokens.size() >= n_ctx_) {
    throw std::invalid_argument("Generator::extend: " + std::to_string(tokens.size()) +
                                " tokens do not fit in the context (" + std::to_string(n_past_) +
                                " used of " + std::to_string(n_ctx_) + ")");
  }
  pending_.insert(pending_.end(), tokens.begin(), tokens.end());
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  logits_valid_ = false;
  stage_backend_rows({});
  runtime::Part part{config_.seq, n_past_, pending_, 1};
  const int32_t rc = runtime::decode_parts(
      ctx_, shared_batch(shared, batch_, n_batch_), n_batch_, std::span<runtime::Part>(&part, 1),
      [&](size_t, int32_t out0) { after_prefill(part.n_decoded, out0); }, nullptr, shared.on_full);
  stats_.forward_passes += part.n_calls;
  stats_.decode_ms += part.ms;
  if (rc != 0 && !logits_valid_) {
    // Not decoded: drop what did not make it, keep what the sequence holds.
    n_past_ += static_cast<llama_pos>(part.n_decoded);
    pending_.clear();
    history_.resize(static_cast<size_t>(n_past_ - history_base_));
    throw std::runtime_error(std::string("Generator: llama_decode failed (extend, status ") +
                             std::to_string(rc) + ": " + runtime::decode_status_text(rc) + ")");
  }
}

Token Generator::produce() {
  if (!prefilled_) throw std::logic_error("Generator::produce: call prefill() first");
  if (!logits_valid_) {
    throw std::logic_error(
        "Generator::produce: no logits at the current position (commit a token)");
  }
  const Pick p = backend_chain_ != nullptr ? pick(nullptr, LLAMA_TOKEN_NULL, backend_token_)
                                           : pick(logits_->data(), LLAMA_TOKEN_NULL);
  return p.token;
}

void Generator::fill_mask() {
  constraint_->fill_next_token_bitmask(mask_.data());
  size_t n = 0;
  for (uint32_t w : mask_) n += static_cast<size_t>(std::popcount(w));
  size_t n_eog = 0;
  for (Token t : *eog_tokens_) n_eog += bitmask_test(mask_.data(), t) ? 1 : 0;
  mask_allowed_ = n;
  mask_allowed_non_eog_ = n - n_eog;
  mask_valid_ = true;
}

void Generator::launch_mask() {
  if (!mask_worker_) mask_worker_ = std::make_unique<decode::MaskWorker>();
  mask_in_flight_ = true;
  mask_worker_->submit(
      [](void* arg) {
        auto* g = static_cast<Generator*>(arg);
        const auto t0 = Clock::now();
        g->fill_mask();
        g->mask_job_ms_ = ms_between(t0, Clock::now());
      },
      this);
}

void Generator::settle_mask() {
  if (!mask_in_flight_) return;
  const auto t0 = Clock::now();
  mask_worker_->wait();
  mask_in_flight_ = false;
  stats_.mask_ms += ms_between(t0, Clock::now());  // the part left on the critical path
  stats_.mask_overlapped_ms += mask_job_ms_;
}

void Generator::ensure_mask(size_t& n_allowed, size_t& n_allowed_non_eog) {
  settle_mask();
  if (!mask_valid_) {
    const auto t0 = Clock::now();
    fill_mask();
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
    cur_.reserve(static_cast<size_t>(n_vocab_));
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
  accepted = t == draft;
  return t;
}

const float* Generator::biased(const float* logits) {
  if (bias_.empty()) return logits;
  biased_.assign(logits, logits + n_vocab_);
  for (const auto& b : bias_) biased_[static_cast<size_t>(b.token)] += b.bias;
  return biased_.data();
}

void Generator::count_surprisal(const float* logits, Token token) {
  // -log p(token) under the model's distribution (raw logits: no bias, mask or temperature).
  surprisal_sum_ += runtime::log_sum_exp(logits, n_vocab_) - static_cast<double>(logits[token]);
  ++surprisal_count_;
}

void Generator::record_logprob(const float* logits, Token token) {
  const double log_z = runtime::log_sum_exp(logits, n_vocab_);
  TokenLogprob r;
  r.token = token;
  r.logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z);
  if (logprobs_top_ > 0) {
    // The best top_n by logit (ties: lower id first), without sorting the vocabulary.
    const auto better = [&](Token a, Token b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::vector<Token> best;
    best.reserve(static_cast<size_t>(logprobs_top_) + 1);
    for (Token i = 0; i < n_vocab_; ++i) {
      if (best.size() == static_cast<size_t>(logprobs_top_) && !better(i, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
      if (best.size() > static_cast<size_t>(logprobs_top_)) best.pop_back();
    }
    for (Token b : best) {
      r.top.emplace_back(b, static_cast<float>(static_cast<double>(logits[b]) - log_z));
    }
  }
  logprobs_.push_back(std::move(r));
}

// The constraint allows no token: it has ended (completed) or cannot go on (dead end).
StopReason Generator::nothing_allowed_reason() const {
  return constraint_->is_terminated() || constraint_->is_completed()
             ? StopReason::constraint_completed
             : StopReason::constraint_dead_end;
}

Generator::Pick Generator::pick(const float* logits, Token draft, Token backend_token) {
  Pick p;
  bool masked = false;
  if (constraint_) {
    size_t n_allowed = 0;
    size_t n_non_eog = 0;
    ensure_mask(n_allowed, n_non_eog);
    if (n_allowed == 0) {
      p.stop = nothing_allowed_reason();
      return p;
    }
    if (n_non_eog == 0) {
      p.stop = StopReason::constraint_completed;
      return p;
    }
    if (n_allowed == 1) {
      // A forced step: no logits are looked at and no random draw is consumed, with or
      // without skipping, so both paths stay in step.
      p.token = first_allowed();
      p.accepted = p.token == draft;
      return p;
    }
    masked = true;
  }
  const auto t0 = Clock::now();
  if (backend_chain_ != nullptr) {
    // The graph sampled this position with its mask (staged before the pass). A draft is kept
    // when the graph's own draw equals it: the emitted token is always a draw from the
    // position's masked, shaped distribution (greedy: its argmax), so the output is
    // distributed as the plain path's.
    p.token = backend_token;
    p.accepted = p.token != LLAMA_TOKEN_NULL && p.token == draft;
    if (p.token != LLAMA_TOKEN_NULL) llama_sampler_accept(backend_chain_, p.token);
  } else {
    const float* l = biased(logits);
    if (config_.temp <= 0) {
      p.token = argmax(l, masked);
      p.accepted = p.token == draft;
    } else {
      p.token = sample_temp(l, masked, draft, p.accepted);
    }
  }
  stats_.sample_ms += ms_between(t0, Clock::now());
  if (p.token == LLAMA_TOKEN_NULL) {
    p.stop = StopReason::constraint_dead_end;
  } else if (llama_vocab_is_eog(vocab_, p.token)) {
    p.stop = StopReason::eog;
  }
  return p;
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
  if (shape_ != nullptr) llama_sampler_accept(shape_, token);
  out_tokens_.push_back(token);
  step_tokens_.push_back(token);
  ++stats_.tokens_emitted;
  history_.push_back(token);
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

void Generator::begin_step() {
  if (!prefilled_) throw std::logic_error("Generator::next: call prefill() first");
  step_tokens_.clear();
  step_text_begin_ = text_.size();
  undrafted_ = LLAMA_TOKEN_NULL;
  drafts_.clear();
}

Step Generator::last_step() const {
  Step s;
  s.tokens = std::span<const Token>(step_tokens_.data(), step_tokens_.size());
  const size_t b = std::min(step_text_begin_, text_.size());
  s.text = std::string_view(text_).substr(b);
  s.done = stopped();
  s.reason = stop_;
  return s;
}

// The first half of a step: forced tokens, jump-forward and the draft are settled here;
// what remains is sampling at the current position (logits ready) or a forward pass.
Generator::Plan Generator::plan(bool alone) {
  if (stopped()) return Plan::done;
  const size_t budget = config_.max_tokens == 0
                            ? std::numeric_limits<size_t>::max()
                            : config_.max_tokens - std::min(config_.max_tokens, out_tokens_.size());
  if (budget == 0) {
    finish(StopReason::max_tokens);
    return Plan::done;
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
        finish(nothing_allowed_reason());
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
    if (n_forced > 0 || stopped()) return Plan::done;
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
      return Plan::done;
    }
    drafts_.clear();
  }

  if (logits_valid_) return Plan::sample;

  // The first token of the forced string when no draft is decoded: the sampler's choice at
  // this position still tells whether a draft would have been kept (a free observation).
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
    // Backend sampling: the context's outputs per sequence bound the rows of one pass.
    if (backend_chain_ != nullptr) limit = std::min(limit, backend_rows_max_ - 1);
    if (!drafts_.empty()) {
      const Token first = drafts_[0];
      if (drafts_.size() > limit) drafts_.resize(limit);
      if (opt.draft_policy == DraftPolicy::adaptive && !drafts_.empty()) {
        drafts_.resize(opt.cost.best_draft(pending_.size(), drafts_.size(), accept_rate()));
        if (drafts_.empty()) ++stats_.draft_declined;
      }
      if (drafts_.empty()) undrafted_ = first;
    }
  }
  if (room < pending_.size() + 1) {
    finish(StopReason::context_full);
    return Plan::done;
  }
  // Where the cost table says a pass of one token without logits (no output projection)
  // per pending token is cheaper than one batch of them all (llama.cpp's matrix-matrix
  // kernels can cost more per token than its matrix-vector one), the pending tokens but the
  // last go alone. Their KV is then computed exactly as the plain path computes it. Only
  // for a sequence decoded alone: in a shared batch the rows ride along with others.
  if (alone && opt.split_pending && pending_.size() >= 2 &&
      opt.cost.split_pending(pending_.size(), drafts_.size())) {
    while (pending_.size() > 1) {
      decode_alone(std::span<const Token>(pending_.data(), 1), "pending token");
      ++stats_.tokens_filled_alone;
    }
  }
  part_tokens_.assign(pending_.begin(), pending_.end());
  part_tokens_.insert(part_tokens_.end(), drafts_.begin(), drafts_.end());
  stage_backend_rows(drafts_);
  // The position's mask is needed only once the pass is done: compute it meanwhile.
  if (opt.overlap_mask && constraint_ && !mask_valid_ && backend_chain_ == nullptr) launch_mask();
  return Plan::decode;
}

// One pass of `tokens` (a prefix of pending_) without logits, for this sequence alone.
void Generator::decode_alone(std::span<const Token> tokens, const char* what) {
  runtime::Part part{config_.seq, n_past_, tokens, 0};
  const int32_t rc = runtime::decode_parts(ctx_, shared_batch(Shared{}, batch_, n_batch_), n_batch_,
                                           std::span<runtime::Part>(&part, 1), {});
  stats_.forward_passes += part.n_calls;
  stats_.decode_ms += part.ms;
  if (rc != 0) decode_failed(rc, part.n_decoded, what);
  mark_decoded(tokens.size());
}

// The second half of a step: sample at the current position (logits from the pass that
// just ran, batch index out0 on, when `live`; else the kept logits), then walk the drafts,
// keeping each one the sampler itself picks, and stop at the first other pick.
void Generator::take_outputs(int32_t out0, bool live) {
  size_t k = 0;
  const size_t n_draft = live ? drafts_.size() : 0;
  const DecodeOptions& opt = config_.decode;
  for (;;) {
    const Token draft = k < n_draft ? drafts_[k] : LLAMA_TOKEN_NULL;
    const float* logits = nullptr;
    Token sampled = LLAMA_TOKEN_NULL;
    if (backend_chain_ != nullptr) {
      sampled =
          live ? llama_get_sampled_token_ith(ctx_, out0 + static_cast<int32_t>(k)) : backend_token_;
    } else {
      logits = live ? llama_get_logits_ith(ctx_, out0 + static_cast<int32_t>(k))
                    : (logits_ ? logits_->data() : nullptr);
      if (logits == nullptr)
        throw std::runtime_error("Generator: no logits for the current position");
    }
    const Pick p = pick(logits, draft, sampled);
    if (p.stop != StopReason::none) {
      finish(p.stop);
      break;
    }
    const Token t = p.token;
    if (draft != LLAMA_TOKEN_NULL || undrafted_ != LLAMA_TOKEN_NULL) {
      accept_trials_ += 1;
      if (p.accepted || t == undrafted_) accept_hits_ += 1;
    }
    if (track_surprisal_ && logits != nullptr) count_surprisal(logits, t);
    if (logprobs_top_ >= 0 && logits != nullptr) record_logprob(logits, t);
    if (p.accepted && draft != LLAMA_TOKEN_NULL) {
      ++stats_.draft_accepted;
      ++k;
      if (!emit(t, true)) break;
      continue;  // the next position's logits are in the same batch
    }
    emit(t, false);
    break;
  }
  logits_valid_ = false;
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
  }
  drafts_.clear();
}

Step Generator::next() {
  Generator* self = this;
  step_many(std::span<Generator* const>(&self, 1));
  return last_step();
}

void Generator::step_many(std::span<Generator* const> gens, const Shared& shared) {
  if (!check_batch(gens, gens.size(), "step_many")) return;
  for (Generator* g : gens) g->begin_step();
  std::vector<Generator*> decoding;
  decoding.reserve(gens.size());
  const bool alone = gens.size() == 1;
  for (Generator* g : gens) {
    const Plan p = g->plan(alone);
    if (p == Plan::sample) {
      g->take_outputs(-1, false);  // the kept logits, before any pass overwrites the context's
    } else if (p == Plan::decode) {
      decoding.push_back(g);
    }
  }
  if (decoding.empty()) {
    for (Generator* g : gens) g->stats_.total_ms = ms_between(g->t_start_, Clock::now());
    return;
  }
  std::vector<runtime::Part> parts(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i) {
    Generator& g = *decoding[i];
    parts[i] = runtime::Part{g.config_.seq, g.n_past_, g.part_tokens_, 1 + g.drafts_.size()};
  }
  Generator& g0 = *decoding[0];
  // A mask computed during the pass is waited for however the pass ends.
  struct Settle {
    std::vector<Generator*>& gens;
    ~Settle() {
      for (Generator* g : gens) g->settle_mask();
    }
  } settle{decoding};
  const int32_t rc = runtime::decode_parts(
      g0.ctx_, shared_batch(shared, g0.batch_, g0.n_batch_), g0.n_batch_, parts,
      [&](size_t p, int32_t out0) {
        Generator& g = *decoding[p];
        const size_t n_pend = g.pending_.size();
        g.stats_.forward_passes += parts[p].n_calls;
        g.stats_.decode_ms += parts[p].ms;
        // Tokens decoded here other than the one whose logits were wanted had their KV
        // filled in a batch after they were emitted.
        g.stats_.tokens_batch_filled += n_pend - 1;
        g.stats_.draft_proposed += g.drafts_.size();
        g.n_past_ += static_cast<llama_pos>(parts[p].tokens.size());
        g.pending_.clear();
        g.take_outputs(out0, true);
      },
      nullptr, shared.on_full);
  for (Generator* g : decoding) g->settle_mask();
  for (Generator* g : gens) g->stats_.total_ms = ms_between(g->t_start_, Clock::now());
  if (rc != 0) {
    // Every generator whose pass did not run keeps its pending tokens for a later step.
    for (size_t i = 0; i < decoding.size(); ++i) {
      Generator& g = *decoding[i];
      if (!g.pending_.empty() && parts[i].n_decoded < parts[i].tokens.size()) {
        g.stats_.forward_passes += parts[i].n_calls;
        g.mark_decoded(parts[i].n_decoded);
        g.drafts_.clear();
        g.logits_valid_ = false;
        // No KV cell left (the cells are shared by every sequence of the context): the
        // generation ends as when its own positions run out.
        if (rc == 1) g.finish(StopReason::context_full);
      }
    }
    if (rc == 1) return;
    throw std::runtime_error(std::string("Generator: llama_decode failed (decode, status ") +
                             std::to_string(rc) + ": " + runtime::decode_status_text(rc) + ")");
  }
}

StopReason Generator::generate(const std::function<bool(const Step&)>& on_step) {
  for (;;) {
    const Step s = next();
    if (on_step && !on_step(s)) return s.done ? s.reason : StopReason::none;
    if (s.done) return s.reason;
  }
}

}  // namespace lacuna
