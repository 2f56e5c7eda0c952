// make_model.cpp — writes a deterministic random-weight GGUF around a real llama.cpp tokenizer.
//
// The metadata (hyperparameters + every tokenizer.* key of the vocab file) is built with
// ggml's gguf API; the tensor data is then streamed tensor by tensor, in row chunks, so a
// 1 GB model is never held in memory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "lacuna/log.h"
#include "lacuna/make_model.h"
#include "lacuna/model.h"

#ifndef LACUNA_LLAMA_SRC_DIR
#define LACUNA_LLAMA_SRC_DIR ""
#endif

namespace lacuna {
namespace {

struct GgufDeleter {
  void operator()(gguf_context* g) const { gguf_free(g); }
};
using GgufPtr = std::unique_ptr<gguf_context, GgufDeleter>;

struct GgmlDeleter {
  void operator()(ggml_context* c) const { ggml_free(c); }
};
using GgmlPtr = std::unique_ptr<ggml_context, GgmlDeleter>;

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

// ---- deterministic random numbers -----------------------------------------------------

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Approximately standard normal, from the 4 16-bit lanes of one 64-bit hash (Irwin-Hall:
// the sum of 4 uniforms), scaled by `scale`. Integer work then one float multiply, so the
// result is the same on every IEEE-754 platform.
inline float normalish(uint64_t bits, float scale) {
  const int32_t sum =
      static_cast<int32_t>(bits & 0xffff) + static_cast<int32_t>((bits >> 16) & 0xffff) +
      static_cast<int32_t>((bits >> 32) & 0xffff) + static_cast<int32_t>((bits >> 48) & 0xffff);
  return static_cast<float>(sum - 131070) * scale;
}

// ---- tensors ------------------------------------------------------------------------

enum class Init { normal, ones };

struct TensorSpec {
  std::string name;
  int64_t ne0 = 0;
  int64_t ne1 = 1;  // 1 for 1-D tensors
  bool matrix = false;
  Init init = Init::normal;
  float std = 0.02f;
};

std::vector<TensorSpec> tensor_specs(const ModelPreset& p, int64_t n_vocab) {
  const int64_t head_dim = p.n_embd / p.n_head;
  const int64_t q_dim = head_dim * p.n_head;
  const int64_t kv_dim = head_dim * p.n_head_kv;
  std::vector<TensorSpec> t;
  auto mat = [&](std::string name, int64_t ne0, int64_t ne1, float std = 0.02f) {
    t.push_back({std::move(name), ne0, ne1, true, Init::normal, std});
  };
  auto vec = [&](std::string name, int64_t ne0, Init init, float std = 0.02f) {
    t.push_back({std::move(name), ne0, 1, false, init, std});
  };
  mat("token_embd.weight", p.n_embd, n_vocab);
  for (uint32_t i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    vec(b + "attn_norm.weight", p.n_embd, Init::ones);
    mat(b + "attn_q.weight", p.n_embd, q_dim);
    mat(b + "attn_k.weight", p.n_embd, kv_dim);
    mat(b + "attn_v.weight", p.n_embd, kv_dim);
    if (p.attn_bias) {
      vec(b + "attn_q.bias", q_dim, Init::normal);
      vec(b + "attn_k.bias", kv_dim, Init::normal);
      vec(b + "attn_v.bias", kv_dim, Init::normal);
    }
    mat(b + "attn_output.weight", q_dim, p.n_embd);
    vec(b + "ffn_norm.weight", p.n_embd, Init::ones);
    mat(b + "ffn_gate.weight", p.n_embd, p.n_ff);
    mat(b + "ffn_up.weight", p.n_embd, p.n_ff);
    mat(b + "ffn_down.weight", p.n_ff, p.n_embd);
  }
  vec("output_norm.weight", p.n_embd, Init::ones);
  // An untied output projection with std 2/sqrt(n_embd): after the final RMS norm the
  // logits then have std ~2, peaked enough that greedy choices are clear.
  if (!p.tie_embeddings) {
    mat("output.weight", p.n_embd, n_vocab, 2.0f / std::sqrt(static_cast<float>(p.n_embd)));
  }
  return t;
}

ggml_type to_ggml(WeightType w) {
  switch (w) {
    case WeightType::f32:
      return GGML_TYPE_F32;
    case WeightType::f16:
      return GGML_TYPE_F16;
    case WeightType::q8_0:
      return GGML_TYPE_Q8_0;
    case WeightType::q4_0:
      return GGML_TYPE_Q4_0;
  }
  return GGML_TYPE_F32;
}

uint32_t file_type(WeightType w) {
  switch (w) {
    case WeightType::f32:
      return LLAMA_FTYPE_ALL_F32;
    case WeightType::f16:
      return LLAMA_FTYPE_MOSTLY_F16;
    case WeightType::q8_0:
      return LLAMA_FTYPE_MOSTLY_Q8_0;
    case WeightType::q4_0:
      return LLAMA_FTYPE_MOSTLY_Q4_0;
  }
  return LLAMA_FTYPE_ALL_F32;
}

// Copies one metadata key (scalar, string or array) from `src` to `dst`.
void copy_key(gguf_context* dst, const gguf_context* src, int64_t id) {
  const char* key = gguf_get_key(src, id);
  const gguf_type type = gguf_get_kv_type(src, id);
  switch (type) {
    case GGUF_TYPE_UINT8:
      gguf_set_val_u8(dst, key, gguf_get_val_u8(src, id));
      break;
    case GGUF_TYPE_INT8:
      gguf_set_val_i8(dst, key, gguf_get_val_i8(src, id));
      break;
    case GGUF_TYPE_UINT16:
      gguf_set_val_u16(dst, key, gguf_get_val_u16(src, id));
      break;
    case GGUF_TYPE_INT16:
      gguf_set_val_i16(dst, key, gguf_get_val_i16(src, id));
      break;
    case GGUF_TYPE_UINT32:
      gguf_set_val_u32(dst, key, gguf_get_val_u32(src, id));
      break;
    case GGUF_TYPE_INT32:
      gguf_set_val_i32(dst, key, gguf_get_val_i32(src, id));
      break;
    case GGUF_TYPE_FLOAT32:
      gguf_set_val_f32(dst, key, gguf_get_val_f32(src, id));
      break;
    case GGUF_TYPE_BOOL:
      gguf_set_val_bool(dst, key, gguf_get_val_bool(src, id));
      break;
    case GGUF_TYPE_STRING:
      gguf_set_val_str(dst, key, gguf_get_val_str(src, id));
      break;
    case GGUF_TYPE_UINT64:
      gguf_set_val_u64(dst, key, gguf_get_val_u64(src, id));
      break;
    case GGUF_TYPE_INT64:
      gguf_set_val_i64(dst, key, gguf_get_val_i64(src, id));
      break;
    case GGUF_TYPE_FLOAT64:
      gguf_set_val_f64(dst, key, gguf_get_val_f64(src, id));
      break;
    case GGUF_TYPE_ARRAY: {
      const gguf_type at = gguf_get_arr_type(src, id);
      const size_t n = gguf_get_arr_n(src, id);
      if (at == GGUF_TYPE_STRING) {
        std::vector<const char*> strs(n);
        for (size_t i = 0; i < n; ++i) strs[i] = gguf_get_arr_str(src, id, i);
        gguf_set_arr_str(dst, key, strs.data(), n);
      } else if (at == GGUF_TYPE_ARRAY) {
        throw std::runtime_error(std::string("cannot copy nested array key '") + key + "'");
      } else {
        gguf_set_arr_data(dst, key, at, gguf_get_arr_data(src, id), n);
      }
      break;
    }
    case GGUF_TYPE_COUNT:
      throw std::runtime_error(std::string("key '") + key + "' has an invalid type");
  }
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) {
    throw std::runtime_error("write to '" + path + "' failed");
  }
}

// Streams one tensor's values, chunk by chunk, converted to `type`. Returns bytes written.
size_t write_tensor(std::FILE* f, const std::string& path, const TensorSpec& spec, ggml_type type,
                    uint64_t seed) {
  const uint64_t tensor_seed = splitmix64(seed ^ fnv1a(spec.name));
  // Irwin-Hall sum of 4 16-bit uniforms: std = 65536 * sqrt(4/12) ~= 37837.23.
  const float scale = spec.std / 37837.23f;
  const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / spec.ne0);
  std::vector<float> values;
  std::vector<uint8_t> converted;
  size_t written = 0;
  for (int64_t row0 = 0; row0 < spec.ne1; row0 += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, spec.ne1 - row0);
    const size_t n = static_cast<size_t>(rows * spec.ne0);
    values.resize(n);
    const uint64_t first = static_cast<uint64_t>(row0 * spec.ne0);
    if (spec.init == Init::ones) {
      std::fill(values.begin(), values.end(), 1.0f);
    } else {
      for (size_t i = 0; i < n; ++i) {
        values[i] = normalish(splitmix64(tensor_seed + (first + i) * 0x9e3779b97f4a7c15ull), scale);
      }
    }
    const size_t row_bytes = ggml_row_size(type, spec.ne0);
    const size_t bytes = row_bytes * static_cast<size_t>(rows);
    switch (type) {
      case GGML_TYPE_F32:
        write_all(f, values.data(), bytes, path);
        break;
      case GGML_TYPE_F16:
        converted.resize(bytes);
        ggml_fp32_to_fp16_row(values.data(), reinterpret_cast<ggml_fp16_t*>(converted.data()),
                              static_cast<int64_t>(n));
        write_all(f, converted.data(), bytes, path);
        break;
      default: {
        converted.resize(bytes);
        const size_t got =
            ggml_quantize_chunk(type, values.data(), converted.data(), 0, rows, spec.ne0, nullptr);
        if (got != bytes) throw std::logic_error("unexpected quantized size");
        write_all(f, converted.data(), bytes, path);
        break;
      }
    }
    written += bytes;
  }
  return written;
}

}  // namespace

