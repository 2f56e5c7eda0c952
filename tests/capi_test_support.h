// capi_test_support.h — a gtest fixture base for the C ABI tests: tiny-llama3 loaded once per
// suite through lacuna_model_load, and contexts made from it.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lacuna/lacuna.h"
#include "test_models.h"

namespace lacuna::testing {

class CapiModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(ensure_test_model("tiny-llama3"));
    ASSERT_EQ(lacuna_model_load(path_->c_str(), nullptr, &model_), LACUNA_OK)
        << lacuna_last_error();
  }
  static void TearDownTestSuite() {
    lacuna_model_free(model_);
    model_ = nullptr;
    delete path_;
    path_ = nullptr;
  }

  // A small single-threaded context on the suite's model (null on failure, reported).
  static lacuna_context* make_context() {
    lacuna_context_params cp = lacuna_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 64;
    cp.n_threads = 1;
    lacuna_context* ctx = nullptr;
    EXPECT_EQ(lacuna_context_create(model_, &cp, &ctx), LACUNA_OK) << lacuna_last_error();
    return ctx;
  }

  inline static lacuna_model* model_ = nullptr;
  inline static std::string* path_ = nullptr;
};

}  // namespace lacuna::testing
