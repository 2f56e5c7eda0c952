// test_regex.cpp — ECMAScript regex → GBNF: full-match semantics checked against
// std::regex (ECMAScript grammar) on generated strings, search semantics, errors.
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/regex_convert.h"
#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/regex.h"

namespace {

class Re {
 public:
  explicit Re(const std::string& pattern, lacuna::RegexOptions opt = {}) {
    gbnf_ = lacuna::regex_to_gbnf(pattern, opt);
    compiled_ = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf_), nullptr);
  }
  bool accepts(const std::string& text) const {
    lacuna::GrammarMatcher m(compiled_);
    return m.accept_string(text) && m.is_completed();
  }
  const std::string& gbnf() const { return gbnf_; }

 private:
  std::string gbnf_;
  std::shared_ptr<const lacuna::CompiledGrammar> compiled_;
};

TEST(Regex, AgreesWithStdRegexOnRandomStrings) {
  const std::vector<std::string> patterns = {
      "a(b|c)*d",   "[a-c]{2,3}x?",       "(ab|a)(bc|c)", "\\d+(\\.\\d{1,2})?",
      "[^ab]*b",    "(a|b)*abb",          "x{3}|y{0,2}",  "\\w\\W\\s\\S",
      "[\\d\\-x]+", "(?:ab)+|c*",         "a.c",          "[A-Fa-f0-9]{2}(:[0-9a-f]{2})*",
      "(a?){2}b",   "\\x41\\u0042[\\t ]", "a{2,}",        "((a|b)c)?d+",
  };
  const std::string alphabet = "abcdxy019.-: \tABW_";
  std::mt19937 rng(42);
  for (const std::string& p : patterns) {
    Re re(p);
    std::regex oracle(p, std::regex::ECMAScript);
    for (int i = 0; i < 400; ++i) {
      std::string s;
      size_t len = rng() % 7;
      for (size_t k = 0; k < len; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
      EXPECT_EQ(re.accepts(s), std::regex_match(s, oracle))
          << "pattern " << p << " on '" << s << "'\n"
          << re.gbnf();
    }
  }
}

TEST(Regex, KnownMatchesAndUnicode) {
  Re re("^[α-ω]+-\\u00e9\\d$");
  EXPECT_TRUE(re.accepts("αβγ-é7"));
  EXPECT_FALSE(re.accepts("abc-é7"));
  Re dot("a.b");
  EXPECT_TRUE(dot.accepts("a€b"));
  EXPECT_FALSE(dot.accepts("a\nb"));
  Re space("\\s");
  EXPECT_TRUE(space.accepts("\u00a0"));
  EXPECT_TRUE(space.accepts("\u3000"));
  EXPECT_FALSE(space.accepts("x"));
}

TEST(Regex, SearchSemanticsAndAnchors) {
  lacuna::RegexOptions search;
  search.search = true;
  Re un("ab+", search);
  EXPECT_TRUE(un.accepts("xxabbz"));
  EXPECT_TRUE(un.accepts("ab"));
  EXPECT_FALSE(un.accepts("ba"));
  Re start("^ab", search);
  EXPECT_TRUE(start.accepts("abzz"));
  EXPECT_FALSE(start.accepts("zab"));
  Re end("ab$", search);
  EXPECT_TRUE(end.accepts("zzab"));
  EXPECT_FALSE(end.accepts("abz"));
  Re alt("^a$|b", search);
  EXPECT_TRUE(alt.accepts("a"));
  EXPECT_TRUE(alt.accepts("xbx"));
  EXPECT_FALSE(alt.accepts("ax"));
  Re grouped("^(foo|bar)$", search);
  EXPECT_TRUE(grouped.accepts("bar"));
  EXPECT_FALSE(grouped.accepts("bars"));
  Re mixed("(^a|b$)", search);
  EXPECT_TRUE(mixed.accepts("az"));
  EXPECT_TRUE(mixed.accepts("zb"));
  EXPECT_FALSE(mixed.accepts("za"));
}

// Search semantics against std::regex_search, with repetitions at the unanchored ends
// (trimmed to their minimum: `.*` next to them absorbs the rest) and inside.
TEST(Regex, SearchAgreesWithStdRegexSearch) {
  const std::vector<std::string> patterns = {"[a-c][a-c0-9]*",
                                             "[ab:.-]{1,25}",
                                             "^a+",
                                             "b{2,5}$",
                                             "(ab*){1,3}",
                                             "x*",
                                             "^(ab)+c*",
                                             "c?a{2,}b*",
                                             "(a|bc)+d?",
                                             "^a*b{0,2}$",
                                             "(a*b){2,3}",
                                             "ab|ba|cd0",
                                             "^ab|b:|c.$|d",
                                             "a|",
                                             "^$|b",
                                             "^a|b|c$|d|",
                                             "ab|a0|ba|a",
                                             "a.b|a:|a|ac$"};
  const std::string alphabet = "abcd0:.- ";
  std::mt19937 rng(7);
  lacuna::RegexOptions search;
  search.search = true;
  for (const std::string& p : patterns) {
    Re re(p, search);
    std::regex oracle(p, std::regex::ECMAScript);
    for (int i = 0; i < 400; ++i) {
      std::string str;
      const size_t len = rng() % 8;
      for (size_t k = 0; k < len; ++k) str.push_back(alphabet[rng() % alphabet.size()]);
      EXPECT_EQ(re.accepts(str), std::regex_search(str, oracle))
          << "pattern " << p << " on '" << str << "'\n"
          << re.gbnf();
    }
  }
  // What the trim leaves: one character of the class between the two `.*`.
  EXPECT_EQ(Re("[a-c][a-c0-9]*", search).gbnf().find("]*"), std::string::npos);
  EXPECT_EQ(Re("[ab:.-]{1,25}", search).gbnf().find("25"), std::string::npos);
  // Searched-for alternatives that start with the same code point share their free ends:
  // one search for any of the names, `.* (x1 | x2 | x3) .*`, not one search per name; names
  // that start apart keep a search each.
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string names = Re("INT_TICK|INT_M1|INT_M10|INT_H1", search).gbnf();
  EXPECT_EQ(count(names, "re-any*"), 2u) << names;
  const std::string apart = Re("alpha|beta|gamma", search).gbnf();
  EXPECT_EQ(count(apart, "re-any*"), 6u) << apart;
  // dev .* | .* (ab1 | ab2) .* | .* rc .* | .* stable
  const std::string mixed = Re("^dev|ab1|ab2|rc|stable$", search).gbnf();
  EXPECT_EQ(count(mixed, "re-any*"), 6u) << mixed;
}

// The key automaton (used for patternProperties, bounded patterns and raw strings) sorts
// strings into the classes std::regex_search gives them, and is minimal: where the least
// number of states is known by hand, it has that number.
TEST(Regex, KeyClassifierIsExactAndMinimal) {
  using lacuna::regex_detail::KeyClassifier;
  lacuna::RegexOptions search;
  search.search = true;
  const std::vector<std::string> patterns = {"^a", "b$", "^(?:\\S+\\s+){0,3}\\S+$", "c{2}"};
  const std::vector<std::string> names = {"ab", "a b", ""};
  KeyClassifier k(patterns, names, search, 512);
  std::vector<std::regex> oracles;
  for (const std::string& p : patterns) oracles.emplace_back(p, std::regex::ECMAScript);
  const std::string alphabet = "abc \t";
  std::mt19937 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string str;
    const size_t len = rng() % 12;
    for (size_t j = 0; j < len; ++j) str.push_back(alphabet[rng() % alphabet.size()]);
    const KeyClassifier::Signature& sig = k.signatures()[k.classify(str)];
    std::vector<size_t> want;
    for (size_t p = 0; p < patterns.size(); ++p) {
      if (std::regex_search(str, oracles[p])) want.push_back(p);
    }
    EXPECT_EQ(sig.patterns, want) << "'" << str << "'";
    int name = -1;
    for (size_t j = 0; j < names.size(); ++j) {
      if (str == names[j]) name = static_cast<int>(j);
    }
    EXPECT_EQ(sig.name, name) << "'" << str << "'";
  }
  auto states = [&](const std::string& p) {
    return KeyClassifier({p}, {}, search, 512).state_count();
  };
  EXPECT_EQ(states("^a{0,5}$"), 7u);     // 0..5 a's read, and the dead state
  EXPECT_EQ(states("^(ab|cb)$"), 4u);    // after a and after c are one state
  EXPECT_EQ(states("ab"), 3u);           // nothing yet, an a last, found
  EXPECT_EQ(states("^(a|b)*abb$"), 5u);  // the textbook example: 4 and the dead state
}

