// decode_parts.cpp — packs runs of tokens of several sequences into shared llama_decode
// calls and hands each run its outputs (the one decode path, docs/runtime.md).
#include "runtime/decode_parts.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace lacuna::runtime {

const char* decode_status_text(int32_t status) {
  switch (status) {
    case 0:
      return "ok";
    case 1:
      return "no KV cache slot for the batch (the context is full)";
    case 2:
      return "aborted";
    case -1:
      return "invalid batch (bad token id, position or sequence id)";
    default:
      return "fatal error in llama_decode";
  }
}

int32_t decode_parts(llama_context* ctx, llama_batch& batch, int32_t n_batch, std::span<Part> parts,
                     const OnOutputs& on_outputs, DecodeCounters* counters,
                     const std::function<bool()>& on_full) {
  if (n_batch < 1) throw std::invalid_argument("decode_parts: n_batch must be >= 1");
  const size_t cap = static_cast<size_t>(n_batch);
  for (Part& p : parts) {
    if (p.tokens.empty()) throw std::invalid_argument("decode_parts: a part has no tokens");
    if (p.n_out > cap || p.n_out > p.tokens.size()) {
      throw std::invalid_argument("decode_parts: a part asks for " + std::to_string(p.n_out) +
                                  " outputs, more than its tokens or a batch of " +
                                  std::to_string(cap));
    }
    p.n_decoded = 0;
  }
  // What the current call holds: for each part, how many tokens it adds; and which parts
  // have their outputs in it (with the batch index of the first output).
  struct Slice {
    size_t part;
    size_t n;
    int32_t out0;  // batch index of the part's first output; -1: no outputs in this call
  };
  std::vector<Slice> slices;
  slices.reserve(parts.size() + 1);

  auto flush = [&]() -> int32_t {
    if (batch.n_tokens == 0) return 0;
    int32_t rc = 0;
    double ms = 0;
    bool retried = false;  // on_full is asked once per failing call, never in a loop
    for (;;) {
      const auto t0 = std::chrono::steady_clock::now();
      rc = llama_decode(ctx, batch);
      ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (counters != nullptr) ++counters->calls;
      if (rc == 1 && !retried && on_full && on_full()) {
        retried = true;
        continue;
      }
      break;
    }
    if (counters != nullptr) counters->ms += ms;
    for (const Slice& s : slices) {
      ++parts[s.part].n_calls;
      parts[s.part].ms += ms;
    }
    if (rc != 0) {
      // llama.cpp keeps the ubatches of the call that succeeded: ask the memory what each
      // sequence holds now.
      llama_memory_t mem = llama_get_memory(ctx);
      for (const Slice& s : slices) {
        Part& p = parts[s.part];
        const llama_pos held = llama_memory_seq_pos_max(mem, p.seq) + 1 - p.pos;
        const size_t upto = p.n_decoded + s.n;
        p.n_decoded =
            std::clamp<size_t>(held < 0 ? 0 : static_cast<size_t>(held), p.n_decoded, upto);
      }
      return rc;
    }
    for (const Slice& s : slices) {
      parts[s.part].n_decoded += s.n;
      if (s.out0 >= 0 && on_outputs) on_outputs(s.part, s.out0);
    }
    slices.clear();
    batch.n_tokens = 0;
    return 0;
  };

  batch.n_tokens = 0;
  for (size_t pi = 0; pi < parts.size(); ++pi) {
    const Part& p = parts[pi];
    const size_t n = p.tokens.size();
    const size_t first_out = n - p.n_out;
    size_t i = 0;
    while (i < n) {
      size_t room = cap - static_cast<size_t>(batch.n_tokens);
      // The outputs go in one call: when the rest from here holds them and does not fit,
      // only tokens before the outputs go now.
      size_t take = std::min(room, n - i);
      if (i + take > first_out && i + take < n) {
        take = first_out > i ? first_out - i : 0;
      }
      if (take == 0) {
        if (const int32_t rc = flush(); rc != 0) return rc;
        continue;
      }
      const bool with_out = i + take == n && p.n_out > 0;
      const int32_t out0 = batch.n_tokens + static_cast<int32_t>(first_out - i);
      for (size_t k = 0; k < take; ++k) {
        const size_t t = i + k;
        const int32_t b = batch.n_tokens++;
        batch.token[b] = p.tokens[t];
        batch.pos[b] = p.pos + static_cast<llama_pos>(t);
        batch.n_seq_id[b] = 1;
        batch.seq_id[b][0] = p.seq;
        batch.logits[b] = t >= first_out ? 1 : 0;
      }
      slices.push_back(Slice{pi, take, with_out ? out0 : -1});
      i += take;
      if (static_cast<size_t>(batch.n_tokens) == cap) {
        if (const int32_t rc = flush(); rc != 0) return rc;
      }
    }
  }
  return flush();
}

}  // namespace lacuna::runtime
