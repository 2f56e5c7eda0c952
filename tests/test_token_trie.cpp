// test_token_trie.cpp — the token-trie constraint: masks at every step, forced chains, leaf
// and prefix endings, descriptor selection, safety bound, bad payloads, cache and LRU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lacuna/token_trie.h"

namespace lacuna {
namespace {

constexpr size_t kVocab = 1000;
constexpr Token kEnd = 999;

using Leaves = std::vector<std::pair<std::string, std::vector<Token>>>;

std::string payload(const std::vector<std::pair<std::string, Leaves>>& descriptors,
                    const std::string& model_id = "test-model") {
  nlohmann::json j;
  j["modelId"] = model_id;
  j["descriptors"] = nlohmann::json::array();
  for (const auto& [path, leaves] : descriptors) {
    nlohmann::json d;
    d["path"] = path;
    d["leaves"] = nlohmann::json::array();
    for (const auto& [name, tokens] : leaves)
      d["leaves"].push_back({{"name", name}, {"tokens", tokens}});
    j["descriptors"].push_back(d);
  }
  return j.dump();
}

std::shared_ptr<const TrieSet> build(const Leaves& leaves) {
  return build_trie_set(payload({{"action", leaves}}), kVocab);
}

std::set<Token> mask_set(Constraint& c) {
  std::vector<uint32_t> words(bitmask_words(c.n_vocab()), 0xdeadbeefu);
  c.fill_next_token_bitmask(words.data());
  std::set<Token> out;
  for (size_t t = 0; t < c.n_vocab(); ++t) {
    if (bitmask_test(words.data(), static_cast<Token>(t))) out.insert(static_cast<Token>(t));
  }
  // No bit beyond n_vocab.
  for (size_t t = c.n_vocab(); t < words.size() * 32; ++t) {
    EXPECT_FALSE(bitmask_test(words.data(), static_cast<Token>(t))) << t;
  }
  return out;
}

std::set<Token> list_set(TokenTrieConstraint& c) {
  const AllowedTokens a = c.allowed_tokens();
  EXPECT_EQ(a.kind, AllowedTokens::Kind::kList);
  EXPECT_TRUE(std::is_sorted(a.tokens, a.tokens + a.size));
  return std::set<Token>(a.tokens, a.tokens + a.size);
}

// The legal next tokens after `prefix`, computed by brute force over the leaves.
std::set<Token> expected_next(const Leaves& leaves, const std::vector<Token>& prefix,
                              const std::vector<Token>& end_tokens) {
  std::set<Token> out;
  for (const auto& [name, tokens] : leaves) {
    if (tokens.size() < prefix.size() ||
        !std::equal(prefix.begin(), prefix.end(), tokens.begin())) {
      continue;
    }
    if (tokens.size() == prefix.size()) {
      out.insert(end_tokens.begin(), end_tokens.end());
    } else {
      out.insert(tokens[prefix.size()]);
    }
  }
  return out;
}

const Leaves kActions = {
    {"REPLY", {10, 11}},      {"REPLY_THREAD", {10, 11, 12, 13}},
    {"SEARCH", {20, 21, 22}}, {"SEARCH_WEB", {20, 21, 23}},
    {"STOP", {30}},           {"SEND_EMAIL", {40, 41, 42, 43, 44}},
};

TEST(TokenTrie, MasksExactlyTheLegalTokensAtEveryStepOfEveryLeaf) {
  for (const std::vector<Token>& ends : {std::vector<Token>{kEnd}, std::vector<Token>{}}) {
    auto set = build(kActions);
    TokenTrieConstraint c(set, TrieOptions{ends, 500, {}});
    for (const auto& [name, tokens] : kActions) {
      c.reset();
      std::vector<Token> prefix;
      for (size_t i = 0; i <= tokens.size(); ++i) {
        const auto want = expected_next(kActions, prefix, ends);
        if (c.is_terminated()) {
          EXPECT_TRUE(mask_set(c).empty());
          break;
        }
        EXPECT_EQ(mask_set(c), want) << name << " step " << i;
        EXPECT_EQ(list_set(c), want) << name << " step " << i;
        if (i == tokens.size()) break;
        // Every token outside the legal set is refused and changes nothing.
        EXPECT_FALSE(c.accept_token(500));
        ASSERT_TRUE(c.accept_token(tokens[i])) << name << " step " << i;
        prefix.push_back(tokens[i]);
      }
      ASSERT_NE(c.chosen_leaf(), nullptr);
      EXPECT_EQ(*c.chosen_leaf(), name);
      if (!ends.empty()) {
        EXPECT_FALSE(c.is_terminated());
        ASSERT_TRUE(c.accept_token(kEnd));
        EXPECT_TRUE(c.is_terminated());
        EXPECT_EQ(*c.chosen_leaf(), name);
        EXPECT_TRUE(mask_set(c).empty());
        EXPECT_FALSE(c.accept_token(kEnd));
      }
    }
  }
}

TEST(TokenTrie, ForcedChainsFollowSingleChildren) {
  auto set = build(kActions);
  TokenTrieConstraint c(set, TrieOptions{{kEnd}, 500, {}});
  std::vector<Token> forced;
  EXPECT_EQ(c.forced_tokens(forced), 0u);  // root branches
  ASSERT_TRUE(c.accept_token(40));
  EXPECT_EQ(c.forced_tokens(forced), 5u);  // 41 42 43 44 then the single end token
  EXPECT_EQ(forced, (std::vector<Token>{41, 42, 43, 44, kEnd}));
  forced.clear();
  EXPECT_EQ(c.forced_tokens(forced, 2), 2u);
  EXPECT_EQ(forced, (std::vector<Token>{41, 42}));
  EXPECT_EQ(c.span_tokens(), 1u);  // forced_tokens does not move the state

  c.reset();
  ASSERT_TRUE(c.accept_token(20));
  forced.clear();
  EXPECT_EQ(c.forced_tokens(forced), 1u);  // 21, then SEARCH vs SEARCH_WEB branch
  EXPECT_EQ(forced, std::vector<Token>{21});

  // Two end tokens: the end of a childless leaf is a real choice, not forced.
  TokenTrieConstraint two(set, TrieOptions{{kEnd, 998}, 500, {}});
  ASSERT_TRUE(two.accept_token(30));
  forced.clear();
  EXPECT_EQ(two.forced_tokens(forced), 0u);
  // No end token: a childless leaf terminates at once, nothing is forced after it.
  TokenTrieConstraint none(set, TrieOptions{{}, 500, {}});
  ASSERT_TRUE(none.accept_token(40));
  forced.clear();
  EXPECT_EQ(none.forced_tokens(forced), 4u);
  for (Token t : forced) ASSERT_TRUE(none.accept_token(t));
  EXPECT_TRUE(none.is_terminated());
  EXPECT_EQ(*none.chosen_leaf(), "SEND_EMAIL");
}

TEST(TokenTrie, LeafThatPrefixesLongerLeavesAllowsEnding) {
  auto set = build(kActions);
  TokenTrieConstraint c(set, TrieOptions{{kEnd}, 500, {}});
  ASSERT_TRUE(c.accept_token(10));
  EXPECT_EQ(c.chosen_leaf(), nullptr);
  EXPECT_FALSE(c.is_completed());
  ASSERT_TRUE(c.accept_token(11));
  ASSERT_NE(c.chosen_leaf(), nullptr);
  EXPECT_EQ(*c.chosen_leaf(), "REPLY");
  EXPECT_TRUE(c.is_completed());
  EXPECT_FALSE(c.is_terminated());
  EXPECT_EQ(mask_set(c), (std::set<Token>{12, kEnd}));
  std::vector<Token> forced;
  EXPECT_EQ(c.forced_tokens(forced), 0u);  // continue or end: a branching step

  auto fork = c.fork();
  ASSERT_TRUE(c.accept_token(kEnd));  // REPLY
  EXPECT_TRUE(c.is_terminated());
  EXPECT_EQ(*c.chosen_leaf(), "REPLY");

  auto& thread = static_cast<TokenTrieConstraint&>(*fork);  // REPLY_THREAD
  EXPECT_FALSE(thread.is_terminated());
  ASSERT_TRUE(thread.accept_token(12));
  EXPECT_EQ(thread.chosen_leaf(), nullptr);
  ASSERT_TRUE(thread.accept_token(13));
  EXPECT_EQ(*thread.chosen_leaf(), "REPLY_THREAD");
  EXPECT_EQ(mask_set(thread), std::set<Token>{kEnd});

  // Without end tokens, REPLY only reports completion; the caller hands over.
  TokenTrieConstraint handover(set, TrieOptions{{}, 500, {}});
  ASSERT_TRUE(handover.accept_token(10));
  ASSERT_TRUE(handover.accept_token(11));
  EXPECT_TRUE(handover.is_completed());
  EXPECT_FALSE(handover.is_terminated());
  EXPECT_EQ(mask_set(handover), std::set<Token>{12});
}

TEST(TokenTrie, RollbackForkAndReset) {
  auto set = build(kActions);
  TokenTrieConstraint c(set, TrieOptions{{kEnd}, 500, {}});
  for (Token t : {10, 11, 12, 13, kEnd}) ASSERT_TRUE(c.accept_token(t));
  EXPECT_TRUE(c.is_terminated());
  EXPECT_FALSE(c.rollback(6));
  EXPECT_TRUE(c.is_terminated());  // unchanged
  ASSERT_TRUE(c.rollback(3));      // end, 13, 12
  EXPECT_EQ(*c.chosen_leaf(), "REPLY");
  EXPECT_EQ(mask_set(c), (std::set<Token>{12, kEnd}));
  ASSERT_TRUE(c.rollback(2));
  EXPECT_EQ(mask_set(c), (std::set<Token>{10, 20, 30, 40}));
  ASSERT_TRUE(c.accept_token(20));
  auto f = c.fork();
  ASSERT_TRUE(c.accept_token(21));
  EXPECT_EQ(mask_set(*f), std::set<Token>{21});  // the fork kept its own state
  c.reset();
  EXPECT_EQ(c.span_tokens(), 0u);
  EXPECT_EQ(mask_set(c), (std::set<Token>{10, 20, 30, 40}));
}

TEST(TokenTrie, DescriptorSelectionByPath) {
  const std::string json =
      payload({{"action", kActions}, {"parameters.mode", {{"fast", {500}}, {"slow", {501}}}}});
  auto set = build_trie_set(json, kVocab);
  ASSERT_EQ(set->tries.size(), 2u);
  TokenTrieConstraint first(set, TrieOptions{{kEnd}, 500, {}});
  EXPECT_EQ(first.trie().path(), "action");
  EXPECT_EQ(mask_set(first), (std::set<Token>{10, 20, 30, 40}));

  TokenTrieConstraint mode(set, TrieOptions{{kEnd}, 500, {}}, "parameters.mode");
  EXPECT_EQ(mask_set(mode), (std::set<Token>{500, 501}));
  ASSERT_TRUE(mode.accept_token(501));
  EXPECT_EQ(*mode.chosen_leaf(), "slow");

  first.select("parameters.mode");
  EXPECT_EQ(mask_set(first), (std::set<Token>{500, 501}));
  try {
    first.select("nope");
    FAIL() << "expected an error";
  } catch (const TrieError& e) {
    EXPECT_EQ(e.code(), TrieErrc::kUnknownPath);
    EXPECT_NE(std::string(e.what()).find("no descriptor with path \"nope\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("\"parameters.mode\""), std::string::npos);
  }
  EXPECT_EQ(mask_set(first), (std::set<Token>{500, 501}));  // still usable, unchanged
  EXPECT_THROW(TokenTrieConstraint(set, TrieOptions{}, "missing"), TrieError);
}

TEST(TokenTrie, SafetyBoundDeactivatesWithAWarning) {
  auto set = build(kActions);
  TokenTrieConstraint c(set, TrieOptions{{kEnd}, 3, {}});
  for (Token t : {40, 41}) ASSERT_TRUE(c.accept_token(t));
  EXPECT_FALSE(c.deactivated());
  EXPECT_TRUE(c.warning().empty());
  ASSERT_TRUE(c.accept_token(42));  // third token, no leaf finished
  EXPECT_TRUE(c.deactivated());
  EXPECT_NE(c.warning().find("no leaf finished after 3 tokens"), std::string::npos);
  EXPECT_EQ(mask_set(c).size(), kVocab);  // every token allowed
  EXPECT_EQ(c.allowed_tokens().kind, AllowedTokens::Kind::kAll);
  EXPECT_TRUE(c.accept_token(7));  // anything goes
  std::vector<Token> forced;
  EXPECT_EQ(c.forced_tokens(forced), 0u);
  ASSERT_TRUE(c.rollback(2));  // 7 and the token that hit the bound
  EXPECT_FALSE(c.deactivated());
  EXPECT_EQ(mask_set(c), std::set<Token>{42});
  c.reset();
  EXPECT_TRUE(c.warning().empty());

  // A short leaf finishes before the bound.
  TokenTrieConstraint ok(set, TrieOptions{{kEnd}, 3, {}});
  for (Token t : {20, 21, 22}) ASSERT_TRUE(ok.accept_token(t));
  EXPECT_TRUE(ok.deactivated());  // 3 tokens without the end token: bound reached
  TokenTrieConstraint fine(set, TrieOptions{{kEnd}, 3, {}});
  for (Token t : {30, kEnd}) ASSERT_TRUE(fine.accept_token(t));
  EXPECT_TRUE(fine.is_terminated());
  EXPECT_FALSE(fine.deactivated());
}

TEST(TokenTrie, AcceptBytesWalksTokenPieces) {
  auto set = build(kActions);
  TrieOptions opt{
      {kEnd}, 500, [](Token t, std::string& out) { out = "<" + std::to_string(t) + ">"; }};
  TokenTrieConstraint c(set, opt);
  EXPECT_EQ(c.jump_forward_string(), "");
  EXPECT_TRUE(c.accept_bytes("<20><21>"));
  EXPECT_EQ(mask_set(c), (std::set<Token>{22, 23}));
  EXPECT_FALSE(c.accept_bytes("<2"));  // not on a token boundary
  EXPECT_FALSE(c.accept_bytes("<99>"));
  EXPECT_EQ(mask_set(c), (std::set<Token>{22, 23}));  // unchanged
  c.reset();
  ASSERT_TRUE(c.accept_token(40));
  EXPECT_EQ(c.jump_forward_string(), "<41><42><43><44>");
}

// ---- bad input ----------------------------------------------------------------------------

void expect_error(const std::string& json, TrieErrc code, const std::string& fragment,
                  const TriePayloadLimits& limits = {}) {
  try {
    build_trie_set(json, kVocab, limits);
    FAIL() << "expected an error for " << json.substr(0, 200);
  } catch (const TrieError& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message: " << e.what() << "\nwanted: " << fragment;
  }
}

TEST(TokenTriePayload, BadInputGivesPreciseErrors) {
  expect_error("{\"modelId\": \"m\", \"descriptors\": [", TrieErrc::kSyntax, "malformed JSON");
  expect_error("", TrieErrc::kSyntax, "malformed JSON");
  expect_error("[1,2]", TrieErrc::kSchema, "/: expected an object, got array");
  expect_error(R"({"descriptors": []})", TrieErrc::kSchema, "/: missing \"modelId\"");
  expect_error(R"({"modelId": 3, "descriptors": []})", TrieErrc::kSchema,
               "/modelId: expected a string, got number");
  expect_error(R"({"modelId": "m", "descriptors": []})", TrieErrc::kEmptyLeafSet,
               "/descriptors: no descriptors");
  expect_error(payload({{"a", {}}}), TrieErrc::kEmptyLeafSet,
               "/descriptors/0/leaves: empty leaf set");
  expect_error(payload({{"a", {{"x", {}}}}}), TrieErrc::kEmptyLeafSet,
               "/descriptors/0/leaves/0/tokens: leaf has no tokens");
  expect_error(payload({{"a", {{"x", {1}}, {"y", {2, -5}}}}}), TrieErrc::kTokenRange,
               "/descriptors/0/leaves/1/tokens/1: token id -5 out of range [0, 1000)");
  expect_error(payload({{"a", {{"x", {1000}}}}}), TrieErrc::kTokenRange,
               "/descriptors/0/leaves/0/tokens/0: token id 1000 out of range [0, 1000)");
  expect_error(
      R"({"modelId":"m","descriptors":[{"path":"a","leaves":[{"name":"x","tokens":[1.5]}]}]})",
      TrieErrc::kSchema, "/descriptors/0/leaves/0/tokens/0: expected an integer token id");
  expect_error(
      R"({"modelId":"m","descriptors":[{"path":"a","leaves":[{"name":"x","tokens":["1"]}]}]})",
      TrieErrc::kSchema, "expected an integer token id, got string");
  expect_error(payload({{"a", {{"", {1}}}}}), TrieErrc::kSchema,
               "/descriptors/0/leaves/0/name: empty leaf name");
  expect_error(
      payload({{"a", {{"x", {1}}, {"x", {2}}}}}), TrieErrc::kDuplicate,
      "/descriptors/0/leaves/1/name: duplicate leaf name \"x\" (first at /descriptors/0/leaves/0)");
  expect_error(payload({{"a", {{"x", {1, 2}}, {"y", {1, 2}}}}}), TrieErrc::kDuplicate,
               "/descriptors/0: leaves \"x\" and \"y\" have the same token sequence");
  expect_error(payload({{"a", {{"x", {1}}}}, {"a", {{"y", {2}}}}}), TrieErrc::kDuplicate,
               "/descriptors/1/path: duplicate path \"a\"");
  expect_error(R"({"modelId":"m","descriptors":[{"leaves":[]}]})", TrieErrc::kSchema,
               "/descriptors/0: missing \"path\"");

  TriePayloadLimits small;
  small.max_payload_bytes = 64;
  expect_error(payload({{"a", kActions}}), TrieErrc::kTooLarge, "over the limit of 64", small);
  std::string deep(100000, '[');
  expect_error(deep, TrieErrc::kTooDeep, "nests deeper than 16 levels");
  // Brackets inside strings do not count as nesting.
  const std::string bracket_names = payload({{"a", {{"[[[[[[[[[[[[[[[[[[[[[[[[", {1}}}}});
  EXPECT_NO_THROW(build_trie_set(bracket_names, kVocab));
  TriePayloadLimits few;
  few.max_leaves = 3;
  expect_error(payload({{"a", kActions}}), TrieErrc::kLimit, "more than 3 leaves", few);
  few = {};
  few.max_leaf_tokens = 2;
  expect_error(payload({{"a", kActions}}), TrieErrc::kLimit, "over the limit of 2", few);
}

TEST(TokenTriePayload, ParsesNamesTokensAndModelId) {
  auto p = parse_trie_payload(payload({{"action", kActions}}, "llama-3-8b"), kVocab);
  EXPECT_EQ(p.model_id, "llama-3-8b");
  ASSERT_EQ(p.descriptors.size(), 1u);
  EXPECT_EQ(p.descriptors[0].path, "action");
  ASSERT_EQ(p.descriptors[0].leaves.size(), kActions.size());
  for (size_t i = 0; i < kActions.size(); ++i) {
    EXPECT_EQ(p.descriptors[0].leaves[i].name, kActions[i].first);
    EXPECT_EQ(p.descriptors[0].leaves[i].tokens, kActions[i].second);
  }
  auto set = build(kActions);
  EXPECT_EQ(set->tries[0]->n_leaves(), kActions.size());
  EXPECT_EQ(set->tries[0]->max_depth(), 5u);
  EXPECT_GT(set->memory_bytes(), 0u);
}

// ---- cache ----------------------------------------------------------------------------------

TEST(TrieCache, HitReturnsTheSameTrieWithoutParsing) {
  TrieCache cache;
  const std::string json = payload({{"action", kActions}});
  auto a = cache.get(json, kVocab);
  EXPECT_EQ(cache.stats().parses, 1u);
  auto b = cache.get(json, kVocab);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(cache.stats().parses, 1u);
  EXPECT_EQ(cache.stats().hits, 1u);
  // Another vocabulary size is another entry.
  auto c = cache.get(json, kVocab + 1);
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(cache.stats().parses, 2u);
  // Failures are not cached and leave the cache usable.
  EXPECT_THROW(cache.get("{", kVocab), TrieError);
  EXPECT_THROW(cache.get("{", kVocab), TrieError);
  EXPECT_EQ(cache.stats().parses, 4u);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.get(json, kVocab).get(), a.get());
}

TEST(TrieCache, EvictsTheLeastRecentlyUsedAt128) {
  TrieCache cache;
  EXPECT_EQ(cache.capacity(), 128u);
  auto json_n = [](int i) { return payload({{"a", {{"leaf" + std::to_string(i), {i % 900}}}}}); };
  std::vector<std::shared_ptr<const TrieSet>> kept;
  for (int i = 0; i < 128; ++i) kept.push_back(cache.get(json_n(i), kVocab));
  EXPECT_EQ(cache.stats().entries, 128u);
  EXPECT_EQ(cache.stats().evictions, 0u);
  cache.get(json_n(0), kVocab);  // touch 0: now 1 is the least recently used
  cache.get(json_n(128), kVocab);
  EXPECT_EQ(cache.stats().entries, 128u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  const auto parses = cache.stats().parses;
  cache.get(json_n(0), kVocab);  // still cached
  EXPECT_EQ(cache.stats().parses, parses);
  auto again = cache.get(json_n(1), kVocab);  // evicted: parsed again
  EXPECT_EQ(cache.stats().parses, parses + 1);
  // Reference counting: the evicted set we still held is intact and distinct.
  EXPECT_NE(again.get(), kept[1].get());
  EXPECT_EQ(kept[1]->tries[0]->leaf_name(0), "leaf1");
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
}

}  // namespace
}  // namespace lacuna
