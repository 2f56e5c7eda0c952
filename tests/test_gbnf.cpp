// test_gbnf.cpp — the GBNF parser and printer: every construct, every error (line/column),
// every grammar shipped with llama.cpp, and print-then-parse round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"

using namespace lacuna;

namespace {

bool matches(const Grammar& g, std::string_view text) {
  auto cg = CompiledGrammar::compile(g, nullptr);
  GrammarMatcher m(cg);
  return m.accept_string(text) && m.is_completed();
}

bool matches(std::string_view gbnf, std::string_view text) {
  return matches(parse_gbnf(gbnf), text);
}

void expect_error(std::string_view gbnf, size_t line, size_t column, std::string_view needle) {
  try {
    parse_gbnf(gbnf);
    FAIL() << "no error for: " << gbnf;
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.line, line) << e.what();
    EXPECT_EQ(e.column, column) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line " + std::to_string(line) + ", column " +
                                         std::to_string(column)),
              std::string::npos);
  }
}

// The printed rules as a sorted list (printing keeps names; rule order may change).
std::vector<std::string> sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Gbnf, Literals) {
  EXPECT_TRUE(matches(R"(root ::= "abc")", "abc"));
  EXPECT_FALSE(matches(R"(root ::= "abc")", "abd"));
  EXPECT_FALSE(matches(R"(root ::= "abc")", "ab"));
  EXPECT_TRUE(matches(R"(root ::= "")", ""));
  EXPECT_TRUE(matches(R"(root ::= "a" "b")", "ab"));
}

