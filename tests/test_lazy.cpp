// test_lazy.cpp — lazy activation: trigger words (also split across tokens), trigger tokens,
// regexes (with and without a capture group), text after the trigger inside the same
// token, refusals, rollback and fork, inside the sampler adapter and through the C ABI.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lacuna/grammar.h"
#include "lacuna/lacuna.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "lacuna/sampler.h"
#include "lacuna/token_trie.h"
#include "trie_test_support.h"

namespace lacuna {
namespace {

constexpr size_t kVocab = 64;
constexpr Token kEnd = 63;

// A synthetic vocabulary: token id -> bytes.
const std::map<Token, std::string> kPieces = {
    {0, "a"},   {1, "b"},    {2, "</"},       {3, "think"},    {4, ">"},
    {5, ">\n"}, {6, "<T>"},  {7, ">RE"},      {8, "</think>"}, {9, " "},
    {10, "RE"}, {11, "PLY"}, {12, "_THREAD"}, {13, "STOP"},    {20, "<call>"},
    {21, "go"}, {22, "ab"},  {23, "bc"},      {24, "c"},       {kEnd, "<eos>"},
};

void piece(Token t, std::string& out) {
  auto it = kPieces.find(t);
  out = it == kPieces.end() ? std::string() : it->second;
}

std::unique_ptr<TokenTrieConstraint> make_trie() {
  nlohmann::json j = {{"modelId", "synthetic"},
                      {"descriptors",
                       {{{"path", "action"},
                         {"leaves",
                          {{{"name", "REPLY"}, {"tokens", {10, 11}}},
                           {{"name", "REPLY_THREAD"}, {"tokens", {10, 11, 12}}},
                           {{"name", "STOP"}, {"tokens", {13}}},
                           {{"name", "CALL"}, {"tokens", {20, 21}}},
                           {{"name", "C"}, {"tokens", {24}}}}}}}}};
  TrieOptions opt;
  opt.end_tokens = {kEnd};
  opt.piece = piece;
  return std::make_unique<TokenTrieConstraint>(build_trie_set(j.dump(), kVocab), opt);
}

const std::set<Token> kRoot = {10, 13, 20, 24};

std::set<Token> allowed_of(Constraint& c) {
  std::vector<uint32_t> words(bitmask_words(c.n_vocab()));
  c.fill_next_token_bitmask(words.data());
  std::set<Token> out;
  for (size_t t = 0; t < c.n_vocab(); ++t) {
    if (bitmask_test(words.data(), static_cast<Token>(t))) out.insert(static_cast<Token>(t));
  }
  return out;
}

LazyConstraint lazy(LazyTriggers triggers) {
  return LazyConstraint(make_trie(), std::move(triggers), piece);
}

void expect_inactive(LazyConstraint& c) {
  EXPECT_FALSE(c.active());
  EXPECT_EQ(allowed_of(c).size(), kVocab);
  EXPECT_EQ(c.allowed_tokens().kind, AllowedTokens::Kind::kAll);
  std::vector<Token> forced;
  EXPECT_EQ(c.forced_tokens(forced), 0u);
  EXPECT_TRUE(c.is_completed());
  EXPECT_FALSE(c.is_terminated());
}

TEST(Lazy, WordSplitAcrossTokensActivatesAtItsEnd) {
  LazyConstraint c = lazy({{"</think>"}, {}, {}});
  for (Token t : {0, 9, 2, 3}) {
    expect_inactive(c);
    ASSERT_TRUE(c.accept_token(t));
  }
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(4));  // ">" completes "</think>"
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), kRoot);
  EXPECT_FALSE(c.accept_token(0));  // now constrained
  ASSERT_TRUE(c.accept_token(13));
  ASSERT_TRUE(c.accept_token(kEnd));
  EXPECT_TRUE(c.is_terminated());
  EXPECT_EQ(*static_cast<TokenTrieConstraint&>(c.inner()).chosen_leaf(), "STOP");

  // The whole word in one token.
  LazyConstraint one = lazy({{"</think>"}, {}, {}});
  ASSERT_TRUE(one.accept_token(8));
  EXPECT_TRUE(one.active());
  EXPECT_EQ(allowed_of(one), kRoot);
}

