// generator.h — the decoder of one sequence: prefill, pull-based next(), forced-token
// skipping with deferred batch fill, verified forced strings, jump-forward, stats; and its
// hooks for the runtime (many sequences in one batch, fork, produce/commit).
//
// Semantics, exactness argument and configuration: docs/generator.md, docs/runtime.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lacuna/constraint.h"
#include "llama.h"

namespace lacuna {

namespace decode {
class MaskWorker;
}

// The cost model for verified forced strings: what one llama_decode of n tokens, each with
// logits, costs relative to a batch of one token (docs/generator.md, "Draft lengths").
struct DecodeCost {
  // relative[n-1]: cost of a batch of n tokens, each with logits, over a batch of 1
  // (relative[0] = 1).
  std::vector<double> relative;
  // relative_last[n-1]: the same batch with logits for its last token only (what a pass
  // that batch-fills pending tokens costs). Empty: taken as `relative`.
  std::vector<double> relative_last;
  // One token without logits (no output projection) over one token with logits; 0 when
  // unknown. Where `one_no_logits + 1` is below a batch of two, a pending forced token is
  // cheaper decoded alone than batch-filled (split_pending()).
  double one_no_logits = 0.0;

  // A default for CPU decoding (measured on bench-0.5b, 2 threads).
  static DecodeCost cpu_default();
  // From measured times ms[i] of batches of sizes[i] tokens (sizes increasing, starting at
  // 1), interpolated linearly in between. The sizes >= 2 are made non-decreasing by
  // averaging out-of-order neighbours (isotonic regression), and every further token costs
  // at least half the table's average slope from 2 to its end, so that one noisy
  // measurement makes neither a step nor a free plateau. Throws std::invalid_argument for
  // bad input.
  static DecodeCost from_ms(std::span<const size_t> sizes, std::span<const double> ms);
  // The same with the times of batches with logits for the last token only.
  static DecodeCost from_ms(std::span<const size_t> sizes, std::span<const double> ms,
                            std::span<const double> ms_last);
  // Relative cost of n tokens with logits (past the table: its last slope continued; 0 for
  // n = 0).
  double of(size_t n) const;
  // Relative cost of one pass of n_pending tokens (logits for the last) and n_draft draft
  // tokens (logits for each).
  double of_pass(size_t n_pending, size_t n_draft) const;
  // Sets one_no_logits from the measured time of one token without logits and of one with
  // them. Throws std::invalid_argument unless both are finite and > 0.
  void set_no_logits_ms(double ms_no_logits, double ms_one);
  // Whether decoding all pending tokens but the last alone, one pass each without logits,
  // then the last with the drafts, costs less than one pass of them all (one_no_logits
  // known and n_pending >= 2).
  bool split_pending(size_t n_pending, size_t n_draft) const;
  // The cost of the cheaper of the two ways (what the generator runs).
  double of_plan(size_t n_pending, size_t n_draft) const;
  // The draft length k in [0, n_available] with the largest expected saving for a pass
  // that decodes n_pending tokens anyway, when each draft token is kept with probability
  // accept_rate (given the ones before it were): the k drafts yield a + a^2 + ... + a^k
  // tokens that would otherwise cost a one-token pass each, and cost of_plan(n_pending, k) -
  // of_plan(n_pending, 0). 0 unless drafting is expected to gain.
  size_t best_draft(size_t n_pending, size_t n_available, double accept_rate) const;
};

// Measures llama_decode of each batch size in `sizes` (starting at 1, at most n_batch; every
// token with logits, or only the last one when all_logits is false) on sequence `seq`, after
// what the sequence holds, `reps` times each (median; the sizes take turns), and removes what
// it decoded. ms_out (optional) receives the median times.
// Throws std::invalid_argument for bad arguments, std::runtime_error when decoding fails.
DecodeCost measure_decode_cost(llama_context* ctx, llama_seq_id seq, std::span<const size_t> sizes,
                               int reps, std::vector<double>* ms_out = nullptr,
                               bool all_logits = true);
// The median time in ms of `reps` decodes of one token without logits on sequence `seq`,
// after what it holds (removed again). Same errors as measure_decode_cost().
double measure_decode_no_logits_ms(llama_context* ctx, llama_seq_id seq, int reps);

// The cost model of the model behind `ctx` at the context's thread count, measured on `ctx`
// the first time (sizes 1, 2, 3, 4, 6, 8 as far as n_batch allows, `reps` decodes of each,
// the tables with all logits and with the last only, and one token without logits,
// interleaved, medians) and cached for the
// process, keyed by the model (address, description, size, parameter count) and the thread
// count. Decodes after what `seq` holds and removes it again; the context's logits are
// overwritten. Returns the cached table without decoding when there is one; when the context
// has no room for the batches, returns DecodeCost::cpu_default() without caching it.
// Thread-safe (one measurement at a time). Throws std::invalid_argument for a null context
// or reps < 1, std::runtime_error when decoding fails.
DecodeCost cached_decode_cost(llama_context* ctx, llama_seq_id seq, int reps = 3);
// Forgets every table cached_decode_cost() measured (tests).
void clear_decode_cost_cache();

// How verified forced strings pick their draft length.
enum class DraftPolicy {
  adaptive,  // the cost model and the running acceptance rate; no draft when it would lose
  always,    // as long as allowed (max_draft, shortened after a rejection, doubled after a
             // fully kept draft), whatever it costs
};

// Which of the ways to do less work are on. The defaults are the exact ones (tier 1);
// decode_options_from_env() lets LACUNA_SKIP / LACUNA_VERIFY / LACUNA_JUMP override them.
struct DecodeOptions {
  bool skip_forced = true;     // tier 1: a single forced token is emitted without logits
  bool verify_strings = true;  // tier 1: forced strings are drafted and verified in one batch
  bool jump_forward = false;   // tier 2: forced strings are committed unverified
  size_t max_draft = 16;       // most draft tokens per verified batch
  size_t max_forced = 64;      // most forced tokens taken per step
  DraftPolicy draft_policy = DraftPolicy::adaptive;
  // Pending forced tokens go one pass each without logits where `cost` says that is cheaper
  // than batch-filling them (DecodeCost::split_pending; exact either way).
  bool split_pending = true;
  DecodeCost cost = DecodeCost::cpu_default();  // used by DraftPolicy::adaptive, split_pending
  // Adaptive drafts: replace `cost` with cached_decode_cost() of the context, measured
  // once per process, model and thread count on the first prefill (before the prompt is
  // decoded; LACUNA_MEASURE_COST=1). The table depends on the weight type and the machine
  // far more than the default assumes (docs/generator.md).
  bool measure_cost = false;
  // The acceptance rate assumed before any draft was verified in a generation, and its
  // weight in pseudo-observations (a Beta prior); the running rate replaces it as
  // observations come in.
  double prior_accept_rate = 0.5;
  double prior_weight = 2.0;
  // Backend sampling (LACUNA_BACKEND_SAMPLING=1, off by default; docs/backend_sampling.md):
  // the constraint's mask and the sampler chain run inside llama.cpp's graph and only the
  // sampled token comes back. Where the backend refuses the chain, the generator samples on
  // the CPU (one line on stderr says so).
  bool backend_sampling = false;
  // The mask off the critical path (LACUNA_OVERLAP_MASK=1, off by default; measured in
  // docs/backend_sampling.md): where a pass runs before the position's mask is needed (no
  // forced-token skipping, CPU sampling), the mask is computed on a worker thread during the
  // pass. Exact: the same mask, only computed earlier.
  bool overlap_mask = false;
};

// The compiled-in defaults (CMake options LACUNA_DECODE_SKIP/VERIFY/JUMP), then the
// environment: LACUNA_SKIP, LACUNA_VERIFY, LACUNA_JUMP = 0/1, LACUNA_MAX_DRAFT = N,
// LACUNA_DRAFT = adaptive/always, LACUNA_MEASURE_COST = 0/1, LACUNA_SPLIT = 0/1,
// LACUNA_BACKEND_SAMPLING = 0/1, LACUNA_OVERLAP_MASK = 0/1.
// Throws std::invalid_argument for a malformed value.
DecodeOptions decode_options_from_env();
DecodeOptions decode_options_from_env(DecodeOptions base);
// True when LACUNA_STATS=1 (print stats per generation to stderr).
bool stats_enabled_from_env();

struct GeneratorConfig {
  // Sampling: greedy (masked argmax, first index on ties) when temp <= 0; otherwise
  // top-k, top-p, min-p, temperature and a seeded draw (llama.cpp's samplers).
  float temp = 0.0f;
  uint32_t seed = 0;
  int32_t top_k = 40;   // <= 0: off
  float top_p = 0.95f;  // >= 1: off
  float min_p = 0.05f;  // <= 0: off

