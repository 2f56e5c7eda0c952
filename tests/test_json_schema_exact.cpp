// test_json_schema_exact.cpp — JSON Schema keywords made exact in the grammar: patternProperties
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// key classes, oneOf exclusivity, dependencies, not, if/then/else (accepted and refused
// documents, strict-mode errors and lenient warnings).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "schema_test_support.h"

namespace {

using lacuna::SchemaOptions;

using lacuna::testing::compact;
using lacuna::testing::expect_language;
using lacuna::testing::Lang;

// The keyword a strict conversion fails on ("" when it succeeds).
std::string strict_error_keyword(const std::string& schema) {
  try {
    lacuna::json_schema_to_gbnf(schema, compact(true));
  } catch (const lacuna::SchemaError& e) {
    return e.keyword.empty() ? "(none)" : e.keyword;
  }
  return "";
}

// ---- patternProperties -------------------------------------------------------------------

TEST(JsonSchemaPatternProperties, KeyMatchingAPatternCannotTakeAdditionalProperties) {
  Lang l(R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}}})");
  expect_language(l, {R"({"x-a":1,"y":"s"})", R"({"y":[]})", "{}", R"({"x":"s"})"},
                  {R"({"x-a":"s"})", R"({"y":1,"x-b":null})"});
  EXPECT_TRUE(l.warnings().empty());
  // Search semantics: \w matches any key holding a word character.
  Lang w(R"({"type":"object","patternProperties":{"\\w":{"type":"object"}}})");
  expect_language(w, {R"({"a1":{}})", R"({"-":1})", R"({"--":"s"})"},
                  {R"({"a":""})", R"({"-a-":1})"});
  // The empty pattern matches every key: additionalProperties never applies.
  Lang all(R"({"type":"object","patternProperties":{"":{"type":"string"}},
               "additionalProperties":{"type":"integer"}})");
  expect_language(all, {R"({"k":"s"})", R"({"":"s"})"}, {R"({"k":1})"});
}

TEST(JsonSchemaPatternProperties, KeyMatchingSeveralPatternsSatisfiesAll) {
  Lang l(R"({"type":"object","patternProperties":{"^a":{"type":"integer"},"b$":{"minimum":5}},
             "additionalProperties":false})");
  expect_language(l, {R"({"ab":7})", R"({"a":1})", R"({"xb":"s"})", R"({"b":9})"},
                  {R"({"ab":3})", R"({"ab":"s"})", R"({"xb":1})", R"({"x":1})"});
}

TEST(JsonSchemaPatternProperties, NamedKeysAlsoSatisfyMatchingPatterns) {
  Lang l(R"({"type":"object","properties":{"xa":{"type":"integer"}},
             "patternProperties":{"^x":{"minimum":10}},"additionalProperties":false})");
  expect_language(l, {R"({"xa":12})", R"({"xb":35.5})", "{}"},
                  {R"({"xa":3})", R"({"xb":1})", R"({"y":12})"});
  // A required key without a property schema takes the matching pattern's schema.
  Lang r(R"({"type":"object","required":["x1"],"patternProperties":{"^x":{"type":"string"}}})");
  expect_language(r, {R"({"x1":"s"})", R"({"x1":"s","q":1})"}, {R"({"x1":1})", "{}"});
}

TEST(JsonSchemaPatternProperties, HugeAutomatonFallsBackWithAWarning) {
  // (a|b)*a(a|b){12} needs 2^13 DFA states: too many, so the approximation is used.
  const std::string schema =
      R"({"type":"object","patternProperties":{"(a|b)*a(a|b){12}$":{"type":"integer"}}})";
  auto t0 = std::chrono::steady_clock::now();
  Lang l(schema);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_FALSE(l.warnings().empty());
  EXPECT_EQ(l.warnings()[0], "patternProperties");
  EXPECT_TRUE(l.accepts(R"({"aaaaaaaaaaaaa":1})"));
  EXPECT_EQ(strict_error_keyword(schema), "patternProperties");
}

// ---- oneOf -------------------------------------------------------------------------------

