// test_matcher.cpp — GrammarMatcher on small synthetic vocabularies: masks, accept/refuse,
// rollback, fork, reset, completion, stop tokens, forced tokens, jump-forward strings,
// partial UTF-8, token references, and limits on pathological grammars.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/token_index.h"

using namespace lacuna;

namespace {

// Vocabulary: index = token id.
const std::vector<std::string> kPieces = {
    "</s>",  // 0: EOS
    "a",        "b", "ab", "abc", "\"", "{", "}", ":", " ", "1", "12", "x",
    "\xC3",      // 13: first byte of "é" (C3 A9)
    "\xA9",      // 14: continuation completing "é"
    "\xC3\xA9",  // 15: "é"
    "\xA9z",     // 16: continuation + 'z'
    "",          // 17: empty piece: never allowed
    "<|tool|>",  // 18: a control token
    "\x80",      // 19: stray continuation byte
};

std::shared_ptr<const TokenIndex> vocab() {
  static auto idx = TokenIndex::from_pieces(kPieces, {0}, {18});
  return idx;
}

std::set<Token> allowed(GrammarMatcher& m) {
  std::vector<uint32_t> words(bitmask_words(m.n_vocab()));
  m.fill_next_token_bitmask(words.data());
  std::set<Token> out;
  for (size_t t = 0; t < m.n_vocab(); ++t) {
    if (bitmask_test(words.data(), static_cast<Token>(t))) out.insert(static_cast<Token>(t));
  }
  return out;
}

GrammarMatcher matcher(const std::string& gbnf, const CompileOptions& opt = {}) {
  return GrammarMatcher(CompiledGrammar::compile(parse_gbnf(gbnf), vocab(), opt));
}

}  // namespace

TEST(Matcher, MaskAndAccept) {
  auto m = matcher(R"(root ::= "a" "b"+ "c"?)");
  EXPECT_EQ(allowed(m), (std::set<Token>{1, 3, 4}));  // a, ab, abc
  EXPECT_FALSE(m.accept_token(2));                    // "b" refused, state unchanged
  EXPECT_EQ(m.history_size(), 0u);
  EXPECT_TRUE(m.accept_token(1));
  EXPECT_EQ(allowed(m), (std::set<Token>{2}));
  EXPECT_FALSE(m.is_completed());
  EXPECT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.is_completed());
  EXPECT_EQ(allowed(m), (std::set<Token>{0, 2}));  // EOS now allowed
  EXPECT_TRUE(m.accept_token(0));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_TRUE(allowed(m).empty());
  EXPECT_FALSE(m.accept_token(2));
}

TEST(Matcher, RefusesOutOfRangeEmptyAndStrayTokens) {
  auto m = matcher(R"(root ::= [^x]*)");
  EXPECT_FALSE(m.accept_token(-1));
  EXPECT_FALSE(m.accept_token(static_cast<Token>(kPieces.size())));
  EXPECT_FALSE(m.accept_token(17));  // empty piece
  EXPECT_FALSE(m.accept_token(19));  // invalid UTF-8 at a code-point boundary
  auto a = allowed(m);
  EXPECT_EQ(a.count(17), 0u);
  EXPECT_EQ(a.count(19), 0u);
  EXPECT_EQ(a.count(12), 0u);  // "x"
  EXPECT_EQ(a.count(18), 1u);  // the control token's text matches [^x]* (as in llama.cpp)
}

TEST(Matcher, SpecialTokensAsTextCanBeTurnedOff) {
  CompileOptions opt;
  opt.special_tokens_as_text = false;
  auto m = matcher(R"(root ::= [^x]*)", opt);
  EXPECT_EQ(allowed(m).count(18), 0u);
  EXPECT_FALSE(m.accept_token(18));
  auto named = matcher(R"(root ::= "a" <|tool|>)", opt);
  EXPECT_TRUE(named.accept_token(1));
  EXPECT_EQ(allowed(named), (std::set<Token>{18}));
}