TEST(Lazy, TextAfterTheTriggerInTheSameTokenIsFedToTheConstraint) {
  LazyConstraint c = lazy({{"</think>"}, {}, {}});
  for (Token t : {2, 3}) ASSERT_TRUE(c.accept_token(t));
  ASSERT_TRUE(c.accept_token(7));  // ">RE": trigger end + "RE"
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), std::set<Token>{11});
  std::vector<Token> forced;
  EXPECT_EQ(c.forced_tokens(forced), 1u);
  EXPECT_EQ(forced, std::vector<Token>{11});
  ASSERT_TRUE(c.accept_token(11));
  EXPECT_EQ(*static_cast<TokenTrieConstraint&>(c.inner()).chosen_leaf(), "REPLY");
}

TEST(Lazy, TextAfterTheTriggerThatTheConstraintRefusesRefusesTheToken) {
  LazyConstraint c = lazy({{"</think>"}, {}, {}});
  for (Token t : {2, 3}) ASSERT_TRUE(c.accept_token(t));
  EXPECT_FALSE(c.accept_token(5));  // ">\n": "\n" cannot start any leaf
  EXPECT_NE(c.last_error().find("is not allowed by the inner constraint"), std::string::npos);
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(4));  // the state was unchanged: "</think" + ">" triggers
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), kRoot);
}

TEST(Lazy, TriggerTokenActivatesAfterTheToken) {
  LazyConstraint c = lazy({{}, {6}, {}});
  ASSERT_TRUE(c.accept_token(0));
  ASSERT_TRUE(c.accept_token(8));  // "</think>" is no trigger here
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(6));
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), kRoot);  // the trigger token itself was not fed
}

TEST(Lazy, RegexWithoutGroupStartsAtTheEndOfTheMatch) {
  LazyConstraint c = lazy({{}, {}, {"a+b"}});
  ASSERT_TRUE(c.accept_token(1));  // "b" alone does not match
  ASSERT_TRUE(c.accept_token(0));
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(1));  // "bab": "ab" matches
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), kRoot);

  // The match ends inside a token: the rest ("c" of "bc") goes to the trie.
  LazyConstraint mid = lazy({{}, {}, {"ab"}});
  ASSERT_TRUE(mid.accept_token(0));
  ASSERT_TRUE(mid.accept_token(23));  // "a" + "bc"
  EXPECT_TRUE(mid.active());
  EXPECT_EQ(*static_cast<TokenTrieConstraint&>(mid.inner()).chosen_leaf(), "C");
  EXPECT_EQ(allowed_of(mid), std::set<Token>{kEnd});
}

TEST(Lazy, RegexWithGroupFeedsTheGroupLikeLlamaCpp) {
  LazyConstraint c = lazy({{}, {}, {"^[\\s\\S]*?(<call>)[\\s\\S]*$"}});
  ASSERT_TRUE(c.accept_token(0));
  ASSERT_TRUE(c.accept_token(9));
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(20));  // "<call>": the group is the constrained text
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), std::set<Token>{21});
  ASSERT_TRUE(c.accept_token(21));
  EXPECT_EQ(*static_cast<TokenTrieConstraint&>(c.inner()).chosen_leaf(), "CALL");
}

TEST(Lazy, RollbackAcrossActivationForkAndReset) {
  LazyConstraint c = lazy({{"</think>"}, {}, {}});
  for (Token t : {2, 3, 4, 10}) ASSERT_TRUE(c.accept_token(t));
  EXPECT_EQ(allowed_of(c), std::set<Token>{11});
  auto f = c.fork();
  ASSERT_TRUE(c.rollback(1));  // 10
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), kRoot);
  ASSERT_TRUE(c.rollback(1));  // ">" that triggered
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(4));  // "</think" is still in the buffer
  EXPECT_TRUE(c.active());
  EXPECT_FALSE(c.rollback(10));
  EXPECT_EQ(allowed_of(*f), std::set<Token>{11});  // the fork kept its own state
  c.reset();
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(4));  // no "</think" any more
  expect_inactive(c);
}