TEST(Gbnf, Escapes) {
  EXPECT_TRUE(matches(R"(root ::= "\n\t\r\"\\")", "\n\t\r\"\\"));
  EXPECT_TRUE(matches(R"(root ::= "\x41\u00e9\U0001F600")", "A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_TRUE(matches(R"(root ::= [\[\]\-])", "-"));
  EXPECT_TRUE(matches(R"(root ::= [\[\]\-])", "]"));
  EXPECT_TRUE(matches("root ::= \"\xC3\xA9\"", "\xC3\xA9"));  // raw UTF-8 in a literal
}

TEST(Gbnf, CharClasses) {
  EXPECT_TRUE(matches("root ::= [a-z0-9_]", "q"));
  EXPECT_TRUE(matches("root ::= [a-z0-9_]", "_"));
  EXPECT_FALSE(matches("root ::= [a-z0-9_]", "Q"));
  EXPECT_TRUE(matches("root ::= [^a-z]", "Q"));
  EXPECT_FALSE(matches("root ::= [^a-z]", "q"));
  EXPECT_TRUE(matches("root ::= [^a-z]", "\xE2\x82\xAC"));
  EXPECT_TRUE(matches("root ::= [a-]", "-"));  // '-' before ']' is literal
  EXPECT_TRUE(matches("root ::= .", "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches("root ::= .", ""));
}

TEST(Gbnf, GroupingAlternationRepetition) {
  const char* g = R"(root ::= ("ab" | "c")* "d"+ "e"? "f"{2} "g"{1,} "h"{1,2})";
  EXPECT_TRUE(matches(g, "dffgh"));
  EXPECT_TRUE(matches(g, "abcabdddeffggghh"));
  EXPECT_FALSE(matches(g, "ffgh"));     // d+ needs one
  EXPECT_FALSE(matches(g, "dfgh"));     // f{2}
  EXPECT_FALSE(matches(g, "dffghhh"));  // h{1,2}
  EXPECT_TRUE(matches("root ::= \"x\"{0}", ""));
  EXPECT_TRUE(matches("root ::= \"x\"{0,3}", "xxx"));
  EXPECT_FALSE(matches("root ::= \"x\"{0,3}", "xxxx"));
  EXPECT_TRUE(matches("root ::= \"x\"{ 2 , 3 }", "xx"));
}

TEST(Gbnf, RulesCommentsAndLines) {
  const char* g =
      "# a comment\n"
      "root ::= greeting \" \" name  # trailing comment\n"
      "\n"
      "greeting ::= (\n"
      "    \"hello\"\n"
      "  | \"hi\"\n"
      ")\n"
      "name ::=\n"
      "  [A-Z] [a-z]*\r\n";
  EXPECT_TRUE(matches(g, "hello Bob"));
  EXPECT_TRUE(matches(g, "hi Al"));
  EXPECT_FALSE(matches(g, "hey Al"));
}

TEST(Gbnf, TokenReferencesParse) {
  Grammar g = parse_gbnf("root ::= <[42]> !<[7]> <|eot_id|> !<|x|>");
  const auto& alt = g.rule(g.root()).alternatives.at(0);
  ASSERT_EQ(alt.size(), 4u);
  EXPECT_EQ(alt[0].kind, GrammarElement::Kind::kToken);
  EXPECT_EQ(alt[0].token, 42);
  EXPECT_EQ(alt[1].kind, GrammarElement::Kind::kTokenNot);
  EXPECT_EQ(alt[1].token, 7);
  EXPECT_EQ(alt[2].token_text, "<|eot_id|>");
  EXPECT_EQ(alt[3].kind, GrammarElement::Kind::kTokenNot);
  EXPECT_EQ(alt[3].token_text, "<|x|>");
  // Byte-level matching never matches a token reference.
  EXPECT_FALSE(matches("root ::= <[42]>", "x"));
}

TEST(Gbnf, RootName) {
  Grammar g = parse_gbnf("start ::= \"a\"\nroot ::= \"b\"", "start");
  EXPECT_EQ(g.rule(g.root()).name, "start");
  EXPECT_TRUE(matches(g, "a"));
}

TEST(Gbnf, Errors) {
  expect_error("root ::= foo", 1, 10, "undefined rule 'foo'");
  expect_error("item ::= \"a\"", 1, 1, "missing root rule 'root'");
  expect_error("", 1, 1, "missing root rule");
  expect_error("root ::= \"a\\q\"", 1, 12, "unknown escape '\\q'");
  expect_error("root ::= \"\\x4\"", 1, 11, "expecting 2 hex digits");
  expect_error("root ::= \"\\u12G4\"", 1, 11, "expecting 4 hex digits");
  expect_error("root ::= \"abc", 1, 10, "unterminated string literal");
  expect_error("root ::= [abc", 1, 10, "unterminated character class");
  expect_error("root ::= [z-a]", 1, 13, "out of order");
  expect_error("root ::= [] \"a\"", 1, 10, "empty character class");
  expect_error("root ::= [^]", 1, 10, "empty character class");
  expect_error("root ::= (\"a\"", 1, 14, "expecting ')'");
  expect_error("root ::= *", 1, 10, "repetition operator without a preceding item");
  expect_error("root ::= \"a\"{", 1, 14, "expecting an integer");
  expect_error("root ::= \"a\"{2", 1, 15, "expecting ',' or '}'");
  expect_error("root ::= \"a\"{2,3", 1, 17, "expecting '}'");
  expect_error("root ::= \"a\"{3,2}", 1, 13, "n < m");
  expect_error("root ::= \"a\"{2001}", 1, 13, "exceeds the limit");
  expect_error("root \"a\"", 1, 6, "expecting '::='");
  expect_error("root ::= \"a\" )", 1, 14, "expecting newline or end");
  expect_error("root ::= \"a\"\n| \"b\"", 2, 1, "expecting a rule name");
  expect_error("root ::= <[12", 1, 14, "expecting ']'");
  expect_error("root ::= <foo", 1, 10, "unterminated token reference");
  expect_error("root ::= !\"a\"", 1, 11, "expecting '<'");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", 2, 1, "defined twice");
  expect_error("root ::= \"a\"\n\n  x ::= y\n", 3, 9, "undefined rule 'y'");
  expect_error("root ::= \"\xFF\"", 1, 11, "invalid UTF-8");
  expect_error(std::string("root ::= \"a\0\"", 14), 1, 12, "NUL character");
}

TEST(Gbnf, LeftRecursionIsRejected) {
  expect_error("root ::= root \"a\" | \"b\"", 1, 1, "left recursion in rule 'root'");
  expect_error("root ::= x\nx ::= y \"a\"\ny ::= \"\" | x", 2, 1, "left recursion");
  // Through a rule that can be empty.
  expect_error("root ::= e root \"a\" | \"b\"\ne ::= \"x\"?", 1, 1, "left recursion");
  // Right recursion is fine.
  EXPECT_TRUE(matches("root ::= \"a\" root | \"b\"", "aaab"));
}

// A character element's ranges: one kept inline, more on the heap; copies and moves keep
// them, and compare equal by content.
TEST(Gbnf, CharRangesCopyMoveAndGrow) {
  CharRanges one{{'a', 'a'}};
  EXPECT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].lo, uint32_t('a'));
  CharRanges many;
  for (uint32_t c = 0; c < 40; ++c) many.push_back({10 * c, 10 * c + 5});
  ASSERT_EQ(many.size(), 40u);
  EXPECT_EQ(many.back().hi, 395u);
  CharRanges copy = many;
  EXPECT_EQ(copy, many);
  copy[3].hi = 1;
  EXPECT_FALSE(copy == many);
  CharRanges moved = std::move(copy);
  EXPECT_EQ(moved.size(), 40u);
  EXPECT_EQ(moved[3].hi, 1u);
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  copy = one;
  EXPECT_EQ(copy, one);
  copy.push_back({'c', 'z'});
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_EQ(copy[0].lo, uint32_t('a'));
  EXPECT_EQ(copy[1].hi, uint32_t('z'));
  one = std::move(many);
  EXPECT_EQ(one.size(), 40u);
  EXPECT_EQ(one[39].lo, 390u);
  // Through the IR: a class of many ranges parses, prints and matches as written.
  const Grammar g = parse_gbnf("root ::= [a-cx-z0-2A-C_] \"!\"");
  EXPECT_EQ(g.rules()[0].alternatives[0][0].ranges.size(), 5u);
  EXPECT_TRUE(matches(parse_gbnf(to_gbnf(g)), "y!"));
  EXPECT_FALSE(matches(g, "d!"));
}

// parse_gbnf checks its grammar once (compile does not check it again); a grammar built
// from rules is still checked, also when the rules came from a parsed one.
TEST(Gbnf, GrammarsBuiltFromRulesAreChecked) {
  const Grammar parsed = parse_gbnf("root ::= x \"a\" | \"b\"\nx ::= \"c\"");
  EXPECT_NO_THROW(parsed.validate());
  std::vector<GrammarRule> rules = parsed.rules();
  rules[1].alternatives[0][0].kind = GrammarElement::Kind::kRuleRef;  // x ::= root
  rules[1].alternatives[0][0].rule = 0;
  const Grammar built(rules, parsed.root());
  try {
    built.validate();
    FAIL() << "no error for a left recursion";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("left recursion"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CompiledGrammar::compile(built, nullptr), GrammarError);
  EXPECT_TRUE(matches(Grammar(parsed.rules(), parsed.root()), "ca"));
}

TEST(Gbnf, RepetitionNestingLimit) {
  // llama.cpp's threshold: the product of nested repetition counts may not exceed 2000.
  expect_error("root ::= (\"a\"{0,100}){0,100}", 1, 22, "nested too deeply");
  EXPECT_NO_THROW(parse_gbnf("root ::= \"a\"{0,2000}"));
  // Bounds above 2000 mean "unbounded", as in llama.cpp.
  EXPECT_TRUE(matches("root ::= \"a\"{1,5000}", std::string(3000, 'a')));
}

TEST(Gbnf, DeepNestingIsAnErrorNotACrash) {
  std::string g = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_THROW(parse_gbnf(g), GrammarError);
}

TEST(Gbnf, PrintParsesToTheSameLanguage) {
  const char* g = R"(root ::= ("ab" | [^"\\\x00-\x1F] | "\u00e9"){1,3} [a-c\-\]]? "\n\"" .)";
  Grammar a = parse_gbnf(g);
  std::string printed = to_gbnf(a);
  Grammar b = parse_gbnf(printed);
  for (const char* s : {"abx\n\"z", "\xC3\xA9\n\"q", "zzz-\n\"!", "ab]\n\"\xE2\x82\xAC", "\n\"a",
                        "abababab\n\"a"}) {
    EXPECT_EQ(matches(a, s), matches(b, s)) << s << "\n" << printed;
  }
  EXPECT_EQ(sorted_lines(printed), sorted_lines(to_gbnf(b)));
}

