// test_constraint_sampler.cpp — the llama_sampler adapter on a real vocabulary: apply on
// full, sorted, truncated and filtered candidate arrays, chain order, clone, reset, refused
// accepts, selectors, and the C ABI entry points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
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

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class ConstraintSamplerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelParams p;
    p.vocab_only = true;
    model_ = new Model(Model::load(trie_test::vocab_path("llama-bpe"), p));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  const llama_vocab* vocab() const { return model_->vocab_ptr(); }
  size_t n_vocab() const { return static_cast<size_t>(llama_vocab_n_tokens(vocab())); }

  std::vector<Token> tok(const std::string& text) const {
    return tokenize(model_->vocab(), text, false, false);
  }

  std::string payload(const std::vector<std::string>& names, const std::string& model_id = "m") {
    nlohmann::json j;
    j["modelId"] = model_id;
    nlohmann::json leaves = nlohmann::json::array();
    for (const auto& n : names) leaves.push_back({{"name", n}, {"tokens", tok(n)}});
    j["descriptors"] = {{{"path", "action"}, {"leaves", leaves}}};
    return j.dump();
  }

  std::unique_ptr<TokenTrieConstraint> trie(const std::vector<std::string>& names) {
    TrieOptions opt;
    opt.end_tokens = {llama_vocab_eos(vocab())};
    opt.piece = vocab_piece_fn(vocab());
    return std::make_unique<TokenTrieConstraint>(build_trie_set(payload(names), n_vocab()), opt);
  }

  // Random logits over the whole vocabulary, id-ordered (what llama_sampler_sample builds).
  std::vector<llama_token_data> full_candidates(uint32_t seed) const {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<llama_token_data> cur(n_vocab());
    for (size_t i = 0; i < cur.size(); ++i) cur[i] = {static_cast<Token>(i), dist(rng), 0.0f};
    return cur;
  }

  static Model* model_;
};

Model* ConstraintSamplerTest::model_ = nullptr;

const std::vector<std::string> kNames = {"REPLY",        "REPLY_THREAD", "SEARCH_WEB",
                                         "SEARCH_FILES", "SEND_EMAIL",   "STOP"};

std::set<Token> allowed_of(Constraint& c) {
  std::vector<uint32_t> words(bitmask_words(c.n_vocab()));
  c.fill_next_token_bitmask(words.data());
  std::set<Token> out;
  for (size_t t = 0; t < c.n_vocab(); ++t) {
    if (bitmask_test(words.data(), static_cast<Token>(t))) out.insert(static_cast<Token>(t));
  }
  return out;
}

// Tokens of cur_p that survive (finite logit).
std::set<Token> survivors(const llama_token_data_array& cur_p) {
  std::set<Token> out;
  for (size_t i = 0; i < cur_p.size; ++i) {
    if (cur_p.data[i].logit != kNegInf) out.insert(cur_p.data[i].id);
  }
  return out;
}