TEST(Lazy, InnerWithoutByteInputRefusesTextAfterTheTrigger) {
  LazyConstraint c(std::make_unique<trie_test::BitmaskOnly>(make_trie()), {{"</think>"}, {}, {}},
                   piece);
  for (Token t : {2, 3}) ASSERT_TRUE(c.accept_token(t));
  EXPECT_FALSE(c.accept_token(7));
  EXPECT_NE(c.last_error().find("cannot take the 2 bytes after the trigger"), std::string::npos);
  ASSERT_TRUE(c.accept_token(4));
  EXPECT_TRUE(c.active());
}

TEST(Lazy, GrammarInnerTakesTheTextAfterTheTriggerAsBytes) {
  std::vector<std::string> pieces(kVocab);
  for (const auto& [t, p] : kPieces) pieces[static_cast<size_t>(t)] = p;
  auto index = TokenIndex::from_pieces(pieces, {kEnd});
  auto compiled = CompiledGrammar::compile(parse_gbnf("root ::= \"REPLY\" | \"STOP\"\n"), index);
  LazyConstraint c(std::make_unique<GrammarMatcher>(compiled), {{"</think>"}, {}, {}}, piece);
  for (Token t : {0, 2, 3}) ASSERT_TRUE(c.accept_token(t));
  expect_inactive(c);
  ASSERT_TRUE(c.accept_token(7));  // ">RE": "RE" goes to the grammar as bytes
  EXPECT_TRUE(c.active());
  EXPECT_EQ(allowed_of(c), std::set<Token>{11});  // "PLY" completes "REPLY"
  ASSERT_TRUE(c.accept_token(11));
  EXPECT_TRUE(c.is_completed());
  ASSERT_TRUE(c.rollback(2));  // "PLY" and the triggering token
  expect_inactive(c);
  EXPECT_FALSE(c.accept_token(5));  // ">\n": "\n" is refused by the grammar
  EXPECT_NE(c.last_error().find("not allowed by the inner constraint"), std::string::npos);
  ASSERT_TRUE(c.accept_token(4));
  EXPECT_EQ(allowed_of(c), (std::set<Token>{10, 13}));  // "RE", "STOP"
}

