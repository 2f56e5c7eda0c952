// decode_parts.h — the one place lacuna calls llama_decode for generation: runs of tokens of
// several sequences ("parts") packed into shared batches of at most n_batch tokens.
//
// Every decoding path (Generator, Branch, BranchStore, kv::Session's prefill, the C ABI, the
// CLI and the server) hands its tokens here. See docs/runtime.md, "One decode path".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "llama.h"

namespace lacuna::runtime {

using Token = int32_t;

// A run of tokens of one sequence at consecutive positions, with logits for its last n_out
// tokens. The outputs of one part always come from one llama_decode call (n_out <= n_batch);
// tokens before them may go in earlier calls.
struct Part {
  llama_seq_id seq = 0;
  llama_pos pos = 0;  // position of tokens[0]
  std::span<const Token> tokens;
  size_t n_out = 0;  // logits for tokens[size - n_out, size)
  // Filled by decode_parts: tokens whose KV the sequence holds (all of them on success; after
  // a failure, what llama.cpp kept), and the llama_decode calls that held tokens of the part
  // with their time.
  size_t n_decoded = 0;
  size_t n_calls = 0;
  double ms = 0;
};

// Counters of one decode_parts call (added to what they hold).
struct DecodeCounters {
  size_t calls = 0;  // llama_decode calls
  double ms = 0;     // time inside llama_decode
};

// Called after each llama_decode for every part whose outputs that call produced: `out0` is
// the batch index (for llama_get_logits_ith) of the part's first output; the others follow. The
// logits are valid only until the next call, so the callee reads or copies them there.
using OnOutputs = std::function<void(size_t part, int32_t out0)>;

// Decodes the parts in order, packing them into calls of at most n_batch tokens (`batch`
// must hold n_batch tokens with one sequence id each). A part's outputs are never split
// across calls. When llama_decode fails, decoding stops, every part's n_decoded says what is
// in the KV cache, and the status is returned (1: no KV slot; see llama_decode); 0 on
// success. `on_full`, when given, is asked once per failing call with status 1 whether to
// try the same call again (it may free cells, e.g. by evicting a prefix cache).
// Throws std::invalid_argument for a part with n_out > n_batch or with no tokens.
int32_t decode_parts(llama_context* ctx, llama_batch& batch, int32_t n_batch, std::span<Part> parts,
                     const OnOutputs& on_outputs, DecodeCounters* counters = nullptr,
                     const std::function<bool()>& on_full = {});

// A readable reason for a llama_decode status.
const char* decode_status_text(int32_t status);

}  // namespace lacuna::runtime
