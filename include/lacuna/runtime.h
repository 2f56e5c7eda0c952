// runtime.h — the agent runtime: a Context (one model, one llama_context with many
// sequences, KV reuse), Branches (one sequence each: fork, prefill with reuse, generate,
// produce/commit, metrics, Blink KV) and the BranchStore (many branches in one batch).
//
// Every front end (CLI, C ABI, Node, server) decodes through it; its decode path is the one
// of Generator (docs/runtime.md). One thread at a time per Context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lacuna/generator.h"
#include "lacuna/kv.h"
#include "lacuna/model.h"

namespace lacuna::runtime {

struct ContextParams {
  uint32_t n_ctx = 4096;    // KV cells shared by every branch (unified KV cache)
  uint32_t n_batch = 512;   // most tokens per llama_decode
  uint32_t n_ubatch = 512;  // physical batch
  uint32_t n_branches = 8;  // branches alive at once (each holds one sequence)
  int32_t n_threads = 0;    // 0 = hardware threads
  int32_t n_threads_batch = 0;
  bool embeddings = false;  // a context for encode() (pooled embeddings)
  // KV reuse: the in-memory prefix cache (kv.prefix_cache, its own sequences on top of
  // n_branches) and the persistent store (kv.persist_dir). kv::KvConfig::from_env() gives
  // the LACUNA_* variables' settings.
  kv::KvConfig kv{};
  uint32_t n_cache_holders = 4;  // sequences the prefix cache may hold prefixes in
  std::string model_path;        // for the persistent store's fingerprint (default: the model's)
  DecodeOptions decode{};        // for new branches (decode_options_from_env(): LACUNA_SKIP, ...)
};

struct BranchParams {
  // Sampling (GeneratorConfig's meaning).
  float temp = 0.0f;
  uint32_t seed = 0;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  size_t max_tokens = 256;  // per generation; 0 = until another stop
  std::vector<std::string> stop_strings;
  std::vector<llama_logit_bias> logit_bias;
  bool track_perplexity = false;  // surprisal of sampled tokens (one log-sum-exp each)
  // Log-probabilities of the emitted tokens with this many alternatives each (-1: off;
  // Generator::set_logprobs: every token then comes from logits, no skipping or drafts).
  int32_t logprobs = -1;
  // Blink KV, automatic: when the context is full, keep the first `blink_sinks` tokens and
  // the last `blink_tail` tokens and go on (both 0: off; stop with context_full).
  size_t blink_sinks = 0;
  size_t blink_tail = 0;
  bool print_stats = false;
};

// A branch state file that cannot be written or loaded (Branch::save_state / load_state).
class StateFileError : public std::runtime_error {
 public:
  enum class Kind { not_found, io, parse, model_mismatch, limit };
  StateFileError(Kind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// KV usage of the context.
struct KvPressure {
  uint32_t n_ctx = 0;
  uint32_t cells_used = 0;  // distinct positions held by any sequence (upper bound)
  uint32_t remaining = 0;
};

class Context;
class BranchStore;
struct BranchState;

// A handle to one branch. Cheap to copy; the branch lives until pruned (or its Context
// ends). Every call on a pruned branch, or on a default-constructed handle, throws
// std::invalid_argument.
class Branch {
 public:
  Branch() = default;
  bool valid() const;
  uint32_t id() const { return id_; }
  Context& context() const;
  llama_seq_id seq() const;

  // ---- tokens in -----------------------------------------------------------------------
  // Appends tokens to the branch's sequence and decodes them, reusing KV where it can (a
  // fresh branch: the prefix cache and the persistent store); starts a new generation
  // (Generator::prefill). Throws std::invalid_argument for bad tokens, std::runtime_error
  // when they do not fit.
  void prefill(std::span<const Token> tokens);
  void prefill_text(std::string_view text, bool add_special = true, bool parse_special = true);
  // The branch's sequence becomes exactly `tokens`: the longest prefix it holds, or that
  // the prefix cache or the persistent store holds, is kept, the rest decoded (warm
  // multi-turn chat). Starts a new generation. Same errors as prefill().
  void set_tokens(std::span<const Token> tokens);

  // ---- generation (Generator semantics: forced tokens skipped, drafts verified) ---------
  Step next();
  StopReason generate(const std::function<bool(const Step&)>& on_step = {});
  // Sample without committing (needs logits: after a prefill or commit), then commit a
  // token (the constraint must allow it) and decode it.
  Token produce();
  void commit(Token token);

  // ---- tree -----------------------------------------------------------------------------
  // A new branch with the same sequence (KV shared by llama_memory_seq_cp, O(1) in the
  // prefix length), constraint, sampler state and logits. Throws std::length_error when no
  // sequence is free (ContextParams::n_branches).
  Branch fork();
  // Frees the branch's sequence. Throws std::logic_error while it has live children.
  void prune();
  // Prunes the branch and all its descendants.
  void prune_subtree();
  Branch parent() const;  // invalid handle for a root
  std::vector<Branch> children() const;

  // ---- constraint and sampling ----------------------------------------------------------
  void set_constraint(std::unique_ptr<Constraint> constraint);  // nullptr: none
  // GBNF or JSON Schema, compiled against the model's vocabulary; with triggers, inactive
  // until one appears in the output (lazy). Throws the front ends' errors.
  void set_grammar(const std::string& gbnf, const std::vector<std::string>& lazy_triggers = {});
  void set_json_schema(const std::string& schema, bool compact = false,
                       const std::vector<std::string>& lazy_triggers = {});
  void set_sampler_params(float temp, uint32_t seed, int32_t top_k = 40, float top_p = 0.95f,
                          float min_p = 0.05f);
  void set_logit_bias(std::vector<llama_logit_bias> bias);
  void set_stop_strings(std::vector<std::string> stop_strings);  // none may be empty
  // Every setting of `params` at once (sampling, logit bias, stop strings, token budget,
  // perplexity, log-probabilities, Blink KV), for the next tokens: a branch kept between
  // requests takes the next request's settings. std::invalid_argument (nothing changed) for
  // an empty stop string or logprobs above 20.
  void set_params(const BranchParams& params);
  void reseed(uint32_t seed);

  // ---- metrics (from the branch's logits at the current position, not copied out) -------
  // Entropy of the model's next-token distribution in nats (bits: / ln 2). Needs logits.
  double model_entropy() const;
  // -log p(token) at the current position, nats.
  double model_surprisal(Token token) const;
  // exp(mean surprisal) of the tokens sampled from logits so far (commit() always counts;
  // next() with BranchParams::track_perplexity). 0 when none.
  double perplexity() const;
  std::vector<float> logits() const;  // a copy (n_vocab floats); empty when none

  // ---- Blink KV -------------------------------------------------------------------------
  // Clears the sequence and decodes `sinks` at position 0 and `tail` right after, so the
  // positions stay contiguous and bounded; the next token's logits equal a cold prefill of
  // sinks + tail. The generation goes on (output and constraint kept). Throws
  // std::invalid_argument when sinks + tail is empty or does not fit the context.
  void clear_and_reseed(std::span<const Token> sinks, std::span<const Token> tail);

  // ---- state ----------------------------------------------------------------------------
  // The branch's tokens and KV to a cache file (checksums, the model's fingerprint), and
  // back (replacing the sequence; a new generation starts, logits ready). Throws
  // StateFileError (missing, unreadable, corrupt, another model's, too long); a failed
  // load leaves the branch as it was.
  void save_state(const std::string& path) const;
  void load_state(const std::string& path);
  // Writes the branch's KV to the persistent store (no-op without one). Bytes written.
  uint64_t persist();

  // ---- what it holds --------------------------------------------------------------------
  std::span<const Token> tokens() const;  // the whole sequence (KV then pending)
  const Generator& generator() const;     // output, text, stats of the current generation
  Generator& generator();
  const kv::KvStats& kv_stats() const;

  bool operator==(const Branch& o) const = default;

 private:
  friend class Context;
  friend class BranchStore;
  Branch(Context* ctx, uint32_t id, uint64_t gen) : ctx_(ctx), id_(id), gen_(gen) {}
  BranchState& state() const;
  Context* ctx_ = nullptr;
  uint32_t id_ = 0;
  uint64_t gen_ = 0;
};

// Many branches at once: one llama_decode for all of them.
class BranchStore {
 public:
  // commit() for each (branch, token): one shared batch.
  void commit(std::span<const std::pair<Branch, Token>> items);
  // One next() for each branch, their forward passes in shared batches (each branch's
  // pending forced tokens and drafts included). Results: branch.generator().last_step().
  void step(std::span<const Branch> branches);
  // prefill() for each (branch, tokens): reuse first, then the rest of every branch packed
  // into batches of at most n_batch.
  void prefill(std::span<const std::pair<Branch, std::vector<Token>>> items);
  // Prunes every branch except `keep` (and its ancestors' sequences are freed too; `keep`
  // becomes a root).
  void retain_only(Branch keep);
  // Sequences free for new branches.
  size_t available() const;
  KvPressure kv_pressure() const;

 private:
  friend class Context;
  explicit BranchStore(Context* ctx) : ctx_(ctx) {}
  Context* ctx_;
};

class Context {
 public:
  // Creates the llama_context (n_branches + prefix-cache sequences, unified KV) over the
  // model, the prefix cache and (with kv.persist_dir) the persistent store. Throws
  // std::invalid_argument for bad params, LlamaError / kv::KvError when llama.cpp or the
  // store refuse.
  Context(Model model, ContextParams params = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // A new empty branch (a root). Throws std::length_error when no sequence is free.
  Branch create_branch(const BranchParams& params = {});
  BranchStore& store() { return store_; }
  const BranchStore& store() const { return store_; }

  // Pooled, L2-normalized embedding of `tokens` (a context made with embeddings = true).
  // Uses a free sequence and gives it back. Throws std::logic_error without embeddings.
  std::vector<float> encode(std::span<const Token> tokens);

  const Model& model() const { return model_; }
  Vocab vocab() const { return model_.vocab(); }
  llama_context* raw() const { return llama_.get(); }
  const ContextParams& params() const { return params_; }
  uint32_t n_ctx() const;
  size_t n_live_branches() const;
  // KV reuse stats of every branch so far (pruned ones included).
  kv::KvStats kv_stats() const;
  kv::PrefixCache* prefix_cache() const { return cache_.get(); }
  kv::PersistentStore* persistent_store() const { return disk_.get(); }

 private:
  friend class Branch;
  friend class BranchStore;
  BranchState& state_of(const Branch& b);
  Branch handle(uint32_t id);
  // A new branch on a free sequence, its decoder made by `make` for that sequence (a fork's)
  // or from the context's prototype (a new branch's).
  uint32_t allocate(const BranchParams& params,
                    const std::function<std::unique_ptr<Generator>(llama_seq_id)>& make = {});
  void free_branch(uint32_t id);
  void prefill_many(std::span<const std::pair<Branch, std::span<const Token>>> items, bool replace);
  void blink_if_full(std::span<const Branch> branches);
  const kv::Fingerprint& fingerprint();
  Generator::Shared shared();

  Model model_;
  ContextParams params_;
  lacuna::Context llama_;
  std::unique_ptr<kv::PrefixCache> cache_;
  std::unique_ptr<kv::PersistentStore> disk_;
  std::unique_ptr<kv::Fingerprint> fingerprint_;
  std::vector<std::unique_ptr<BranchState>> branches_;  // by id; null = free
  std::vector<llama_seq_id> free_seqs_;
  uint64_t next_gen_ = 1;
  kv::KvStats retired_stats_;
  llama_batch batch_{};
  // Holds the vocabulary tables every branch's decoder shares (made once, never decodes).
  std::unique_ptr<Generator> proto_;
  BranchStore store_{this};
};

}  // namespace lacuna::runtime
