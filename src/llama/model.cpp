// model.cpp — GGUF validation and Model loading: every bad file becomes a ModelError.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "gguf.h"
#include "lacuna/log.h"
#include "lacuna/model.h"
#include "llama/metadata_checks.h"

namespace lacuna {
namespace {

[[noreturn]] void fail(ModelErrorKind kind, const std::string& path, const std::string& reason,
                       bool with_llama_error = false) {
  std::string msg = "cannot load model '" + path + "': " + reason;
  if (with_llama_error) {
    const std::string llama = last_llama_error();
    if (!llama.empty()) msg += " (llama.cpp: " + llama + ")";
  }
  throw ModelError(kind, msg);
}

struct GgufDeleter {
  void operator()(gguf_context* g) const { gguf_free(g); }
};
using GgufPtr = std::unique_ptr<gguf_context, GgufDeleter>;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string hex_bytes(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// A string-valued metadata key, or "" when absent. Throws (malformed) on a non-string.
std::string string_key(const gguf_context* g, const char* key, const std::string& path) {
  const int64_t id = gguf_find_key(g, key);
  if (id < 0) return {};
  if (gguf_get_kv_type(g, id) != GGUF_TYPE_STRING) {
    fail(ModelErrorKind::malformed, path,
         std::string("metadata key '") + key + "' has type " +
             gguf_type_name(gguf_get_kv_type(g, id)) + ", expected string");
  }
  return gguf_get_val_str(g, id);
}

}  // namespace

const char* model_error_kind_name(ModelErrorKind kind) {
  switch (kind) {
    case ModelErrorKind::not_found:
      return "not_found";
    case ModelErrorKind::unreadable:
      return "unreadable";
    case ModelErrorKind::empty:
      return "empty";
    case ModelErrorKind::not_gguf:
      return "not_gguf";
    case ModelErrorKind::malformed:
      return "malformed";
    case ModelErrorKind::truncated:
      return "truncated";
    case ModelErrorKind::unsupported_architecture:
      return "unsupported_architecture";
    case ModelErrorKind::vocab_only:
      return "vocab_only";
    case ModelErrorKind::load_failed:
      return "load_failed";
  }
  return "unknown";
}

GgufInfo inspect_gguf(const std::string& path) {
  namespace fs = std::filesystem;
  init_llama();

  GgufInfo info;
  info.path = path;
  if (path.empty()) fail(ModelErrorKind::not_found, path, "empty path");

  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) fail(ModelErrorKind::not_found, path, "no such file");
  if (ec) fail(ModelErrorKind::unreadable, path, ec.message());
  if (st.type() == fs::file_type::directory) {
    fail(ModelErrorKind::unreadable, path, "is a directory, not a file");
  }
  if (st.type() != fs::file_type::regular) {
    fail(ModelErrorKind::unreadable, path, "is not a regular file");
  }
  info.file_size = fs::file_size(path, ec);
  if (ec) fail(ModelErrorKind::unreadable, path, ec.message());
  if (info.file_size == 0) fail(ModelErrorKind::empty, path, "the file is empty (0 bytes)");

  // The magic first, so that "not a GGUF file" is said plainly.
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
    if (!f) fail(ModelErrorKind::unreadable, path, std::strerror(errno));
    unsigned char magic[4] = {0, 0, 0, 0};
    const size_t got = std::fread(magic, 1, 4, f.get());
    if (std::memcmp(magic, "GGUF", got) != 0 || got == 0) {
      fail(ModelErrorKind::not_gguf, path,
           "not a GGUF file (starts with bytes " + hex_bytes(magic, got) +
               ", expected 47 47 55 46 \"GGUF\")");
    }
    if (got < 4) {
      fail(ModelErrorKind::truncated, path,
           "truncated inside the GGUF magic (" + std::to_string(info.file_size) + " bytes)");
    }
  }
  // magic (4) + version (4) + tensor count (8) + key-value count (8)
  constexpr uint64_t header_size = 24;
  if (info.file_size < header_size) {
    fail(ModelErrorKind::truncated, path,
         "truncated inside the GGUF header (" + std::to_string(info.file_size) + " of " +
             std::to_string(header_size) + " bytes)");
  }

  GgufPtr g;
  {
    ScopedLlamaErrorCapture capture;
    clear_last_llama_error();
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx = nullptr;
    g.reset(gguf_init_from_file(path.c_str(), gp));
    if (!g) {
      // ggml's parser says "failed to read <section>" when the file ends early; a more
      // specific complaint logged before that means the content itself is bad.
      const std::string err = last_llama_error();
      const std::string first = err.substr(0, err.find("; "));
      const bool looks_truncated = first.find("failed to read") != std::string::npos ||
                                   first.find("exceeds remaining file size") != std::string::npos;
      fail(looks_truncated ? ModelErrorKind::truncated : ModelErrorKind::malformed, path,
           looks_truncated ? "the GGUF metadata is truncated (the file ends inside the "
                             "header, key-value section or tensor infos)"
                           : "malformed GGUF header, metadata or tensor infos",
           true);
    }
  }