// An empty class (`[]`) never matches: an alternative made of one is dropped rather than read
// as "", and a repetition of one matches only "" (fuzz_regex found `(?:[]|x)*` emitted as a
// repetition of a group that matches "", which the GBNF parser refuses).
TEST(Regex, EmptyClassesNeverMatch) {
  Re alt("(?:[]|a)b");
  EXPECT_TRUE(alt.accepts("ab"));
  EXPECT_FALSE(alt.accepts("b"));
  Re star("(?:[]|ab)*c");
  EXPECT_TRUE(star.accepts("c"));
  EXPECT_TRUE(star.accepts("ababc"));
  EXPECT_FALSE(star.accepts("ac"));
  Re fuzzed("^(?:[]|{\\s]Ab)*c{1,");
  EXPECT_TRUE(fuzzed.accepts("c{1,"));
  EXPECT_TRUE(fuzzed.accepts("{ ]Ab{\t]Abc{1,"));
  EXPECT_FALSE(fuzzed.accepts("{]Abc{1,"));
  Re zero("a[]*b");
  EXPECT_TRUE(zero.accepts("ab"));
  Re plus("[]+|x");
  EXPECT_TRUE(plus.accepts("x"));
  EXPECT_FALSE(plus.accepts(""));
  EXPECT_THROW(Re("a[]|(?:[]|[])+"), lacuna::RegexError);  // no branch can match
}

TEST(Regex, ErrorsCarryPositions) {
  auto pos = [](const std::string& p) -> long {
    try {
      lacuna::regex_to_gbnf(p);
    } catch (const lacuna::RegexError& e) {
      return static_cast<long>(e.position);
    }
    return -1;
  };
  EXPECT_EQ(pos("ab(c"), 4);
  EXPECT_EQ(pos("a)"), 1);
  EXPECT_EQ(pos("[z-a]"), 2);
  EXPECT_EQ(pos("*a"), 0);
  EXPECT_EQ(pos("a(?=b)"), 1);
  EXPECT_EQ(pos("(a)\\1"), 4);
  EXPECT_EQ(pos("x{5,2}"), 1);
  EXPECT_GE(pos("[abc"), 0);
  EXPECT_GE(pos("\\p{L}"), 0);
  EXPECT_GE(pos("a\\"), 0);
  EXPECT_GE(pos("a^b"), 0);
  EXPECT_GE(pos(std::string("\xff")), 0);
}

TEST(Regex, RepetitionLimits) {
  EXPECT_THROW(lacuna::regex_to_gbnf("a{5000}"), lacuna::RegexError);
  std::vector<std::string> warnings;
  lacuna::RegexOptions opt;
  opt.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  Re wide("a{2,100000}", opt);
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(wide.accepts(std::string(3000, 'a')));
  EXPECT_FALSE(wide.accepts("a"));
}

}  // namespace
