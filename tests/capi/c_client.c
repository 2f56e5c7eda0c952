/* c_client.c — a plain C11 client of liblacuna.so: loads the tiny model, opens a stream
 * constrained by a token trie of three action names, generates, checks that the output is
 * exactly one of the names and that the stats agree, and checks a few error paths. Exits
 * non-zero on any failure. Usage: capi_c_client MODEL.gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacuna/lacuna.h"

static int g_failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              lacuna_last_error());                                                            \
      ++g_failures;                                                                            \
    }                                                                                          \
  } while (0)

#define REQUIRE_OK(call)                                                                           \
  do {                                                                                             \
    lacuna_status st_ = (call);                                                                    \
    if (st_ != LACUNA_OK) {                                                                        \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, lacuna_status_name(st_), \
              lacuna_last_error());                                                                \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static const char* const kNames[3] = {"search_web", "send_email", "read_file"};

/* Appends the JSON leaf {"name": NAME, "tokens": [...]} for `name` to `json`. */
static void append_leaf(const lacuna_model* model, const char* name, char* json, size_t cap) {
  llama_token tokens[64];
  size_t n = 0;
  REQUIRE_OK(lacuna_tokenize(model, name, strlen(name), 0, 0, tokens, 64, &n));
  size_t len = strlen(json);
  len += (size_t)snprintf(json + len, cap - len, "{\"name\":\"%s\",\"tokens\":[", name);
  for (size_t i = 0; i < n; ++i) {
    len += (size_t)snprintf(json + len, cap - len, "%s%d", i ? "," : "", (int)tokens[i]);
  }
  snprintf(json + len, cap - len, "]}");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  CHECK(lacuna_abi_version() == LACUNA_ABI_VERSION);

  /* Bad input: a status and a message, no crash. */
  lacuna_model* bad = NULL;
  CHECK(lacuna_model_load("/nonexistent/model.gguf", NULL, &bad) == LACUNA_ERR_NOT_FOUND);
  CHECK(bad == NULL && strlen(lacuna_last_error()) > 0);
  CHECK(lacuna_model_load(NULL, NULL, &bad) == LACUNA_ERR_INVALID_ARGUMENT);

  lacuna_model* model = NULL;
  REQUIRE_OK(lacuna_model_load(argv[1], NULL, &model));
  lacuna_context_params cp = lacuna_context_default_params();
  cp.n_ctx = 512;
  cp.n_threads = 2;
  lacuna_context* ctx = NULL;
  REQUIRE_OK(lacuna_context_create(model, &cp, &ctx));

  static char json[8192];
  snprintf(json, sizeof(json),
           "{\"modelId\":\"tiny\",\"descriptors\":[{\"path\":\"action\",\"leaves\":[");
  for (int i = 0; i < 3; ++i) {
    if (i) strncat(json, ",", sizeof(json) - strlen(json) - 1);
    append_leaf(model, kNames[i], json, sizeof(json));
  }
  strncat(json, "]}]}", sizeof(json) - strlen(json) - 1);

  lacuna_stream_params sp = lacuna_stream_default_params();
  sp.max_tokens = 32;
  sp.token_trie = json;
  sp.token_trie_len = strlen(json);
  lacuna_stream* stream = NULL;
  REQUIRE_OK(lacuna_stream_open(ctx, &sp, &stream));

  /* A second stream on the same context is refused. */
  lacuna_stream* second = NULL;
  CHECK(lacuna_stream_open(ctx, &sp, &second) == LACUNA_ERR_STATE && second == NULL);

  /* A malformed trie payload fails and leaves the stream usable. */
  CHECK(lacuna_stream_set_token_trie(stream, "{\"modelId\":", 11, LACUNA_TRIE_MODE_ARGMAX) ==
        LACUNA_ERR_PARSE);
  CHECK(lacuna_stream_next(stream, NULL) == LACUNA_ERR_INVALID_ARGUMENT);

  const char* prompt = "The next action is:";
  REQUIRE_OK(lacuna_stream_prefill_text(stream, prompt, strlen(prompt), 1, 0));
  char out[256];
  size_t out_len = 0;
  size_t n_tokens = 0;
  lacuna_step step;
  for (int guard = 0; guard < 100; ++guard) {
    REQUIRE_OK(lacuna_stream_next(stream, &step));
    CHECK(step.text != NULL && strlen(step.text) == step.text_len);
    if (out_len + step.text_len < sizeof(out)) {
      memcpy(out + out_len, step.text, step.text_len);
      out_len += step.text_len;
    }
    n_tokens += step.n_tokens;
    if (step.done) break;
  }
  out[out_len] = '\0';
  CHECK(step.done == 1);
  CHECK(step.stop_reason == LACUNA_STOP_CONSTRAINT_COMPLETED);
  int matches = 0;
  for (int i = 0; i < 3; ++i) matches += strcmp(out, kNames[i]) == 0;
  CHECK(matches == 1);
  const char* leaf = NULL;
  REQUIRE_OK(lacuna_stream_chosen_leaf(stream, &leaf));
  CHECK(leaf != NULL && strcmp(leaf, out) == 0);

  const char* whole = NULL;
  size_t whole_len = 0;
  REQUIRE_OK(lacuna_stream_text(stream, &whole, &whole_len));
  CHECK(whole_len == out_len && memcmp(whole, out, out_len) == 0);

  lacuna_stats stats;
  REQUIRE_OK(lacuna_stream_stats(stream, &stats));
  CHECK(stats.tokens_emitted == n_tokens);
  CHECK(stats.forward_passes <= stats.tokens_emitted);
  CHECK(stats.stop_reason == LACUNA_STOP_CONSTRAINT_COMPLETED);
  printf("c_client: output \"%s\" (%zu tokens, %llu forward passes, %llu skipped)\n", out, n_tokens,
         (unsigned long long)stats.forward_passes, (unsigned long long)stats.tokens_skipped);

  /* Free generation after clearing the trie: tokens come, up to max_tokens. */
  REQUIRE_OK(lacuna_stream_clear_token_trie(stream));
  CHECK(lacuna_stream_clear_token_trie(stream) == LACUNA_ERR_STATE);
  REQUIRE_OK(lacuna_stream_reset(stream));
  REQUIRE_OK(lacuna_stream_prefill_text(stream, prompt, strlen(prompt), 1, 0));
  size_t free_tokens = 0;
  do {
    REQUIRE_OK(lacuna_stream_next(stream, &step));
    free_tokens += step.n_tokens;
  } while (!step.done);
  CHECK(free_tokens > 0 && free_tokens <= 32);

  lacuna_stream_close(stream);
  lacuna_context_free(ctx);
  lacuna_model_free(model);
  lacuna_stream_close(NULL);
  lacuna_context_free(NULL);
  lacuna_model_free(NULL);
  if (g_failures != 0) {
    fprintf(stderr, "c_client: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_client: all checks passed\n");
  return 0;
}
