// context.cpp — Context: a llama_context that keeps its model alive, with checked decode.
#include <stdexcept>
#include <string>
#include <thread>

#include "lacuna/log.h"
#include "lacuna/model.h"

namespace lacuna {
namespace {

int32_t default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int32_t>(n);
}

std::string with_llama_error(std::string msg) {
  const std::string err = last_llama_error();
  if (!err.empty()) msg += " (llama.cpp: " + err + ")";
  return msg;
}

}  // namespace

Context Context::create(const Model& model, const ContextParams& params) {
  if (params.n_threads < 0 || params.n_threads_batch < 0) {
    throw std::invalid_argument("Context: thread counts must be >= 0");
  }
  if (params.n_batch == 0 || params.n_ubatch == 0 || params.n_seq_max == 0) {
    throw std::invalid_argument("Context: n_batch, n_ubatch and n_seq_max must be positive");
  }
  init_llama();
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = params.n_ctx;
  cp.n_batch = params.n_batch;
  cp.n_ubatch = params.n_ubatch;
  cp.n_seq_max = params.n_seq_max;
  cp.n_threads = params.n_threads > 0 ? params.n_threads : default_threads();
  cp.n_threads_batch = params.n_threads_batch > 0 ? params.n_threads_batch : cp.n_threads;
  cp.embeddings = params.embeddings;
  cp.no_perf = !params.perf;
  return create(model, cp);
}

Context Context::create(const Model& model, const llama_context_params& params) {
  init_llama();
  if (model.vocab_only()) {
    throw LlamaError("cannot create a context on a vocabulary-only model ('" + model.path() + "')");
  }
  if (params.n_seq_max > llama_max_parallel_sequences()) {
    throw std::invalid_argument("Context: n_seq_max " + std::to_string(params.n_seq_max) +
                                " exceeds llama.cpp's limit of " +
                                std::to_string(llama_max_parallel_sequences()));
  }
  ScopedLlamaErrorCapture capture;
  clear_last_llama_error();
  ContextPtr ctx(llama_init_from_model(model.get(), params));
  if (!ctx) {
    throw LlamaError(with_llama_error("llama.cpp could not create a context (n_ctx " +
                                      std::to_string(params.n_ctx) + ", n_batch " +
                                      std::to_string(params.n_batch) + ")"));
  }
  return Context(model, std::move(ctx));
}

void Context::set_threads(int32_t n_threads, int32_t n_threads_batch) {
  if (n_threads <= 0 || n_threads_batch <= 0) {
    throw std::invalid_argument("Context::set_threads: thread counts must be positive");
  }
  llama_set_n_threads(ctx_.get(), n_threads, n_threads_batch);
}

int32_t Context::try_decode(const Batch& batch) {
  if (batch.empty()) return -1;
  return llama_decode(ctx_.get(), batch.raw());
}

void Context::decode(const Batch& batch) {
  if (batch.empty()) throw LlamaError("decode: the batch is empty");
  ScopedLlamaErrorCapture capture;
  clear_last_llama_error();
  const int32_t rc = llama_decode(ctx_.get(), batch.raw());
  if (rc == 0) return;
  std::string why;
  switch (rc) {
    case 1:
      why = "no KV cache slot for the batch (the context of " + std::to_string(n_ctx()) +
            " tokens is full; use a larger n_ctx or a smaller batch)";
      break;
    case 2:
      why = "aborted";
      break;
    case -1:
      why = "invalid batch (bad token id, position or sequence id)";
      break;
    default:
      why = "fatal error " + std::to_string(rc);
      break;
  }
  throw LlamaError(
      with_llama_error("decode of " + std::to_string(batch.size()) + " tokens failed: " + why));
}

const float* Context::logits(int32_t i) const {
  ScopedLlamaErrorCapture capture;
  clear_last_llama_error();
  const float* p = llama_get_logits_ith(ctx_.get(), i);
  if (p == nullptr) {
    throw LlamaError(
        with_llama_error("no logits for output " + std::to_string(i) + " of the last decode"));
  }
  return p;
}

void Context::clear_memory(bool data) {
  llama_memory_clear(llama_get_memory(ctx_.get()), data);
}

bool Context::seq_rm(SeqId seq, Pos p0, Pos p1) {
  return llama_memory_seq_rm(llama_get_memory(ctx_.get()), seq, p0, p1);
}

Pos Context::seq_pos_max(SeqId seq) const {
  return llama_memory_seq_pos_max(llama_get_memory(ctx_.get()), seq);
}

}  // namespace lacuna
