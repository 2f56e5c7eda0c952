// backend_mask.h — a constraint's bitmask applied inside llama.cpp's graph (backend sampling):
// the mask goes up as n_vocab/8 bytes per output row and is expanded to 0/-inf in the graph.
//
// MaskGraph builds the graph ops and uploads the bits; make_staged_mask_sampler() is the
// llama_sampler whose masks the owner (the Generator) stages before each llama_decode;
// make_token_only_sampler() ends a chain so that only the sampled token is copied back.
// docs/backend_sampling.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace lacuna::backend {

// The graph side of one sampler's mask: a 256 x 8 lookup table (byte -> eight 0/-inf
// floats) in a buffer of the output device, and one bitmask input tensor per output row.
// The input holds the mask's bytes as the int8 values of GGML_TYPE_Q8_0 blocks with scale
// 1 (34 bytes per 32 mask bytes): the graph dequantizes them to floats, adds 128 and uses
// them as row indices into the table; the rows, flattened, are the additive mask.
class MaskGraph {
 public:
  explicit MaskGraph(size_t n_vocab);
  ~MaskGraph();
  MaskGraph(const MaskGraph&) = delete;
  MaskGraph& operator=(const MaskGraph&) = delete;

  // Allocates the table in `buft` and checks that its device runs every op. False when it
  // cannot (the sampler then stays on the CPU).
  bool init(ggml_backend_buffer_type_t buft);
  bool ready() const { return table_ != nullptr; }
  // Adds the mask of a new input row to `logits` (n_vocab floats, or the rows of
  // `candidates` when given) and returns the masked logits.
  ggml_tensor* apply(ggml_context* ctx, ggml_tensor* logits, ggml_tensor* candidates);
  // The graph is rebuilt: the inputs of the old one are forgotten.
  void reset() { inputs_.clear(); }
  size_t n_inputs() const { return inputs_.size(); }
  // Uploads a bitmask (bitmask_words(n_vocab) words; nullptr: every token allowed) into input i.
  void upload(size_t i, const uint32_t* words);
  // Bytes one upload sends to the backend.
  size_t upload_bytes() const { return n_blocks_ * kBlockBytes; }

  static constexpr size_t kBlockBytes = 34;  // sizeof(block_q8_0): f16 scale + 32 x int8

 private:
  size_t n_vocab_;
  size_t n_blocks_;  // Q8_0 blocks of 32 mask bytes
  ggml_context* table_ctx_ = nullptr;
  ggml_backend_buffer_t table_buf_ = nullptr;
  ggml_tensor* table_ = nullptr;
  std::vector<ggml_tensor*> inputs_;
  std::vector<uint8_t> staging_;  // n_blocks_ * kBlockBytes
};

// Upload counters of every MaskGraph in the process (for the benchmark).
struct UploadCounters {
  uint64_t uploads = 0;
  uint64_t bytes = 0;
  uint64_t ns = 0;  // time spent packing and sending them (inside llama_decode)
};
UploadCounters upload_counters();

// ---- the staged-mask sampler (the Generator's) --------------------------------------------

// A llama_sampler whose backend form masks output row i of its sequence with the i-th
// staged mask (rows past the staged ones: every token allowed). The CPU form (apply) masks
// with the first staged mask. It consumes nothing on accept: the owner stages the masks of
// the next llama_decode with stage_masks() before calling it.
llama_sampler* make_staged_mask_sampler(size_t n_vocab);
// `masks`: one bitmask per output row, bitmask_words(n_vocab) words each, concatenated
// (empty: every token allowed). Copied.
void stage_masks(llama_sampler* staged, std::span<const uint32_t> masks);
// After llama_set_sampler: whether backend_init accepted it, and the context's per-sequence
// output limit it was told (0 before init).
bool backend_active(const llama_sampler* staged);
uint32_t backend_max_outputs(const llama_sampler* staged);

// A llama_sampler that does nothing on the CPU and, as the last member of a backend chain,
// drops the logits, probabilities and candidates from the chain's outputs, so that llama.cpp
// copies only the sampled token back (4 bytes a row). backend_active() tells whether every
// sampler before it runs on the backend (its backend_init is called only then).
llama_sampler* make_token_only_sampler();
bool token_only_active(const llama_sampler* smpl);

}  // namespace lacuna::backend
