// reference_loop.cpp — llama.cpp's plain decode loop (one llama_decode per token,
// llama_sampler_sample over a chain): the baseline the generator is compared with.
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "lacuna/generator.h"

namespace lacuna {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The loop shared by both reference samplers: `sample` returns the next token (and has
// made the samplers accept it).
template <typename Sample>
ReferenceResult reference_loop(llama_context* ctx, std::span<const Token> prompt, size_t max_tokens,
                               Sample&& sample) {
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
    Token t = 0;
    try {
      t = sample();
    } catch (...) {
      llama_batch_free(batch);
      throw;
    }
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

}  // namespace

ReferenceResult reference_generate(llama_context* ctx, llama_sampler* chain,
                                   std::span<const Token> prompt, size_t max_tokens) {
  if (ctx == nullptr || chain == nullptr)
    throw std::invalid_argument("reference_generate: null argument");
  return reference_loop(ctx, prompt, max_tokens,
                        [&] { return llama_sampler_sample(chain, ctx, -1); });
}

ReferenceResult reference_generate_rejection(llama_context* ctx, llama_sampler* grammar,
                                             llama_sampler* chain, std::span<const Token> prompt,
                                             size_t max_tokens) {
  if (ctx == nullptr || grammar == nullptr || chain == nullptr)
    throw std::invalid_argument("reference_generate_rejection: null argument");
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token_data> cur(static_cast<size_t>(n_vocab));
  size_t resamples = 0;
  // Fills `cur` with the last logits (every token, in id order), as common_sampler does.
  auto load = [&](llama_token_data_array& arr) {
    const float* logits = llama_get_logits_ith(ctx, -1);
    if (logits == nullptr) throw std::runtime_error("reference_generate_rejection: no logits");
    for (int32_t i = 0; i < n_vocab; ++i) cur[static_cast<size_t>(i)] = {i, logits[i], 0.0f};
    arr = {cur.data(), cur.size(), -1, false};
  };
  auto sample = [&]() -> Token {
    llama_token_data_array arr{};
    load(arr);
    llama_sampler_apply(chain, &arr);
    if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size)
      throw std::runtime_error("reference_generate_rejection: the chain selected no token");
    Token id = arr.data[arr.selected].id;
    llama_token_data single{id, 1.0f, 0.0f};
    llama_token_data_array one{&single, 1, -1, false};
    llama_sampler_apply(grammar, &one);
    if (!std::isfinite(single.logit)) {
      ++resamples;
      load(arr);
      llama_sampler_apply(grammar, &arr);
      llama_sampler_apply(chain, &arr);
      if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size)
        throw std::runtime_error("reference_generate_rejection: the chain selected no token");
      id = arr.data[arr.selected].id;
    }
    llama_sampler_accept(grammar, id);
    llama_sampler_accept(chain, id);
    return id;
  };
  ReferenceResult r = reference_loop(ctx, prompt, max_tokens, sample);
  r.grammar_resamples = resamples;
  return r;
}

}  // namespace lacuna
