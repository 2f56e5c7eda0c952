// make_model.h — writes random-weight GGUF models around real llama.cpp tokenizers, for tests
// and benchmarks (`lacuna make-model`).
//
// The weights are a pure function of (preset, type, seed): the same inputs give a byte-identical
// file on any IEEE-754 platform (own PRNG; only exactly rounded float operations). Matrices are
// roughly normal with std 0.02 (the output projection of untied presets is scaled so logits have
// std ~2); norm weights are 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lacuna {

// Storage type of the 2-D weight matrices (1-D tensors are always f32). The quantized types
// (q8_0, q4_0: blocks of 32 values) need every matrix row to be a multiple of 32.
enum class WeightType { f32, f16, q8_0, q4_0 };

const char* weight_type_name(WeightType type);
// Parses "f32", "f16", "q8_0", "q4_0". Throws std::invalid_argument otherwise.
WeightType parse_weight_type(const std::string& text);

struct ModelPreset {
  std::string name;
  std::string description;
  std::string arch;   // llama.cpp architecture: "llama" or "qwen2"
  std::string vocab;  // tokenizer file: <vocab_dir>/ggml-vocab-<vocab>.gguf
  uint32_t n_embd = 0;
  uint32_t n_layer = 0;
  uint32_t n_ff = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t n_ctx_train = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool attn_bias = false;       // q/k/v biases (qwen2)
  bool tie_embeddings = false;  // no output.weight: the token embedding doubles as output
  WeightType default_type = WeightType::f32;
  // Chat template written as tokenizer.chat_template: a file name (without .jinja) of the
  // pinned llama.cpp's models/templates/. Empty: the tokenizer file's own, if any.
  std::string chat_template;
};

// tiny-llama3, tiny-spm, tiny-qwen2, bench-0.5b (sorted by name).
const std::vector<ModelPreset>& model_presets();
// Throws std::invalid_argument naming the known presets.
const ModelPreset& find_model_preset(const std::string& name);

struct MakeModelOptions {
  std::string preset;                 // a name from model_presets()
  std::string out_path;               // the .gguf to write (parent directories are created)
  uint64_t seed = 0x6c6163756e61ull;  // "lacuna"
  std::optional<WeightType> type;     // default: the preset's
  std::string vocab_dir;              // default: LACUNA_LLAMA_SRC_DIR "/models"
  bool skip_existing = false;         // keep out_path if it is a complete GGUF of this preset+type
  // Chat template: NAME (models/templates/NAME.jinja next to the tokenizers) or a Jinja FILE;
  // empty: the preset's; "none": none beyond what the tokenizer file carries.
  std::string chat_template;
};

struct MakeModelResult {
  std::string path;
  bool skipped = false;   // skip_existing and the file was already there and loads
  uint64_t bytes = 0;     // file size
  uint64_t n_params = 0;  // 0 when skipped
  uint32_t n_vocab = 0;   // 0 when skipped
  double seconds = 0.0;
};

// Writes the model (to a temporary file, renamed into place when complete). Throws
// std::invalid_argument for bad options and std::runtime_error for I/O failures.
MakeModelResult make_model(const MakeModelOptions& options);

// The default tokenizer directory (compile-time LACUNA_LLAMA_SRC_DIR + "/models").
std::string default_vocab_dir();

}  // namespace lacuna
