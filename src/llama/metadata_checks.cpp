// metadata_checks.cpp — pre-checks for GGUF metadata that would trip a GGML_ASSERT in llama.cpp.
#include "llama/metadata_checks.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

namespace lacuna::detail {
namespace {

constexpr int64_t kMaxLayers = 512;    // LLAMA_MAX_LAYERS in llama.cpp 0.5.0
constexpr int64_t kMaxExperts = 1024;  // LLAMA_MAX_EXPERTS

bool is_int_type(gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_BOOL:
      return true;
    default:
      return false;
  }
}

// Element i of an integer scalar (i = 0) or integer array, widened to int64 (saturating).
int64_t int_at(const void* data, gguf_type t, size_t i) {
  switch (t) {
    case GGUF_TYPE_UINT8:
      return static_cast<const uint8_t*>(data)[i];
    case GGUF_TYPE_INT8:
      return static_cast<const int8_t*>(data)[i];
    case GGUF_TYPE_BOOL:
      return static_cast<const int8_t*>(data)[i];
    case GGUF_TYPE_UINT16:
      return static_cast<const uint16_t*>(data)[i];
    case GGUF_TYPE_INT16:
      return static_cast<const int16_t*>(data)[i];
    case GGUF_TYPE_UINT32:
      return static_cast<const uint32_t*>(data)[i];
    case GGUF_TYPE_INT32:
      return static_cast<const int32_t*>(data)[i];
    case GGUF_TYPE_UINT64: {
      const uint64_t v = static_cast<const uint64_t*>(data)[i];
      return v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v);
    }
    case GGUF_TYPE_INT64:
      return static_cast<const int64_t*>(data)[i];
    default:
      return 0;
  }
}

// An integer scalar key, or the maximum of an integer array key; nullopt when absent or of
// another type (llama.cpp reports wrong types itself).
std::optional<int64_t> int_key(const gguf_context* g, const std::string& key, bool* is_array) {
  const int64_t id = gguf_find_key(g, key.c_str());
  if (is_array) *is_array = false;
  if (id < 0) return std::nullopt;
  const gguf_type t = gguf_get_kv_type(g, id);
  if (is_int_type(t)) return int_at(gguf_get_val_data(g, id), t, 0);
  if (t != GGUF_TYPE_ARRAY) return std::nullopt;
  const gguf_type at = gguf_get_arr_type(g, id);
  if (!is_int_type(at)) return std::nullopt;
  if (is_array) *is_array = true;
  const size_t n = gguf_get_arr_n(g, id);
  if (n == 0) return std::nullopt;
  const void* data = gguf_get_arr_data(g, id);
  int64_t best = INT64_MIN;
  for (size_t i = 0; i < n; ++i) best = std::max(best, int_at(data, at, i));
  return best;
}

std::string check_hparams(const gguf_context* g, const std::string& arch) {
  const std::string p = arch + ".";
  const auto n_layer = int_key(g, p + "block_count", nullptr);
  if (n_layer && (*n_layer < 1 || *n_layer > kMaxLayers)) {
    return p + "block_count is " + std::to_string(*n_layer) + ", outside [1, " +
           std::to_string(kMaxLayers) + "]";
  }
  if (const auto nextn = int_key(g, p + "nextn_predict_layers", nullptr)) {
    if (*nextn < 0 || (n_layer && *nextn > *n_layer)) {
      return p + "nextn_predict_layers is " + std::to_string(*nextn) +
             ", more than the layer count";
    }
  }
  const int64_t n_expert = int_key(g, p + "expert_count", nullptr).value_or(0);
  const int64_t n_used = int_key(g, p + "expert_used_count", nullptr).value_or(0);
  const int64_t n_groups = int_key(g, p + "expert_group_count", nullptr).value_or(0);
  const int64_t n_group_used = int_key(g, p + "expert_group_used_count", nullptr).value_or(0);
  if (n_expert < 0 || n_expert > kMaxExperts) {
    return p + "expert_count is " + std::to_string(n_expert) + ", outside [0, " +
           std::to_string(kMaxExperts) + "]";
  }
  if (n_expert > 0) {
    if (n_used < 1 || n_used > n_expert) {
      return p + "expert_used_count " + std::to_string(n_used) + " is not in [1, expert_count " +
             std::to_string(n_expert) + "]";
    }
    if (n_groups < 0 || n_groups >= n_expert) {
      return p + "expert_group_count " + std::to_string(n_groups) + " is not below expert_count";
    }
    if (n_groups > 1 &&
        (n_expert % n_groups != 0 || n_group_used < 1 || n_group_used >= n_groups)) {
      return p + "expert_group_count/expert_group_used_count are inconsistent with expert_count";
    }
  } else if (n_used != 0 || n_groups != 0) {
    return p + "expert_used_count/expert_group_count are set but expert_count is 0";
  }

  const int64_t rope_id = gguf_find_key(g, (p + "rope.scaling.type").c_str());
  if (rope_id >= 0 && gguf_get_kv_type(g, rope_id) == GGUF_TYPE_STRING) {
    const std::string_view s = gguf_get_val_str(g, rope_id);
    if (s != "none" && s != "linear" && s != "yarn" && s != "longrope") {
      return p + "rope.scaling.type '" + std::string(s) +
             "' is not one of none, linear, yarn, longrope";
    }
  }

  bool head_is_array = false;
  bool kv_is_array = false;
  const auto n_head = int_key(g, p + "attention.head_count", &head_is_array);
  const auto n_head_kv = int_key(g, p + "attention.head_count_kv", &kv_is_array);
  if (n_head && !head_is_array && *n_head < 0) return p + "attention.head_count is negative";
  if (n_head && n_head_kv && !head_is_array && !kv_is_array && *n_head > 0 && *n_head_kv < 1) {
    return p + "attention.head_count_kv is " + std::to_string(*n_head_kv) +
           " while attention.head_count is " + std::to_string(*n_head);
  }
  return {};
}

std::string check_vocab(const gguf_context* g) {
  const int64_t id = gguf_find_key(g, "tokenizer.ggml.tokens");
  if (id < 0 || gguf_get_kv_type(g, id) != GGUF_TYPE_ARRAY ||
      gguf_get_arr_type(g, id) != GGUF_TYPE_STRING) {
    return {};  // llama.cpp reports a missing or mistyped token list itself
  }
  const size_t n = gguf_get_arr_n(g, id);
  std::unordered_set<std::string_view> seen;
  seen.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view tok = gguf_get_arr_str(g, id, i);
    if (!seen.insert(tok).second) {
      return "the vocabulary lists token '" + std::string(tok.substr(0, 64)) + "' twice (id " +
             std::to_string(i) + ")";
    }
  }
  return {};
}

std::string check_tensor_dims(const gguf_context* g) {
  const int64_t n = gguf_get_n_tensors(g);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* ne = gguf_get_tensor_ne(g, i);
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
      if (ne[d] < 1) {
        return std::string("tensor '") + gguf_get_tensor_name(g, i) + "' has dimension " +
               std::to_string(d) + " of size " + std::to_string(ne[d]);
      }
    }
  }
  return {};
}

}  // namespace

std::string check_llama_metadata(const gguf_context* g, const std::string& arch) {
  std::string why = check_tensor_dims(g);
  if (why.empty() && !arch.empty()) why = check_hparams(g, arch);
  if (why.empty()) why = check_vocab(g);
  return why;
}

}  // namespace lacuna::detail
