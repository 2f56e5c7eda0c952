// stream_capi.cpp — the C ABI for models, contexts and pull-based generation streams
// (lacuna.h): a stream wraps lacuna::Generator, its constraint, cancel and slot save/restore.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "capi/capi_common.h"
#include "decode/constraint_factory.h"
#include "lacuna/generator.h"
#include "lacuna/kv.h"
#include "lacuna/log.h"

namespace {

using lacuna::capi::CapiError;
using lacuna::capi::guarded;

// What a model handle, its contexts and their streams share: the weights and the model
// file's fingerprint (computed on the first slot save or restore).
struct ModelState {
  explicit ModelState(lacuna::Model m) : model(std::move(m)) {}
  lacuna::Model model;
  std::mutex fingerprint_mutex;
  std::optional<lacuna::kv::Fingerprint> fingerprint;

  lacuna::kv::Fingerprint model_fingerprint() {
    std::lock_guard<std::mutex> lock(fingerprint_mutex);
    if (!fingerprint) {
      if (model.path().empty()) {
        throw CapiError(LACUNA_ERR_STATE, "the model has no file to fingerprint");
      }
      try {
        fingerprint = lacuna::kv::fingerprint_file(model.path());
      } catch (const lacuna::kv::KvError& e) {
        throw CapiError(LACUNA_ERR_IO, e.what());
      }
    }
    return *fingerprint;
  }
};

struct ContextState {
  ContextState(std::shared_ptr<ModelState> m, lacuna::Context c)
      : model(std::move(m)), ctx(std::move(c)) {}
  std::shared_ptr<ModelState> model;
  lacuna::Context ctx;
  std::atomic<bool> has_stream{false};
};

constexpr llama_seq_id kSeq = 0;

}  // namespace

struct lacuna_model {
  std::shared_ptr<ModelState> state;
};

struct lacuna_context {
  std::shared_ptr<ContextState> state;
};

struct lacuna_stream {
  enum class Kind { none, grammar, trie };

  std::shared_ptr<ContextState> ctx;
  lacuna::GeneratorConfig config;  // as opened; temp is overridden in trie argmax mode
  float temperature = 0.0f;
  Kind kind = Kind::none;
  int32_t trie_mode = LACUNA_TRIE_MODE_ARGMAX;
  std::unique_ptr<lacuna::Constraint> proto;  // the constraint in its initial state
  std::unique_ptr<lacuna::Generator> gen;

  std::vector<lacuna::Token> history;  // every token of the sequence (prompts and output)
  bool prefilled = false;              // a generation is under way (next() may be called)
  bool cancelled = false;              // the current generation ended by cancel
  std::atomic<bool> cancel_requested{false};
  std::atomic<bool> busy{false};

  std::vector<lacuna::Token> step_tokens;  // the buffers handed out by next()
  std::string step_text;
  std::vector<lacuna::Token> scratch;
};

