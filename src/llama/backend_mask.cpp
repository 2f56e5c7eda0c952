// backend_mask.cpp — a constraint's bitmask inside llama.cpp's graph: n_vocab/8 bytes
// uploaded per output row, expanded to a 0/-inf additive mask with a lookup table
// (get_rows); the staged-mask and token-only llama_samplers built on it.
#include "llama/backend_mask.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "ggml-alloc.h"
#include "lacuna/constraint.h"

namespace lacuna::backend {
namespace {

std::atomic<uint64_t> g_uploads{0};
std::atomic<uint64_t> g_upload_bytes{0};
std::atomic<uint64_t> g_upload_ns{0};

constexpr uint16_t kHalfOne = 0x3C00;  // 1.0 as IEEE half

// Row r of the table is the byte b whose int8 value is r - 128; entry j is 0 when bit j of b
// is set (token 8k + j allowed), else -inf.
void fill_table(float* t) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < 256; ++r) {
    const auto b = static_cast<uint8_t>(static_cast<int8_t>(r - 128));
    for (int j = 0; j < 8; ++j) t[r * 8 + j] = ((b >> j) & 1u) != 0 ? 0.0f : neg_inf;
  }
}

// The additive mask (n_vocab floats, 0 or -inf) of input `inp`.
ggml_tensor* expand(ggml_context* ctx, ggml_tensor* table, ggml_tensor* inp, size_t n_vocab) {
  ggml_tensor* bytes = ggml_cast(ctx, inp, GGML_TYPE_F32);  // int8 values, exact
  ggml_tensor* rows = ggml_cast(ctx, ggml_scale_bias(ctx, bytes, 1.0f, 128.0f), GGML_TYPE_I32);
  ggml_tensor* bits = ggml_get_rows(ctx, table, rows);  // [8, n_bytes]
  ggml_tensor* flat = ggml_reshape_1d(ctx, bits, ggml_nelements(bits));
  return ggml_view_1d(ctx, flat, static_cast<int64_t>(n_vocab), 0);
}

}  // namespace

UploadCounters upload_counters() {
  return {g_uploads.load(std::memory_order_relaxed), g_upload_bytes.load(std::memory_order_relaxed),
          g_upload_ns.load(std::memory_order_relaxed)};
}

MaskGraph::MaskGraph(size_t n_vocab)
    : n_vocab_(n_vocab), n_blocks_((bitmask_words(n_vocab) * 4 + 31) / 32) {
  staging_.assign(n_blocks_ * kBlockBytes, 0);
  for (size_t b = 0; b < n_blocks_; ++b) std::memcpy(&staging_[b * kBlockBytes], &kHalfOne, 2);
}

MaskGraph::~MaskGraph() {
  if (table_buf_ != nullptr) ggml_backend_buffer_free(table_buf_);
  if (table_ctx_ != nullptr) ggml_free(table_ctx_);
}

bool MaskGraph::init(ggml_backend_buffer_type_t buft) {
  if (table_ != nullptr) return true;
  if (buft == nullptr || n_vocab_ == 0) return false;
  // Every op the mask adds, checked on the device first (a probe graph, never computed).
  if (ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft); dev != nullptr) {
    ggml_init_params pp{64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context* probe = ggml_init(pp);
    if (probe == nullptr) return false;
    ggml_tensor* table = ggml_new_tensor_2d(probe, GGML_TYPE_F32, 8, 256);
    ggml_tensor* inp =
        ggml_new_tensor_1d(probe, GGML_TYPE_Q8_0, static_cast<int64_t>(n_blocks_ * 32));
    ggml_tensor* logits = ggml_new_tensor_1d(probe, GGML_TYPE_F32, static_cast<int64_t>(n_vocab_));
    ggml_tensor* out = ggml_add(probe, logits, expand(probe, table, inp, n_vocab_));
    ggml_cgraph* gf = ggml_new_graph(probe);
    ggml_build_forward_expand(gf, out);
    bool ok = true;
    for (int i = 0; i < ggml_graph_n_nodes(gf) && ok; ++i) {
      ggml_tensor* node = ggml_graph_node(gf, i);
      if (node->op == GGML_OP_NONE || node->op == GGML_OP_VIEW || node->op == GGML_OP_RESHAPE) {
        continue;
      }
      ok = ggml_backend_dev_supports_op(dev, node);
    }
    ggml_free(probe);
    if (!ok) return false;
  }
  ggml_init_params tp{2 * ggml_tensor_overhead(), nullptr, true};
  table_ctx_ = ggml_init(tp);
  if (table_ctx_ == nullptr) return false;
  ggml_tensor* table = ggml_new_tensor_2d(table_ctx_, GGML_TYPE_F32, 8, 256);
  ggml_set_name(table, "lacuna_mask_table");
  table_buf_ = ggml_backend_alloc_ctx_tensors_from_buft(table_ctx_, buft);
  if (table_buf_ == nullptr) {
    ggml_free(table_ctx_);
    table_ctx_ = nullptr;
    return false;
  }
  std::vector<float> host(8 * 256);
  fill_table(host.data());
  ggml_backend_tensor_set(table, host.data(), 0, host.size() * sizeof(float));
  table_ = table;
  return true;
}

