// reference_loop.cpp — llama.cpp's plain decode loop (one llama_decode per token,
// llama_sampler_sample over a chain): the baseline the generator is compared with.
#include <chrono>
#include <stdexcept>
#include <string>

#include "lacuna/generator.h"

namespace lacuna {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

ReferenceResult reference_generate(llama_context* ctx, llama_sampler* chain,
                                   std::span<const Token> prompt, size_t max_tokens) {
  if (ctx == nullptr || chain == nullptr)
    throw std::invalid_argument("reference_generate: null argument");
  if (prompt.empty()) throw std::invalid_argument("reference_generate: empty prompt");
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  for (Token t : prompt) {
    if (t < 0 || t >= n_vocab)
      throw std::invalid_argument("reference_generate: token out of range");
  }
  const size_t n_ctx = llama_n_ctx(ctx);
  const size_t n_batch = llama_n_batch(ctx);
  if (prompt.size() >= n_ctx)
    throw std::runtime_error("reference_generate: prompt does not fit the context");
  llama_memory_clear(llama_get_memory(ctx), true);

  ReferenceResult r;
  r.stats.prompt_tokens = prompt.size();
  const auto t_start = Clock::now();
  llama_batch batch = llama_batch_init(static_cast<int32_t>(n_batch), 0, 1);
  auto fail = [&](const std::string& what) {
    llama_batch_free(batch);
    throw std::runtime_error("reference_generate: " + what);
  };
  llama_pos pos = 0;
  for (size_t i = 0; i < prompt.size();) {
    batch.n_tokens = 0;
    for (; i < prompt.size() && static_cast<size_t>(batch.n_tokens) < n_batch; ++i) {
      const int32_t k = batch.n_tokens++;
      batch.token[k] = prompt[i];
      batch.pos[k] = pos++;
      batch.n_seq_id[k] = 1;
      batch.seq_id[k][0] = 0;
      batch.logits[k] = i + 1 == prompt.size() ? 1 : 0;
    }
    if (llama_decode(ctx, batch) != 0) fail("prompt decode failed");
  }
  r.stats.prefill_ms = ms_between(t_start, Clock::now());
  r.tokens.reserve(max_tokens);
  r.stats.stop = StopReason::max_tokens;
  while (r.tokens.size() < max_tokens) {
    const auto t0 = Clock::now();
    const Token t = llama_sampler_sample(chain, ctx, -1);
    r.stats.sample_ms += ms_between(t0, Clock::now());
    if (llama_vocab_is_eog(vocab, t)) {
      r.stats.stop = StopReason::eog;
      break;
    }
    r.tokens.push_back(t);
    if (r.tokens.size() >= max_tokens) break;
    if (static_cast<size_t>(pos) + 1 >= n_ctx) {
      r.stats.stop = StopReason::context_full;
      break;
    }
    batch.n_tokens = 1;
    batch.token[0] = t;
    batch.pos[0] = pos++;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    const auto t1 = Clock::now();
    if (llama_decode(ctx, batch) != 0) fail("decode failed");
    r.stats.decode_ms += ms_between(t1, Clock::now());
    ++r.stats.forward_passes;
  }
  llama_batch_free(batch);
  r.stats.tokens_emitted = r.tokens.size();
  r.stats.total_ms = ms_between(t_start, Clock::now());
  return r;
}

}  // namespace lacuna