namespace {

// Marks a stream in use for one call; a second thread gets LACUNA_ERR_BUSY.
class BusyGuard {
 public:
  explicit BusyGuard(lacuna_stream* s) : s_(s) {
    if (s_->busy.exchange(true, std::memory_order_acquire)) {
      throw CapiError(LACUNA_ERR_BUSY, "the stream is in use by another thread");
    }
  }
  ~BusyGuard() { s_->busy.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  lacuna_stream* s_;
};

void require(bool ok, const char* message) {
  if (!ok) throw CapiError(LACUNA_ERR_INVALID_ARGUMENT, message);
}

llama_context* raw(lacuna_stream* s) {
  return s->ctx->ctx.get();
}

const llama_vocab* vocab_of(lacuna_stream* s) {
  return s->ctx->model->model.vocab_ptr();
}

size_t kv_tokens(lacuna_stream* s) {
  const llama_pos pos_max = llama_memory_seq_pos_max(llama_get_memory(raw(s)), kSeq);
  return pos_max < 0 ? 0 : static_cast<size_t>(pos_max) + 1;
}

float effective_temperature(const lacuna_stream* s) {
  return s->kind == lacuna_stream::Kind::trie && s->trie_mode == LACUNA_TRIE_MODE_ARGMAX
             ? 0.0f
             : s->temperature;
}

// (Re)creates the generator over the sequence as it is in the KV cache. Tokens of the
// history not in the KV cache must be prefilled again by the caller.
void rebuild_generator(lacuna_stream* s) {
  lacuna::GeneratorConfig c = s->config;
  c.temp = effective_temperature(s);
  s->gen.reset();
  s->gen = std::make_unique<lacuna::Generator>(raw(s), c, s->proto ? s->proto->fork() : nullptr);
  s->prefilled = false;
}

// Tokens of the history not in the KV cache (the last output token after a generation).
std::span<const lacuna::Token> not_in_kv(lacuna_stream* s, size_t kv) {
  return std::span<const lacuna::Token>(s->history).subspan(std::min(kv, s->history.size()));
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
  const size_t n_ctx = llama_n_ctx(raw(s));
  if (s->history.size() + n >= n_ctx) {
    throw CapiError(LACUNA_ERR_LIMIT, std::to_string(n) + " tokens do not fit in the context (" +
                                          std::to_string(s->history.size()) + " used of " +
                                          std::to_string(n_ctx) + ")");
  }
}

// Starts a generation over `tokens` (plus whatever of the history the KV cache lacks).
void start_generation(lacuna_stream* s, std::span<const lacuna::Token> tokens) {
  s->prefilled = false;
  s->cancelled = false;
  s->cancel_requested.store(false, std::memory_order_relaxed);
  const size_t kv = kv_tokens(s);
  if (s->gen->config().temp != effective_temperature(s) ||
      static_cast<size_t>(s->gen->n_past()) != kv) {
    rebuild_generator(s);
  }
  // A generator that ran before keeps its own not-yet-decoded output token; a fresh one
  // starts at the KV cache, so the missing history goes in front of the prompt.
  s->scratch.clear();
  if (s->gen->n_pending() == 0) {
    const auto missing = not_in_kv(s, kv);
    s->scratch.assign(missing.begin(), missing.end());
  }
  s->scratch.insert(s->scratch.end(), tokens.begin(), tokens.end());
  if (lacuna::Constraint* c = s->gen->constraint()) c->reset();
  try {
    s->gen->prefill(s->scratch);
  } catch (...) {
    // The KV cache may hold part of the prompt: start over from what it holds.
    const size_t now = kv_tokens(s);
    if (now < s->history.size()) s->history.resize(now);
    rebuild_generator(s);
    throw;
  }
  s->history.insert(s->history.end(), tokens.begin(), tokens.end());
  s->prefilled = true;
}

// Installs a new constraint (or none) for the next generation; the current one ends.
void set_constraint(lacuna_stream* s, std::unique_ptr<lacuna::Constraint> c,
                    lacuna_stream::Kind kind, int32_t trie_mode) {
  auto fork = c ? c->fork() : nullptr;
  s->gen->set_constraint(std::move(fork));  // checks the vocabulary size first
  s->proto = std::move(c);
  s->kind = kind;
  s->trie_mode = trie_mode;
  s->prefilled = false;
}

std::unique_ptr<lacuna::Constraint> grammar_constraint(lacuna_stream* s, std::string_view gbnf) {
  return lacuna::decode::make_grammar_constraint(vocab_of(s), std::string(gbnf));
}

std::unique_ptr<lacuna::Constraint> schema_constraint(lacuna_stream* s, std::string_view schema,
                                                      bool compact) {
  lacuna::SchemaOptions so;
  so.whitespace = compact ? lacuna::SchemaOptions::Whitespace::Compact
                          : lacuna::SchemaOptions::Whitespace::Flexible;
  so.on_warning = [](const std::string& keyword, const std::string& pointer,
                     const std::string& message) {
    lacuna::log_message(lacuna::LogLevel::warn,
                        "schema: " + keyword + " at " + pointer + ": " + message);
  };
  return grammar_constraint(s, lacuna::json_schema_to_gbnf(schema, so));
}

int32_t trie_mode_checked(int32_t mode) {
  if (mode != LACUNA_TRIE_MODE_ARGMAX && mode != LACUNA_TRIE_MODE_SAMPLE) {
    throw CapiError(LACUNA_ERR_INVALID_ARGUMENT,
                    "unknown token-trie mode " + std::to_string(mode) +
                        " (0 = argmax, 1 = sample; mask-only is for samplers)");
  }
  return mode;
}

int32_t stop_code(lacuna::StopReason r) {
  using lacuna::StopReason;
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

std::vector<uint8_t> read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw CapiError(err == ENOENT ? LACUNA_ERR_NOT_FOUND : LACUNA_ERR_IO,
                    std::string("cannot open '") + path + "': " + std::strerror(err));
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) throw CapiError(LACUNA_ERR_IO, std::string("error while reading '") + path + "'");
  return bytes;
}

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw CapiError(LACUNA_ERR_IO,
                      "cannot create '" + tmp + "': " + std::string(std::strerror(errno)));
    }
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw CapiError(LACUNA_ERR_IO, "cannot write '" + tmp + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw CapiError(LACUNA_ERR_IO, "cannot rename '" + tmp + "' to '" + path +
                                       "': " + std::string(std::strerror(err)));
  }
}

