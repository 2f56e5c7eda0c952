/* lacuna.h — lacuna's C ABI: plain C, for FFI callers. No C++ types cross this boundary.
 *
 * Conventions (every part of the API follows them):
 *   - Fallible functions return lacuna_status (LACUNA_OK == 0) and write results through
 *     out-parameters, or return a pointer that is NULL on failure.
 *   - On failure, lacuna_last_error() gives a message for the last failing call on the
 *     calling thread (thread-local; valid until the next lacuna call on that thread).
 *   - Objects are created by lacuna_*_init* and released by the matching *_free. A sampler
 *     returned here is a plain llama_sampler: free it with llama_sampler_free, or hand it to
 *     a llama_sampler_chain (which then owns it).
 *   - Nothing aborts on bad input: NULL pointers and bad values give LACUNA_ERR_INVALID_ARGUMENT.
 */
#ifndef LACUNA_H
#define LACUNA_H

#include <stddef.h>
#include <stdint.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on every incompatible change of this header. */
#define LACUNA_ABI_VERSION 2

typedef enum lacuna_status {
  LACUNA_OK = 0,
  LACUNA_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, value out of range, bad option */
  LACUNA_ERR_PARSE = 2,            /* malformed input text (JSON, regex, ...) */
  LACUNA_ERR_SCHEMA = 3,           /* well-formed input with the wrong shape or content */
  LACUNA_ERR_MODEL_MISMATCH = 4,   /* input made for another model */
  LACUNA_ERR_LIMIT = 5,            /* a configured limit (size, depth, count) was exceeded */
  LACUNA_ERR_NOT_FOUND = 6,        /* no such item (e.g. descriptor path) */
  LACUNA_ERR_STATE = 7,            /* the object is not in a state that allows the call */
  LACUNA_ERR_INTERNAL = 8,         /* out of memory or an unexpected failure */
  LACUNA_ERR_IO = 9,               /* a file cannot be read or written */
  LACUNA_ERR_BUSY = 10             /* the handle is in use by another thread */
} lacuna_status;

/* LACUNA_ABI_VERSION of the library actually linked. */
uint32_t lacuna_abi_version(void);

/* Message of the last failing lacuna call on this thread ("" when none). */
const char* lacuna_last_error(void);

/* A short constant name for a status, e.g. "LACUNA_ERR_PARSE". */
const char* lacuna_status_name(lacuna_status status);

/* ---- constraints ------------------------------------------------------------------------
 * An opaque per-sequence constraint state (a token trie, a grammar matcher, a lazy wrapper).
 * Consumed by lacuna_sampler_init_constraint and lacuna_constraint_init_lazy, which take
 * ownership; otherwise release it with lacuna_constraint_free. */
typedef struct lacuna_constraint lacuna_constraint;

void lacuna_constraint_free(lacuna_constraint* constraint);

/* ---- token trie ------------------------------------------------------------------------ */

enum {
  LACUNA_TRIE_MODE_ARGMAX = 0, /* the sampler masks, then picks the best legal token */
  LACUNA_TRIE_MODE_SAMPLE = 1, /* masks, then temperature, top-p and a seeded draw */
  LACUNA_TRIE_MODE_MASK = 2    /* masks only: put a selector (greedy/dist) after it */
};

typedef struct lacuna_token_trie_params {
  int32_t mode;                  /* LACUNA_TRIE_MODE_*; default ARGMAX */
  float temperature;             /* SAMPLE mode; default 1.0; <= 0 picks the best */
  float top_p;                   /* SAMPLE mode; default 1.0 (off) */
  uint32_t seed;                 /* SAMPLE mode; default 0 */
  const char* expected_model_id; /* NULL: not checked; else must equal the payload's modelId */
  const char* descriptor_path;   /* NULL or "": the first descriptor */
  /* Tokens that end the span at a leaf. NULL with n_end_tokens == 0 and
   * use_default_end_tokens != 0: the vocabulary's EOS and EOT. With use_default_end_tokens
   * == 0 and no tokens: no end token (a leaf without children ends the span at once). */
  const llama_token* end_tokens;
  size_t n_end_tokens;
  int32_t use_default_end_tokens; /* default 1 */
  int32_t max_span_tokens;        /* safety bound; default 500; 0 disables it */
  size_t max_payload_bytes;       /* default 4 MiB */
  int32_t use_cache;              /* default 1: the process-wide trie cache */
} lacuna_token_trie_params;