TEST(Lazy, BadTriggersAreClearErrors) {
  auto expect_invalid = [](LazyTriggers t, TokenPieceFn fn, const std::string& fragment) {
    try {
      LazyConstraint c(make_trie(), std::move(t), std::move(fn));
      FAIL() << "expected an error: " << fragment;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_invalid({}, piece, "no trigger words, tokens or patterns");
  expect_invalid({{""}, {}, {}}, piece, "trigger word 0 is empty");
  expect_invalid({{}, {kVocab}, {}}, piece, "trigger token 64 out of range [0, 64)");
  expect_invalid({{}, {}, {"(unclosed"}}, piece, "invalid trigger pattern \"(unclosed\"");
  expect_invalid({{"x"}, {}, {}}, nullptr, "need token bytes");
  expect_invalid({{"abcdef"}, {}, {}, 3}, piece, "shorter than the longest trigger word");
  EXPECT_THROW(LazyConstraint(nullptr, {{"x"}, {}, {}}, piece), std::invalid_argument);
}

TEST(Lazy, LongInactiveOutputKeepsABoundedWindow) {
  LazyTriggers t{{"</think>"}, {}, {}, 16};
  LazyConstraint c = lazy(t);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(c.accept_token(i % 2));
  EXPECT_FALSE(c.rollback(1000));  // beyond the kept window
  ASSERT_TRUE(c.rollback(3));
  for (Token tok : {2, 3, 4}) ASSERT_TRUE(c.accept_token(tok));
  EXPECT_TRUE(c.active());
}

TEST(Lazy, InsideTheSamplerAdapter) {
  llama_sampler* smpl = make_constraint_sampler(
      std::make_unique<LazyConstraint>(make_trie(), LazyTriggers{{"</think>"}, {}, {}}, piece));
  auto run_apply = [&]() {
    std::vector<llama_token_data> cur(kVocab);
    for (size_t i = 0; i < kVocab; ++i) cur[i] = {static_cast<Token>(i), float(i % 7), 0.0f};
    llama_token_data_array cp{cur.data(), cur.size(), -1, false};
    llama_sampler_apply(smpl, &cp);
    std::set<Token> out;
    for (size_t i = 0; i < cp.size; ++i) {
      if (cp.data[i].logit != -std::numeric_limits<float>::infinity()) out.insert(cp.data[i].id);
    }
    return out;
  };
  EXPECT_EQ(run_apply().size(), kVocab);  // inactive: untouched
  for (Token t : {0, 2, 3}) llama_sampler_accept(smpl, t);
  EXPECT_EQ(run_apply().size(), kVocab);
  llama_sampler_accept(smpl, 7);
  EXPECT_EQ(run_apply(), std::set<Token>{11});
  llama_sampler* copy = llama_sampler_clone(smpl);
  llama_sampler_reset(smpl);
  EXPECT_EQ(run_apply().size(), kVocab);
  std::swap(smpl, copy);
  EXPECT_EQ(run_apply(), std::set<Token>{11});
  llama_sampler_free(smpl);
  llama_sampler_free(copy);
}

TEST(Lazy, RealVocabTriggerSplitAcrossTokensThroughTheCApi) {
  ModelParams mp;
  mp.vocab_only = true;
  Model model = Model::load(trie_test::vocab_path("llama-bpe"), mp);
  const llama_vocab* vocab = model.vocab_ptr();
  const std::vector<Token> think = tokenize(model.vocab(), "Let me think.</think>", false, false);
  const std::vector<Token> trigger_only = tokenize(model.vocab(), "</think>", false, false);
  ASSERT_GT(trigger_only.size(), 1u) << "the trigger should span several tokens";

  nlohmann::json leaves = nlohmann::json::array();
  for (const char* name : {"REPLY", "SEARCH", "STOP"}) {
    leaves.push_back({{"name", name}, {"tokens", tokenize(model.vocab(), name, false, false)}});
  }
  nlohmann::json j = {{"modelId", "m"}, {"descriptors", {{{"path", "a"}, {"leaves", leaves}}}}};
  const std::string json = j.dump();
  lacuna_constraint* trie = nullptr;
  ASSERT_EQ(lacuna_constraint_init_token_trie(vocab, json.data(), json.size(), nullptr, &trie),
            LACUNA_OK);
  const char* words[] = {"</think>"};
  lacuna_constraint* lazy_c = nullptr;
  ASSERT_EQ(lacuna_constraint_init_lazy(trie, vocab, words, 1, nullptr, 0, nullptr, 0, &lazy_c),
            LACUNA_OK);
  llama_sampler* smpl = lacuna_sampler_init_constraint(lazy_c, nullptr);
  ASSERT_NE(smpl, nullptr) << lacuna_last_error();
  Constraint* c = sampler_constraint(smpl);
  auto* lz = dynamic_cast<LazyConstraint*>(c);
  ASSERT_NE(lz, nullptr);
  for (size_t i = 0; i + 1 < think.size(); ++i) {
    llama_sampler_accept(smpl, think[i]);
    EXPECT_FALSE(lz->active()) << i;
  }
  llama_sampler_accept(smpl, think.back());
  EXPECT_TRUE(lz->active());
  std::set<Token> firsts;
  for (const char* name : {"REPLY", "SEARCH", "STOP"}) {
    firsts.insert(tokenize(model.vocab(), name, false, false)[0]);
  }
  EXPECT_EQ(allowed_of(*c), firsts);
  const char* leaf = "x";
  EXPECT_EQ(lacuna_token_trie_chosen_leaf(smpl, &leaf), LACUNA_OK);  // the trie behind the lazy
  EXPECT_EQ(leaf, nullptr);
  llama_sampler_free(smpl);

  // Bad pattern: clear error, the inner constraint is released.
  ASSERT_EQ(lacuna_constraint_init_token_trie(vocab, json.data(), json.size(), nullptr, &trie),
            LACUNA_OK);
  const char* patterns[] = {"(["};
  EXPECT_EQ(lacuna_constraint_init_lazy(trie, vocab, nullptr, 0, nullptr, 0, patterns, 1, &lazy_c),
            LACUNA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lacuna_last_error()).find("invalid trigger pattern"), std::string::npos);
  EXPECT_EQ(lazy_c, nullptr);
}

}  // namespace
}  // namespace lacuna