std::vector<uint8_t> sequence_state(llama_context* ctx) {
  std::vector<uint8_t> state(llama_state_seq_get_size(ctx, kSeq));
  const size_t got = llama_state_seq_get_data(ctx, state.data(), state.size(), kSeq);
  if (got == 0 && !state.empty()) {
    throw CapiError(LACUNA_ERR_INTERNAL, "llama.cpp could not copy the sequence state");
  }
  state.resize(got);
  return state;
}

lacuna_stats to_c(const lacuna::GenerationStats& g, bool cancelled) {
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
    lacuna::ContextParams cp;
    cp.n_ctx = p.n_ctx;
    cp.n_batch = p.n_batch;
    cp.n_ubatch = p.n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = p.n_threads;
    cp.n_threads_batch = p.n_threads;
    auto c = std::make_unique<lacuna_context>();
    c->state = std::make_shared<ContextState>(model->state,
                                              lacuna::Context::create(model->state->model, cp));
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

    auto s = std::make_unique<lacuna_stream>();
    s->ctx = ctx->state;
    s->temperature = p.temperature;
    s->config.temp = p.temperature;
    s->config.top_p = p.top_p;
    s->config.top_k = p.top_k;
    s->config.min_p = p.min_p;
    s->config.seed = p.seed;
    s->config.max_tokens = static_cast<size_t>(p.max_tokens);
    s->config.seq = kSeq;
    s->config.decode = lacuna::decode_options_from_env();
    for (size_t i = 0; i < p.n_stop_strings; ++i) {
      require(p.stop_strings[i] != nullptr, "a stop string is NULL");
      require(p.stop_strings[i][0] != '\0', "a stop string is empty");
      s->config.stop_strings.emplace_back(p.stop_strings[i]);
    }
    if (p.grammar != nullptr) {
      s->proto = grammar_constraint(s.get(), p.grammar);
      s->kind = lacuna_stream::Kind::grammar;
    } else if (p.json_schema != nullptr) {
      s->proto = schema_constraint(s.get(), p.json_schema, p.schema_compact != 0);
      s->kind = lacuna_stream::Kind::grammar;
    } else if (p.token_trie != nullptr) {
      s->trie_mode = trie_mode_checked(p.token_trie_mode);
      lacuna_token_trie_params tp = lacuna_token_trie_default_params();
      tp.mode = s->trie_mode;
      s->proto = lacuna::capi::make_trie(vocab_of(s.get()), p.token_trie, p.token_trie_len, tp);
      s->kind = lacuna_stream::Kind::trie;
    }
    if (ctx->state->has_stream.exchange(true)) {
      throw CapiError(LACUNA_ERR_STATE, "the context already has an open stream");
    }
    try {
      if (p.n_threads > 0) llama_set_n_threads(raw(s.get()), p.n_threads, p.n_threads);
      llama_memory_seq_rm(llama_get_memory(raw(s.get())), kSeq, -1, -1);
      rebuild_generator(s.get());
    } catch (...) {
      ctx->state->has_stream.store(false);
      throw;
    }
    s->history.reserve(llama_n_ctx(raw(s.get())));  // no growth while tokens come
    s->step_tokens.reserve(128);
    s->step_text.reserve(1024);
    *out = s.release();
    return LACUNA_OK;
  });
}

void lacuna_stream_close(lacuna_stream* stream) {
  if (stream == nullptr) return;
  stream->gen.reset();
  stream->ctx->has_stream.store(false);
  delete stream;
}