lacuna_token_trie_params lacuna_token_trie_default_params(void);

/* A sampler over a token trie built from the JSON payload
 *   {"modelId": str, "descriptors": [{"path": str, "leaves": [{"name": str, "tokens": [int]}]}]}
 * mode: LACUNA_TRIE_MODE_*. NULL on error (malformed JSON, empty leaf set, token id < 0 or
 * >= n_vocab, duplicate leaves, empty names, too large or too deeply nested payload, ...);
 * lacuna_last_error() says what and where. The modelId is not checked: use the _ext form. */
struct llama_sampler* lacuna_sampler_init_token_trie(const struct llama_vocab* vocab,
                                                     const char* json, size_t len, int mode);

/* Same with every option; params NULL = defaults. */
struct llama_sampler* lacuna_sampler_init_token_trie_ext(const struct llama_vocab* vocab,
                                                         const char* json, size_t len,
                                                         const lacuna_token_trie_params* params);

/* The trie as a constraint handle (for lacuna_sampler_init_constraint or lazy wrapping).
 * params->mode, temperature, top_p and seed are ignored here. */
lacuna_status lacuna_constraint_init_token_trie(const struct llama_vocab* vocab, const char* json,
                                                size_t len, const lacuna_token_trie_params* params,
                                                lacuna_constraint** out);

/* The chosen leaf's name: the leaf ending at the current node of the trie behind `smpl` (a
 * trie sampler, or a chain holding one, possibly lazy). *name is NULL while no leaf ends
 * there. The string lives as long as the sampler. */
lacuna_status lacuna_token_trie_chosen_leaf(struct llama_sampler* smpl, const char** name);

/* Switches the trie behind `smpl` to the descriptor with this path and resets it. */
lacuna_status lacuna_token_trie_select(struct llama_sampler* smpl, const char* path);

/* Safety-bound warning of the trie behind `smpl` ("" when none; NULL if no trie). */
const char* lacuna_token_trie_warning(struct llama_sampler* smpl);

/* ---- samplers over any constraint ------------------------------------------------------ */

enum {
  LACUNA_SELECT_NONE = 0,   /* mask only */
  LACUNA_SELECT_GREEDY = 1, /* mask, then argmax */
  LACUNA_SELECT_DIST = 2    /* mask, then temperature, top-p, seeded draw */
};

typedef struct lacuna_sampler_params {
  int32_t selector;  /* LACUNA_SELECT_*; default NONE */
  float temperature; /* DIST; default 1.0 */
  float top_p;       /* DIST; default 1.0 */
  uint32_t seed;     /* DIST; default 0 */
} lacuna_sampler_params;

lacuna_sampler_params lacuna_sampler_default_params(void);

/* A llama_sampler over `constraint` (ownership passes to the sampler, also on failure).
 * Place it after logit bias and penalties and before truncation samplers and the final
 * selector (see docs/sampler.md). NULL on error; params NULL = defaults. */
struct llama_sampler* lacuna_sampler_init_constraint(lacuna_constraint* constraint,
                                                     const lacuna_sampler_params* params);

/* Lazy activation: wraps `inner` (ownership passes, also on failure) so it is inactive until
 * a trigger word, token or regex pattern appears in the output; see docs/sampler.md. */
lacuna_status lacuna_constraint_init_lazy(lacuna_constraint* inner, const struct llama_vocab* vocab,
                                          const char* const* trigger_words, size_t n_words,
                                          const llama_token* trigger_tokens, size_t n_tokens,
                                          const char* const* trigger_patterns, size_t n_patterns,
                                          lacuna_constraint** out);

/* State of the constraint behind a lacuna sampler (or a chain holding one). */
lacuna_status lacuna_sampler_is_terminated(struct llama_sampler* smpl, int32_t* terminated);
lacuna_status lacuna_sampler_is_completed(struct llama_sampler* smpl, int32_t* completed);

/* The forced continuation (single-choice tokens) from the current state: writes up to
 * `capacity` tokens to `tokens` and their count to *n. */
lacuna_status lacuna_sampler_forced_tokens(struct llama_sampler* smpl, llama_token* tokens,
                                           size_t capacity, size_t* n);