TEST(Matcher, TokenReferences) {
  auto m = matcher(R"(root ::= <[6]> !<[12]> "}")");
  EXPECT_EQ(allowed(m), (std::set<Token>{6}));
  EXPECT_TRUE(m.accept_token(6));
  auto a = allowed(m);
  EXPECT_EQ(a.count(12), 0u);  // excluded
  EXPECT_EQ(a.count(0), 0u);   // stop tokens are never matched by a token reference
  EXPECT_EQ(a.count(1), 1u);
  EXPECT_EQ(a.count(13), 0u);      // no full code point
  EXPECT_TRUE(m.accept_token(4));  // "abc" as one token
  EXPECT_EQ(allowed(m), (std::set<Token>{7}));
  // A token reference matches only a whole token at a token boundary: "a" then <[2]>
  // does not allow token "ab".
  auto n = matcher(R"(root ::= "a" <[2]>)");
  EXPECT_EQ(allowed(n), (std::set<Token>{1}));
  EXPECT_TRUE(n.accept_token(1));
  EXPECT_EQ(allowed(n), (std::set<Token>{2}));
  // By text: resolved against the vocabulary at compile time.
  auto t = matcher(R"(root ::= <|tool|>)");
  EXPECT_EQ(allowed(t), (std::set<Token>{18}));
  EXPECT_THROW(CompiledGrammar::compile(parse_gbnf("root ::= <|nope|>"), vocab()), GrammarError);
  EXPECT_THROW(CompiledGrammar::compile(parse_gbnf("root ::= <[999]>"), vocab()), GrammarError);
}

TEST(Matcher, PartialUtf8AcrossTokens) {
  auto m = matcher(R"(root ::= "é" "z"?)");
  auto a = allowed(m);
  EXPECT_TRUE(a.count(13));  // "\xC3": a prefix of é
  EXPECT_TRUE(a.count(15));  // "é"
  EXPECT_FALSE(a.count(14));
  EXPECT_TRUE(m.accept_token(13));
  EXPECT_FALSE(m.is_completed());
  // Only continuation tokens can follow; EOS is not allowed inside a code point.
  EXPECT_EQ(allowed(m), (std::set<Token>{14, 16}));
  auto f = m.fork();
  EXPECT_TRUE(m.accept_token(16));  // completes é, then "z"
  EXPECT_TRUE(m.is_completed());
  EXPECT_TRUE(f->accept_token(14));
  EXPECT_TRUE(f->is_completed());
  EXPECT_TRUE(allowed(m).count(0));
}

TEST(Matcher, PartialUtf8NegatedClassIsConservativeLikeLlamaCpp) {
  // [^é] with a pending C3 byte: some completions (è) match, but llama.cpp refuses a
  // partial sequence whose completion range touches an excluded code point; so do we.
  auto m = matcher(R"(root ::= [^é])");
  EXPECT_FALSE(allowed(m).count(13));
  auto p = matcher(R"(root ::= [^a])");
  EXPECT_TRUE(allowed(p).count(13));
}

TEST(Matcher, RollbackForkReset) {
  auto m = matcher(R"(root ::= "{" ("a" | "b")* "}")");
  ASSERT_TRUE(m.accept_token(6));
  auto after_brace = allowed(m);
  ASSERT_TRUE(m.accept_token(1));
  ASSERT_TRUE(m.accept_token(3));
  EXPECT_EQ(m.history_size(), 3u);
  auto f = m.fork();
  EXPECT_TRUE(m.rollback(2));
  EXPECT_EQ(allowed(m), after_brace);
  EXPECT_FALSE(m.rollback(5));
  EXPECT_EQ(m.history_size(), 1u);
  EXPECT_TRUE(f->accept_token(7));
  EXPECT_TRUE(f->is_completed());
  EXPECT_FALSE(m.is_completed());
  m.reset();
  EXPECT_EQ(m.history_size(), 0u);
  EXPECT_EQ(allowed(m), (std::set<Token>{6}));
  EXPECT_TRUE(f->rollback(1));
  EXPECT_FALSE(f->is_completed());
}

