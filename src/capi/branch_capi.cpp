// branch_capi.cpp — the C ABI of the agent runtime (lacuna.h, "branches"): branch handles over
// runtime::Branch, and the batched commit/step over many of them.
#include <cstring>
#include <string>
#include <vector>

#include "capi/runtime_capi.h"

using lacuna::capi::CapiError;
using lacuna::capi::ContextGuard;
using lacuna::capi::ContextState;
using lacuna::capi::guarded;
using lacuna::capi::require;

struct lacuna_branch {
  std::shared_ptr<ContextState> ctx;
  lacuna::runtime::Branch b;
  std::vector<lacuna::Token> step_tokens;  // buffers handed out by next()
  std::string step_text;
};

namespace {

lacuna_branch* wrap(const std::shared_ptr<ContextState>& ctx, lacuna::runtime::Branch b) {
  auto h = std::make_unique<lacuna_branch>();
  h->ctx = ctx;
  h->b = b;
  h->step_tokens.reserve(64);
  h->step_text.reserve(256);
  return h.release();
}

std::vector<std::string> strings_of(const char* const* s, size_t n, const char* what) {
  if (s == nullptr && n > 0) {
    throw CapiError(LACUNA_ERR_INVALID_ARGUMENT,
                    std::string("the ") + what + " list is NULL but its count is not 0");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == nullptr || s[i][0] == '\0') {
      throw CapiError(LACUNA_ERR_INVALID_ARGUMENT, std::string("a ") + what + " is NULL or empty");
    }
    out.emplace_back(s[i]);
  }
  return out;
}

std::span<const lacuna::Token> span_of(const llama_token* t, size_t n, const char* what) {
  if (t == nullptr && n > 0)
    throw CapiError(LACUNA_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  return std::span<const lacuna::Token>(t, n);
}

// The branches of one batched call: all non-NULL, of one context, each once.
ContextState& common_context(lacuna_branch* const* bs, size_t n) {
  require(bs != nullptr && n > 0, "branches is NULL or empty");
  for (size_t i = 0; i < n; ++i) {
    require(bs[i] != nullptr, "a branch is NULL");
    if (bs[i]->ctx != bs[0]->ctx) {
      throw CapiError(LACUNA_ERR_INVALID_ARGUMENT,
                      "branch " + std::to_string(i) + " belongs to another context");
    }
    for (size_t j = 0; j < i; ++j) {
      if (bs[j]->b == bs[i]->b) {
        throw CapiError(LACUNA_ERR_INVALID_ARGUMENT, "a branch is listed twice");
      }
    }
  }
  return *bs[0]->ctx;
}

}  // namespace

extern "C" {

lacuna_branch_params lacuna_branch_default_params(void) {
  lacuna_branch_params p;
  std::memset(&p, 0, sizeof(p));
  const lacuna::runtime::BranchParams d;
  p.max_tokens = static_cast<int32_t>(d.max_tokens);
  p.temperature = d.temp;
  p.top_p = d.top_p;
  p.top_k = d.top_k;
  p.min_p = d.min_p;
  p.seed = d.seed;
  return p;
}

lacuna_status lacuna_branch_create(lacuna_context* ctx, const lacuna_branch_params* params,
                                   lacuna_branch** out) {
  return guarded("lacuna_branch_create", [&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    require(ctx != nullptr, "ctx is NULL");
    const lacuna_branch_params p = params ? *params : lacuna_branch_default_params();
    require(p.max_tokens >= 0, "max_tokens is negative");
    ContextGuard guard(*ctx->state);
    lacuna::runtime::BranchParams bp;
    bp.max_tokens = static_cast<size_t>(p.max_tokens);
    bp.temp = p.temperature;
    bp.top_p = p.top_p;
    bp.top_k = p.top_k;
    bp.min_p = p.min_p;
    bp.seed = p.seed;
    bp.track_perplexity = p.track_perplexity != 0;
    bp.blink_sinks = p.blink_sinks;
    bp.blink_tail = p.blink_tail;
    lacuna::runtime::Branch b = ctx->state->rt->create_branch(bp);
    // Sampling parameters are checked by the decoder: a bad one frees the branch again.
    try {
      b.set_sampler_params(bp.temp, bp.seed, bp.top_k, bp.top_p, bp.min_p);
    } catch (...) {
      b.prune();
      throw;
    }
    *out = wrap(ctx->state, b);
    return LACUNA_OK;
  });
}

void lacuna_branch_free(lacuna_branch* branch) {
  if (branch == nullptr) return;
  if (branch->b.valid() && !branch->ctx->busy.load()) branch->b.prune_subtree();
  delete branch;
}

int32_t lacuna_branch_alive(const lacuna_branch* branch) {
  return branch != nullptr && branch->b.valid() ? 1 : 0;
}

#define LACUNA_BRANCH_CALL(name, body)            \
  return guarded(name, [&] {                      \
    require(branch != nullptr, "branch is NULL"); \
    ContextGuard guard(*branch->ctx);             \
    body;                                         \
    return LACUNA_OK;                             \
  })

lacuna_status lacuna_branch_prefill(lacuna_branch* branch, const llama_token* tokens, size_t n) {
  LACUNA_BRANCH_CALL("lacuna_branch_prefill", branch->b.prefill(span_of(tokens, n, "tokens")));
}

lacuna_status lacuna_branch_prefill_text(lacuna_branch* branch, const char* text, size_t len,
                                         int32_t add_special, int32_t parse_special) {
  LACUNA_BRANCH_CALL("lacuna_branch_prefill_text", {
    require(text != nullptr || len == 0, "text is NULL");
    branch->b.prefill_text(std::string_view(text == nullptr ? "" : text, len), add_special != 0,
                           parse_special != 0);
  });
}

lacuna_status lacuna_branch_set_tokens(lacuna_branch* branch, const llama_token* tokens, size_t n) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_tokens",
                     branch->b.set_tokens(span_of(tokens, n, "tokens")));
}