/* Error state of the sampler: accept() of a refused token or an apply() that left no
 * candidate. *refused: number of refused accepts. Returns the last message ("" if none) or
 * NULL when `smpl` holds no lacuna sampler. */
const char* lacuna_sampler_error(struct llama_sampler* smpl, uint64_t* refused);

/* ---- models, contexts and generation streams ---------------------------------------------
 * The handles and who may use them (docs/c_api.md has the full contract):
 *   lacuna_model    a loaded GGUF model. Immutable once loaded: any number of threads may use
 *                   it at once (create contexts, tokenize). Contexts and streams keep the
 *                   weights alive, so lacuna_model_free may come before theirs.
 *   lacuna_context  one llama.cpp context (KV cache, threads) over a model. One thread at a
 *                   time. At most one open stream per context. Streams keep it alive, so
 *                   lacuna_context_free may come before lacuna_stream_close.
 *   lacuna_stream   one generation sequence in a context: prefill, then pull tokens with
 *                   lacuna_stream_next until done. One thread at a time, except
 *                   lacuna_stream_cancel, which any thread may call at any time while the
 *                   stream is open. A call that finds the stream in use by another thread
 *                   fails with LACUNA_ERR_BUSY instead of racing.
 * Every *_free / _close accepts NULL. */
typedef struct lacuna_model lacuna_model;
typedef struct lacuna_context lacuna_context;
typedef struct lacuna_stream lacuna_stream;

typedef struct lacuna_model_params {
  int32_t n_gpu_layers; /* layers to offload when a GPU backend exists; default -1 (all) */
  int32_t use_mmap;     /* default 1 */
  int32_t vocab_only;   /* default 0; 1 loads only the tokenizer (no context can be created) */
} lacuna_model_params;

lacuna_model_params lacuna_model_default_params(void);

/* Loads a GGUF model (params NULL = defaults). Errors: NULL path or out ->
 * INVALID_ARGUMENT; missing file -> NOT_FOUND; unreadable -> IO; empty, not GGUF,
 * truncated or malformed -> PARSE; unknown architecture or vocabulary only -> SCHEMA. */
lacuna_status lacuna_model_load(const char* path, const lacuna_model_params* params,
                                lacuna_model** out);
void lacuna_model_free(lacuna_model* model);

/* The model's llama.cpp vocabulary (for lacuna_sampler_init_token_trie and friends); lives as
 * long as the model handle. NULL for a NULL model. */
const struct llama_vocab* lacuna_model_vocab(const lacuna_model* model);
/* Tokens in the vocabulary (0 for NULL). */
int32_t lacuna_model_n_vocab(const lacuna_model* model);

/* Text to tokens with the model's tokenizer. add_special: add BOS/EOS as the vocabulary asks;
 * parse_special: text such as "<|eot_id|>" becomes the special token. Writes up to
 * `capacity` tokens and the number of tokens the text needs to *n_tokens; when that is more
 * than capacity, nothing is written and the status is LACUNA_ERR_LIMIT (call again with a
 * larger buffer; tokens may be NULL when capacity is 0). */
lacuna_status lacuna_tokenize(const lacuna_model* model, const char* text, size_t len,
                              int32_t add_special, int32_t parse_special, llama_token* tokens,
                              size_t capacity, size_t* n_tokens);

/* The bytes of `token` (special tokens rendered as their text when `special`). Writes up to
 * `capacity` bytes plus a NUL and the byte count to *len; LACUNA_ERR_LIMIT when the buffer is
 * too small (then *len is the size needed, without the NUL). */
lacuna_status lacuna_token_to_piece(const lacuna_model* model, llama_token token, int32_t special,
                                    char* buf, size_t capacity, size_t* len);

typedef struct lacuna_context_params {
  uint32_t n_ctx;      /* KV cells shared by every branch; default 4096; 0 = the model's size */
  uint32_t n_batch;    /* most tokens per forward pass; default 512 */
  int32_t n_threads;   /* default 0 = all hardware threads */
  uint32_t n_branches; /* branches (a stream is one) alive at once; default 8 (ABI 2) */
  /* 1: constraint masks and sampling run inside llama.cpp's graph (backend sampling); only
   * the sampled token comes back. Default 0 (LACUNA_BACKEND_SAMPLING=1 turns it on for every
   * context). Where the backend cannot run the chain, sampling stays on the CPU (a line on
   * stderr says so). Logits are then not kept on the host: lacuna_branch_logits and
   * lacuna_branch_produce give LACUNA_ERR_STATE. */
  int32_t backend_sampling;
} lacuna_context_params;