TEST(Matcher, ForcedTokensAndJumpForward) {
  auto m = matcher(R"(root ::= "{" "\"" "x" "\"" ":" [0-9]+ "}")");
  EXPECT_EQ(m.jump_forward_string(), "{\"x\":");
  std::vector<Token> forced;
  EXPECT_EQ(m.forced_tokens(forced), 5u);
  EXPECT_EQ(forced, (std::vector<Token>{6, 5, 12, 5, 8}));
  EXPECT_EQ(m.history_size(), 0u);  // forced_tokens does not move the matcher
  for (Token t : forced) ASSERT_TRUE(m.accept_token(t));
  EXPECT_EQ(m.jump_forward_string(), "");
  forced.clear();
  EXPECT_EQ(m.forced_tokens(forced), 0u);
  ASSERT_TRUE(m.accept_token(10));
  ASSERT_TRUE(m.accept_token(7));
  forced.clear();
  EXPECT_EQ(m.forced_tokens(forced), 1u);  // only EOS remains
  EXPECT_EQ(forced, (std::vector<Token>{0}));
}

TEST(Matcher, AcceptStringWithoutVocabulary) {
  auto cg = CompiledGrammar::compile(parse_gbnf(R"(root ::= "é" [0-9]{2,3} "!")"), nullptr);
  GrammarMatcher m(cg);
  EXPECT_TRUE(m.accept_string("\xC3"));  // split inside a code point
  EXPECT_TRUE(
      m.accept_string("\xA9"
                      "12"));
  EXPECT_FALSE(m.accept_string("x"));
  EXPECT_TRUE(m.accept_string("3!"));
  EXPECT_TRUE(m.is_completed());
  EXPECT_FALSE(m.accept_string("!"));
  EXPECT_TRUE(m.rollback(1));
  EXPECT_FALSE(m.is_completed());
  EXPECT_FALSE(m.accept_string("\xFF"));  // invalid UTF-8
  std::vector<uint32_t> words(1);
  EXPECT_THROW(m.fill_next_token_bitmask(words.data()), std::logic_error);
}

TEST(Matcher, EmptyLanguageStartAllowsOnlyEos) {
  auto m = matcher(R"(root ::= "")");
  EXPECT_TRUE(m.is_completed());
  EXPECT_EQ(allowed(m), (std::set<Token>{0}));
}

TEST(Matcher, PathologicalGrammarsFinishOrFailClearly) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  // A long chain of optionals.
  std::string chain = "root ::=";
  for (int i = 0; i < 300; ++i) chain += " \"a\"?";
  auto m = matcher(chain);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.is_completed());
  // x{0,2000}
  auto r = matcher(R"(root ::= "a"{0,2000})");
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(r.accept_token(1));  // "a"
  // Highly ambiguous alternation.
  auto amb = matcher(R"(root ::= ("a" | "a" | "ab" | "a" "b")* )");
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(amb.accept_token(i % 2 ? 3 : 1));
  // Deep nesting.
  std::string deep = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')');
  auto d = matcher(deep);
  EXPECT_TRUE(d.accept_token(1));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30.0);
  // Limits are enforced with a clear error.
  CompileOptions tight;
  tight.max_positions = 100;
  EXPECT_THROW(matcher(chain, tight), GrammarLimitError);
  CompileOptions few_contexts;
  few_contexts.max_contexts = 5;
  EXPECT_THROW(matcher(R"(root ::= ("a" | "b" "c" | "x" "y" "z")+ "1")", few_contexts),
               GrammarLimitError);
  CompileOptions few_stacks;
  few_stacks.max_stacks = 2;
  auto s = matcher(R"(root ::= ("a" | "ab")* ("b" | "bb")*)", few_stacks);
  EXPECT_THROW(
      {
        for (int i = 0; i < 10; ++i) s.accept_token(i % 2 ? 2 : 1);
      },
      GrammarLimitError);
}

