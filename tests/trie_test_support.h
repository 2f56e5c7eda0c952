// trie_test_support.h — paths of the real vocabularies and of the tiny test models, and a
// bitmask-only constraint wrapper, for the trie, sampler and lazy tests (self-contained:
// only committed library headers).
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lacuna/constraint.h"
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

// A constraint that only speaks the bitmask interface (exercises the generic path).
class BitmaskOnly : public Constraint {
 public:
  explicit BitmaskOnly(std::unique_ptr<Constraint> inner) : inner_(std::move(inner)) {}
  size_t n_vocab() const override { return inner_->n_vocab(); }
  void fill_next_token_bitmask(uint32_t* w) override { inner_->fill_next_token_bitmask(w); }
  bool accept_token(Token t) override { return inner_->accept_token(t); }
  bool rollback(size_t n) override { return inner_->rollback(n); }
  std::unique_ptr<Constraint> fork() const override {
    return std::make_unique<BitmaskOnly>(inner_->fork());
  }
  void reset() override { inner_->reset(); }
  bool is_completed() const override { return inner_->is_completed(); }
  bool is_terminated() const override { return inner_->is_terminated(); }
  size_t forced_tokens(std::vector<Token>& out, size_t max) const override {
    return inner_->forced_tokens(out, max);
  }

 private:
  std::unique_ptr<Constraint> inner_;
};

}  // namespace lacuna::trie_test