lacuna_context_params lacuna_context_default_params(void);

/* A context over `model` (params NULL = defaults). */
lacuna_status lacuna_context_create(lacuna_model* model, const lacuna_context_params* params,
                                    lacuna_context** out);
void lacuna_context_free(lacuna_context* ctx);

/* Why a generation ended (lacuna_step.stop_reason, lacuna_stats.stop_reason). */
typedef enum lacuna_stop_reason {
  LACUNA_STOP_NONE = 0,                 /* still running */
  LACUNA_STOP_EOG = 1,                  /* the model produced an end-of-generation token */
  LACUNA_STOP_CONSTRAINT_COMPLETED = 2, /* the grammar/schema/trie is complete */
  LACUNA_STOP_CONSTRAINT_DEAD_END = 3,  /* the constraint allows no token at all */
  LACUNA_STOP_MAX_TOKENS = 4,           /* max_tokens reached */
  LACUNA_STOP_STOP_STRING = 5,          /* the text contains a stop string */
  LACUNA_STOP_CONTEXT_FULL = 6,         /* no room left in the context */
  LACUNA_STOP_CANCELLED = 7             /* lacuna_stream_cancel */
} lacuna_stop_reason;

/* A short constant name, e.g. "max_tokens". */
const char* lacuna_stop_reason_name(int32_t reason);

typedef struct lacuna_stream_params {
  int32_t max_tokens; /* tokens per generation; default 256; 0 = until another stop */
  float temperature;  /* default 0 = greedy (argmax, first index on ties) */
  float top_p;        /* default 0.95; >= 1 off (temperature > 0 only) */
  int32_t top_k;      /* default 40; <= 0 off */
  float min_p;        /* default 0.05; <= 0 off */
  uint32_t seed;      /* default 0 */
  int32_t n_threads;  /* default 0 = keep the context's */
  /* At most one constraint (all NULL: free generation). Strings are copied. */
  const char* grammar;     /* GBNF text (llama.cpp's dialect), root rule "root", NUL-ended */
  const char* json_schema; /* JSON Schema text, NUL-ended */
  int32_t schema_compact;  /* 1: no whitespace in the JSON; default 0 (flexible) */
  const char* token_trie;  /* token-trie JSON payload (see lacuna_sampler_init_token_trie) */
  size_t token_trie_len;   /* its length in bytes */
  int32_t token_trie_mode; /* LACUNA_TRIE_MODE_ARGMAX (default) or _SAMPLE */
  const char* const* stop_strings; /* generation stops once the text contains one */
  size_t n_stop_strings;
} lacuna_stream_params;

lacuna_stream_params lacuna_stream_default_params(void);

/* Opens a stream on `ctx` (params NULL = defaults): empties the context's sequence and
 * compiles the constraint. Errors: a second open stream on the context -> STATE; a bad
 * grammar -> PARSE (with line and column), a bad schema -> SCHEMA, bad trie payloads as in
 * lacuna_sampler_init_token_trie; several constraints at once -> INVALID_ARGUMENT. */
lacuna_status lacuna_stream_open(lacuna_context* ctx, const lacuna_stream_params* params,
                                 lacuna_stream** out);
/* Closes the stream (waits for nothing: do not call it while another thread is inside a
 * call on the stream). NULL is a no-op. */
void lacuna_stream_close(lacuna_stream* stream);

/* Starts a generation: appends the tokens to the sequence and runs the model over them
 * (together with the previous generation's last token when it is not yet in the KV cache).
 * The constraint restarts from its initial state; stats, output and cancel are cleared.
 * Successive prefills continue one conversation; lacuna_stream_reset starts over. */
lacuna_status lacuna_stream_prefill(lacuna_stream* stream, const llama_token* tokens,
                                    size_t n_tokens);
/* Same from text, tokenized with the model (add_special: BOS when the vocabulary asks and the
 * sequence is empty; special-token text is parsed when parse_special). */
lacuna_status lacuna_stream_prefill_text(lacuna_stream* stream, const char* text, size_t len,
                                         int32_t add_special, int32_t parse_special);