TEST(JsonSchemaOneOf, RequiredOnlyBranchesAreExclusive) {
  Lang l(R"({"type":"object","properties":{"a":{},"b":{}},
             "oneOf":[{"required":["a"]},{"required":["b"]}]})");
  expect_language(l, {R"({"a":1})", R"({"b":1})", R"({"b":1,"c":2})"},
                  {R"({"a":1,"b":2})", "{}", R"({"c":1})"});
  EXPECT_TRUE(l.warnings().empty());
  // A branch requiring two keys is excluded by leaving out either of them.
  Lang two(R"({"type":"object","oneOf":[{"required":["r"]},{"required":["l","w"]}]})");
  expect_language(two, {R"({"r":1})", R"({"l":1,"w":2})", R"({"r":1,"l":1})", R"({"w":1,"r":1})"},
                  {R"({"r":1,"l":1,"w":1})", R"({"l":1})", "{}"});
  // A branch whose required keys include another branch's can never be the only match.
  Lang sub(R"({"type":"object","oneOf":[{"required":["a"]},{"required":["a","b"]}]})");
  expect_language(sub, {R"({"a":1})"}, {R"({"a":1,"b":1})", R"({"b":1})"});
}

TEST(JsonSchemaOneOf, DisjointBranchesAreExactAndOverlapsAreReported) {
  EXPECT_EQ(strict_error_keyword(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})"), "");
  EXPECT_EQ(strict_error_keyword(R"({"type":"object","required":["kind"],"oneOf":[
               {"properties":{"kind":{"const":"a"},"x":{"type":"integer"}}},
               {"properties":{"kind":{"enum":["b","c"]}}}]})"),
            "");
  EXPECT_EQ(strict_error_keyword(R"({"oneOf":[{"type":"string"},{"minLength":2}]})"), "oneOf");
  // Lenient: read as anyOf, with a warning naming oneOf.
  Lang l(R"({"oneOf":[{"type":"string"},{"type":"string","minLength":2}]})");
  ASSERT_EQ(l.warnings().size(), 1u);
  EXPECT_EQ(l.warnings()[0], "oneOf");
  expect_language(l, {"\"a\"", "\"ab\""}, {"1"});
}

// ---- dependencies ------------------------------------------------------------------------

TEST(JsonSchemaDependencies, RequiredKeysFollowAPresentKey) {
  for (const char* kw : {"dependencies", "dependentRequired"}) {
    Lang l(std::string(R"({"type":"object","properties":{"a":{},"b":{},"c":{}},")") + kw +
           R"(":{"a":["b","c"]}})");
    expect_language(l, {"{}", R"({"b":1})", R"({"a":1,"b":2,"c":3})", R"({"b":1,"c":2})"},
                    {R"({"a":1})", R"({"a":1,"b":2})", R"({"a":1,"c":2})"});
    EXPECT_TRUE(l.warnings().empty()) << kw;
  }
}

TEST(JsonSchemaDependencies, SchemaAppliesWhenTheKeyIsPresent) {
  for (const char* kw : {"dependencies", "dependentSchemas"}) {
    Lang l(std::string(R"({"type":"object","properties":{"card":{"type":"string"},"n":{}},")") +
           kw + R"(":{"card":{"properties":{"n":{"type":"integer"}},"required":["n"]}}})");
    expect_language(l, {"{}", R"({"n":"x"})", R"({"card":"v","n":3})"},
                    {R"({"card":"v"})", R"({"card":"v","n":"x"})"});
    EXPECT_TRUE(l.warnings().empty()) << kw;
  }
}

TEST(JsonSchemaDependencies, TooManyCombinationsWarn) {
  std::string deps;
  for (int i = 0; i < 12; ++i) {
    deps += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\":[\"z\"]";
  }
  const std::string schema = R"({"type":"object","dependencies":{)" + deps + "}}";
  Lang l(schema);
  ASSERT_FALSE(l.warnings().empty());
  EXPECT_EQ(l.warnings()[0], "dependencies");
  EXPECT_TRUE(l.accepts(R"({"k0":1,"z":2})"));
  EXPECT_FALSE(l.accepts(R"({"k0":1})"));  // the first dependencies are still enforced
  EXPECT_EQ(strict_error_keyword(schema), "dependencies");
}

// ---- not ---------------------------------------------------------------------------------