lacuna_status lacuna_branch_next(lacuna_branch* branch, lacuna_step* step) {
  LACUNA_BRANCH_CALL("lacuna_branch_next", {
    require(step != nullptr, "step is NULL");
    std::memset(step, 0, sizeof(*step));
    if (!branch->b.generator().prefilled()) {
      throw CapiError(LACUNA_ERR_STATE, "no generation under way: prefill first");
    }
    const lacuna::Step st = branch->b.next();
    lacuna::capi::fill_step(st, branch->step_tokens, branch->step_text, step);
  });
}

lacuna_status lacuna_branch_produce(lacuna_branch* branch, llama_token* token) {
  LACUNA_BRANCH_CALL("lacuna_branch_produce", {
    require(token != nullptr, "token is NULL");
    if (branch->b.valid() && branch->b.generator().logits() == nullptr) {
      throw CapiError(LACUNA_ERR_STATE,
                      "no logits at the branch's position: prefill or commit first");
    }
    *token = branch->b.produce();
  });
}

lacuna_status lacuna_branch_commit(lacuna_branch* branch, llama_token token) {
  LACUNA_BRANCH_CALL("lacuna_branch_commit", {
    if (branch->b.valid() && !branch->b.generator().prefilled()) {
      throw CapiError(LACUNA_ERR_STATE, "no generation under way: prefill first");
    }
    branch->b.commit(token);
  });
}

lacuna_status lacuna_branch_fork(lacuna_branch* branch, lacuna_branch** out) {
  LACUNA_BRANCH_CALL("lacuna_branch_fork", {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    lacuna::runtime::Branch child = branch->b.fork();
    *out = wrap(branch->ctx, child);
  });
}

lacuna_status lacuna_branch_prune(lacuna_branch* branch) {
  LACUNA_BRANCH_CALL("lacuna_branch_prune", branch->b.prune());
}

lacuna_status lacuna_branch_prune_subtree(lacuna_branch* branch) {
  LACUNA_BRANCH_CALL("lacuna_branch_prune_subtree", branch->b.prune_subtree());
}

lacuna_status lacuna_branch_retain_only(lacuna_branch* branch) {
  LACUNA_BRANCH_CALL("lacuna_branch_retain_only", branch->ctx->rt->store().retain_only(branch->b));
}

lacuna_status lacuna_branch_set_grammar(lacuna_branch* branch, const char* gbnf, size_t len,
                                        const char* const* triggers, size_t n_triggers) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_grammar", {
    require(gbnf != nullptr || len == 0, "gbnf is NULL");
    branch->b.set_constraint(lacuna::capi::grammar_constraint(
        *branch->ctx, std::string_view(gbnf == nullptr ? "" : gbnf, len),
        strings_of(triggers, n_triggers, "trigger")));
  });
}

lacuna_status lacuna_branch_set_json_schema(lacuna_branch* branch, const char* schema, size_t len,
                                            int32_t compact, const char* const* triggers,
                                            size_t n_triggers) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_json_schema", {
    require(schema != nullptr || len == 0, "schema is NULL");
    branch->b.set_constraint(lacuna::capi::schema_constraint(
        *branch->ctx, std::string_view(schema == nullptr ? "" : schema, len), compact != 0,
        strings_of(triggers, n_triggers, "trigger")));
  });
}