TEST(TokenIndexSynthetic, DecodesLikeLlamaCpp) {
  auto idx = vocab();
  EXPECT_EQ(idx->n_vocab(), kPieces.size());
  EXPECT_TRUE(idx->is_eog(0));
  EXPECT_TRUE(idx->is_control(18));
  EXPECT_EQ(idx->kind(17), TokenIndex::Kind::kNever);
  EXPECT_EQ(idx->kind(19), TokenIndex::Kind::kInvalid);
  EXPECT_EQ(idx->kind(13), TokenIndex::Kind::kText);
  EXPECT_EQ(idx->partial(13).n_remain, 1);
  size_t n;
  const uint32_t* cps = idx->code_points(15, &n);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(cps[0], 0xE9u);
  EXPECT_EQ(idx->token_bytes(4), "abc");
  // Every token's code points are its bytes decoded; those of the trie's tokens lie one
  // after another in trie order (the walks read them along the trie).
  for (size_t t = 0; t < idx->n_vocab(); ++t) {
    const auto kind = idx->kind(static_cast<Token>(t));
    std::vector<uint32_t> want;
    if (kind == TokenIndex::Kind::kText || kind == TokenIndex::Kind::kInvalid)
      decode_utf8_like_llama(idx->token_bytes(static_cast<Token>(t)), {}, want);
    size_t nt;
    const uint32_t* got = idx->code_points(static_cast<Token>(t), &nt);
    EXPECT_EQ(std::vector<uint32_t>(got, got + nt), want) << "token " << t;
  }
  const auto& tt = idx->trie_tokens();
  for (size_t k = 0; k + 1 < tt.size(); ++k) {
    size_t n0, n1;
    const uint32_t* c0 = idx->code_points(tt[k].id, &n0);
    const uint32_t* c1 = idx->code_points(tt[k + 1].id, &n1);
    EXPECT_EQ(c0 + n0, c1) << "trie tokens " << k << " and " << k + 1;
  }
  EXPECT_EQ(idx->find_piece("<|tool|>"), std::optional<Token>(18));
  EXPECT_FALSE(idx->find_piece("zzz").has_value());
  EXPECT_THROW(idx->token_bytes(99), std::out_of_range);
  // Continuation-first tokens are listed for the partial-sequence path.
  const auto& cont = idx->continuation_tokens();
  EXPECT_EQ(std::set<Token>(cont.begin(), cont.end()), (std::set<Token>{14, 16, 19}));
  // Subtree code points: the root's descendants include 'a', 'x' and a non-ASCII code point.
  const auto& sc = idx->subtree_chars().at(0);
  EXPECT_TRUE((sc.ascii[1] >> ('a' - 64)) & 1u);
  EXPECT_TRUE((sc.ascii[1] >> ('x' - 64)) & 1u);
  EXPECT_FALSE((sc.ascii[1] >> ('z' - 64)) & 1u);  // only in an invalid token, not in the trie
  EXPECT_TRUE(sc.non_ascii);
  std::vector<uint32_t> out;
  PartialUtf8 p = decode_utf8_like_llama("\xE2\x82", {}, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(p.n_remain, 1);
  p = decode_utf8_like_llama(
      "\xAC"
      "a",
      p, out);
  EXPECT_EQ(out, (std::vector<uint32_t>{0x20AC, 'a'}));
  EXPECT_EQ(p.n_remain, 0);
  out.clear();
  p = decode_utf8_like_llama("a", {0x2, 1}, out);  // 'a' is no continuation byte
  EXPECT_EQ(p.n_remain, -1);
  EXPECT_TRUE(out.empty());
}