TEST(JsonSchemaNot, RequiredForms) {
  // not required [a, b]: a and b never together.
  Lang both(R"({"type":"object","not":{"required":["a","b"]}})");
  expect_language(both, {"{}", R"({"a":1})", R"({"b":1,"c":2})"}, {R"({"a":1,"b":2})"});
  // not anyOf of required: none of the keys.
  Lang none(R"({"type":"object","not":{"anyOf":[{"required":["a"]},{"required":["b"]}]}})");
  expect_language(none, {"{}", R"({"c":1})"}, {R"({"a":1})", R"({"b":1})"});
  // not allOf of required: not both.
  Lang all(R"({"type":"object","not":{"allOf":[{"required":["a"]},{"required":["b"]}]}})");
  expect_language(all, {R"({"a":1})", R"({"b":1})"}, {R"({"a":1,"b":1})"});
  EXPECT_TRUE(both.warnings().empty() && none.warnings().empty() && all.warnings().empty());
}

TEST(JsonSchemaNot, ValuesAndProperties) {
  // not const/enum over scalars: the values are removed.
  expect_language(Lang(R"({"type":"string","not":{"enum":["a","b"]}})"),
                  {"\"c\"", "\"ab\"", "\"\""}, {"\"a\"", "\"b\""});
  expect_language(Lang(R"({"enum":["x","y",null],"not":{"const":"y"}})"), {"\"x\"", "null"},
                  {"\"y\""});
  expect_language(Lang(R"({"type":["boolean","null"],"not":{"enum":[false,null]}})"), {"true"},
                  {"false", "null"});
  // not {properties: {p: const}, required: [p]}: p missing or p different.
  Lang p(R"({"type":"object","properties":{"p":{"type":"string"}},
             "not":{"properties":{"p":{"const":"no"}},"required":["p"]}})");
  expect_language(p, {"{}", R"({"p":"yes"})"}, {R"({"p":"no"})"});
  // A form a grammar cannot negate is reported.
  EXPECT_EQ(strict_error_keyword(R"({"type":"string","not":{"pattern":"^a"}})"), "not");
}

// ---- if / then / else --------------------------------------------------------------------

TEST(JsonSchemaIfThenElse, DiscriminatorConst) {
  Lang l(R"({"type":"object","properties":{"kind":{"enum":["circle","square"]},"r":{},"side":{}},
             "required":["kind"],
             "if":{"properties":{"kind":{"const":"circle"}}},
             "then":{"required":["r"]},"else":{"required":["side"]}})");
  expect_language(
      l, {R"({"kind":"circle","r":1})", R"({"kind":"square","side":2})"},
      {R"({"kind":"circle","side":1})", R"({"kind":"square","r":1})", R"({"kind":"circle"})"});
  EXPECT_TRUE(l.warnings().empty());
  // `if` without required holds when the key is missing.
  Lang open(R"({"type":"object","if":{"properties":{"t":{"const":"a"}}},
                "then":{"required":["x"]},"else":{"properties":{"x":false}}})");
  expect_language(open, {R"({"x":1})", R"({"t":"a","x":1})", R"({"t":"b"})"},
                  {"{}", R"({"t":"a"})", R"({"t":"b","x":1})"});
}

TEST(JsonSchemaIfThenElse, TypeConditionAndUnsupportedIf) {
  Lang l(R"({"if":{"type":"string"},"then":{"minLength":2},"else":{"type":"integer"}})");
  expect_language(l, {"\"ab\"", "7"}, {"\"a\"", "1.5", "null"});
  EXPECT_EQ(strict_error_keyword(R"({"if":{"minLength":3},"then":{"pattern":"a"}})"), "if");
}

TEST(JsonSchemaIfThenElse, DraftsBefore7IgnoreIt) {
  // if/then/else are unknown keywords (annotations) in drafts 3 to 6.
  Lang l(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"object",
             "if":{"properties":{"t":{"const":"a"}}},"then":{"required":["x"]}})");
  expect_language(l, {"{}", R"({"t":"a"})", R"({"t":"a","x":1})"}, {"[]"});
  EXPECT_TRUE(l.warnings().empty());
  Lang seven(R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
                 "if":{"properties":{"t":{"const":"a"}}},"then":{"required":["x"]}})");
  expect_language(seven, {R"({"t":"a","x":1})"}, {"{}", R"({"t":"a"})"});
}

