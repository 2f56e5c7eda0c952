// test_kv_diff.cpp — chained block hashes, the token edit diff (append fast path, middle
// edits, random edit scripts that must reproduce the new list) and KvConfig from LACUNA_*.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "lacuna/kv.h"

using lacuna::Token;
using namespace lacuna::kv;

namespace {

TEST(KvBlockHash, ChainsThePrefix) {
  const std::vector<Token> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<Token> b = {9, 9, 9, 9, 5, 6, 7, 8};  // same second block, other prefix
  const BlockHash root = root_hash(4);
  const auto ha = block_hashes(a, 4, root);
  const auto hb = block_hashes(b, 4, root);
  ASSERT_EQ(ha.size(), 2u);  // full blocks only
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_NE(ha[1], hb[1]) << "a block's hash depends on everything before it";
  EXPECT_EQ(ha[0], chain_block(root, std::vector<Token>{1, 2, 3, 4}));
  EXPECT_EQ(ha[1], chain_block(ha[0], std::vector<Token>{5, 6, 7, 8}));
  EXPECT_EQ(block_hashes(a, 4, root), ha) << "deterministic";
  EXPECT_NE(root_hash(4), root_hash(8));
  EXPECT_NE(root_hash(4, 1), root_hash(4, 2));
  EXPECT_NE(block_hashes(a, 4, root_hash(4, 1))[0], ha[0]) << "the seed separates models";
  EXPECT_THROW(block_hashes(a, 0, root), std::invalid_argument);
  EXPECT_EQ(common_prefix(a, b), 0u);
  EXPECT_EQ(common_prefix(a, std::vector<Token>{1, 2, 3, 0}), 3u);
}

// Checks that `spans` is a valid script from a to b: ordered, covering both lists, keeps equal.
void expect_valid(const std::vector<Token>& a, const std::vector<Token>& b,
                  const std::vector<EditSpan>& spans) {
  size_t oi = 0, ni = 0;
  for (const auto& s : spans) {
    ASSERT_EQ(s.old_begin, oi);
    ASSERT_EQ(s.new_begin, ni);
    switch (s.kind) {
      case SpanKind::keep:
        ASSERT_EQ(s.old_len, s.new_len);
        ASSERT_GT(s.old_len, 0u);
        for (size_t k = 0; k < s.old_len; ++k) ASSERT_EQ(a[oi + k], b[ni + k]);
        break;
      case SpanKind::insert:
        ASSERT_TRUE(s.old_len == 0 && s.new_len > 0);
        break;
      case SpanKind::erase:
        ASSERT_TRUE(s.old_len > 0 && s.new_len == 0);
        break;
      case SpanKind::replace:
        ASSERT_TRUE(s.old_len > 0 && s.new_len > 0);
        break;
    }
    oi += s.old_len;
    ni += s.new_len;
  }
  EXPECT_EQ(oi, a.size());
  EXPECT_EQ(ni, b.size());
}

size_t kept(const std::vector<EditSpan>& spans) {
  size_t k = 0;
  for (const auto& s : spans) k += s.kind == SpanKind::keep ? s.old_len : 0;
  return k;
}

std::vector<Token> iota_tokens(size_t n, Token start = 1000) {
  std::vector<Token> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = start + static_cast<Token>(i);
  return t;
}

TEST(KvDiff, AppendTruncateAndIdentity) {
  const auto a = iota_tokens(100);
  auto b = a;
  b.push_back(7);
  b.push_back(8);
  auto s = diff_tokens(a, b, 16);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], (EditSpan{SpanKind::keep, 0, 100, 0, 100}));
  EXPECT_EQ(s[1], (EditSpan{SpanKind::insert, 100, 0, 100, 2}));
  s = diff_tokens(b, a, 16);
  EXPECT_EQ(s[1], (EditSpan{SpanKind::erase, 100, 2, 100, 0}));
  s = diff_tokens(a, a, 16);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].kind, SpanKind::keep);
  EXPECT_TRUE(diff_tokens({}, {}, 16).empty());
  s = diff_tokens({}, a, 16);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].kind, SpanKind::insert);
}

