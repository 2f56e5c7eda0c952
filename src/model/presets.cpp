// presets.cpp — the named model shapes `lacuna make-model` can write.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "lacuna/make_model.h"

namespace lacuna {
namespace {

std::vector<ModelPreset> build_presets() {
  std::vector<ModelPreset> all;
  {
    ModelPreset p;
    p.name = "bench-0.5b";
    p.description = "shape of a 0.5B qwen2 model (896 x 24 layers, 14/2 heads), for benchmarks";
    p.arch = "qwen2";
    p.vocab = "qwen2";
    p.n_embd = 896;
    p.n_layer = 24;
    p.n_ff = 4864;
    p.n_head = 14;
    p.n_head_kv = 2;
    p.n_ctx_train = 32768;
    p.rope_freq_base = 1000000.0f;
    p.rms_eps = 1e-6f;
    p.attn_bias = true;
    p.tie_embeddings = true;
    p.default_type = WeightType::f16;
    all.push_back(p);
  }
  {
    ModelPreset p;
    p.name = "tiny-llama3";
    p.description = "llama arch, llama-bpe vocab (128256 tokens), 64 x 2 layers, for unit tests";
    p.arch = "llama";
    p.vocab = "llama-bpe";
    p.n_embd = 64;
    p.n_layer = 2;
    p.n_ff = 128;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ctx_train = 8192;
    p.rope_freq_base = 500000.0f;
    p.rms_eps = 1e-5f;
    p.chat_template = "meta-llama-Llama-3.1-8B-Instruct";
    all.push_back(p);
    // The same shape around the large gemma-4 vocabulary, with its own tool and thinking
    // tokens and template.
    p.name = "tiny-gemma4";
    p.description = "llama arch, gemma-4 vocab (262144 tokens, tool/thinking tokens), 64 x 2";
    p.vocab = "gemma-4";
    p.rope_freq_base = 10000.0f;
    p.rms_eps = 1e-6f;
    p.chat_template = "google-gemma-4-31B-it";
    all.push_back(p);
  }
  {
    ModelPreset p;
    p.name = "tiny-qwen2";
    p.description = "qwen2 arch and vocab (151936 tokens), q/k/v biases, 64 x 2 layers";
    p.arch = "qwen2";
    p.vocab = "qwen2";
    p.n_embd = 64;
    p.n_layer = 2;
    p.n_ff = 128;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ctx_train = 8192;
    p.rope_freq_base = 1000000.0f;
    p.rms_eps = 1e-6f;
    p.attn_bias = true;
    p.chat_template = "Qwen-Qwen2.5-7B-Instruct";
    all.push_back(p);
    // The same shape and weights with a thinking template (<think> ... </think>).
    p.name = "tiny-qwen3";
    p.description = "tiny-qwen2 with Qwen3's thinking chat template";
    p.chat_template = "Qwen-Qwen3-0.6B";
    all.push_back(p);
  }
  {
    ModelPreset p;
    p.name = "tiny-spm";
    p.description = "llama arch, llama-spm vocab (32000 tokens, byte fallback), 64 x 2 layers";
    p.arch = "llama";
    p.vocab = "llama-spm";
    p.n_embd = 64;
    p.n_layer = 2;
    p.n_ff = 128;
    p.n_head = 4;
    p.n_head_kv = 4;
    p.n_ctx_train = 4096;
    p.rope_freq_base = 10000.0f;
    p.rms_eps = 1e-5f;
    all.push_back(p);
  }
  std::sort(all.begin(), all.end(),
            [](const ModelPreset& a, const ModelPreset& b) { return a.name < b.name; });
  return all;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = build_presets();
  return presets;
}

const ModelPreset& find_model_preset(const std::string& name) {
  std::string known;
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
    known += known.empty() ? p.name : ", " + p.name;
  }
  throw std::invalid_argument("unknown model preset '" + name + "' (known: " + known + ")");
}

const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::f32:
      return "f32";
    case WeightType::f16:
      return "f16";
    case WeightType::q8_0:
      return "q8_0";
    case WeightType::q4_0:
      return "q4_0";
  }
  return "unknown";
}

WeightType parse_weight_type(const std::string& text) {
  if (text == "f32") return WeightType::f32;
  if (text == "f16") return WeightType::f16;
  if (text == "q8_0") return WeightType::q8_0;
  if (text == "q4_0") return WeightType::q4_0;
  throw std::invalid_argument("unknown weight type '" + text + "' (use f32, f16, q8_0 or q4_0)");
}

}  // namespace lacuna