TEST(Gbnf, EveryLlamaCppGrammarParsesCompilesAndRoundTrips) {
  std::filesystem::path dir = std::filesystem::path(LACUNA_LLAMA_SRC_DIR) / "grammars";
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir;
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gbnf") continue;
    SCOPED_TRACE(entry.path().string());
    std::string text = read_file(entry.path());
    Grammar g = parse_gbnf(text);
    EXPECT_GT(g.rules().size(), 0u);
    EXPECT_NO_THROW(CompiledGrammar::compile(g, nullptr));
    Grammar again = parse_gbnf(to_gbnf(g));
    EXPECT_EQ(sorted_lines(to_gbnf(g)), sorted_lines(to_gbnf(again)));
    ++n;
  }
  EXPECT_GE(n, 8u);
}

TEST(Gbnf, JsonGrammarMatchesDocuments) {
  std::string text =
      read_file(std::filesystem::path(LACUNA_LLAMA_SRC_DIR) / "grammars" / "json.gbnf");
  Grammar g = parse_gbnf(text);
  EXPECT_TRUE(matches(g, R"({"a": [1, 2.5e-3, "x\u00e9\n"], "b": {"c": null, "d": true}})"));
  EXPECT_FALSE(matches(g, R"({"a": [1, 2,]})"));
  EXPECT_FALSE(matches(g, R"({"a": 01})"));
}