/* What one lacuna_stream_next produced. The pointers belong to the stream and stay valid
 * until the next call on the stream (any lacuna_stream_* except cancel) or its close. */
typedef struct lacuna_step {
  const llama_token* tokens; /* emitted this step (several when forced tokens were skipped) */
  size_t n_tokens;
  const char* text; /* their bytes, NUL-ended (may end inside a UTF-8 character) */
  size_t text_len;
  int32_t done;        /* 1: the generation ended (this step may still carry tokens) */
  int32_t stop_reason; /* lacuna_stop_reason once done */
} lacuna_step;

/* Produces the next token(s) of the generation (pull-based: call until step->done). After
 * done it keeps returning done with no tokens. Needs a prefill first (else STATE). */
lacuna_status lacuna_stream_next(lacuna_stream* stream, lacuna_step* step);

/* Asks the stream to stop: the next lacuna_stream_next (or the one running now, after its
 * current step) reports done with LACUNA_STOP_CANCELLED. Any thread, any time, lock-free (an
 * atomic flag); cleared by the next prefill or reset. */
lacuna_status lacuna_stream_cancel(lacuna_stream* stream);

/* Empties the sequence (KV cache and tokens) and the output; the constraint is kept. */
lacuna_status lacuna_stream_reset(lacuna_stream* stream);

/* The whole text (and tokens) of the current generation so far; same lifetime rule as the
 * step buffers. */
lacuna_status lacuna_stream_text(lacuna_stream* stream, const char** text, size_t* len);
lacuna_status lacuna_stream_tokens(lacuna_stream* stream, const llama_token** tokens,
                                   size_t* n_tokens);

/* Constraints, applied from the next prefill on. On failure the stream keeps its previous
 * constraint and stays usable. Setting one replaces any other kind. */
lacuna_status lacuna_stream_set_token_trie(lacuna_stream* stream, const char* json, size_t len,
                                           int32_t mode);
/* Same with every trie option (params NULL = defaults; params->mode is used). */
lacuna_status lacuna_stream_set_token_trie_ext(lacuna_stream* stream, const char* json, size_t len,
                                               const lacuna_token_trie_params* params);
lacuna_status lacuna_stream_clear_token_trie(lacuna_stream* stream); /* STATE if no trie */
lacuna_status lacuna_stream_set_grammar(lacuna_stream* stream, const char* gbnf, size_t len);
lacuna_status lacuna_stream_set_json_schema(lacuna_stream* stream, const char* schema, size_t len,
                                            int32_t compact);
/* Removes a grammar or JSON schema constraint; STATE if there is none. */
lacuna_status lacuna_stream_clear_grammar(lacuna_stream* stream);

/* The name of the trie leaf the generation chose (*name NULL while none; STATE when the stream
 * has no trie). Same lifetime rule as the step buffers. */
lacuna_status lacuna_stream_chosen_leaf(lacuna_stream* stream, const char** name);

/* Writes the sequence (its tokens and KV cache) to a file, verified on reading by checksums
 * and a fingerprint of the model file (the first save or restore of a model reads the model
 * file once to compute it). Needs at least one token in the sequence. */
lacuna_status lacuna_stream_save_slot(lacuna_stream* stream, const char* path);
/* Replaces the sequence with a saved one and makes the stream ready for lacuna_stream_next,
 * as after a prefill (the constraint restarts). A missing file -> NOT_FOUND; a corrupt one or
 * one written for another model -> PARSE / MODEL_MISMATCH; the stream then is unchanged. */
lacuna_status lacuna_stream_restore_slot(lacuna_stream* stream, const char* path);

/* Stats of the current (or last) generation: GenerationStats in docs/generator.md. */
typedef struct lacuna_stats {
  uint64_t prompt_tokens;
  uint64_t tokens_emitted; /* == the tokens all lacuna_step results of this generation hold */
  uint64_t forward_passes;
  uint64_t tokens_skipped;
  uint64_t tokens_batch_filled;
  uint64_t draft_proposed;
  uint64_t draft_accepted;
  uint64_t jump_tokens;
  double prefill_ms;
  double decode_ms;
  double mask_ms;
  double sample_ms;
  double total_ms;
  int32_t stop_reason; /* lacuna_stop_reason */
} lacuna_stats;

