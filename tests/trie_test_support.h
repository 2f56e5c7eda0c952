// trie_test_support.h — paths of the real vocabularies and of the tiny test models for the
// trie, sampler and lazy tests (self-contained: only committed library headers).
#pragma once

#include <cstdlib>
#include <string>

#include "lacuna/make_model.h"

namespace lacuna::trie_test {

inline std::string vocab_path(const std::string& name) {
  return std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-" + name + ".gguf";
}

// <LACUNA_TEST_MODEL_DIR>/<preset>.gguf, generated first when missing (as the ctest fixture
// does) so the test also runs on its own.
inline std::string test_model(const std::string& preset) {
  const char* env = std::getenv("LACUNA_TEST_MODEL_DIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : LACUNA_TEST_MODEL_DIR;
  MakeModelOptions opt;
  opt.preset = preset;
  opt.out_path = dir + "/" + preset + ".gguf";
  opt.skip_existing = true;
  return make_model(opt).path;
}

}  // namespace lacuna::trie_test