  info.version = gguf_get_version(g.get());
  info.n_kv = gguf_get_n_kv(g.get());
  info.n_tensors = gguf_get_n_tensors(g.get());
  info.data_offset = gguf_get_data_offset(g.get());
  info.architecture = string_key(g.get(), "general.architecture", path);
  info.name = string_key(g.get(), "general.name", path);
  const int64_t ftype_id = gguf_find_key(g.get(), "general.file_type");
  if (ftype_id >= 0 && gguf_get_kv_type(g.get(), ftype_id) == GGUF_TYPE_UINT32) {
    info.file_type = gguf_get_val_u32(g.get(), ftype_id);
  }

  if (info.n_tensors > 0 && info.data_offset > info.file_size) {
    fail(ModelErrorKind::truncated, path,
         "truncated: the tensor data section starts at byte " + std::to_string(info.data_offset) +
             " but the file has " + std::to_string(info.file_size) + " bytes");
  }
  for (int64_t i = 0; i < info.n_tensors; ++i) {
    const uint64_t off = gguf_get_tensor_offset(g.get(), i);
    const uint64_t size = gguf_get_tensor_size(g.get(), i);
    const uint64_t avail = info.file_size - info.data_offset;
    if (off > avail || size > avail - off) {
      fail(ModelErrorKind::truncated, path,
           std::string("truncated: the data of tensor '") + gguf_get_tensor_name(g.get(), i) +
               "' (bytes " + std::to_string(info.data_offset + off) + " to " +
               std::to_string(info.data_offset + off + size) +
               ") lies beyond the end of the file (" + std::to_string(info.file_size) + " bytes)");
    }
  }
  const std::string why = detail::check_llama_metadata(g.get(), info.architecture);
  if (!why.empty()) fail(ModelErrorKind::malformed, path, "bad metadata: " + why);
  return info;
}

Model Model::load(const std::string& path, const ModelParams& params) {
  const GgufInfo info = inspect_gguf(path);
  if (info.architecture.empty()) {
    fail(ModelErrorKind::unsupported_architecture, path,
         "the GGUF has no general.architecture key, so llama.cpp cannot tell what model it is");
  }
  if (info.n_tensors == 0 && !params.vocab_only) {
    fail(ModelErrorKind::vocab_only, path,
         "the GGUF holds no tensors (a vocabulary-only file); load it with vocab_only = true "
         "for tokenization, or use a full model to generate");
  }

  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = params.vocab_only;
  mp.n_gpu_layers = params.n_gpu_layers;
  mp.check_tensors = params.check_tensors;
  if (!params.use_mmap) mp.load_mode = LLAMA_LOAD_MODE_NONE;

  ScopedLlamaErrorCapture capture;
  clear_last_llama_error();
  ModelPtr model(llama_model_load_from_file(path.c_str(), mp));
  if (!model) {
    const std::string err = last_llama_error();
    if (err.find("unknown model architecture") != std::string::npos) {
      fail(ModelErrorKind::unsupported_architecture, path,
           "architecture '" + info.architecture + "' is not supported by this llama.cpp", true);
    }
    fail(ModelErrorKind::load_failed, path, "llama.cpp could not load it", true);
  }
  Model m(std::move(model), path);
  m.vocab_only_ = params.vocab_only;
  return m;
}

Model::Model(ModelPtr model, std::string path) : path_(std::move(path)) {
  if (!model) throw std::invalid_argument("lacuna::Model: null llama_model");
  model_ = std::shared_ptr<llama_model>(model.release(), LlamaModelDeleter{});
}

Vocab Model::vocab() const {
  return Vocab(vocab_ptr());
}

std::string Model::meta(const std::string& key) const {
  std::vector<char> buf(256);
  int32_t n = llama_model_meta_val_str(model_.get(), key.c_str(), buf.data(), buf.size());
  if (n < 0) return {};
  if (static_cast<size_t>(n) >= buf.size()) {
    buf.resize(static_cast<size_t>(n) + 1);
    n = llama_model_meta_val_str(model_.get(), key.c_str(), buf.data(), buf.size());
    if (n < 0) return {};
  }
  return std::string(buf.data(), static_cast<size_t>(n));
}

std::string Model::architecture() const {
  return meta("general.architecture");
}

std::string Model::description() const {
  char buf[256];
  const int32_t n = llama_model_desc(model_.get(), buf, sizeof(buf));
  if (n <= 0) return {};
  return std::string(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
}

}  // namespace lacuna