lacuna_status lacuna_stream_stats(lacuna_stream* stream, lacuna_stats* stats);

/* ---- branches: the agent runtime (docs/runtime.md) -----------------------------------------
 * A branch is one sequence of a context: prefill (KV reused through the context's prefix cache
 * and persistent store), pull-based generation, produce/commit, fork, prune, metrics, Blink
 * KV, state files; many branches step or commit in ONE forward pass (lacuna_branches_*).
 * Threads: a branch belongs to its context: one thread at a time for the context and all its
 * branches and streams (another thread gets LACUNA_ERR_BUSY). A branch handle keeps the
 * context alive. A pruned branch's handle stays valid as a handle: calls on it give
 * LACUNA_ERR_INVALID_ARGUMENT; lacuna_branch_free releases it. */
typedef struct lacuna_branch lacuna_branch;

typedef struct lacuna_branch_params {
  int32_t max_tokens;       /* tokens per generation; default 256; 0 = until another stop */
  float temperature;        /* default 0 = greedy */
  float top_p;              /* default 0.95 */
  int32_t top_k;            /* default 40 */
  float min_p;              /* default 0.05 */
  uint32_t seed;            /* default 0 */
  int32_t track_perplexity; /* 1: perplexity counts next()'s tokens too; default 0 */
  uint32_t blink_sinks;     /* automatic Blink KV: keep the first blink_sinks tokens and */
  uint32_t blink_tail;      /* the last blink_tail when the context is full; 0, 0 = off */
} lacuna_branch_params;

lacuna_branch_params lacuna_branch_default_params(void);

/* A new, empty branch (params NULL = defaults). No free sequence -> LIMIT. */
lacuna_status lacuna_branch_create(lacuna_context* ctx, const lacuna_branch_params* params,
                                   lacuna_branch** out);
/* Prunes the branch with everything forked from it (if still alive) and frees the handle.
 * NULL is a no-op. */
void lacuna_branch_free(lacuna_branch* branch);

/* Appends tokens to the branch's sequence and decodes them (reusing KV where it can); a new
 * generation starts (the constraint is not reset: lacuna_branch_set_* installs a fresh one). */
lacuna_status lacuna_branch_prefill(lacuna_branch* branch, const llama_token* tokens, size_t n);
lacuna_status lacuna_branch_prefill_text(lacuna_branch* branch, const char* text, size_t len,
                                         int32_t add_special, int32_t parse_special);
/* The sequence becomes exactly these tokens: the longest prefix already held (by the branch,
 * the prefix cache or the persistent store) is kept, the rest decoded (warm multi-turn). */
lacuna_status lacuna_branch_set_tokens(lacuna_branch* branch, const llama_token* tokens, size_t n);

/* The next token(s) (forced tokens skipped, drafts verified), as lacuna_stream_next. The step's
 * buffers belong to the branch until its next call. */
lacuna_status lacuna_branch_next(lacuna_branch* branch, lacuna_step* step);
/* Samples at the current position without taking the token (needs logits: after a prefill or
 * commit, else STATE); *token may be an end-of-generation token; LLAMA_TOKEN_NULL when the
 * constraint allows nothing. */
lacuna_status lacuna_branch_produce(lacuna_branch* branch, llama_token* token);
/* Takes `token` (the constraint must allow it, else INVALID_ARGUMENT and nothing changes) and
 * decodes it. */
lacuna_status lacuna_branch_commit(lacuna_branch* branch, llama_token token);

/* A new branch sharing this one's KV (no copy), constraint, sampler state and logits. */
lacuna_status lacuna_branch_fork(lacuna_branch* branch, lacuna_branch** out);
/* Frees the branch's sequence (STATE while it has live children); the handle remains to be
 * freed. */
lacuna_status lacuna_branch_prune(lacuna_branch* branch);
lacuna_status lacuna_branch_prune_subtree(lacuna_branch* branch);
/* Prunes every other branch of the context; `branch` becomes a root. */
lacuna_status lacuna_branch_retain_only(lacuna_branch* branch);
/* 1 while the branch lives (not pruned). */
int32_t lacuna_branch_alive(const lacuna_branch* branch);

/* Constraints for the branch's next tokens. Triggers (optional): inactive until one of these
 * strings appears in the output (lazy). */