TEST_F(ConstraintSamplerTest, ApplyMasksFullSortedTruncatedAndFilteredArrays) {
  for (bool sparse : {true, false}) {
    std::unique_ptr<Constraint> c = trie(kNames);
    if (!sparse) c = std::make_unique<trie_test::BitmaskOnly>(std::move(c));
    Constraint* raw = c.get();
    llama_sampler* smpl = make_constraint_sampler(std::move(c));
    // Walk "SEARCH_WEB" so the masks differ from step to step.
    const std::vector<Token> path = tok("SEARCH_WEB");
    for (size_t step = 0; step <= path.size(); ++step) {
      const std::set<Token> allowed = allowed_of(*raw);
      ASSERT_FALSE(allowed.empty());
      // Full id-ordered array.
      auto cur = full_candidates(static_cast<uint32_t>(step));
      llama_token_data_array full{cur.data(), cur.size(), -1, false};
      llama_sampler_apply(smpl, &full);
      EXPECT_EQ(survivors(full), allowed) << "full, step " << step;
      // Sorted by logit.
      auto sorted = full_candidates(100 + static_cast<uint32_t>(step));
      std::sort(sorted.begin(), sorted.end(),
                [](const auto& a, const auto& b) { return a.logit > b.logit; });
      llama_token_data_array sp{sorted.data(), sorted.size(), -1, true};
      llama_sampler_apply(smpl, &sp);
      EXPECT_EQ(sp.size, sorted.size());  // masked in place, nothing dropped
      EXPECT_EQ(survivors(sp), allowed) << "sorted, step " << step;
      // Truncated: a shuffled subset holding half of the allowed tokens.
      auto sub = full_candidates(200 + static_cast<uint32_t>(step));
      std::vector<llama_token_data> trunc;
      std::set<Token> kept_allowed;
      size_t i = 0;
      for (Token t : allowed) {
        if (i++ % 2 == 0) {
          trunc.push_back(sub[t]);
          kept_allowed.insert(t);
        }
      }
      std::set<Token> others;
      for (size_t k = 0; k < 500; ++k) {
        const Token t = sub[(k * 7919) % sub.size()].id;
        if (!kept_allowed.count(t) && others.insert(t).second) trunc.push_back(sub[t]);
      }
      std::shuffle(trunc.begin(), trunc.end(), std::mt19937(static_cast<uint32_t>(step)));
      llama_token_data_array tp{trunc.data(), trunc.size(), -1, false};
      llama_sampler_apply(smpl, &tp);
      std::set<Token> want_trunc = kept_allowed;
      for (Token t : others) {
        if (allowed.count(t)) want_trunc.insert(t);
      }
      EXPECT_EQ(survivors(tp), want_trunc) << "truncated, step " << step;
      // Already filtered: some allowed tokens are -inf before we run; they stay -inf.
      auto filt = full_candidates(300 + static_cast<uint32_t>(step));
      const Token pre_masked = *allowed.begin();
      filt[pre_masked].logit = kNegInf;
      llama_token_data_array fp{filt.data(), filt.size(), -1, false};
      llama_sampler_apply(smpl, &fp);
      std::set<Token> want_filt = allowed;
      want_filt.erase(pre_masked);
      EXPECT_EQ(survivors(fp), want_filt) << "filtered, step " << step;
      if (step < path.size()) llama_sampler_accept(smpl, path[step]);
    }
    EXPECT_EQ(constraint_sampler_status(smpl).refused_accepts, 0u);
    llama_sampler_free(smpl);
  }
}

TEST_F(ConstraintSamplerTest, InAChainBeforeTruncationGreedyPicksOnlyAllowedTokens) {
  // Documented order: constraint, then top-k, then greedy.
  llama_sampler* good = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(good, make_constraint_sampler(trie(kNames)));
  llama_sampler_chain_add(good, llama_sampler_init_top_k(5));
  llama_sampler_chain_add(good, llama_sampler_init_greedy());
  // Wrong order: top-k first can leave only forbidden tokens.
  llama_sampler* bad = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(bad, llama_sampler_init_top_k(5));
  llama_sampler_chain_add(bad, make_constraint_sampler(trie(kNames)));
  llama_sampler_chain_add(bad, llama_sampler_init_greedy());

  std::vector<Token> generated;
  for (int step = 0; step < 20; ++step) {
    Constraint* c = sampler_constraint(good);
    ASSERT_NE(c, nullptr);
    if (c->is_terminated()) break;
    const std::set<Token> allowed = allowed_of(*c);
    auto cur = full_candidates(1000 + static_cast<uint32_t>(step));
    // Make the five best tokens forbidden ones.
    for (int k = 0; k < 5; ++k) {
      Token t = 1000 + k;
      while (allowed.count(t)) ++t;
      cur[t].logit = 100.0f;
    }
    llama_token_data_array cp{cur.data(), cur.size(), -1, false};
    llama_sampler_apply(good, &cp);
    ASSERT_GE(cp.selected, 0);
    const Token picked = cp.data[cp.selected].id;
    EXPECT_TRUE(allowed.count(picked)) << "step " << step;
    llama_sampler_accept(good, picked);
    generated.push_back(picked);

    if (step == 0) {
      auto cur2 = full_candidates(1000);
      for (int k = 0; k < 5; ++k) {
        Token t = 1000 + k;
        while (allowed.count(t)) ++t;
        cur2[t].logit = 100.0f;
      }
      llama_token_data_array bp{cur2.data(), cur2.size(), -1, false};
      llama_sampler_apply(bad, &bp);
      EXPECT_TRUE(survivors(bp).empty());  // no mass left on any allowed token
      EXPECT_EQ(constraint_sampler_status(bad).empty_masks, 1u);
    }
  }
  auto* c = dynamic_cast<TokenTrieConstraint*>(sampler_constraint(good));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->is_terminated());
  ASSERT_NE(c->chosen_leaf(), nullptr);
  EXPECT_NE(std::find(kNames.begin(), kNames.end(), *c->chosen_leaf()), kNames.end());
  EXPECT_EQ(generated.back(), llama_vocab_eos(vocab()));
  llama_sampler_free(good);
  llama_sampler_free(bad);
}