lacuna_status lacuna_stream_prefill(lacuna_stream* stream, const llama_token* tokens,
                                    size_t n_tokens) {
  return guarded("lacuna_stream_prefill", [&] {
    require(stream != nullptr, "stream is NULL");
    BusyGuard busy(stream);
    require(tokens != nullptr || n_tokens == 0, "tokens is NULL");
    require(n_tokens > 0 || !stream->history.empty(), "no tokens (and the sequence is empty)");
    check_tokens(stream, tokens, n_tokens);
    start_generation(stream, std::span<const lacuna::Token>(tokens, n_tokens));
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_prefill_text(lacuna_stream* stream, const char* text, size_t len,
                                         int32_t add_special, int32_t parse_special) {
  return guarded("lacuna_stream_prefill_text", [&] {
    require(stream != nullptr, "stream is NULL");
    BusyGuard busy(stream);
    require(text != nullptr || len == 0, "text is NULL");
    const lacuna::Vocab vocab(vocab_of(stream));
    const auto tokens =
        lacuna::tokenize(vocab, std::string_view(text == nullptr ? "" : text, len),
                         add_special != 0 && stream->history.empty(), parse_special != 0);
    require(!tokens.empty() || !stream->history.empty(),
            "the text gives no tokens (and the sequence is empty)");
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
    BusyGuard busy(stream);
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
    if (s.cancelled || s.gen->done()) {
      step->done = 1;
      step->stop_reason = s.cancelled ? LACUNA_STOP_CANCELLED : stop_code(s.gen->stats().stop);
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
      st = s.gen->next();
    } catch (...) {
      s.prefilled = false;  // the generator's state is unknown: the caller starts over
      const size_t kv = kv_tokens(stream);
      if (kv < s.history.size()) s.history.resize(kv);
      rebuild_generator(stream);
      throw;
    }
    s.step_tokens.assign(st.tokens.begin(), st.tokens.end());
    s.step_text.assign(st.text);
    s.history.insert(s.history.end(), st.tokens.begin(), st.tokens.end());
    step->tokens = s.step_tokens.data();
    step->n_tokens = s.step_tokens.size();
    step->text = s.step_text.c_str();
    step->text_len = s.step_text.size();
    step->done = st.done ? 1 : 0;
    step->stop_reason = stop_code(st.reason);
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
    BusyGuard busy(stream);
    llama_memory_seq_rm(llama_get_memory(raw(stream)), kSeq, -1, -1);
    stream->history.clear();
    stream->cancelled = false;
    stream->cancel_requested.store(false, std::memory_order_relaxed);
    rebuild_generator(stream);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_text(lacuna_stream* stream, const char** text, size_t* len) {
  return guarded("lacuna_stream_text", [&] {
    require(stream != nullptr && text != nullptr && len != nullptr, "stream, text or len is NULL");
    BusyGuard busy(stream);
    *text = stream->gen->text().c_str();
    *len = stream->gen->text().size();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_tokens(lacuna_stream* stream, const llama_token** tokens,
                                   size_t* n_tokens) {
  return guarded("lacuna_stream_tokens", [&] {
    require(stream != nullptr && tokens != nullptr && n_tokens != nullptr,
            "stream, tokens or n_tokens is NULL");
    BusyGuard busy(stream);
    *tokens = stream->gen->tokens().data();
    *n_tokens = stream->gen->tokens().size();
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
    BusyGuard busy(stream);
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
    BusyGuard busy(stream);
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
    BusyGuard busy(stream);
    require(gbnf != nullptr || len == 0, "gbnf is NULL");
    auto c = grammar_constraint(stream, std::string_view(gbnf == nullptr ? "" : gbnf, len));
    set_constraint(stream, std::move(c), lacuna_stream::Kind::grammar, LACUNA_TRIE_MODE_ARGMAX);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_set_json_schema(lacuna_stream* stream, const char* schema, size_t len,
                                            int32_t compact) {
  return guarded("lacuna_stream_set_json_schema", [&] {
    require(stream != nullptr, "stream is NULL");
    BusyGuard busy(stream);
    require(schema != nullptr || len == 0, "schema is NULL");
    auto c = schema_constraint(stream, std::string_view(schema == nullptr ? "" : schema, len),
                               compact != 0);
    set_constraint(stream, std::move(c), lacuna_stream::Kind::grammar, LACUNA_TRIE_MODE_ARGMAX);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_clear_grammar(lacuna_stream* stream) {
  return guarded("lacuna_stream_clear_grammar", [&] {
    require(stream != nullptr, "stream is NULL");
    BusyGuard busy(stream);
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
    BusyGuard busy(stream);
    auto* trie = dynamic_cast<lacuna::TokenTrieConstraint*>(stream->gen->constraint());
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
    BusyGuard busy(stream);
    if (kv_tokens(stream) == 0 || stream->history.empty()) {
      throw CapiError(LACUNA_ERR_STATE, "the sequence is empty: prefill first");
    }
    llama_context* ctx = raw(stream);
    const auto fp = stream->ctx->model->model_fingerprint();
    const std::vector<uint8_t> state = sequence_state(ctx);
    lacuna::kv::KvShape shape = lacuna::kv::model_shape(llama_get_model(ctx));
    lacuna::kv::payload_kv_info(state, shape.n_layer, shape);
    const auto bytes =
        lacuna::kv::encode_cache_file(fp, /*block_size=*/1, shape, stream->history, state);
    write_file(path, bytes);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_restore_slot(lacuna_stream* stream, const char* path) {
  return guarded("lacuna_stream_restore_slot", [&] {
    require(stream != nullptr, "stream is NULL");
    require(path != nullptr && path[0] != '\0', "path is NULL or empty");
    BusyGuard busy(stream);
    llama_context* ctx = raw(stream);
    const std::vector<uint8_t> bytes = read_file(path);
    lacuna::kv::CacheFileView view;
    std::string reason;
    if (!lacuna::kv::parse_cache_file(bytes, view, reason)) {
      throw CapiError(LACUNA_ERR_PARSE,
                      std::string("'") + path + "' is not a valid slot file: " + reason);
    }
    if (!(view.fingerprint == stream->ctx->model->model_fingerprint())) {
      throw CapiError(LACUNA_ERR_MODEL_MISMATCH,
                      std::string("'") + path + "' was saved with another model (fingerprint " +
                          view.fingerprint.hex() + ")");
    }
    const lacuna::kv::KvShape want = lacuna::kv::model_shape(llama_get_model(ctx));
    if (view.shape.n_layer != want.n_layer || view.shape.n_embd != want.n_embd ||
        view.shape.n_head != want.n_head || view.shape.n_head_kv != want.n_head_kv) {
      throw CapiError(LACUNA_ERR_MODEL_MISMATCH,
                      std::string("'") + path + "' has KV shapes of another model");
    }
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_of(stream));
    for (lacuna::Token t : view.tokens) {
      if (t < 0 || t >= n_vocab) {
        throw CapiError(LACUNA_ERR_PARSE, std::string("'") + path + "' holds token " +
                                              std::to_string(t) + ", outside the vocabulary");
      }
    }
    if (view.tokens.size() >= llama_n_ctx(ctx)) {
      throw CapiError(LACUNA_ERR_LIMIT, std::string("'") + path + "' holds " +
                                            std::to_string(view.tokens.size()) +
                                            " tokens, more than the context has room for");
    }
    // Keep the current sequence so that a refused payload leaves the stream as it was.
    const std::vector<uint8_t> before = sequence_state(ctx);
    llama_memory_t mem = llama_get_memory(ctx);
    llama_memory_seq_rm(mem, kSeq, -1, -1);
    const size_t got =
        llama_state_seq_set_data(ctx, view.payload.data(), view.payload.size(), kSeq);
    const llama_pos pos_max = llama_memory_seq_pos_max(mem, kSeq);
    if (got == 0 || pos_max < 0 || static_cast<size_t>(pos_max) + 1 > view.tokens.size()) {
      llama_memory_seq_rm(mem, kSeq, -1, -1);
      if (!before.empty()) llama_state_seq_set_data(ctx, before.data(), before.size(), kSeq);
      throw CapiError(LACUNA_ERR_PARSE,
                      std::string("llama.cpp refused the KV data of '") + path + "'");
    }
    // The last token in the KV cache is decoded again, so that the generator has its logits.
    const size_t kv = static_cast<size_t>(pos_max) + 1;
    llama_memory_seq_rm(mem, kSeq, static_cast<llama_pos>(kv - 1), -1);
    stream->history.assign(view.tokens.begin(), view.tokens.begin() + (kv - 1));
    const std::vector<lacuna::Token> tail(view.tokens.begin() + (kv - 1), view.tokens.end());
    rebuild_generator(stream);
    start_generation(stream, tail);
    return LACUNA_OK;
  });
}

lacuna_status lacuna_stream_stats(lacuna_stream* stream, lacuna_stats* stats) {
  return guarded("lacuna_stream_stats", [&] {
    require(stream != nullptr && stats != nullptr, "stream or stats is NULL");
    BusyGuard busy(stream);
    *stats = to_c(stream->gen->stats(), stream->cancelled);
    return LACUNA_OK;
  });
}

}  // extern "C"
