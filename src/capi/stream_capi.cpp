// stream_capi.cpp — the C ABI for models, contexts and pull-based generation streams
// (lacuna.h): a context is a runtime::Context, a stream is one Branch of it (with its
// constraint, cancel and slot save/restore), so a stream's prefills reuse KV through the
// context like every branch's.
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "capi/runtime_capi.h"
#include "decode/constraint_factory.h"

using lacuna::capi::CapiError;
using lacuna::capi::ContextGuard;
using lacuna::capi::ContextState;
using lacuna::capi::guarded;
using lacuna::capi::ModelState;
using lacuna::capi::require;

struct lacuna_stream {
  enum class Kind { none, grammar, trie };

  std::shared_ptr<ContextState> ctx;
  lacuna::runtime::BranchParams params;  // as opened; temp is overridden in trie argmax mode
  float temperature = 0.0f;
  Kind kind = Kind::none;
  int32_t trie_mode = LACUNA_TRIE_MODE_ARGMAX;
  std::unique_ptr<lacuna::Constraint> proto;  // the constraint in its initial state
  lacuna::runtime::Branch branch;

  bool prefilled = false;  // a generation is under way (next() may be called)
  bool cancelled = false;  // the current generation ended by cancel
  std::atomic<bool> cancel_requested{false};

  std::vector<lacuna::Token> step_tokens;  // the buffers handed out by next()
  std::string step_text;
};

namespace lacuna::capi {

int32_t stop_code(StopReason r) {
  switch (r) {
    case StopReason::none:
      return LACUNA_STOP_NONE;
    case StopReason::eog:
      return LACUNA_STOP_EOG;
    case StopReason::constraint_completed:
      return LACUNA_STOP_CONSTRAINT_COMPLETED;
    case StopReason::constraint_dead_end:
      return LACUNA_STOP_CONSTRAINT_DEAD_END;
    case StopReason::max_tokens:
      return LACUNA_STOP_MAX_TOKENS;
    case StopReason::stop_string:
      return LACUNA_STOP_STOP_STRING;
    case StopReason::context_full:
      return LACUNA_STOP_CONTEXT_FULL;
  }
  return LACUNA_STOP_NONE;
}

lacuna_stats to_c(const GenerationStats& g, bool cancelled) {
  lacuna_stats s;
  std::memset(&s, 0, sizeof(s));
  s.prompt_tokens = g.prompt_tokens;
  s.tokens_emitted = g.tokens_emitted;
  s.forward_passes = g.forward_passes;
  s.tokens_skipped = g.tokens_skipped;
  s.tokens_batch_filled = g.tokens_batch_filled;
  s.draft_proposed = g.draft_proposed;
  s.draft_accepted = g.draft_accepted;
  s.jump_tokens = g.jump_tokens;
  s.prefill_ms = g.prefill_ms;
  s.decode_ms = g.decode_ms;
  s.mask_ms = g.mask_ms;
  s.sample_ms = g.sample_ms;
  s.total_ms = g.total_ms;
  s.stop_reason = cancelled ? LACUNA_STOP_CANCELLED : stop_code(g.stop);
  return s;
}

void fill_step(const Step& st, std::vector<Token>& tokens, std::string& text, lacuna_step* out) {
  tokens.assign(st.tokens.begin(), st.tokens.end());
  text.assign(st.text);
  out->tokens = tokens.data();
  out->n_tokens = tokens.size();
  out->text = text.c_str();
  out->text_len = text.size();
  out->done = st.done ? 1 : 0;
  out->stop_reason = stop_code(st.reason);
}

std::unique_ptr<Constraint> grammar_constraint(const ContextState& c, std::string_view gbnf,
                                               const std::vector<std::string>& triggers) {
  return decode::make_grammar_constraint(c.model->model.vocab_ptr(), std::string(gbnf), triggers);
}

std::unique_ptr<Constraint> schema_constraint(const ContextState& c, std::string_view schema,
                                              bool compact,
                                              const std::vector<std::string>& triggers) {
  return decode::make_schema_constraint(c.model->model.vocab_ptr(), std::string(schema), compact,
                                        triggers);
}

}  // namespace lacuna::capi