std::string default_vocab_dir() {
  const std::string src = LACUNA_LLAMA_SRC_DIR;
  return src.empty() ? std::string() : src + "/models";
}

namespace {

// The Jinja source of a chat template option: "" (the preset's name), "none", a name of
// <vocab_dir>/templates/, or a file.
std::string chat_template_source(const std::string& option, const ModelPreset& preset,
                                 const std::string& vocab_dir) {
  namespace fs = std::filesystem;
  const std::string what = option.empty() ? preset.chat_template : option;
  if (what.empty() || what == "none") return {};
  std::string path = vocab_dir + "/templates/" + what + ".jinja";
  if (what.find('/') != std::string::npos || !fs::is_regular_file(path)) path = what;
  std::FILE* f = fs::is_regular_file(path) ? std::fopen(path.c_str(), "rb") : nullptr;
  if (f == nullptr) {
    throw std::invalid_argument("unknown chat template '" + what + "': neither a file nor " +
                                vocab_dir + "/templates/" + what + ".jinja");
  }
  std::string src;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) src.append(buf, n);
  std::fclose(f);
  return src;
}

// The tokenizer.chat_template of a GGUF file ("" when it has none or cannot be read).
std::string file_chat_template(const std::string& path) {
  gguf_init_params gp{};
  gp.no_alloc = true;
  GgufPtr g(gguf_init_from_file(path.c_str(), gp));
  if (!g) return {};
  const int64_t id = gguf_find_key(g.get(), "tokenizer.chat_template");
  if (id < 0 || gguf_get_kv_type(g.get(), id) != GGUF_TYPE_STRING) return {};
  return gguf_get_val_str(g.get(), id);
}

}  // namespace