TEST_F(ConstraintSamplerTest, CloneForksResetRewindsRefusedAcceptIsRecorded) {
  llama_sampler* smpl = make_constraint_sampler(trie(kNames));
  const std::vector<Token> send = tok("SEND_EMAIL");
  const std::vector<Token> stop = tok("STOP");
  llama_sampler_accept(smpl, send[0]);
  llama_sampler* copy = llama_sampler_clone(smpl);
  ASSERT_NE(copy, nullptr);
  ASSERT_TRUE(is_constraint_sampler(copy));
  const auto before = allowed_of(*sampler_constraint(copy));
  for (size_t i = 1; i < send.size(); ++i) llama_sampler_accept(smpl, send[i]);
  EXPECT_EQ(allowed_of(*sampler_constraint(copy)), before);  // the clone did not move
  EXPECT_NE(allowed_of(*sampler_constraint(smpl)), before);
  EXPECT_EQ(std::string(llama_sampler_name(copy)), "lacuna-constraint");

  // A refused token: counted, message kept, state unchanged, sampler still usable.
  const auto at = allowed_of(*sampler_constraint(smpl));
  const Token bad = stop[0] != send[0] ? stop[0] : 0;
  llama_sampler_accept(smpl, bad);
  auto st = constraint_sampler_status(smpl);
  EXPECT_EQ(st.refused_accepts, 1u);
  EXPECT_EQ(st.last_refused, bad);
  EXPECT_NE(st.last_error.find("refused token " + std::to_string(bad)), std::string::npos);
  EXPECT_EQ(allowed_of(*sampler_constraint(smpl)), at);
  llama_sampler_accept(smpl, llama_vocab_eos(vocab()));
  EXPECT_TRUE(sampler_constraint(smpl)->is_terminated());
  EXPECT_EQ(constraint_sampler_status(smpl).refused_accepts, 1u);
  // An out-of-range token is refused too, not a crash.
  llama_sampler_accept(smpl, -7);
  llama_sampler_accept(smpl, 1 << 30);
  EXPECT_EQ(constraint_sampler_status(smpl).refused_accepts, 3u);

  llama_sampler_reset(smpl);
  EXPECT_EQ(constraint_sampler_status(smpl).refused_accepts, 0u);
  EXPECT_FALSE(sampler_constraint(smpl)->is_terminated());
  std::set<Token> firsts;
  for (const auto& n : kNames) firsts.insert(tok(n)[0]);
  EXPECT_EQ(allowed_of(*sampler_constraint(smpl)), firsts);
  llama_sampler_free(copy);
  llama_sampler_free(smpl);
}

TEST_F(ConstraintSamplerTest, DistSelectorSamplesOnlyAllowedAndIsSeeded) {
  ConstraintSamplerParams p;
  p.selector = Selector::kDist;
  p.temperature = 1.5f;
  p.top_p = 0.9f;
  p.seed = 42;
  auto run = [&]() {
    std::vector<Token> picks;
    llama_sampler* smpl = make_constraint_sampler(trie(kNames), p);
    for (uint32_t round = 0; round < 30; ++round) {
      llama_sampler_reset(smpl);
      const auto allowed = allowed_of(*sampler_constraint(smpl));
      auto cur = full_candidates(round);
      llama_token_data_array cp{cur.data(), cur.size(), -1, false};
      llama_sampler_apply(smpl, &cp);
      EXPECT_GE(cp.selected, 0);
      const Token t = cp.data[cp.selected].id;
      EXPECT_TRUE(allowed.count(t));
      picks.push_back(t);
    }
    llama_sampler_free(smpl);
    return picks;
  };
  EXPECT_EQ(run(), run());
}