// ---- minLength / maxLength with pattern ----------------------------------------------------

TEST(JsonSchemaLengthAndPattern, BoundsIntersectThePatternsLanguage) {
  Lang l(R"({"type":"string","pattern":"^[A-Z][a-z]*(-[a-z]+)?$","minLength":3,"maxLength":6})");
  expect_language(l, {"\"Abc\"", "\"Ab-cd\"", "\"Abcdef\""},
                  {"\"Ab\"", "\"Abcdefg\"", "\"abc\"", "\"Ab-cdef\""});
  // Unanchored: the string contains a match, and has the right length.
  Lang s(R"({"type":"string","pattern":"\\d","maxLength":3})");
  expect_language(s, {"\"1\"", "\"a1b\"", "\"\\n1\""}, {"\"\"", "\"abc\"", "\"a1bc\""});
  Lang min(R"({"type":"string","pattern":"x","minLength":2})");
  expect_language(min, {"\"ax\"", "\"xxxx\""}, {"\"x\"", "\"ab\""});
  EXPECT_TRUE(l.warnings().empty() && s.warnings().empty() && min.warnings().empty());
  // Too many (state, length) pairs: the lengths are dropped with a warning.
  Lang big(R"({"type":"string","pattern":"^[a-z]{1,900}[0-9]{0,50}$","maxLength":800})");
  ASSERT_FALSE(big.warnings().empty());
  EXPECT_EQ(big.warnings()[0], "minLength");
}

// ---- pattern without length bounds ---------------------------------------------------------

TEST(JsonSchemaPattern, AmbiguousAnchoredPatternIsWrittenAsItsAutomaton) {
  // Anchored at the start, no `.`, and ambiguous as a regex (each `\\S` may also start the
  // next `\\sK_`; an upper-case letter may start the group or be the last one): the
  // pattern's deterministic automaton.
  Lang kv(R"({"type":"string","pattern":"^(K_\\w+=\\S+)*(\\sK_\\w+=\\S+)*$"})");
  EXPECT_NE(kv.gbnf().find("key-class"), std::string::npos) << kv.gbnf();
  expect_language(kv, {"\"\"", "\"K_a=b\"", "\"K_a=b K_c=d\"", "\"K_a=bK_c=d\""},
                  {"\"x\"", "\"K_=b\"", "\"K_a=\"", "\"K_a=b \"", "\"K_a=b K_\""});
  Lang camel(R"({"type":"string","pattern":"^[a-z]+([A-Z][a-z]+)*[A-Z]?$"})");
  EXPECT_NE(camel.gbnf().find("key-class"), std::string::npos) << camel.gbnf();
  expect_language(camel, {"\"abc\"", "\"abDef\"", "\"abDefG\"", "\"abG\""},
                  {"\"Abc\"", "\"abDE\"", "\"ab-c\"", "\"\""});
  EXPECT_TRUE(kv.warnings().empty() && camel.warnings().empty());
  // The regex's form for a search (an unanchored start, a top-level `|`, a `.` that may
  // match anything: as an automaton each state is a broad class less a few letters) and for
  // an unambiguous pattern (nothing to gain from more rules).
  for (const char* schema :
       {R"({"type":"string","pattern":"admin"})", R"({"type":"string","pattern":"^all|tags$"})",
        R"({"type":"string","pattern":"^https?://.*\\.org$"})",
        R"({"type":"string","pattern":"^[a-z]+\\.[a-z]+$"})",
        R"({"type":"string","pattern":"^Abs$"})"}) {
    Lang l(schema);
    EXPECT_EQ(l.gbnf().find("key-class"), std::string::npos) << schema << "\n" << l.gbnf();
  }
  Lang search(R"({"type":"string","pattern":"^https?://.*\\.org$"})");
  expect_language(search, {"\"https://a.org\"", "\"http://x.y.org\""},
                  {"\"https://a.com\"", "\"ftp://a.org\""});
  Lang either(R"({"type":"string","pattern":"^all|tags$"})");
  expect_language(either, {"\"all\"", "\"allx\"", "\"xtags\""}, {"\"xall\"", "\"tagsx\""});
}

}  // namespace