namespace {

const llama_vocab* vocab_of(lacuna_stream* s) {
  return s->ctx->model->model.vocab_ptr();
}

float effective_temperature(const lacuna_stream* s) {
  return s->kind == lacuna_stream::Kind::trie && s->trie_mode == LACUNA_TRIE_MODE_ARGMAX
             ? 0.0f
             : s->temperature;
}

// The stream's branch as the parameters and constraint say (a new generation follows).
void apply_params(lacuna_stream* s) {
  const auto& p = s->params;
  s->branch.set_sampler_params(effective_temperature(s), p.seed, p.top_k, p.top_p, p.min_p);
  s->branch.set_constraint(s->proto ? s->proto->fork() : nullptr);
  s->prefilled = false;
}

void check_tokens(lacuna_stream* s, const llama_token* tokens, size_t n) {
  const int32_t n_vocab = llama_vocab_n_tokens(vocab_of(s));
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      throw CapiError(LACUNA_ERR_INVALID_ARGUMENT,
                      "token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                          " is outside the vocabulary of " + std::to_string(n_vocab));
    }
  }
  const size_t used = s->branch.tokens().size();
  const size_t n_ctx = s->ctx->rt->n_ctx();
  if (used + n >= n_ctx) {
    throw CapiError(LACUNA_ERR_LIMIT, std::to_string(n) + " tokens do not fit in the context (" +
                                          std::to_string(used) + " used of " +
                                          std::to_string(n_ctx) + ")");
  }
}

// Starts a generation over `tokens` appended to the sequence (the previous generation's last
// token, not yet in the KV cache, is decoded with them).
void start_generation(lacuna_stream* s, std::span<const lacuna::Token> tokens) {
  s->prefilled = false;
  s->cancelled = false;
  s->cancel_requested.store(false, std::memory_order_relaxed);
  if (lacuna::Constraint* c = s->branch.generator().constraint()) c->reset();
  s->branch.prefill(tokens);
  s->prefilled = true;
}

// Installs a new constraint (or none) for the next generation; the current one ends.
void set_constraint(lacuna_stream* s, std::unique_ptr<lacuna::Constraint> c,
                    lacuna_stream::Kind kind, int32_t trie_mode) {
  s->branch.set_constraint(c ? c->fork() : nullptr);  // checks the vocabulary size first
  s->proto = std::move(c);
  s->kind = kind;
  s->trie_mode = trie_mode;
  apply_params(s);
}

int32_t trie_mode_checked(int32_t mode) {
  if (mode != LACUNA_TRIE_MODE_ARGMAX && mode != LACUNA_TRIE_MODE_SAMPLE) {
    throw CapiError(LACUNA_ERR_INVALID_ARGUMENT,
                    "unknown token-trie mode " + std::to_string(mode) +
                        " (0 = argmax, 1 = sample; mask-only is for samplers)");
  }
  return mode;
}

}  // namespace

