// test_capi_branch.cpp — the C ABI's branches (lacuna.h, "branches"): best-of-N by fork,
// batched step and commit equal to one branch at a time, metrics, Blink reseed, state files,
// and bad input (pruned branches, other contexts, full contexts) with the right statuses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "capi_test_support.h"
#include "lacuna/lacuna.h"

namespace {

constexpr const char* kPrompt = "The assistant decides what to do next:";

class CapiBranchTest : public lacuna::testing::CapiModelTest {
 protected:
  void SetUp() override { ctx_ = make_context(); }
  void TearDown() override {
    for (lacuna_branch* b : owned_) lacuna_branch_free(b);
    lacuna_context_free(ctx_);
  }

  lacuna_branch* create(int32_t max_tokens, float temperature = 0.0f, uint32_t seed = 0) {
    lacuna_branch_params p = lacuna_branch_default_params();
    p.max_tokens = max_tokens;
    p.temperature = temperature;
    p.seed = seed;
    lacuna_branch* b = nullptr;
    EXPECT_EQ(lacuna_branch_create(ctx_, &p, &b), LACUNA_OK) << lacuna_last_error();
    owned_.push_back(b);
    return b;
  }

  lacuna_branch* fork(lacuna_branch* b) {
    lacuna_branch* c = nullptr;
    EXPECT_EQ(lacuna_branch_fork(b, &c), LACUNA_OK) << lacuna_last_error();
    owned_.push_back(c);
    return c;
  }

  static std::vector<llama_token> drain(lacuna_branch* b) {
    std::vector<llama_token> out;
    lacuna_step step;
    for (int i = 0; i < 1000; ++i) {
      EXPECT_EQ(lacuna_branch_next(b, &step), LACUNA_OK) << lacuna_last_error();
      out.insert(out.end(), step.tokens, step.tokens + step.n_tokens);
      if (step.done) break;
    }
    return out;
  }

  static void prefill(lacuna_branch* b) {
    ASSERT_EQ(lacuna_branch_prefill_text(b, kPrompt, std::strlen(kPrompt), 1, 0), LACUNA_OK)
        << lacuna_last_error();
  }

  lacuna_context* ctx_ = nullptr;
  std::vector<lacuna_branch*> owned_;
};

TEST_F(CapiBranchTest, BestOfFourByForkMatchesSequentialAndCold) {
  lacuna_branch* root = create(12, 0.9f, 1);
  prefill(root);
  std::vector<lacuna_branch*> kids;
  for (uint32_t i = 0; i < 4; ++i) {
    kids.push_back(fork(root));
    ASSERT_EQ(lacuna_branch_reseed(kids.back(), 100 + i), LACUNA_OK);
  }
  // All four in one forward pass per step.
  std::vector<lacuna_step> steps(4);
  std::vector<std::vector<llama_token>> batched(4);
  for (int s = 0; s < 40; ++s) {
    ASSERT_EQ(lacuna_branches_step(kids.data(), kids.size(), steps.data()), LACUNA_OK)
        << lacuna_last_error();
    bool all_done = true;
    for (size_t i = 0; i < 4; ++i) {
      batched[i].insert(batched[i].end(), steps[i].tokens, steps[i].tokens + steps[i].n_tokens);
      all_done = all_done && steps[i].done;
    }
    if (all_done) break;
  }
  double best = 1e300;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(batched[i].size(), 12u);
    double ppl = 0;
    ASSERT_EQ(lacuna_branch_perplexity(kids[i], &ppl), LACUNA_OK);
    best = std::min(best, ppl);
  }
  // The same four, one at a time on a fresh context, give the same tokens.
  lacuna_context* other = make_context();
  for (uint32_t i = 0; i < 4; ++i) {
    lacuna_branch_params p = lacuna_branch_default_params();
    p.max_tokens = 12;
    p.temperature = 0.9f;
    p.seed = 100 + i;
    lacuna_branch* b = nullptr;
    ASSERT_EQ(lacuna_branch_create(other, &p, &b), LACUNA_OK);
    prefill(b);
    EXPECT_EQ(drain(b), batched[i]) << i;
    lacuna_branch_free(b);
  }
  lacuna_context_free(other);
}