MakeModelResult make_model(const MakeModelOptions& opt) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  init_llama();
  const ModelPreset& preset = find_model_preset(opt.preset);
  if (opt.out_path.empty()) throw std::invalid_argument("no output path given");
  const WeightType wtype = opt.type.value_or(preset.default_type);
  const std::string model_name = "lacuna " + preset.name;

  MakeModelResult result;
  result.path = opt.out_path;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  const std::string vocab_dir = opt.vocab_dir.empty() ? default_vocab_dir() : opt.vocab_dir;
  const std::string chat_template = chat_template_source(opt.chat_template, preset, vocab_dir);

  if (opt.skip_existing && fs::exists(opt.out_path)) {
    // "Loads" is checked structurally (complete, well-formed GGUF of this preset) rather
    // than with a full llama.cpp load, which costs a second for the large BPE vocabularies.
    try {
      const GgufInfo existing = inspect_gguf(opt.out_path);
      if (existing.name == model_name && existing.architecture == preset.arch &&
          existing.file_type == file_type(wtype) &&
          (chat_template.empty() || file_chat_template(opt.out_path) == chat_template)) {
        result.skipped = true;
        result.bytes = existing.file_size;
        result.seconds = elapsed();
        return result;
      }
      log_message(LogLevel::warn, "'" + opt.out_path + "' is not a " + preset.name + " " +
                                      weight_type_name(wtype) + " model; writing it again");
    } catch (const ModelError& e) {
      log_message(LogLevel::warn, std::string(e.what()) + "; writing it again");
    }
  }

  // The tokenizer.
  const std::string vocab_path = vocab_dir + "/ggml-vocab-" + preset.vocab + ".gguf";
  if (vocab_dir.empty() || !fs::is_regular_file(vocab_path)) {
    throw std::invalid_argument("tokenizer file '" + vocab_path +
                                "' not found (pass --vocab-dir <llama.cpp>/models)");
  }
  GgufPtr vocab;
  {
    ScopedLlamaErrorCapture capture;
    clear_last_llama_error();
    gguf_init_params gp{};
    gp.no_alloc = true;
    vocab.reset(gguf_init_from_file(vocab_path.c_str(), gp));
    if (!vocab) {
      throw std::runtime_error("cannot read tokenizer file '" + vocab_path +
                               "': " + last_llama_error());
    }
  }
  const int64_t tokens_id = gguf_find_key(vocab.get(), "tokenizer.ggml.tokens");
  if (tokens_id < 0 || gguf_get_kv_type(vocab.get(), tokens_id) != GGUF_TYPE_ARRAY ||
      gguf_get_arr_type(vocab.get(), tokens_id) != GGUF_TYPE_STRING) {
    throw std::runtime_error("'" + vocab_path + "' has no tokenizer.ggml.tokens string array");
  }
  const int64_t n_vocab = static_cast<int64_t>(gguf_get_arr_n(vocab.get(), tokens_id));
  if (n_vocab <= 0) throw std::runtime_error("'" + vocab_path + "' has no tokens");

  // Metadata.
  GgufPtr out(gguf_init_empty());
  gguf_context* g = out.get();
  const std::string a = preset.arch;
  gguf_set_val_str(g, "general.architecture", a.c_str());
  gguf_set_val_str(g, "general.name", model_name.c_str());
  gguf_set_val_u32(g, "general.file_type", file_type(wtype));
  if (wtype == WeightType::q8_0 || wtype == WeightType::q4_0)
    gguf_set_val_u32(g, "general.quantization_version", GGML_QNT_VERSION);
  gguf_set_val_u32(g, (a + ".vocab_size").c_str(), static_cast<uint32_t>(n_vocab));
  gguf_set_val_u32(g, (a + ".context_length").c_str(), preset.n_ctx_train);
  gguf_set_val_u32(g, (a + ".embedding_length").c_str(), preset.n_embd);
  gguf_set_val_u32(g, (a + ".block_count").c_str(), preset.n_layer);
  gguf_set_val_u32(g, (a + ".feed_forward_length").c_str(), preset.n_ff);
  gguf_set_val_u32(g, (a + ".attention.head_count").c_str(), preset.n_head);
  gguf_set_val_u32(g, (a + ".attention.head_count_kv").c_str(), preset.n_head_kv);
  gguf_set_val_u32(g, (a + ".rope.dimension_count").c_str(), preset.n_embd / preset.n_head);
  gguf_set_val_f32(g, (a + ".rope.freq_base").c_str(), preset.rope_freq_base);
  gguf_set_val_f32(g, (a + ".attention.layer_norm_rms_epsilon").c_str(), preset.rms_eps);
  for (int64_t i = 0; i < gguf_get_n_kv(vocab.get()); ++i) {
    if (std::strncmp(gguf_get_key(vocab.get(), i), "tokenizer.", 10) == 0) {
      copy_key(g, vocab.get(), i);
    }
  }
  if (!chat_template.empty()) gguf_set_val_str(g, "tokenizer.chat_template", chat_template.c_str());

  // Tensor infos.
  const std::vector<TensorSpec> specs = tensor_specs(preset, n_vocab);
  ggml_init_params ip{};
  ip.mem_size = (specs.size() + 1) * ggml_tensor_overhead();
  ip.mem_buffer = nullptr;
  ip.no_alloc = true;
  GgmlPtr meta_ctx(ggml_init(ip));
  if (!meta_ctx) throw std::bad_alloc();
  std::vector<ggml_type> types;
  for (const TensorSpec& s : specs) {
    const ggml_type type = s.matrix ? to_ggml(wtype) : GGML_TYPE_F32;
    if (s.ne0 % ggml_blck_size(type) != 0) {
      throw std::invalid_argument("tensor '" + s.name + "' row of " + std::to_string(s.ne0) +
                                  " does not fit type " + ggml_type_name(type));
    }
    ggml_tensor* t = s.matrix ? ggml_new_tensor_2d(meta_ctx.get(), type, s.ne0, s.ne1)
                              : ggml_new_tensor_1d(meta_ctx.get(), type, s.ne0);
    ggml_set_name(t, s.name.c_str());
    gguf_add_tensor(g, t);
    types.push_back(type);
    result.n_params += static_cast<uint64_t>(s.ne0 * s.ne1);
  }

  // The file: metadata, then each tensor's data padded to the alignment. Written to a
  // temporary name and renamed, so a half-written model never sits at out_path.
  const fs::path out_path(opt.out_path);
  if (out_path.has_parent_path()) fs::create_directories(out_path.parent_path());
  const std::string tmp = opt.out_path + ".tmp." + std::to_string(::getpid());
  try {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw std::runtime_error("cannot create '" + tmp + "'");
    std::vector<uint8_t> meta(gguf_get_meta_size(g));
    gguf_get_meta_data(g, meta.data());
    write_all(f.get(), meta.data(), meta.size(), tmp);
    const size_t alignment = gguf_get_alignment(g);
    const uint8_t zeros[64] = {};
    size_t data_pos = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (gguf_get_tensor_offset(g, static_cast<int64_t>(i)) != data_pos) {
        throw std::logic_error("tensor offset mismatch for " + specs[i].name);
      }
      data_pos += write_tensor(f.get(), tmp, specs[i], types[i], opt.seed);
      const size_t pad = (alignment - data_pos % alignment) % alignment;
      write_all(f.get(), zeros, pad, tmp);
      data_pos += pad;
    }
    std::FILE* raw = f.release();
    if (std::fclose(raw) != 0) throw std::runtime_error("closing '" + tmp + "' failed");
    fs::rename(tmp, out_path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  result.bytes = fs::file_size(out_path);
  result.n_vocab = static_cast<uint32_t>(n_vocab);
  result.seconds = elapsed();
  return result;
}

}  // namespace lacuna