  size_t max_tokens = 256;                // 0: until another stop condition
  std::vector<std::string> stop_strings;  // generation stops once the text contains one
  llama_seq_id seq = 0;                   // the sequence of the context to use
  DecodeOptions decode{};
  bool print_stats = false;  // print stats to stderr when the generation ends
};

enum class StopReason {
  none,                  // still running
  eog,                   // the model sampled an end-of-generation token
  constraint_completed,  // the constraint allows nothing but end-of-generation
  constraint_dead_end,   // the constraint allows no token at all
  max_tokens,            // the token budget is used
  stop_string,           // the text contains a stop string
  context_full,          // no room left in the context
};
const char* stop_reason_name(StopReason reason);

struct GenerationStats {
  size_t prompt_tokens = 0;
  size_t tokens_emitted = 0;       // generated tokens handed to the caller
  size_t forward_passes = 0;       // llama_decode calls after the prompt
  size_t tokens_skipped = 0;       // forced tokens emitted without their own logits
  size_t tokens_batch_filled = 0;  // emitted tokens whose KV was filled in a later batch
  size_t tokens_filled_alone = 0;  // of those, decoded in a pass of their own without logits
  size_t draft_proposed = 0;       // forced-string draft tokens decoded for verification
  size_t draft_accepted = 0;       // of those, kept
  size_t draft_declined = 0;  // passes with a forced string where the cost model drafted nothing
  size_t jump_tokens = 0;     // tier 2: committed without verification
  double prefill_ms = 0;      // prompt decode
  double decode_ms = 0;       // llama_decode after the prompt
  double mask_ms = 0;         // constraint masks, forced tokens, jump strings
  double sample_ms = 0;       // sampling (mask application, selection)
  // Masks computed on the worker thread during a pass (overlap_mask); only the wait for
  // them is in mask_ms.
  double mask_overlapped_ms = 0;
  double total_ms = 0;  // wall time from prefill start to the last step
  StopReason stop = StopReason::none;