TEST_F(CapiBranchTest, ProduceCommitMetricsAndTreePruning) {
  lacuna_branch* a = create(0);
  lacuna_branch* b = create(0);
  prefill(a);
  prefill(b);
  double h = 0;
  ASSERT_EQ(lacuna_branch_entropy(a, &h), LACUNA_OK);
  EXPECT_GT(h, 0.0);
  for (int i = 0; i < 5; ++i) {
    llama_token ta = -1;
    llama_token tb = -1;
    ASSERT_EQ(lacuna_branch_produce(a, &ta), LACUNA_OK);
    ASSERT_EQ(lacuna_branch_produce(b, &tb), LACUNA_OK);
    EXPECT_EQ(ta, tb);
    double s = 0;
    ASSERT_EQ(lacuna_branch_surprisal(a, ta, &s), LACUNA_OK);
    EXPECT_GE(s, 0.0);
    lacuna_branch* both[2] = {a, b};
    const llama_token toks[2] = {ta, tb};
    ASSERT_EQ(lacuna_branches_commit(both, toks, 2), LACUNA_OK) << lacuna_last_error();
  }
  std::vector<float> logits(200000);
  size_t n = 0;
  ASSERT_EQ(lacuna_branch_logits(a, logits.data(), logits.size(), &n), LACUNA_OK);
  EXPECT_EQ(static_cast<int32_t>(n), lacuna_model_n_vocab(model_));
  EXPECT_EQ(lacuna_branch_logits(a, logits.data(), 10, &n), LACUNA_ERR_LIMIT);

  // A tree pruned back: the parent refuses while children live.
  lacuna_branch* c1 = fork(a);
  lacuna_branch* c2 = fork(c1);
  uint32_t used = 0;
  ASSERT_EQ(lacuna_context_kv_pressure(ctx_, nullptr, &used, nullptr), LACUNA_OK);
  const llama_token* seq = nullptr;
  size_t n_seq = 0;
  ASSERT_EQ(lacuna_branch_sequence(a, &seq, &n_seq), LACUNA_OK);
  EXPECT_EQ(lacuna_branch_prune(c1), LACUNA_ERR_STATE);
  ASSERT_EQ(lacuna_branch_prune(c2), LACUNA_OK);
  ASSERT_EQ(lacuna_branch_prune(c1), LACUNA_OK);
  EXPECT_EQ(lacuna_branch_alive(c1), 0);
  EXPECT_EQ(lacuna_branch_commit(c1, 5), LACUNA_ERR_INVALID_ARGUMENT);
  size_t avail = 0;
  ASSERT_EQ(lacuna_context_available(ctx_, &avail), LACUNA_OK);
  EXPECT_EQ(avail, 6u);  // 8 by default, a and b alive
  ASSERT_EQ(lacuna_branch_retain_only(b), LACUNA_OK);
  EXPECT_EQ(lacuna_branch_alive(a), 0);
  EXPECT_EQ(lacuna_branch_alive(b), 1);
}

TEST_F(CapiBranchTest, StateFilesReseedAndBadInput) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("lacuna_capi_branch_" + std::to_string(::getpid()) + ".lkv"))
                               .string();
  lacuna_branch* a = create(8);
  prefill(a);
  ASSERT_EQ(lacuna_branch_save_state(a, path.c_str()), LACUNA_OK) << lacuna_last_error();
  const auto want = drain(a);
  lacuna_branch* b = create(8);
  ASSERT_EQ(lacuna_branch_load_state(b, path.c_str()), LACUNA_OK) << lacuna_last_error();
  EXPECT_EQ(drain(b), want);
  EXPECT_EQ(lacuna_branch_load_state(b, (path + ".nope").c_str()), LACUNA_ERR_NOT_FOUND);
  std::filesystem::remove(path);

  const llama_token sinks[2] = {1, 2};
  const llama_token tail[3] = {300, 301, 302};
  ASSERT_EQ(lacuna_branch_clear_and_reseed(b, sinks, 2, tail, 3), LACUNA_OK);
  size_t n = 0;
  const llama_token* seq = nullptr;
  ASSERT_EQ(lacuna_branch_sequence(b, &seq, &n), LACUNA_OK);
  EXPECT_EQ(n, 5u);
  std::vector<llama_token> big(600, 300);
  EXPECT_EQ(lacuna_branch_clear_and_reseed(b, big.data(), big.size(), tail, 3),
            LACUNA_ERR_INVALID_ARGUMENT);

  const llama_token bad = lacuna_model_n_vocab(model_) + 1;
  EXPECT_EQ(lacuna_branch_prefill(a, &bad, 1), LACUNA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lacuna_branch_commit(a, bad), LACUNA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lacuna_branch_set_grammar(a, "root ::= (", 10, nullptr, 0), LACUNA_ERR_PARSE);
  EXPECT_EQ(lacuna_branch_set_json_schema(a, "{\"type\": 5}", 11, 0, nullptr, 0),
            LACUNA_ERR_SCHEMA);
  lacuna_branch* fresh = create(4);
  llama_token t = 0;
  EXPECT_EQ(lacuna_branch_produce(fresh, &t), LACUNA_ERR_STATE);
  lacuna_step step;
  EXPECT_EQ(lacuna_branch_next(fresh, &step), LACUNA_ERR_STATE);
  // Another context's branch in one batch.
  lacuna_context* other = make_context();
  lacuna_branch* foreign = nullptr;
  ASSERT_EQ(lacuna_branch_create(other, nullptr, &foreign), LACUNA_OK);
  lacuna_branch* mixed[2] = {a, foreign};
  lacuna_step steps[2];
  EXPECT_EQ(lacuna_branches_step(mixed, 2, steps), LACUNA_ERR_INVALID_ARGUMENT);
  lacuna_branch* twice[2] = {a, a};
  EXPECT_EQ(lacuna_branches_step(twice, 2, steps), LACUNA_ERR_INVALID_ARGUMENT);
  lacuna_branch_free(foreign);
  lacuna_context_free(other);
  // No free sequence left.
  std::vector<lacuna_branch*> more;
  lacuna_status st = LACUNA_OK;
  while (st == LACUNA_OK && more.size() < 20) {
    lacuna_branch* x = nullptr;
    st = lacuna_branch_create(ctx_, nullptr, &x);
    if (st == LACUNA_OK) more.push_back(x);
  }
  EXPECT_EQ(st, LACUNA_ERR_LIMIT);
  for (lacuna_branch* x : more) lacuna_branch_free(x);
  // Everything still works.
  ASSERT_EQ(lacuna_branch_prefill_text(a, " more", 5, 0, 0), LACUNA_OK) << lacuna_last_error();
  EXPECT_EQ(drain(a).size(), 8u);
}

}  // namespace