lacuna_status lacuna_branch_set_token_trie(lacuna_branch* branch, const char* json, size_t len) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_token_trie", {
    lacuna_token_trie_params tp = lacuna_token_trie_default_params();
    tp.mode = LACUNA_TRIE_MODE_SAMPLE;  // the branch's own sampler picks among the allowed
    branch->b.set_constraint(
        lacuna::capi::make_trie(branch->ctx->model->model.vocab_ptr(), json, len, tp));
  });
}

lacuna_status lacuna_branch_clear_constraint(lacuna_branch* branch) {
  LACUNA_BRANCH_CALL("lacuna_branch_clear_constraint", branch->b.set_constraint(nullptr));
}

lacuna_status lacuna_branch_set_sampler(lacuna_branch* branch, float temperature, int32_t top_k,
                                        float top_p, float min_p, uint32_t seed) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_sampler",
                     branch->b.set_sampler_params(temperature, seed, top_k, top_p, min_p));
}

lacuna_status lacuna_branch_reseed(lacuna_branch* branch, uint32_t seed) {
  LACUNA_BRANCH_CALL("lacuna_branch_reseed", branch->b.reseed(seed));
}

lacuna_status lacuna_branch_set_stop_strings(lacuna_branch* branch, const char* const* strings,
                                             size_t n) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_stop_strings",
                     branch->b.set_stop_strings(strings_of(strings, n, "stop string")));
}

lacuna_status lacuna_branch_set_logit_bias(lacuna_branch* branch, const llama_token* tokens,
                                           const float* bias, size_t n) {
  LACUNA_BRANCH_CALL("lacuna_branch_set_logit_bias", {
    require((tokens != nullptr && bias != nullptr) || n == 0, "tokens or bias is NULL");
    std::vector<llama_logit_bias> v;
    for (size_t i = 0; i < n; ++i) v.push_back(llama_logit_bias{tokens[i], bias[i]});
    branch->b.set_logit_bias(std::move(v));
  });
}

namespace {
void require_logits(lacuna_branch* branch) {
  if (branch->b.valid() && branch->b.generator().logits() == nullptr) {
    throw CapiError(LACUNA_ERR_STATE,
                    "no logits at the branch's position: prefill or commit first");
  }
}
}  // namespace

lacuna_status lacuna_branch_entropy(lacuna_branch* branch, double* nats) {
  LACUNA_BRANCH_CALL("lacuna_branch_entropy", {
    require(nats != nullptr, "nats is NULL");
    require_logits(branch);
    *nats = branch->b.model_entropy();
  });
}

lacuna_status lacuna_branch_surprisal(lacuna_branch* branch, llama_token token, double* nats) {
  LACUNA_BRANCH_CALL("lacuna_branch_surprisal", {
    require(nats != nullptr, "nats is NULL");
    require_logits(branch);
    *nats = branch->b.model_surprisal(token);
  });
}

lacuna_status lacuna_branch_perplexity(lacuna_branch* branch, double* perplexity) {
  LACUNA_BRANCH_CALL("lacuna_branch_perplexity", {
    require(perplexity != nullptr, "perplexity is NULL");
    *perplexity = branch->b.perplexity();
  });
}

lacuna_status lacuna_branch_logits(lacuna_branch* branch, float* buf, size_t capacity, size_t* n) {
  LACUNA_BRANCH_CALL("lacuna_branch_logits", {
    require(n != nullptr, "n is NULL");
    require(buf != nullptr || capacity == 0, "buf is NULL but capacity is not 0");
    require_logits(branch);
    const float* l = branch->b.generator().logits();
    const size_t n_vocab = static_cast<size_t>(branch->ctx->model->model.vocab().n_vocab());
    *n = n_vocab;
    if (capacity < n_vocab) {
      throw CapiError(LACUNA_ERR_LIMIT, "the logits need " + std::to_string(n_vocab) +
                                            " floats, the buffer holds " +
                                            std::to_string(capacity));
    }
    std::memcpy(buf, l, n_vocab * sizeof(float));
  });
}

lacuna_status lacuna_branch_sequence(lacuna_branch* branch, const llama_token** tokens, size_t* n) {
  LACUNA_BRANCH_CALL("lacuna_branch_sequence", {
    require(tokens != nullptr && n != nullptr, "tokens or n is NULL");
    const auto s = branch->b.tokens();
    *tokens = s.data();
    *n = s.size();
  });
}

lacuna_status lacuna_branch_text(lacuna_branch* branch, const char** text, size_t* len) {
  LACUNA_BRANCH_CALL("lacuna_branch_text", {
    require(text != nullptr && len != nullptr, "text or len is NULL");
    *text = branch->b.generator().text().c_str();
    *len = branch->b.generator().text().size();
  });
}

