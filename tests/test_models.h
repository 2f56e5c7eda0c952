// test_models.h — where tests find the tiny generated models, and a fallback that makes one
// (lacuna::make_model with skip_existing) when a test runs outside ctest's fixture.
#pragma once

#include <cstdlib>
#include <string>

#include "lacuna/make_model.h"

namespace lacuna::testing {

inline std::string test_model_dir() {
  const char* dir = std::getenv("LACUNA_TEST_MODEL_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string(LACUNA_TEST_MODEL_DIR);
}

// Path of <test model dir>/<preset>.gguf, generated first if it is missing or stale.
inline std::string ensure_test_model(const std::string& preset) {
  MakeModelOptions opt;
  opt.preset = preset;
  opt.out_path = test_model_dir() + "/" + preset + ".gguf";
  opt.skip_existing = true;
  return make_model(opt).path;
}

inline std::string vocab_path(const std::string& vocab) {
  return std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-" + vocab + ".gguf";
}

}  // namespace lacuna::testing