lacuna_status lacuna_branch_set_grammar(lacuna_branch* branch, const char* gbnf, size_t len,
                                        const char* const* triggers, size_t n_triggers);
lacuna_status lacuna_branch_set_json_schema(lacuna_branch* branch, const char* schema, size_t len,
                                            int32_t compact, const char* const* triggers,
                                            size_t n_triggers);
lacuna_status lacuna_branch_set_token_trie(lacuna_branch* branch, const char* json, size_t len);
lacuna_status lacuna_branch_clear_constraint(lacuna_branch* branch);
lacuna_status lacuna_branch_set_sampler(lacuna_branch* branch, float temperature, int32_t top_k,
                                        float top_p, float min_p, uint32_t seed);
lacuna_status lacuna_branch_reseed(lacuna_branch* branch, uint32_t seed);
/* The generation stops once its text contains one of these strings (n = 0 clears). */
lacuna_status lacuna_branch_set_stop_strings(lacuna_branch* branch, const char* const* strings,
                                             size_t n);
/* Adds bias[i] to the logit of tokens[i] before sampling (n = 0 clears). */
lacuna_status lacuna_branch_set_logit_bias(lacuna_branch* branch, const llama_token* tokens,
                                           const float* bias, size_t n);

/* Metrics from the branch's logits at its position (STATE when it has none): entropy of the
 * model's next-token distribution and -log p(token), in nats (bits: divide by ln 2); the
 * perplexity of the tokens taken from logits so far (0 when none). */
lacuna_status lacuna_branch_entropy(lacuna_branch* branch, double* nats);
lacuna_status lacuna_branch_surprisal(lacuna_branch* branch, llama_token token, double* nats);
lacuna_status lacuna_branch_perplexity(lacuna_branch* branch, double* perplexity);
/* Copies the logits (n_vocab floats) into buf; LIMIT when capacity is smaller (*n says how many
 * are needed); STATE when there are none. */
lacuna_status lacuna_branch_logits(lacuna_branch* branch, float* buf, size_t capacity, size_t* n);

/* The whole sequence's tokens (KV then pending), and the current generation's output text and
 * tokens; same lifetime as the step buffers. */
lacuna_status lacuna_branch_sequence(lacuna_branch* branch, const llama_token** tokens, size_t* n);
lacuna_status lacuna_branch_text(lacuna_branch* branch, const char** text, size_t* len);
lacuna_status lacuna_branch_output(lacuna_branch* branch, const llama_token** tokens, size_t* n);
lacuna_status lacuna_branch_stats(lacuna_branch* branch, lacuna_stats* stats);

/* Blink KV: the sequence becomes sinks + tail at positions 0.. (the next logits equal a cold
 * prefill of them); the generation goes on. Too long for the context -> INVALID_ARGUMENT. */
lacuna_status lacuna_branch_clear_and_reseed(lacuna_branch* branch, const llama_token* sinks,
                                             size_t n_sinks, const llama_token* tail,
                                             size_t n_tail);

/* The branch's tokens and KV to a file and back (the KV cache file format: checksums and the
 * model file's fingerprint). Missing -> NOT_FOUND, corrupt -> PARSE, another model's ->
 * MODEL_MISMATCH; a refused file leaves the branch as it was. */
lacuna_status lacuna_branch_save_state(lacuna_branch* branch, const char* path);
lacuna_status lacuna_branch_load_state(lacuna_branch* branch, const char* path);

/* Many branches of one context in one forward pass: commit tokens[i] to branches[i]; or one
 * next() for each, steps[i] receiving branches[i]'s step. A branch of another context or
 * listed twice -> INVALID_ARGUMENT, before anything runs. */
lacuna_status lacuna_branches_commit(lacuna_branch* const* branches, const llama_token* tokens,
                                     size_t n);
lacuna_status lacuna_branches_step(lacuna_branch* const* branches, size_t n, lacuna_step* steps);

/* KV cells of the context (llama.cpp does not report its used cells: positions held by the
 * branches, a fork's shared prefix counted once) and free branch sequences. */
lacuna_status lacuna_context_kv_pressure(lacuna_context* ctx, uint32_t* n_ctx, uint32_t* used,
                                         uint32_t* remaining);
lacuna_status lacuna_context_available(lacuna_context* ctx, size_t* n_free);

#ifdef __cplusplus
}
#endif

#endif /* LACUNA_H */
