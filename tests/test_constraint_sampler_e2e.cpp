// test_constraint_sampler_e2e.cpp — greedy generation with the trie sampler on the tiny
// llama3 model: yields exactly one of the action names, with one forward pass per branching
// step when forced tokens are skipped, and the same tokens as the plain one-token-per-pass loop.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lacuna/lacuna.h"
#include "lacuna/model.h"
#include "lacuna/sampler.h"
#include "lacuna/token_trie.h"
#include "trie_test_support.h"

namespace lacuna {
namespace {

const std::vector<std::string> kNames = {"REPLY_ALL_RECIPIENTS", "SEARCH_WEB_PAGES",
                                         "SEND_EMAIL_NOW"};

struct RunResult {
  std::vector<Token> tokens;  // generated, end token included
  int decodes = 0;            // forward passes after the prompt's
  int branching = 0;          // tokens chosen by sampling
  std::string leaf;
};

std::string payload(const Vocab& vocab) {
  nlohmann::json leaves = nlohmann::json::array();
  for (const auto& n : kNames)
    leaves.push_back({{"name", n}, {"tokens", tokenize(vocab, n, false, false)}});
  nlohmann::json j = {{"modelId", "tiny-llama3"},
                      {"descriptors", {{{"path", "action"}, {"leaves", leaves}}}}};
  return j.dump();
}

// skip = true: forced tokens are accepted without a forward pass and decoded in one batch
// together with the next sampled token. skip = false: one decode per token.
RunResult generate(const Model& model, const std::string& prompt, bool skip) {
  const Vocab vocab = model.vocab();
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_threads = 2;
  Context ctx = Context::create(model, cp);
  const std::string json = payload(vocab);
  lacuna_token_trie_params tp = lacuna_token_trie_default_params();
  tp.expected_model_id = "tiny-llama3";
  llama_sampler* smpl =
      lacuna_sampler_init_token_trie_ext(vocab.get(), json.data(), json.size(), &tp);
  EXPECT_NE(smpl, nullptr) << lacuna_last_error();
  RunResult r;
  if (smpl == nullptr) return r;
  Constraint* c = sampler_constraint(smpl);

  std::vector<Token> pending = tokenize(vocab, prompt, true, false);
  Pos pos = 0;
  Batch batch(256);
  bool first = true;
  std::vector<Token> forced;
  while (!c->is_terminated() && r.tokens.size() < 64) {
    if (skip) {  // forced continuation: no forward pass needed to choose it
      forced.clear();
      c->forced_tokens(forced);
      for (Token t : forced) {
        llama_sampler_accept(smpl, t);
        r.tokens.push_back(t);
        pending.push_back(t);
      }
      if (c->is_terminated()) break;
    }
    batch.clear();
    for (size_t i = 0; i < pending.size(); ++i) {
      batch.add(pending[i], pos++, 0, i + 1 == pending.size());
    }
    ctx.decode(batch);
    if (!first) ++r.decodes;
    first = false;
    const Token t = llama_sampler_sample(smpl, ctx.get(), -1);  // masks, picks, accepts
    ++r.branching;
    r.tokens.push_back(t);
    pending.assign(1, t);
  }
  const char* leaf = nullptr;
  EXPECT_EQ(lacuna_token_trie_chosen_leaf(smpl, &leaf), LACUNA_OK);
  if (leaf != nullptr) r.leaf = leaf;
  uint64_t refused = 0;
  EXPECT_STREQ(lacuna_sampler_error(smpl, &refused), "");
  EXPECT_EQ(refused, 0u);
  llama_sampler_free(smpl);
  return r;
}

TEST(ConstraintSamplerE2E, TrieOnTinyLlama3YieldsOneNameWithOnePassPerBranch) {
  const std::string path = trie_test::test_model("tiny-llama3");
  Model model = Model::load(path);
  const Vocab vocab = model.vocab();
  const std::vector<Token> ends = {vocab.eos(), vocab.eot()};

  for (const std::string prompt : {"Pick an action:", "The user wants to", "Tool call ->"}) {
    const RunResult fast = generate(model, prompt, true);
    const RunResult plain = generate(model, prompt, false);
    EXPECT_EQ(fast.tokens, plain.tokens) << prompt;  // skipping changes nothing
    EXPECT_EQ(fast.leaf, plain.leaf);
    ASSERT_FALSE(fast.tokens.empty());
    // Exactly one of the names, then an end token.
    std::vector<Token> body(fast.tokens.begin(), fast.tokens.end() - 1);
    EXPECT_TRUE(fast.tokens.back() == ends[0] || fast.tokens.back() == ends[1]);
    const std::string text = detokenize(vocab, body);
    EXPECT_EQ(text, fast.leaf) << prompt;
    EXPECT_NE(std::find(kNames.begin(), kNames.end(), text), kNames.end()) << text;

    // Branching steps on the chosen path, counted independently on a fresh trie.
    TrieOptions opt;
    for (Token e : ends) {
      if (e != LLAMA_TOKEN_NULL) opt.end_tokens.push_back(e);
    }
    TokenTrieConstraint walk(build_trie_set(payload(vocab), static_cast<size_t>(vocab.n_vocab())),
                             opt);
    int branching_steps = 0;
    for (Token t : fast.tokens) {
      if (walk.allowed_tokens().size > 1) ++branching_steps;
      ASSERT_TRUE(walk.accept_token(t));
    }
    EXPECT_EQ(fast.branching, branching_steps) << prompt;
    // One forward pass per branching step (the first one is the prompt's own pass).
    EXPECT_EQ(fast.decodes + 1, branching_steps) << prompt;
    EXPECT_EQ(plain.decodes + 1, static_cast<int>(plain.tokens.size()));
    EXPECT_LT(fast.decodes, plain.decodes);
  }
}

}  // namespace
}  // namespace lacuna