TEST_F(ConstraintSamplerTest, CApiTokenTrieSamplerAndErrors) {
  EXPECT_EQ(lacuna_abi_version(), static_cast<uint32_t>(LACUNA_ABI_VERSION));
  const std::string json = payload(kNames, "llama-bpe-test");

  EXPECT_EQ(lacuna_sampler_init_token_trie(nullptr, json.data(), json.size(), 0), nullptr);
  EXPECT_NE(std::string(lacuna_last_error()).find("vocab is NULL"), std::string::npos);
  const std::string broken = "{\"modelId\": ";
  EXPECT_EQ(lacuna_sampler_init_token_trie(vocab(), broken.data(), broken.size(), 0), nullptr);
  EXPECT_NE(std::string(lacuna_last_error()).find("malformed JSON"), std::string::npos);
  const std::string empty = R"({"modelId":"m","descriptors":[{"path":"a","leaves":[]}]})";
  EXPECT_EQ(lacuna_sampler_init_token_trie(vocab(), empty.data(), empty.size(), 0), nullptr);
  EXPECT_NE(std::string(lacuna_last_error()).find("empty leaf set"), std::string::npos);
  const std::string range =
      R"({"modelId":"m","descriptors":[{"path":"a","leaves":[{"name":"x","tokens":[128256]}]}]})";
  EXPECT_EQ(lacuna_sampler_init_token_trie(vocab(), range.data(), range.size(), 0), nullptr);
  EXPECT_NE(std::string(lacuna_last_error()).find("token id 128256 out of range [0, 128256)"),
            std::string::npos);
  EXPECT_EQ(lacuna_sampler_init_token_trie(vocab(), json.data(), json.size(), 7), nullptr);
  EXPECT_NE(std::string(lacuna_last_error()).find("unknown mode 7"), std::string::npos);

  lacuna_token_trie_params p = lacuna_token_trie_default_params();
  p.expected_model_id = "another-model";
  EXPECT_EQ(lacuna_sampler_init_token_trie_ext(vocab(), json.data(), json.size(), &p), nullptr);
  EXPECT_NE(std::string(lacuna_last_error())
                .find("payload is for model \"llama-bpe-test\", expected \"another-model\""),
            std::string::npos);
  p.expected_model_id = "llama-bpe-test";
  p.descriptor_path = "nope";
  EXPECT_EQ(lacuna_sampler_init_token_trie_ext(vocab(), json.data(), json.size(), &p), nullptr);
  EXPECT_NE(std::string(lacuna_last_error()).find("no descriptor with path \"nope\""),
            std::string::npos);

  // After all those errors, a good payload works (argmax mode picks the best legal token).
  p.descriptor_path = nullptr;
  llama_sampler* smpl = lacuna_sampler_init_token_trie_ext(vocab(), json.data(), json.size(), &p);
  ASSERT_NE(smpl, nullptr) << lacuna_last_error();
  const char* leaf = "unset";
  ASSERT_EQ(lacuna_token_trie_chosen_leaf(smpl, &leaf), LACUNA_OK);
  EXPECT_EQ(leaf, nullptr);
  const std::vector<Token> want = tok("STOP");
  for (Token t : want) {
    auto cur = full_candidates(5);
    cur[t].logit = 50.0f;
    llama_token_data_array cp{cur.data(), cur.size(), -1, false};
    llama_sampler_apply(smpl, &cp);
    ASSERT_GE(cp.selected, 0);
    EXPECT_EQ(cp.data[cp.selected].id, t);
    llama_sampler_accept(smpl, t);
  }
  ASSERT_EQ(lacuna_token_trie_chosen_leaf(smpl, &leaf), LACUNA_OK);
  ASSERT_NE(leaf, nullptr);
  EXPECT_STREQ(leaf, "STOP");
  int32_t flag = -1;
  ASSERT_EQ(lacuna_sampler_is_completed(smpl, &flag), LACUNA_OK);
  EXPECT_EQ(flag, 1);
  ASSERT_EQ(lacuna_sampler_is_terminated(smpl, &flag), LACUNA_OK);
  EXPECT_EQ(flag, 0);  // waits for EOS/EOT
  llama_token forced[4];
  size_t n_forced = 9;
  ASSERT_EQ(lacuna_sampler_forced_tokens(smpl, forced, 4, &n_forced), LACUNA_OK);
  const bool single_end = llama_vocab_eot(vocab()) == LLAMA_TOKEN_NULL ||
                          llama_vocab_eot(vocab()) == llama_vocab_eos(vocab());
  EXPECT_EQ(n_forced, single_end ? 1u : 0u);
  uint64_t refused = 9;
  const char* err = lacuna_sampler_error(smpl, &refused);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(refused, 0u);
  EXPECT_STREQ(err, "");
  llama_sampler_accept(smpl, want[0]);  // refused: the trie is past STOP
  EXPECT_NE(std::string(lacuna_sampler_error(smpl, &refused)).find("refused token"),
            std::string::npos);
  EXPECT_EQ(refused, 1u);
  EXPECT_EQ(lacuna_token_trie_select(smpl, "missing"), LACUNA_ERR_NOT_FOUND);
  EXPECT_EQ(lacuna_token_trie_select(smpl, "action"), LACUNA_OK);
  EXPECT_STREQ(lacuna_token_trie_warning(smpl), "");
  llama_sampler_free(smpl);

  // A plain llama.cpp sampler is not ours: clear errors, no crash.
  llama_sampler* greedy = llama_sampler_init_greedy();
  EXPECT_EQ(lacuna_token_trie_chosen_leaf(greedy, &leaf), LACUNA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lacuna_sampler_error(greedy, nullptr), nullptr);
  EXPECT_EQ(lacuna_sampler_is_terminated(greedy, &flag), LACUNA_ERR_INVALID_ARGUMENT);
  llama_sampler_free(greedy);

  // Generic constraint handle + sampler; ownership passes even on failure.
  lacuna_constraint* c = nullptr;
  ASSERT_EQ(lacuna_constraint_init_token_trie(vocab(), json.data(), json.size(), nullptr, &c),
            LACUNA_OK);
  lacuna_sampler_params sp = lacuna_sampler_default_params();
  sp.selector = 9;
  EXPECT_EQ(lacuna_sampler_init_constraint(c, &sp), nullptr);  // c is freed
  EXPECT_NE(std::string(lacuna_last_error()).find("unknown selector 9"), std::string::npos);
  ASSERT_EQ(lacuna_constraint_init_token_trie(vocab(), json.data(), json.size(), nullptr, &c),
            LACUNA_OK);
  llama_sampler* generic = lacuna_sampler_init_constraint(c, nullptr);
  ASSERT_NE(generic, nullptr);
  EXPECT_EQ(lacuna_token_trie_chosen_leaf(generic, &leaf), LACUNA_OK);
  llama_sampler_free(generic);
  EXPECT_EQ(lacuna_sampler_init_constraint(nullptr, nullptr), nullptr);
  EXPECT_EQ(lacuna_constraint_init_token_trie(vocab(), json.data(), json.size(), nullptr, nullptr),
            LACUNA_ERR_INVALID_ARGUMENT);
}

TEST_F(ConstraintSamplerTest, CApiUsesTheSharedCache) {
  const std::string json = payload({"alpha", "beta", "gamma"});
  const auto parses = TrieCache::global().stats().parses;
  for (int i = 0; i < 5; ++i) {
    llama_sampler* s = lacuna_sampler_init_token_trie(vocab(), json.data(), json.size(), 0);
    ASSERT_NE(s, nullptr);
    llama_sampler_free(s);
  }
  EXPECT_EQ(TrieCache::global().stats().parses, parses + 1);
}

}  // namespace
}  // namespace lacuna