extern "C" {

// ---- models --------------------------------------------------------------------------------

lacuna_model_params lacuna_model_default_params(void) {
  lacuna_model_params p;
  p.n_gpu_layers = -1;
  p.use_mmap = 1;
  p.vocab_only = 0;
  return p;
}

lacuna_status lacuna_model_load(const char* path, const lacuna_model_params* params,
                                lacuna_model** out) {
  return guarded("lacuna_model_load", [&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    require(path != nullptr, "path is NULL");
    const lacuna_model_params p = params ? *params : lacuna_model_default_params();
    lacuna::ModelParams mp;
    mp.n_gpu_layers = p.n_gpu_layers;
    mp.use_mmap = p.use_mmap != 0;
    mp.vocab_only = p.vocab_only != 0;
    auto m = std::make_unique<lacuna_model>();
    m->state = std::make_shared<ModelState>(lacuna::Model::load(path, mp));
    *out = m.release();
    return LACUNA_OK;
  });
}

void lacuna_model_free(lacuna_model* model) {
  delete model;
}

const llama_vocab* lacuna_model_vocab(const lacuna_model* model) {
  return model == nullptr ? nullptr : model->state->model.vocab_ptr();
}

int32_t lacuna_model_n_vocab(const lacuna_model* model) {
  return model == nullptr ? 0 : llama_vocab_n_tokens(model->state->model.vocab_ptr());
}

lacuna_status lacuna_tokenize(const lacuna_model* model, const char* text, size_t len,
                              int32_t add_special, int32_t parse_special, llama_token* tokens,
                              size_t capacity, size_t* n_tokens) {
  return guarded("lacuna_tokenize", [&] {
    require(n_tokens != nullptr, "n_tokens is NULL");
    *n_tokens = 0;
    require(model != nullptr, "model is NULL");
    require(text != nullptr || len == 0, "text is NULL");
    require(tokens != nullptr || capacity == 0, "tokens is NULL but capacity is not 0");
    const lacuna::Vocab vocab(model->state->model.vocab_ptr());
    const auto toks = lacuna::tokenize(vocab, std::string_view(text == nullptr ? "" : text, len),
                                       add_special != 0, parse_special != 0);
    *n_tokens = toks.size();
    if (toks.size() > capacity) {
      throw CapiError(LACUNA_ERR_LIMIT, "the text needs " + std::to_string(toks.size()) +
                                            " tokens, the buffer holds " +
                                            std::to_string(capacity));
    }
    std::copy(toks.begin(), toks.end(), tokens);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_token_to_piece(const lacuna_model* model, llama_token token, int32_t special,
                                    char* buf, size_t capacity, size_t* len) {
  return guarded("lacuna_token_to_piece", [&] {
    require(len != nullptr, "len is NULL");
    *len = 0;
    require(model != nullptr, "model is NULL");
    require(buf != nullptr || capacity == 0, "buf is NULL but capacity is not 0");
    const lacuna::Vocab vocab(model->state->model.vocab_ptr());
    if (!vocab.valid(token)) {
      throw CapiError(LACUNA_ERR_INVALID_ARGUMENT,
                      "token " + std::to_string(token) + " is outside the vocabulary");
    }
    const std::string piece = lacuna::token_to_piece(vocab, token, special != 0);
    *len = piece.size();
    if (piece.size() + 1 > capacity) {
      throw CapiError(LACUNA_ERR_LIMIT, "the piece needs " + std::to_string(piece.size() + 1) +
                                            " bytes with its NUL, the buffer holds " +
                                            std::to_string(capacity));
    }
    std::memcpy(buf, piece.data(), piece.size());
    buf[piece.size()] = '\0';
    return LACUNA_OK;
  });
}

// ---- contexts ------------------------------------------------------------------------------

lacuna_context_params lacuna_context_default_params(void) {
  lacuna_context_params p;
  p.n_ctx = 4096;
  p.n_batch = 512;
  p.n_threads = 0;
  p.n_branches = 8;
  p.backend_sampling = 0;
  return p;
}

lacuna_status lacuna_context_create(lacuna_model* model, const lacuna_context_params* params,
                                    lacuna_context** out) {
  return guarded("lacuna_context_create", [&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    require(model != nullptr, "model is NULL");
    if (model->state->model.vocab_only()) {
      throw CapiError(LACUNA_ERR_STATE, "the model was loaded with vocab_only: no weights");
    }
    const lacuna_context_params p = params ? *params : lacuna_context_default_params();
    require(p.n_batch >= 2, "n_batch must be at least 2");
    require(p.n_threads >= 0, "n_threads is negative");
    require(p.n_branches >= 1, "n_branches must be at least 1");
    lacuna::runtime::ContextParams cp;
    cp.n_ctx = p.n_ctx;
    cp.n_batch = p.n_batch;
    cp.n_ubatch = p.n_batch;
    cp.n_branches = p.n_branches;
    cp.n_threads = p.n_threads;
    cp.n_threads_batch = p.n_threads;
    cp.kv = lacuna::kv::KvConfig::from_env();
    cp.decode = lacuna::decode_options_from_env();
    if (p.backend_sampling != 0) cp.decode.backend_sampling = true;
    cp.model_path = model->state->model.path();
    auto st = std::make_shared<ContextState>();
    st->model = model->state;
    st->rt = std::make_unique<lacuna::runtime::Context>(model->state->model, cp);
    auto c = std::make_unique<lacuna_context>();
    c->state = std::move(st);
    *out = c.release();
    return LACUNA_OK;
  });
}

void lacuna_context_free(lacuna_context* ctx) {
  delete ctx;
}

// ---- streams -------------------------------------------------------------------------------

const char* lacuna_stop_reason_name(int32_t reason) {
  switch (reason) {
    case LACUNA_STOP_NONE:
      return "none";
    case LACUNA_STOP_EOG:
      return "eog";
    case LACUNA_STOP_CONSTRAINT_COMPLETED:
      return "constraint_completed";
    case LACUNA_STOP_CONSTRAINT_DEAD_END:
      return "constraint_dead_end";
    case LACUNA_STOP_MAX_TOKENS:
      return "max_tokens";
    case LACUNA_STOP_STOP_STRING:
      return "stop_string";
    case LACUNA_STOP_CONTEXT_FULL:
      return "context_full";
    case LACUNA_STOP_CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

lacuna_stream_params lacuna_stream_default_params(void) {
  lacuna_stream_params p;
  std::memset(&p, 0, sizeof(p));
  const lacuna::GeneratorConfig g;
  p.max_tokens = 256;
  p.temperature = 0.0f;
  p.top_p = g.top_p;
  p.top_k = g.top_k;
  p.min_p = g.min_p;
  p.seed = 0;
  p.n_threads = 0;
  p.token_trie_mode = LACUNA_TRIE_MODE_ARGMAX;
  return p;
}

lacuna_status lacuna_stream_open(lacuna_context* ctx, const lacuna_stream_params* params,
                                 lacuna_stream** out) {
  return guarded("lacuna_stream_open", [&] {
    require(out != nullptr, "out is NULL");
    *out = nullptr;
    require(ctx != nullptr, "ctx is NULL");
    const lacuna_stream_params p = params ? *params : lacuna_stream_default_params();
    require(p.max_tokens >= 0, "max_tokens is negative");
    require(p.n_threads >= 0, "n_threads is negative");
    require(p.stop_strings != nullptr || p.n_stop_strings == 0,
            "stop_strings is NULL but n_stop_strings is not 0");
    require(p.token_trie != nullptr || p.token_trie_len == 0,
            "token_trie is NULL but token_trie_len is not 0");
    const int n_constraints =
        (p.grammar != nullptr) + (p.json_schema != nullptr) + (p.token_trie != nullptr);
    require(n_constraints <= 1, "give at most one of grammar, json_schema and token_trie");

    ContextState& cs = *ctx->state;
    ContextGuard guard(cs);
    auto s = std::make_unique<lacuna_stream>();
    s->ctx = ctx->state;
    s->temperature = p.temperature;
    s->params.temp = p.temperature;
    s->params.top_p = p.top_p;
    s->params.top_k = p.top_k;
    s->params.min_p = p.min_p;
    s->params.seed = p.seed;
    s->params.max_tokens = static_cast<size_t>(p.max_tokens);
    for (size_t i = 0; i < p.n_stop_strings; ++i) {
      require(p.stop_strings[i] != nullptr, "a stop string is NULL");
      require(p.stop_strings[i][0] != '\0', "a stop string is empty");
      s->params.stop_strings.emplace_back(p.stop_strings[i]);
    }
    if (p.grammar != nullptr) {
      s->proto = lacuna::capi::grammar_constraint(cs, p.grammar);
      s->kind = lacuna_stream::Kind::grammar;
    } else if (p.json_schema != nullptr) {
      s->proto = lacuna::capi::schema_constraint(cs, p.json_schema, p.schema_compact != 0);
      s->kind = lacuna_stream::Kind::grammar;
    } else if (p.token_trie != nullptr) {
      s->trie_mode = trie_mode_checked(p.token_trie_mode);
      lacuna_token_trie_params tp = lacuna_token_trie_default_params();
      tp.mode = s->trie_mode;
      s->proto = lacuna::capi::make_trie(vocab_of(s.get()), p.token_trie, p.token_trie_len, tp);
      s->kind = lacuna_stream::Kind::trie;
    }
    if (cs.has_stream.exchange(true)) {
      throw CapiError(LACUNA_ERR_STATE, "the context already has an open stream");
    }
    try {
      if (p.n_threads > 0) llama_set_n_threads(cs.rt->raw(), p.n_threads, p.n_threads);
      lacuna::runtime::BranchParams bp = s->params;
      bp.temp = effective_temperature(s.get());
      s->branch = cs.rt->create_branch(bp);
      apply_params(s.get());
    } catch (...) {
      cs.has_stream.store(false);
      throw;
    }
    s->step_tokens.reserve(128);
    s->step_text.reserve(1024);
    *out = s.release();
    return LACUNA_OK;
  });
}

void lacuna_stream_close(lacuna_stream* stream) {
  if (stream == nullptr) return;
  if (stream->branch.valid()) stream->branch.prune_subtree();
  stream->ctx->has_stream.store(false);
  delete stream;
}

lacuna_status lacuna_stream_prefill(lacuna_stream* stream, const llama_token* tokens,
                                    size_t n_tokens) {
  return guarded("lacuna_stream_prefill", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    require(tokens != nullptr || n_tokens == 0, "tokens is NULL");
    require(n_tokens > 0 || !stream->branch.tokens().empty(),
            "no tokens (and the sequence is empty)");
    check_tokens(stream, tokens, n_tokens);
    start_generation(stream, std::span<const lacuna::Token>(tokens, n_tokens));
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_prefill_text(lacuna_stream* stream, const char* text, size_t len,
                                         int32_t add_special, int32_t parse_special) {
  return guarded("lacuna_stream_prefill_text", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    require(text != nullptr || len == 0, "text is NULL");
    const lacuna::Vocab vocab(vocab_of(stream));
    const bool empty = stream->branch.tokens().empty();
    const auto tokens = lacuna::tokenize(vocab, std::string_view(text == nullptr ? "" : text, len),
                                         add_special != 0 && empty, parse_special != 0);
    require(!tokens.empty() || !empty, "the text gives no tokens (and the sequence is empty)");
    check_tokens(stream, tokens.data(), tokens.size());
    start_generation(stream, tokens);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_next(lacuna_stream* stream, lacuna_step* step) {
  return guarded("lacuna_stream_next", [&] {
    require(stream != nullptr, "stream is NULL");
    require(step != nullptr, "step is NULL");
    std::memset(step, 0, sizeof(*step));
    ContextGuard guard(*stream->ctx);
    lacuna_stream& s = *stream;
    s.step_tokens.clear();
    s.step_text.clear();
    step->tokens = s.step_tokens.data();
    step->text = s.step_text.c_str();
    if (!s.prefilled) {
      throw CapiError(LACUNA_ERR_STATE,
                      "no generation under way: call lacuna_stream_prefill first (a set_* or "
                      "reset call ends the current one)");
    }
    const lacuna::Generator& g = s.branch.generator();
    if (s.cancelled || g.done()) {
      step->done = 1;
      step->stop_reason =
          s.cancelled ? LACUNA_STOP_CANCELLED : lacuna::capi::stop_code(g.stats().stop);
      return LACUNA_OK;
    }
    if (s.cancel_requested.load(std::memory_order_relaxed)) {
      s.cancelled = true;
      step->done = 1;
      step->stop_reason = LACUNA_STOP_CANCELLED;
      return LACUNA_OK;
    }
    lacuna::Step st;
    try {
      st = s.branch.next();
    } catch (...) {
      s.prefilled = false;  // the caller starts over with a prefill
      throw;
    }
    lacuna::capi::fill_step(st, s.step_tokens, s.step_text, step);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_cancel(lacuna_stream* stream) {
  if (stream == nullptr) {
    return lacuna::capi::fail(LACUNA_ERR_INVALID_ARGUMENT, "lacuna_stream_cancel: stream is NULL");
  }
  stream->cancel_requested.store(true, std::memory_order_relaxed);
  return LACUNA_OK;
}

lacuna_status lacuna_stream_reset(lacuna_stream* stream) {
  return guarded("lacuna_stream_reset", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    // A fresh branch: an empty sequence, the constraint and parameters as set.
    lacuna::runtime::BranchParams bp = stream->params;
    bp.temp = effective_temperature(stream);
    if (stream->branch.valid()) stream->branch.prune_subtree();
    stream->branch = stream->ctx->rt->create_branch(bp);
    stream->cancelled = false;
    stream->cancel_requested.store(false, std::memory_order_relaxed);
    apply_params(stream);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_text(lacuna_stream* stream, const char** text, size_t* len) {
  return guarded("lacuna_stream_text", [&] {
    require(stream != nullptr && text != nullptr && len != nullptr, "stream, text or len is NULL");
    ContextGuard guard(*stream->ctx);
    *text = stream->branch.generator().text().c_str();
    *len = stream->branch.generator().text().size();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_tokens(lacuna_stream* stream, const llama_token** tokens,
                                   size_t* n_tokens) {
  return guarded("lacuna_stream_tokens", [&] {
    require(stream != nullptr && tokens != nullptr && n_tokens != nullptr,
            "stream, tokens or n_tokens is NULL");
    ContextGuard guard(*stream->ctx);
    *tokens = stream->branch.generator().tokens().data();
    *n_tokens = stream->branch.generator().tokens().size();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_set_token_trie(lacuna_stream* stream, const char* json, size_t len,
                                           int32_t mode) {
  lacuna_token_trie_params p = lacuna_token_trie_default_params();
  p.mode = mode;
  return lacuna_stream_set_token_trie_ext(stream, json, len, &p);
}

lacuna_status lacuna_stream_set_token_trie_ext(lacuna_stream* stream, const char* json, size_t len,
                                               const lacuna_token_trie_params* params) {
  return guarded("lacuna_stream_set_token_trie", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    const lacuna_token_trie_params p = params ? *params : lacuna_token_trie_default_params();
    const int32_t mode = trie_mode_checked(p.mode);
    auto trie = lacuna::capi::make_trie(vocab_of(stream), json, len, p);
    set_constraint(stream, std::move(trie), lacuna_stream::Kind::trie, mode);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_clear_token_trie(lacuna_stream* stream) {
  return guarded("lacuna_stream_clear_token_trie", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    if (stream->kind != lacuna_stream::Kind::trie) {
      throw CapiError(LACUNA_ERR_STATE, "the stream has no token trie");
    }
    set_constraint(stream, nullptr, lacuna_stream::Kind::none, LACUNA_TRIE_MODE_ARGMAX);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_set_grammar(lacuna_stream* stream, const char* gbnf, size_t len) {
  return guarded("lacuna_stream_set_grammar", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    require(gbnf != nullptr || len == 0, "gbnf is NULL");
    auto c = lacuna::capi::grammar_constraint(*stream->ctx,
                                              std::string_view(gbnf == nullptr ? "" : gbnf, len));
    set_constraint(stream, std::move(c), lacuna_stream::Kind::grammar, LACUNA_TRIE_MODE_ARGMAX);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_set_json_schema(lacuna_stream* stream, const char* schema, size_t len,
                                            int32_t compact) {
  return guarded("lacuna_stream_set_json_schema", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    require(schema != nullptr || len == 0, "schema is NULL");
    auto c = lacuna::capi::schema_constraint(
        *stream->ctx, std::string_view(schema == nullptr ? "" : schema, len), compact != 0);
    set_constraint(stream, std::move(c), lacuna_stream::Kind::grammar, LACUNA_TRIE_MODE_ARGMAX);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_clear_grammar(lacuna_stream* stream) {
  return guarded("lacuna_stream_clear_grammar", [&] {
    require(stream != nullptr, "stream is NULL");
    ContextGuard guard(*stream->ctx);
    if (stream->kind != lacuna_stream::Kind::grammar) {
      throw CapiError(LACUNA_ERR_STATE, "the stream has no grammar or JSON schema");
    }
    set_constraint(stream, nullptr, lacuna_stream::Kind::none, LACUNA_TRIE_MODE_ARGMAX);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_chosen_leaf(lacuna_stream* stream, const char** name) {
  return guarded("lacuna_stream_chosen_leaf", [&] {
    require(stream != nullptr && name != nullptr, "stream or name is NULL");
    *name = nullptr;
    ContextGuard guard(*stream->ctx);
    auto* trie =
        dynamic_cast<lacuna::TokenTrieConstraint*>(stream->branch.generator().constraint());
    if (trie == nullptr) throw CapiError(LACUNA_ERR_STATE, "the stream has no token trie");
    const std::string* leaf = trie->chosen_leaf();
    *name = leaf == nullptr ? nullptr : leaf->c_str();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_save_slot(lacuna_stream* stream, const char* path) {
  return guarded("lacuna_stream_save_slot", [&] {
    require(stream != nullptr, "stream is NULL");
    require(path != nullptr && path[0] != '\0', "path is NULL or empty");
    ContextGuard guard(*stream->ctx);
    if (stream->branch.generator().n_past() == 0) {
      throw CapiError(LACUNA_ERR_STATE, "the sequence is empty: prefill first");
    }
    stream->branch.save_state(path);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_restore_slot(lacuna_stream* stream, const char* path) {
  return guarded("lacuna_stream_restore_slot", [&] {
    require(stream != nullptr, "stream is NULL");
    require(path != nullptr && path[0] != '\0', "path is NULL or empty");
    ContextGuard guard(*stream->ctx);
    // The constraint restarts; the branch is ready for next() as after a prefill.
    if (lacuna::Constraint* c = stream->branch.generator().constraint()) c->reset();
    stream->branch.load_state(path);
    stream->cancelled = false;
    stream->cancel_requested.store(false, std::memory_order_relaxed);
    stream->prefilled = true;
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_stats(lacuna_stream* stream, lacuna_stats* stats) {
  return guarded("lacuna_stream_stats", [&] {
    require(stream != nullptr && stats != nullptr, "stream or stats is NULL");
    ContextGuard guard(*stream->ctx);
    *stats = lacuna::capi::to_c(stream->branch.generator().stats(), stream->cancelled);
    return LACUNA_OK;
  });
}

}  // extern "C"