TEST(KvDiff, MiddleEditsKeepTheRest) {
  const auto a = iota_tokens(2000);
  // Replace 10 tokens in the middle.
  auto b = a;
  for (size_t i = 1000; i < 1010; ++i) b[i] = 5;
  auto s = diff_tokens(a, b, 64);
  expect_valid(a, b, s);
  EXPECT_EQ(kept(s), 1990u);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1], (EditSpan{SpanKind::replace, 1000, 10, 1000, 10}));
  // Insert 50 tokens and delete 30 elsewhere: kept spans move.
  b = a;
  b.insert(b.begin() + 500, 50, 3);
  b.erase(b.begin() + 1500, b.begin() + 1530);
  s = diff_tokens(a, b, 64);
  expect_valid(a, b, s);
  EXPECT_EQ(kept(s), 1970u);
  // A block moved from the end to the front is found once, in order.
  b.assign(a.begin() + 1900, a.end());
  b.insert(b.end(), a.begin(), a.begin() + 1900);
  s = diff_tokens(a, b, 64);
  expect_valid(a, b, s);
  EXPECT_GE(kept(s), 1800u);
}

TEST(KvDiff, RandomEditScriptsAreValid) {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<Token> a(rng() % 400);
    for (auto& t : a) t = static_cast<Token>(rng() % 50);  // small alphabet: many repeats
    auto b = a;
    const int n_edits = static_cast<int>(rng() % 5);
    for (int e = 0; e < n_edits; ++e) {
      const size_t at = b.empty() ? 0 : rng() % b.size();
      switch (rng() % 3) {
        case 0:
          b.insert(b.begin() + static_cast<long>(at), rng() % 20, static_cast<Token>(rng() % 50));
          break;
        case 1:
          b.erase(b.begin() + static_cast<long>(at),
                  b.begin() + static_cast<long>(std::min(b.size(), at + rng() % 20)));
          break;
        default:
          if (!b.empty()) b[at] = static_cast<Token>(rng() % 50);
      }
    }
    const uint32_t block = 1 + rng() % 16;
    expect_valid(a, b, diff_tokens(a, b, block));
    if (HasFatalFailure()) return;
  }
}

TEST(KvConfig, FromEnvironment) {
  ::setenv("LACUNA_PREFIX_CACHE", "0", 1);
  ::setenv("LACUNA_KV_BLOCK", "32", 1);
  ::setenv("LACUNA_PERSIST_DIR", "/tmp/x", 1);
  ::setenv("LACUNA_EDIT_REUSE", "on", 1);
  ::setenv("LACUNA_PERSIST_MAX_BYTES", "1000", 1);
  KvConfig c = KvConfig::from_env();
  EXPECT_FALSE(c.prefix_cache);
  EXPECT_EQ(c.block_size, 32u);
  EXPECT_EQ(c.persist_dir, "/tmp/x");
  EXPECT_TRUE(c.edit_reuse);
  EXPECT_EQ(c.persist_max_bytes, 1000u);
  ::setenv("LACUNA_KV_BLOCK", "0", 1);
  EXPECT_THROW(KvConfig::from_env(), KvError);
  ::setenv("LACUNA_KV_BLOCK", "12abc", 1);
  EXPECT_THROW(KvConfig::from_env(), KvError);
  ::setenv("LACUNA_KV_BLOCK", "-4", 1);
  EXPECT_THROW(KvConfig::from_env(), KvError);
  ::unsetenv("LACUNA_KV_BLOCK");
  ::setenv("LACUNA_EDIT_REUSE", "maybe", 1);
  try {
    KvConfig::from_env();
    FAIL() << "expected KvError";
  } catch (const KvError& e) {
    EXPECT_NE(std::string(e.what()).find("LACUNA_EDIT_REUSE"), std::string::npos);
  }
  for (const char* v : {"LACUNA_PREFIX_CACHE", "LACUNA_PERSIST_DIR", "LACUNA_EDIT_REUSE",
                        "LACUNA_PERSIST_MAX_BYTES"}) {
    ::unsetenv(v);
  }
  c = KvConfig::from_env();
  EXPECT_TRUE(c.prefix_cache);
  EXPECT_FALSE(c.edit_reuse);
  EXPECT_EQ(c.block_size, 64u);
}

TEST(KvStats, AddAndJson) {
  KvStats a, b;
  a.tokens_reused = 5;
  b.tokens_reused = 7;
  b.bytes_loaded = 3;
  a += b;
  EXPECT_EQ(a.tokens_reused, 12u);
  EXPECT_EQ(a.bytes_loaded, 3u);
  const std::string j = a.to_json();
  EXPECT_NE(j.find("\"tokens_reused\":12"), std::string::npos) << j;
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.back(), '}');
}

}  // namespace
