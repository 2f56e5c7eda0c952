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
#define LACUNA_ABI_VERSION 1

typedef enum lacuna_status {
  LACUNA_OK = 0,
  LACUNA_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, value out of range, bad option */
  LACUNA_ERR_PARSE = 2,            /* malformed input text (JSON, regex, ...) */
  LACUNA_ERR_SCHEMA = 3,           /* well-formed input with the wrong shape or content */
  LACUNA_ERR_MODEL_MISMATCH = 4,   /* input made for another model */
  LACUNA_ERR_LIMIT = 5,            /* a configured limit (size, depth, count) was exceeded */
  LACUNA_ERR_NOT_FOUND = 6,        /* no such item (e.g. descriptor path) */
  LACUNA_ERR_STATE = 7,            /* the object is not in a state that allows the call */
  LACUNA_ERR_INTERNAL = 8          /* out of memory or an unexpected failure */
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

#ifdef __cplusplus
}
#endif

#endif /* LACUNA_H */