ggml_tensor* MaskGraph::apply(ggml_context* ctx, ggml_tensor* logits, ggml_tensor* candidates) {
  if (table_ == nullptr) return logits;
  ggml_tensor* flat = ggml_reshape_1d(ctx, logits, ggml_nelements(logits));
  // llama.cpp's chain probes its members with a stand-in logits tensor of another size:
  // nothing to mask there.
  if (candidates == nullptr && flat->ne[0] != static_cast<int64_t>(n_vocab_)) return logits;
  ggml_tensor* inp = ggml_new_tensor_1d(ctx, GGML_TYPE_Q8_0, static_cast<int64_t>(n_blocks_ * 32));
  ggml_format_name(inp, "lacuna_mask_%zu", inputs_.size());
  ggml_set_input(inp);
  inputs_.push_back(inp);
  ggml_tensor* mask = expand(ctx, table_, inp, n_vocab_);
  if (candidates != nullptr) {
    // The candidates' entries of the mask (a sampler before this one narrowed the set).
    ggml_tensor* col =
        ggml_reshape_2d(ctx, ggml_cont(ctx, mask), 1, static_cast<int64_t>(n_vocab_));
    ggml_tensor* ids = ggml_reshape_1d(ctx, candidates, ggml_nelements(candidates));
    mask = ggml_reshape_1d(ctx, ggml_get_rows(ctx, col, ids), ggml_nelements(candidates));
  }
  ggml_tensor* out = ggml_add(ctx, flat, mask);
  ggml_set_name(out, "lacuna_masked_logits");
  return out;
}