lacuna_status lacuna_branch_output(lacuna_branch* branch, const llama_token** tokens, size_t* n) {
  LACUNA_BRANCH_CALL("lacuna_branch_output", {
    require(tokens != nullptr && n != nullptr, "tokens or n is NULL");
    *tokens = branch->b.generator().tokens().data();
    *n = branch->b.generator().tokens().size();
  });
}

lacuna_status lacuna_branch_stats(lacuna_branch* branch, lacuna_stats* stats) {
  LACUNA_BRANCH_CALL("lacuna_branch_stats", {
    require(stats != nullptr, "stats is NULL");
    *stats = lacuna::capi::to_c(branch->b.generator().stats(), false);
  });
}

lacuna_status lacuna_branch_clear_and_reseed(lacuna_branch* branch, const llama_token* sinks,
                                             size_t n_sinks, const llama_token* tail,
                                             size_t n_tail) {
  LACUNA_BRANCH_CALL(
      "lacuna_branch_clear_and_reseed",
      branch->b.clear_and_reseed(span_of(sinks, n_sinks, "sinks"), span_of(tail, n_tail, "tail")));
}

lacuna_status lacuna_branch_save_state(lacuna_branch* branch, const char* path) {
  LACUNA_BRANCH_CALL("lacuna_branch_save_state", {
    require(path != nullptr && path[0] != '\0', "path is NULL or empty");
    branch->b.save_state(path);
  });
}

lacuna_status lacuna_branch_load_state(lacuna_branch* branch, const char* path) {
  LACUNA_BRANCH_CALL("lacuna_branch_load_state", {
    require(path != nullptr && path[0] != '\0', "path is NULL or empty");
    branch->b.load_state(path);
  });
}

#undef LACUNA_BRANCH_CALL

lacuna_status lacuna_branches_commit(lacuna_branch* const* branches, const llama_token* tokens,
                                     size_t n) {
  return guarded("lacuna_branches_commit", [&] {
    ContextState& cs = common_context(branches, n);
    require(tokens != nullptr, "tokens is NULL");
    ContextGuard guard(cs);
    std::vector<std::pair<lacuna::runtime::Branch, lacuna::Token>> items;
    for (size_t i = 0; i < n; ++i) {
      if (branches[i]->b.valid() && !branches[i]->b.generator().prefilled()) {
        throw CapiError(LACUNA_ERR_STATE,
                        "branch " + std::to_string(i) + " has no generation under way");
      }
      items.emplace_back(branches[i]->b, tokens[i]);
    }
    cs.rt->store().commit(items);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_branches_step(lacuna_branch* const* branches, size_t n, lacuna_step* steps) {
  return guarded("lacuna_branches_step", [&] {
    ContextState& cs = common_context(branches, n);
    require(steps != nullptr, "steps is NULL");
    std::memset(steps, 0, n * sizeof(lacuna_step));
    ContextGuard guard(cs);
    std::vector<lacuna::runtime::Branch> bs;
    for (size_t i = 0; i < n; ++i) {
      if (branches[i]->b.valid() && !branches[i]->b.generator().prefilled()) {
        throw CapiError(LACUNA_ERR_STATE,
                        "branch " + std::to_string(i) + " has no generation under way");
      }
      bs.push_back(branches[i]->b);
    }
    cs.rt->store().step(bs);
    for (size_t i = 0; i < n; ++i) {
      lacuna::capi::fill_step(branches[i]->b.generator().last_step(), branches[i]->step_tokens,
                              branches[i]->step_text, &steps[i]);
    }
    return LACUNA_OK;
  });
}

lacuna_status lacuna_context_kv_pressure(lacuna_context* ctx, uint32_t* n_ctx, uint32_t* used,
                                         uint32_t* remaining) {
  return guarded("lacuna_context_kv_pressure", [&] {
    require(ctx != nullptr, "ctx is NULL");
    ContextGuard guard(*ctx->state);
    const auto k = ctx->state->rt->store().kv_pressure();
    if (n_ctx != nullptr) *n_ctx = k.n_ctx;
    if (used != nullptr) *used = k.cells_used;
    if (remaining != nullptr) *remaining = k.remaining;
    return LACUNA_OK;
  });
}

lacuna_status lacuna_context_available(lacuna_context* ctx, size_t* n_free) {
  return guarded("lacuna_context_available", [&] {
    require(ctx != nullptr && n_free != nullptr, "ctx or n_free is NULL");
    ContextGuard guard(*ctx->state);
    *n_free = ctx->state->rt->store().available();
    return LACUNA_OK;
  });
}

}  // extern "C"