  // Emitted tokens per forward pass of the decode phase.
  double tokens_per_pass() const;
  // A JSON object with every field (and stop reason as a string).
  std::string to_json() const;
};

// What one call of next() produced.
// One emitted token's log-probability under the model's distribution at its position (the
// raw logits: no bias, mask or temperature) and the most likely tokens there, best first.
struct TokenLogprob {
  Token token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<Token, float>> top;
};

struct Step {
  std::span<const Token> tokens;  // emitted this step (may be several)
  std::string_view text;          // their bytes (a stop string and what follows is cut)
  bool done = false;              // nothing more will come
  StopReason reason = StopReason::none;
};

// Where the shared llama_decode calls of Generator::step_many and friends run: `batch`
// (capacity n_batch, one sequence id per token; null: the first generator's own) and
// `on_full` (asked whether to retry a call that found no KV slot after freeing cells, e.g. a
// prefix cache's; may be empty).
struct SharedBatch {
  llama_batch* batch = nullptr;
  std::function<bool()> on_full;
};

// The decoder of one sequence: the per-branch half of the runtime's one decode path
// (docs/runtime.md). A step plans what the sequence adds to the next shared batch (pending
// forced tokens, drafts, the position to sample), the batch runs, and the step takes its
// rows back. next() is the one-sequence case of step_many(); runtime::BranchStore runs many.
class Generator {
 public:
  // ctx and its model must outlive the generator. The constraint (optional) is owned;
  // it starts in whatever state it has. Throws std::invalid_argument on bad config.
  Generator(llama_context* ctx, GeneratorConfig config,
            std::unique_ptr<Constraint> constraint = nullptr);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Appends prompt tokens to the sequence and decodes them (together with any tokens
  // generated before and not yet in the KV cache). Starts a new generation: stats,
  // emitted tokens and the stop state are cleared; the constraint is not touched.
  // Throws std::invalid_argument for out-of-range tokens, std::runtime_error when the
  // context is too small or llama_decode fails (the sequence then holds what was decoded).
  void prefill(std::span<const Token> prompt);

  // Produces the next token(s). Call until Step::done. Requires a prefill first.
  Step next();

  // Push API over next(): calls on_step for every step until done or until on_step
  // returns false. Returns the stop reason (none when stopped by the callback).
  StopReason generate(const std::function<bool(const Step&)>& on_step = {});

  // ---- many sequences in one batch (the runtime's one decode path) -------------------
  // All generators must share one llama_context and use distinct sequences.
  using Shared = SharedBatch;
  // One next() for each generator, their forward passes in shared llama_decode calls;
  // each one's result is then its last_step(). Same errors as next().
  static void step_many(std::span<Generator* const> gens, const Shared& shared = SharedBatch{});
  // prefill() for each generator with its prompt, packed into shared calls.
  static void prefill_many(std::span<Generator* const> gens,
                           std::span<const std::span<const Token>> prompts,
                           const Shared& shared = SharedBatch{});
  // commit() for each generator with its token, in shared calls.
  static void commit_many(std::span<Generator* const> gens, std::span<const Token> tokens,
                          const Shared& shared = SharedBatch{});
  // Appends tokens the caller chose to the sequence and decodes them with logits for the
  // last, within the current generation: not emitted, not given to the constraint (Blink
  // KV's reseed). Throws std::invalid_argument for bad tokens, std::runtime_error when
  // decoding fails.
  void extend(std::span<const Token> tokens, const Shared& shared = SharedBatch{});
  // What the last next() / step_many() produced for this generator (same lifetime rules
  // as next()'s Step).
  Step last_step() const;

  // ---- sample and commit separately (a caller that picks tokens itself) ---------------
  // The token the sampler picks at the current position (needs logits: after a prefill or
  // a commit), without taking it. May be an end-of-generation token. LLAMA_TOKEN_NULL when
  // the constraint allows nothing. Consumes a random draw when sampling with temperature.
  Token produce();
  // Takes `token` (the constraint must allow it: std::invalid_argument otherwise) and
  // decodes it, so that the next position's logits are ready. Stats count it as emitted.
  void commit(Token token);
  // Logits at the current position (n_vocab floats) while they are ready, else nullptr.
  const float* logits() const;

  // ---- sequence bookkeeping for the runtime ------------------------------------------
  // A copy of this generator for sequence `seq`, which the caller has made hold the same
  // KV (llama_memory_seq_cp): constraint forked, sampler and RNG state, logits, pending
  // tokens, the generation's output and stats copied. Throws std::invalid_argument for a
  // bad seq.
  std::unique_ptr<Generator> fork(llama_seq_id seq) const;
  // A new generator with `config` (its seq included) that shares this one's vocabulary
  // tables instead of scanning the vocabulary again: no constraint, nothing generated, the
  // sequence as the KV cache holds it. Same errors as the constructor.
  std::unique_ptr<Generator> fresh(GeneratorConfig config) const;
  // The tokens of the sequence from position history_base() on: those in the KV cache,
  // then the pending ones (emitted, not yet decoded).
  std::span<const Token> history() const { return history_; }
  llama_pos history_base() const { return history_base_; }
  // The caller has removed the sequence's KV from position n_keep on: the generator
  // forgets those tokens (pending ones too) and its logits. n_keep >= history_base().
  void rewind(llama_pos n_keep);
  // The caller has put the KV of `tokens` into the sequence after n_past() (no pending
  // tokens may exist). The logits are not ready afterwards.
  void adopt(std::span<const Token> tokens);
  // Sampling parameters and logit bias from the next token on (the seed restarts the
  // draws); the constraint and the sequence are kept.
  void set_sampling(float temp, uint32_t seed, int32_t top_k, float top_p, float min_p);
  void reseed(uint32_t seed);
  void set_logit_bias(std::vector<llama_logit_bias> bias);
  // Stop strings from the next token on (none may be empty: std::invalid_argument).
  void set_stop_strings(std::vector<std::string> stop_strings);
  // Running log-probabilities of emitted tokens that were sampled from logits (forced
  // tokens decoded without logits are not counted): their sum in nats and count.
  double surprisal_sum() const { return surprisal_sum_; }
  size_t surprisal_count() const { return surprisal_count_; }
  // Track the surprisal of tokens picked in next()/step_many() (off by default: one
  // log-sum-exp over the vocabulary per sampled token). commit() always counts it.
  // Needs the logits on the host: turns backend sampling off for this generator.
  void set_track_surprisal(bool on);
  // Log-probabilities of the emitted tokens (-1: off, the default), each with the top_n
  // (at most 20) most likely tokens of its position. Every token is then sampled from logits:
  // no forced-token skipping, forced strings or drafts for this generator, and no backend
  // sampling (the logits must reach the host); turning it off again restores skipping.
  // std::invalid_argument for top_n > 20.
  void set_logprobs(int top_n);
  // The token budget of the current and later generations (0: none).
  void set_max_tokens(size_t max_tokens) { config_.max_tokens = max_tokens; }
  // The records of the current generation, one per emitted token, in order.
  const std::vector<TokenLogprob>& logprobs() const { return logprobs_; }
  // Whether this generator's sampler chain runs inside llama.cpp's graph now.
  bool backend_sampling() const { return backend_chain_ != nullptr; }
  llama_seq_id seq() const { return config_.seq; }
  llama_context* context() const { return ctx_; }

  // Replaces the constraint (nullptr: none) for the next generation.
  void set_constraint(std::unique_ptr<Constraint> constraint);
  Constraint* constraint() const { return constraint_.get(); }

  const std::vector<Token>& tokens() const { return out_tokens_; }
  const std::string& text() const { return text_; }
  const GenerationStats& stats() const { return stats_; }
  const GeneratorConfig& config() const { return config_; }
  bool done() const { return stop_ != StopReason::none; }
  bool prefilled() const { return prefilled_; }
  // Tokens of the sequence in the KV cache, and tokens emitted but not yet decoded.
  llama_pos n_past() const { return n_past_; }
  size_t n_pending() const { return pending_.size(); }
  // Stops the generation now (e.g. cancelled by the caller) with the given reason.
  void stop(StopReason reason) { finish(reason); }

 private:
  // What a step needs after its planning.
  enum class Plan { done, sample, decode };
  struct Pick {
    Token token = LLAMA_TOKEN_NULL;
    bool accepted = false;  // equals the draft
    StopReason stop{};      // none unless the pick ends the generation
  };
  Generator(const Generator& other, llama_seq_id seq);        // fork()
  Generator(const Generator& proto, GeneratorConfig config);  // fresh()
  bool stopped() const { return stop_ != StopReason::none; }
  // Throws std::invalid_argument "<what>: token N outside the vocabulary of M".
  void check_token(Token t, const char* what) const;
  void finish(StopReason reason);
  StopReason nothing_allowed_reason() const;
  void begin_step();
  Plan plan(bool alone);
  void take_outputs(int32_t out0, bool live);
  void decode_alone(std::span<const Token> tokens, const char* what);
  // The first n pending tokens (at most all) are in the KV cache now.
  void mark_decoded(size_t n);
  void decode_failed(int32_t status, size_t n_decoded, const char* what);
  void start_generation(std::span<const Token> prompt);
  void after_prefill(size_t n_decoded, int32_t out0);
  void snapshot_logits(const float* logits);
  // Fills mask_ from the constraint unless it is valid for the current state; gives the
  // number of allowed tokens and of allowed tokens that are not end-of-generation.
  void ensure_mask(size_t& n_allowed, size_t& n_allowed_non_eog);
  Token first_allowed() const;
  // Picks a token at the position whose logits are given. draft >= 0: apply the
  // verification rule for that draft token. Changes nothing but the RNG and the mask cache.
  // With backend sampling, `backend_token` is the graph's pick there (logits unused).
  Pick pick(const float* logits, Token draft, Token backend_token = LLAMA_TOKEN_NULL);
  Token argmax(const float* logits, bool masked) const;
  Token sample_temp(const float* logits, bool masked, Token draft, bool& accepted);
  const float* biased(const float* logits);
  void count_surprisal(const float* logits, Token token);
  void record_logprob(const float* logits, Token token);
  // Emits a token: constraint, text, stats, stop conditions. Returns false once stopped.
  bool emit(Token token, bool in_kv);
  void make_drafts(std::string_view forced, std::vector<Token>& drafts);
  size_t append_piece(Token token);
  void build_samplers();
  // Backend sampling: the chain (staged mask, logit bias, top-k/top-p/min-p/temperature and
  // dist, or greedy; a token-only tail) for config_.seq, attached with llama_set_sampler.
  // `chain` null: built from the config. Falls back to the CPU with a notice on refusal.
  void attach_backend(llama_sampler* chain);
  void detach_backend();
  // Stages the masks of this sequence's output rows of the next llama_decode: the current
  // position's, then (drafts) the one after each draft token.
  void stage_backend_rows(std::span<const Token> drafts);
  // overlap_mask: fill_mask() on the worker thread; settle_mask() waits for it (every reader
  // of the constraint or the mask goes through ensure_mask(), which settles first).
  void fill_mask();
  void launch_mask();
  void settle_mask();

  llama_context* ctx_;
  const llama_vocab* vocab_;
  GeneratorConfig config_;
  std::unique_ptr<Constraint> constraint_;
  int32_t n_vocab_ = 0;
  uint32_t n_ctx_ = 0;
  int32_t n_batch_ = 0;

  llama_batch batch_{};
  std::vector<uint32_t> mask_;
  bool mask_valid_ = false;  // mask_ is the constraint's mask for its current state
  size_t mask_allowed_ = 0;
  size_t mask_allowed_non_eog_ = 0;
  std::shared_ptr<const std::vector<uint32_t>> eog_mask_;  // bit set = end-of-generation
  std::shared_ptr<const std::vector<Token>> eog_tokens_;
  std::vector<llama_token_data> cur_;
  llama_sampler* shape_ = nullptr;  // top-k, top-p, min-p, temperature (no draw)
  llama_sampler* dist_ = nullptr;   // the seeded draw
  std::mt19937 accept_rng_;         // uniform draws for speculative acceptance
  std::vector<llama_logit_bias> bias_;
  std::vector<float> biased_;                        // scratch: logits with the bias added
  llama_sampler* backend_chain_ = nullptr;           // attached to ctx_ for config_.seq (owned)
  llama_sampler* backend_staged_ = nullptr;          // its first member: the staged masks
  size_t backend_rows_max_ = 1;                      // outputs per llama_decode for the sequence
  Token backend_token_ = LLAMA_TOKEN_NULL;           // the graph's pick at the current position
  std::vector<uint32_t> backend_masks_;              // scratch: staged masks
  std::unique_ptr<decode::MaskWorker> mask_worker_;  // overlap_mask, made on first use
  bool mask_in_flight_ = false;
  double mask_job_ms_ = 0;  // written by the worker

  llama_pos n_past_ = 0;
  llama_pos history_base_ = 0;
  std::vector<Token> history_;      // positions [history_base_, n_past_ + pending)
  std::vector<Token> pending_;      // emitted/prompt tokens not yet in the KV cache
  std::vector<Token> drafts_;       // scratch
  std::vector<Token> part_tokens_;  // scratch: pending_ + drafts_ for the shared batch
  std::vector<Token> step_tokens_;
  size_t draft_len_ = 0;  // DraftPolicy::always: current draft length limit (<= max_draft)
  // Draft positions whose choice was seen this generation, and how many chose the draft
  // (drafts decoded, and the first draft of a forced string that was not decoded).
  double accept_trials_ = 0;
  double accept_hits_ = 0;
  double accept_rate() const;
  Token undrafted_ = LLAMA_TOKEN_NULL;  // this step's first forced-string token, not drafted
  // The logits at the current position when ready (shared with forks until one writes).
  std::shared_ptr<std::vector<float>> logits_;
  bool logits_valid_ = false;
  bool prefilled_ = false;
  bool cost_measured_ = false;  // DecodeOptions::measure_cost done for this generator
  int logprobs_top_ = -1;
  DecodeOptions decode_before_logprobs_{};  // what set_logprobs(-1) restores
  std::vector<TokenLogprob> logprobs_;
  bool track_surprisal_ = false;
  double surprisal_sum_ = 0;
  size_t surprisal_count_ = 0;

  std::vector<Token> out_tokens_;
  std::string text_;
  size_t step_text_begin_ = 0;
  size_t max_stop_len_ = 0;
  StopReason stop_ = StopReason::none;
  GenerationStats stats_;
  std::chrono::steady_clock::time_point t_start_{};
};

// The reference loop: llama.cpp's own way, one llama_decode per token and
// llama_sampler_sample over a caller-built chain (e.g. llama_sampler_init_grammar followed
// by greedy). Used by the differential tests and the benchmark's `llama-grammar` and
// `free` modes. Decodes `prompt` into sequence 0 of a cleared context. Stops on an
// end-of-generation token (not included) or after max_tokens.
struct ReferenceResult {
  std::vector<Token> tokens;
  GenerationStats stats;
  size_t grammar_resamples = 0;  // reference_generate_rejection: tokens the grammar rejected
};
ReferenceResult reference_generate(llama_context* ctx, llama_sampler* chain,
                                   std::span<const Token> prompt, size_t max_tokens);

// The same loop sampling the way llama.cpp's common_sampler_sample does by default
// (grammar_first = false, "grammar-based rejection sampling"): `chain` (which holds no
// grammar) picks a token from the full logits; the token alone is checked with `grammar`
// (a one-entry candidate array); only when the grammar rejects it are the logits taken
// again, `grammar` applied over the whole vocabulary and `chain` run once more. Both
// samplers then accept the token. Greedy, it emits the same tokens as `reference_generate`
// with grammar + greedy in one chain, at the cost of a full-vocabulary grammar pass only
// where the model's own choice breaks the grammar.
ReferenceResult reference_generate_rejection(llama_context* ctx, llama_sampler* grammar,
                                             llama_sampler* chain, std::span<const Token> prompt,
                                             size_t max_tokens);

}  // namespace lacuna