void MaskGraph::upload(size_t i, const uint32_t* words) {
  if (i >= inputs_.size()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n_bytes = bitmask_words(n_vocab_) * 4;
  const auto* src =
      reinterpret_cast<const uint8_t*>(words);  // little-endian: byte k = tokens 8k..8k+7
  for (size_t b = 0; b < n_blocks_; ++b) {
    uint8_t* q = &staging_[b * kBlockBytes + 2];
    const size_t from = b * 32;
    const size_t n = from < n_bytes ? std::min<size_t>(32, n_bytes - from) : 0;
    if (words == nullptr) {
      std::memset(q, 0xFF, 32);
    } else {
      if (n > 0) std::memcpy(q, src + from, n);
      if (n < 32) std::memset(q + n, 0, 32 - n);
    }
  }
  ggml_backend_tensor_set(inputs_[i], staging_.data(), 0, staging_.size());
  g_uploads.fetch_add(1, std::memory_order_relaxed);
  g_upload_bytes.fetch_add(staging_.size(), std::memory_order_relaxed);
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  g_upload_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
}

// ---- the staged-mask sampler --------------------------------------------------------------

namespace {

struct Staged {
  size_t n_vocab;
  size_t words;
  MaskGraph graph;
  std::vector<uint32_t> masks;  // n_staged * words
  size_t n_staged = 0;
  size_t cursor = 0;  // next staged mask to upload (rows of one decode may span ubatches)
  bool active = false;
  uint32_t max_outputs = 0;
  explicit Staged(size_t n) : n_vocab(n), words(bitmask_words(n)), graph(n) {}
};

Staged* staged_of(const llama_sampler* s) {
  return static_cast<Staged*>(s->ctx);
}

const char* staged_name(const llama_sampler*) {
  return "lacuna-staged-mask";
}

void staged_apply(llama_sampler* smpl, llama_token_data_array* cur_p) {
  const Staged& s = *staged_of(smpl);
  if (s.n_staged == 0) return;
  const uint32_t* m = s.masks.data();
  for (size_t i = 0; i < cur_p->size; ++i) {
    const Token id = cur_p->data[i].id;
    if (id < 0 || static_cast<size_t>(id) >= s.n_vocab || !bitmask_test(m, id)) {
      cur_p->data[i].logit = -std::numeric_limits<float>::infinity();
    }
  }
}

llama_sampler* staged_clone(const llama_sampler* smpl);

void staged_free(llama_sampler* smpl) {
  delete staged_of(smpl);
}

bool staged_backend_init(llama_sampler* smpl, ggml_backend_buffer_type_t buft, uint32_t n_out) {
  Staged& s = *staged_of(smpl);
  s.max_outputs = n_out;
  s.active = s.graph.init(buft);
  return s.active;
}

void staged_backend_apply(llama_sampler* smpl, ggml_context* ctx, ggml_cgraph*,
                          llama_sampler_data* data) {
  Staged& s = *staged_of(smpl);
  data->logits = s.graph.apply(ctx, data->logits, data->candidates);
}

void staged_backend_set_input(llama_sampler* smpl) {
  Staged& s = *staged_of(smpl);
  for (size_t i = 0; i < s.graph.n_inputs(); ++i) {
    const size_t k = s.cursor + i;
    s.graph.upload(i, k < s.n_staged ? s.masks.data() + k * s.words : nullptr);
  }
  s.cursor += s.graph.n_inputs();
}

void staged_backend_reset(llama_sampler* smpl) {
  staged_of(smpl)->graph.reset();
}

void staged_copy_state(const llama_sampler* src, llama_sampler* dst) {
  const Staged& a = *staged_of(src);
  Staged& b = *staged_of(dst);
  b.masks = a.masks;
  b.n_staged = a.n_staged;
  b.cursor = a.cursor;
}

llama_sampler_i make_staged_iface() {
  llama_sampler_i i{};
  i.name = staged_name;
  i.accept = nullptr;
  i.apply = staged_apply;
  i.reset = nullptr;
  i.clone = staged_clone;
  i.free = staged_free;
  i.backend_init = staged_backend_init;
  i.backend_accept = nullptr;  // llama.cpp 0.5.0 never calls it; the owner stages instead
  i.backend_apply = staged_backend_apply;
  i.backend_set_input = staged_backend_set_input;
  i.backend_reset = staged_backend_reset;
  i.copy_state = staged_copy_state;
  return i;
}

llama_sampler_i g_staged_iface = make_staged_iface();

llama_sampler* staged_clone(const llama_sampler* smpl) {
  const Staged& s = *staged_of(smpl);
  auto copy = std::make_unique<Staged>(s.n_vocab);
  copy->masks = s.masks;
  copy->n_staged = s.n_staged;
  return llama_sampler_init(&g_staged_iface, copy.release());
}

// ---- the token-only tail ----------------------------------------------------------------

struct TokenOnly {
  bool active = false;
};

const char* token_only_name(const llama_sampler*) {
  return "lacuna-token-only";
}
void token_only_apply(llama_sampler*, llama_token_data_array*) {}
llama_sampler* token_only_clone(const llama_sampler*);
void token_only_free(llama_sampler* smpl) {
  delete static_cast<TokenOnly*>(smpl->ctx);
}
bool token_only_backend_init(llama_sampler* smpl, ggml_backend_buffer_type_t, uint32_t) {
  static_cast<TokenOnly*>(smpl->ctx)->active = true;
  return true;
}
void token_only_backend_apply(llama_sampler*, ggml_context*, ggml_cgraph*,
                              llama_sampler_data* data) {
  if (data->sampled == nullptr) return;  // no selector before it: keep what there is
  data->logits = nullptr;
  data->probs = nullptr;
  data->candidates = nullptr;
}

llama_sampler_i make_token_only_iface() {
  llama_sampler_i i{};
  i.name = token_only_name;
  i.apply = token_only_apply;
  i.clone = token_only_clone;
  i.free = token_only_free;
  i.backend_init = token_only_backend_init;
  i.backend_apply = token_only_backend_apply;
  return i;
}

llama_sampler_i g_token_only_iface = make_token_only_iface();

llama_sampler* token_only_clone(const llama_sampler*) {
  return llama_sampler_init(&g_token_only_iface, new TokenOnly{});
}

}  // namespace

llama_sampler* make_staged_mask_sampler(size_t n_vocab) {
  return llama_sampler_init(&g_staged_iface, new Staged(n_vocab));
}

void stage_masks(llama_sampler* staged, std::span<const uint32_t> masks) {
  Staged& s = *staged_of(staged);
  s.masks.assign(masks.begin(), masks.end());
  s.n_staged = s.words == 0 ? 0 : masks.size() / s.words;
  s.cursor = 0;
}

bool backend_active(const llama_sampler* staged) {
  return staged != nullptr && staged->iface == &g_staged_iface && staged_of(staged)->active;
}

uint32_t backend_max_outputs(const llama_sampler* staged) {
  return staged != nullptr && staged->iface == &g_staged_iface ? staged_of(staged)->max_outputs : 0;
}

llama_sampler* make_token_only_sampler() {
  return llama_sampler_init(&g_token_only_iface, new TokenOnly{});
}

bool token_only_active(const llama_sampler* smpl) {
  return smpl != nullptr && smpl->iface == &g_token_only_iface &&
         static_cast<const TokenOnly*>(smpl->ctx)->active;
}

}  // namespace lacuna::backend
