// test_json_schema_coverage.cpp — JSON Schema cases found failing on JSONSchemaBench: key order
// of required-only keys, instance key order under if/then branches, draft-7 $ref siblings,
// numeric enum spellings, 64-bit integer bounds, propertyNames, warnings inside branches.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_schema_parts.h"
#include "lacuna/json_schema.h"
#include "schema_test_support.h"

namespace {

using lacuna::testing::compact;
using lacuna::testing::expect_language;
using lacuna::testing::Lang;

// ---- key order ---------------------------------------------------------------------------

TEST(JsonSchemaKeyOrder, RequiredKeysWithoutPropertiesComeInListedOrder) {
  // "b" is listed before "a": the grammar (and the bench's key order) follow the list, not
  // the alphabet.
  const std::string schema = R"({"type":"object","required":["b","a"],
                                 "additionalProperties":{"type":"integer"}})";
  Lang l(schema);
  expect_language(l, {R"({"b":1,"a":2})", R"({"b":1,"a":2,"c":3})"},
                  {R"({"a":2})", R"({"b":1})", R"({"b":1,"a":"x"})"});
  EXPECT_EQ(lacuna::schema_detail::canonical_instance(schema, R"({"a":2,"b":1})", false),
            R"({"b":1,"a":2})");
}

TEST(JsonSchemaKeyOrder, InstanceOrderFollowsTheIfThenBranchItTakes) {
  // Regression (JsonSchemaStore v4-config): the instance's nested keys were ordered after the
  // wrong if/then branch, because the branch choice ignored `not` of a discriminator.
  const std::string schema = R"({"type":"object","required":["protocol"],
    "properties":{"protocol":{"type":"string"}},
    "allOf":[
      {"if":{"properties":{"protocol":{"const":"http"}},"required":["protocol"]},
       "then":{"properties":{"settings":{"type":"object","additionalProperties":false,
         "properties":{"timeout":{"type":"integer"},"userLevel":{"type":"integer"}}}}}},
      {"if":{"properties":{"protocol":{"const":"socks"}},"required":["protocol"]},
       "then":{"properties":{"settings":{"type":"object","additionalProperties":false,
         "properties":{"auth":{"type":"string"},"udp":{"type":"boolean"},
                       "userLevel":{"type":"integer"}}}}}}]})";
  Lang l(schema);
  const std::string socks =
      R"({"protocol":"socks","settings":{"userLevel":8,"udp":true,"auth":"a"}})";
  std::string ordered = lacuna::schema_detail::canonical_instance(schema, socks, false);
  EXPECT_EQ(ordered, R"({"protocol":"socks","settings":{"auth":"a","udp":true,"userLevel":8}})");
  EXPECT_TRUE(l.accepts(ordered)) << l.gbnf();
  // The http branch's settings have no "auth".
  expect_language(l, {R"({"protocol":"http","settings":{"timeout":3,"userLevel":1}})"},
                  {R"({"protocol":"http","settings":{"auth":"a"}})",
                   R"({"protocol":"socks","settings":{"timeout":3}})"});
}

}  // namespace

namespace {

// ---- $ref siblings -----------------------------------------------------------------------

TEST(JsonSchemaRefSiblings, IgnoredUpToDraft7AppliedAfter) {
  const std::string body =
      R"("definitions":{"w":{"type":"object","properties":{"id":{"type":"string"}}}},
    "type":"object","properties":{"w":{"type":"object","required":["config"],
                                      "$ref":"#/definitions/w"}}})";
  // Draft 7: `required` beside the $ref is ignored.
  Lang d7(R"({"$schema":"http://json-schema.org/draft-07/schema#",)" + body);
  expect_language(d7, {R"({"w":{"id":"a"}})", R"({"w":{"id":"a","config":1}})"},
                  {R"({"w":{"id":1}})", R"({"w":[]})"});
  // Draft 2020-12 (or no $schema): it applies.
  Lang d2020(R"({"$schema":"https://json-schema.org/draft/2020-12/schema",)" + body);
  expect_language(d2020, {R"({"w":{"id":"a","config":1}})"}, {R"({"w":{"id":"a"}})"});
  // A draft-4 {"type":"string","$ref":...} is the referenced object schema.
  Lang d4(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"object",
              "properties":{"s":{"type":"string","$ref":"#/d"}},
              "d":{"type":"object","properties":{"x":{"type":"integer"}}}})");
  expect_language(d4, {R"({"s":{"x":1}})"}, {R"({"s":"text"})", R"({"s":{"x":"1"}})"});
}

// ---- numbers -----------------------------------------------------------------------------

TEST(JsonSchemaEnumNumbers, EqualNumbersInOtherSpellingsMatch) {
  Lang l(R"({"enum":[2.0, 1.5, 1e-06, -3]})");
  expect_language(l, {"2", "2.0", "2.00", "1.5", "1.50", "0.000001", "1e-06", "-3", "-3.0"},
                  {"2.5", "1.05", "1", "3", "-2", "20", "0.00001"});
  Lang c(R"({"type":"object","properties":{"since":{"const":2.0}},"required":["since"]})");
  expect_language(c, {R"({"since":2})", R"({"since":2.0})"}, {R"({"since":3})"});
}

TEST(JsonSchemaIntegerBounds, SixtyFourBitBoundsAreExact) {
  Lang l(R"({"type":"integer","minimum":0,"maximum":9223372036854775807})");
  expect_language(l, {"0", "9223372036854775807", "9223372036854775806"},
                  {"9223372036854775808", "12345678901234567890", "-1"});
  EXPECT_TRUE(l.warnings().empty());
  // Above the 64-bit range (written by serializers as 9223372036854776000).
  Lang big(R"({"type":"integer","minimum":0,"maximum":9223372036854776000})");
  expect_language(big, {"9223372036854776000", "9223372036854775999", "1"},
                  {"9223372036854776001", "10000000000000000000"});
  Lang excl(R"({"type":"integer","exclusiveMaximum":10000000000000000000})");
  expect_language(excl, {"9999999999999999999", "-5"}, {"10000000000000000000"});
  // A bound the converter cannot write is reported, not silently dropped.
  Lang huge(R"({"type":"integer","maximum":1.5e300})");
  ASSERT_EQ(huge.warnings().size(), 1u);
  EXPECT_EQ(huge.warnings()[0], "maximum");
}

// ---- warnings ----------------------------------------------------------------------------

TEST(JsonSchemaWarnings, KeywordsInsideBranchesAreReported) {
  // uniqueItems inside a oneOf branch (JsonSchemaStore secrethub) went unreported.
  Lang l(R"({"type":"object","additionalProperties":{"oneOf":[
             {"type":"array","uniqueItems":true,"items":{"type":"string"}},
             {"type":"object"}]}})");
  ASSERT_FALSE(l.warnings().empty());
  EXPECT_EQ(l.warnings()[0], "uniqueItems");
  try {
    lacuna::json_schema_to_gbnf(
        R"({"anyOf":[{"type":"array","uniqueItems":true},{"type":"null"}]})", compact(true));
    FAIL() << "strict mode accepted an unenforced uniqueItems in a branch";
  } catch (const lacuna::SchemaError& e) {
    EXPECT_EQ(e.keyword, "uniqueItems");
  }
}

}  // namespace

namespace {

// ---- propertyNames -----------------------------------------------------------------------

TEST(JsonSchemaPropertyNames, PatternLimitsEveryKey) {
  // JsonSchemaStore fabric.mod.json: icon widths as keys.
  Lang l(R"({"type":"object","propertyNames":{"pattern":"^[1-9][0-9]*$"},
             "additionalProperties":{"type":"string"}})");
  expect_language(l, {"{}", R"({"16":"a.png","32":"b.png"})"},
                  {R"({"0":"a"})", R"({"sixteen":"a"})", R"({"":"a"})", R"({"16":1})"});
  EXPECT_TRUE(l.warnings().empty());
  // Named properties must pass it too; a required one that cannot makes the object impossible.
  Lang named(R"({"type":"object","properties":{"ab":{"type":"integer"},"x1":{"type":"integer"}},
                 "propertyNames":{"pattern":"^[a-z]+$"}})");
  expect_language(named, {R"({"ab":1})", R"({"ab":1,"cd":null})"},
                  {R"({"x1":1})", R"({"ab":1,"C":2})"});
  EXPECT_THROW(Lang(R"({"type":"object","required":["X"],"propertyNames":{"pattern":"^[a-z]+$"}})"),
               lacuna::SchemaError);
}

TEST(JsonSchemaPropertyNames, WithPatternPropertiesAndLengths) {
  Lang l(R"({"type":"object","propertyNames":{"maxLength":3},
             "patternProperties":{"^x":{"type":"integer"}},"additionalProperties":{"type":"string"}})");
  expect_language(l, {R"({"xa":1,"abc":"s"})", R"({"x":2})"},
                  {R"({"xa":"s"})", R"({"abcd":"s"})", R"({"xabc":1})", R"({"ab":1})"});
  Lang min(R"({"type":"object","propertyNames":{"minLength":2}})");
  expect_language(min, {R"({"ab":1})", "{}"}, {R"({"a":1})", R"({"":1})"});
}

TEST(JsonSchemaPropertyNames, EnumAndFalse) {
  Lang l(R"({"type":"object","properties":{"a":{"type":"integer"}},
             "propertyNames":{"enum":["a","b","c"]},"additionalProperties":{"type":"boolean"}})");
  expect_language(l, {R"({"a":1,"b":true})", R"({"c":false})", "{}"},
                  {R"({"d":true})", R"({"b":1})", R"({"a":true})"});
  Lang none(R"({"type":"object","propertyNames":false})");
  expect_language(none, {"{}"}, {R"({"a":1})"});
  // Forms a key grammar cannot express are reported (strict: an error).
  Lang fmt(R"({"type":"object","propertyNames":{"format":"email"}})");
  ASSERT_EQ(fmt.warnings().size(), 1u);
  EXPECT_EQ(fmt.warnings()[0], "propertyNames");
  EXPECT_THROW(lacuna::json_schema_to_gbnf(
                   R"({"type":"object","propertyNames":{"format":"email"}})", compact(true)),
               lacuna::SchemaError);
}

}  // namespace

namespace {

// ---- cheaper grammar shapes, same language ----------------------------------------------

TEST(JsonSchemaShapes, IntegerRangesMatchArithmetic) {
  // Full lengths are merged into one [1-9] [0-9]{a,b}; every integer in a window is checked.
  struct Case {
    long lo, hi;  // hi < lo: no maximum
  };
  for (Case c : {Case{0, 9}, Case{1, 0}, Case{0, -1}, Case{10, 9}, Case{5, 1234}, Case{-20, -3},
                 Case{-1000, 999}, Case{100, 99}, Case{-7, 10000}}) {
    std::string schema = R"({"type":"integer","minimum":)" + std::to_string(c.lo) +
                         (c.hi >= c.lo ? R"(,"maximum":)" + std::to_string(c.hi) : "") + "}";
    Lang l(schema);
    for (long v = -1200; v <= 12000; v += (v > 1200 ? 97 : 1)) {
      bool in = v >= c.lo && (c.hi < c.lo || v <= c.hi);
      ASSERT_EQ(l.accepts(std::to_string(v)), in) << schema << " on " << v << "\n" << l.gbnf();
    }
    EXPECT_FALSE(l.accepts("012"));
    EXPECT_EQ(l.accepts("123456789012"), c.hi < c.lo) << schema;
  }
}

TEST(JsonSchemaShapes, BranchesShareTheirScalarParts) {
  // Untyped anyOf branches: one string/number/... for all of them, objects kept apart.
  Lang l(R"({"anyOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                      {"properties":{"b":{"type":"string"}},"required":["b"]}]})");
  expect_language(l, {R"({"a":1})", R"({"b":"x"})", R"("s")", "1.5", "true", "null", "[1]"},
                  {R"({"a":"x"})", R"({"b":1})", "{}"});
  // The schema's own rule lists `string` once (not once per branch).
  const std::string& g = l.gbnf();
  size_t start = g.find("\nvalue ::= ");
  ASSERT_NE(start, std::string::npos) << g;
  std::string line = g.substr(start + 1, g.find('\n', start + 1) - start - 1);
  size_t strings = 0;
  for (size_t p = line.find(" string"); p != std::string::npos; p = line.find(" string", p + 1))
    ++strings;
  EXPECT_EQ(strings, 1u) << line;
}

TEST(JsonSchemaShapes, ControlEscapesGroupedInOneClass) {
  // \S inside a JSON string: the escaped control characters that are not whitespace.
  Lang l(R"({"type":"string","pattern":"^\\S+$"})");
  expect_language(l, {R"("ab")", R"("\u0001")", R"("\u001F")", R"("\u000e")", R"("\b")"},
                  {R"("a b")", R"("\u0009")", R"("\u000A")", R"("\n")", R"("")"});
  EXPECT_EQ(l.gbnf().find(R"("\\u000" [1])"), std::string::npos) << l.gbnf();
}

TEST(JsonSchemaShapes, ABranchAcceptingEverythingAbsorbsTheOthers) {
  // Github_easy o2231: oneOf [A, {"#ref": ...}] (a typo, so an annotation-only branch) is read
  // as anyOf: every value. The grammar is the any-value rule alone, not A beside it.
  Lang l(R"({"oneOf":[{"properties":{"twos":{"type":"array","items":{"type":"integer"}}}},
                      {"#ref":"#/definitions/x"}]})");
  expect_language(l, {R"({"twos":[1]})", R"({"twos":"x"})", R"("s")", "[]", "null"}, {"", "{"});
  EXPECT_EQ(l.gbnf().find("twos"), std::string::npos) << l.gbnf();
  ASSERT_FALSE(l.warnings().empty());
  EXPECT_EQ(l.warnings()[0], "oneOf");
  // With closed objects by default an annotation-only schema is not "any value".
  lacuna::SchemaOptions closed = compact();
  closed.additional_properties_default = false;
  Lang c(R"({"anyOf":[{"type":"integer"},{"title":"t"}]})", closed);
  expect_language(c, {"1", "{}", R"("s")"}, {R"({"a":1})"});
}

// ---- numbers with exponent, IRIs --------------------------------------------------------

TEST(JsonSchemaNumberExponent, ZeroAsTheOnlyBoundAllowsExponents) {
  Lang ge(R"({"type":"number","minimum":0})");
  expect_language(ge, {"1e-06", "0", "2.5E+3", "0e5", "7"}, {"-1e-06", "-2", "-0.5E3"});
  Lang gt(R"({"type":"number","exclusiveMinimum":0})");
  expect_language(gt, {"1e-06", "0.01e2", "3"}, {"0e5", "0.0e1", "0", "-1e2"});
  Lang le(R"({"type":"number","maximum":0})");
  expect_language(le, {"-1e-06", "0e3", "-0e3", "0", "-4"}, {"1e-06", "2E2"});
  // Other bounds stay without exponent (exact only in plain decimals, as documented).
  Lang range(R"({"type":"number","minimum":0,"maximum":1})");
  expect_language(range, {"0.5", "1"}, {"5e-1", "1.5"});
}

TEST(JsonSchemaFormats, IriAndUriReference) {
  Lang iri(R"({"type":"string","format":"iri"})");
  expect_language(iri, {R"("https://example.com/ünï")", R"("urn:x")"},
                  {R"("not-an-iri")", R"("://x")"});
  Lang ref(R"({"type":"string","format":"uri-reference"})");
  expect_language(ref, {R"("Web")", R"("../a/b?q#f")", R"("http://x.y/z")", R"("")", R"("a/b:c")"},
                  {R"("://")", R"("1a:b")", R"("a b")"});
  Lang iref(R"({"type":"string","format":"iri-reference"})");
  expect_language(iref, {R"("dossier/été")"}, {R"(":x")"});
}

TEST(JsonSchemaFormats, FormatBesidePatternIsReported) {
  // Github_medium o1053: "format":"date" with a date-like pattern; the pattern wins and the
  // format's day check is not applied, so it must not pass silently.
  Lang l(R"({"type":"string","format":"date","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"})");
  expect_language(l, {R"("2020-02-28")", R"("2020-02-30")"}, {R"("2020-2-28")"});
  ASSERT_EQ(l.warnings().size(), 1u);
  EXPECT_EQ(l.warnings()[0], "format");
  // An annotation-only format beside a pattern needs no report.
  Lang a(R"({"type":"string","format":"regex","pattern":"^a"})");
  EXPECT_TRUE(a.warnings().empty());
}

TEST(JsonSchemaShapes, ObjectStatesListEveryNextMember) {
  // Every order of every subset of keys: named keys in schema order, "b" required, extra
  // keys anywhere, 1..3 members. The direct member listing must give exactly this.
  Lang l(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
             "c":{"type":"boolean"},"d":{"type":"null"}},"required":["b"],
             "additionalProperties":{"type":"integer"},"minProperties":2,"maxProperties":3})");
  const std::vector<std::pair<std::string, std::string>> members = {
      {"a", "1"}, {"b", R"("s")"}, {"c", "true"}, {"d", "null"}, {"x", "2"}, {"y", "3"}};
  size_t accepted = 0;
  for (unsigned mask = 0; mask < 64; ++mask) {
    std::vector<size_t> keys;
    for (size_t k = 0; k < 6; ++k)
      if (mask & (1u << k)) keys.push_back(k);
    if (keys.size() > 4) continue;
    std::sort(keys.begin(), keys.end());
    do {
      std::string doc = "{";
      long last_named = -1;
      bool ordered = true;
      for (size_t k : keys) {
        if (doc.size() > 1) doc += ",";
        doc += "\"" + members[k].first + "\":" + members[k].second;
        if (k < 4) {
          ordered &= static_cast<long>(k) > last_named;
          last_named = static_cast<long>(k);
        }
      }
      doc += "}";
      bool want = ordered && (mask & 2u) && keys.size() >= 2 && keys.size() <= 3;
      ASSERT_EQ(l.accepts(doc), want) << doc << "\n" << l.gbnf();
      accepted += want;
    } while (std::next_permutation(keys.begin(), keys.end()));
  }
  EXPECT_GT(accepted, 20u);
  // Past the size bound the skipping form is used; same rules.
  std::string props;
  for (int i = 0; i < 150; ++i)
    props += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\":{\"type\":\"integer\"}";
  Lang big(R"({"type":"object","additionalProperties":false,"properties":{)" + props + "}}");
  expect_language(big, {R"({"p3":1,"p100":2})", "{}", R"({"p149":0})"},
                  {R"({"p100":2,"p3":1})", R"({"p150":1})", R"({"p3":"x"})"});
}

TEST(JsonSchemaLengthAndPattern, LoopingTailIsOneRepetition) {
  // The accepting self-loop at a pattern's end becomes class{lo,hi}, so long bounds fit the
  // (state, length) budget: exact, and no warning.
  auto q = [](const std::string& x) { return "\"" + x + "\""; };
  Lang l(R"({"type":"string","minLength":3,"maxLength":80,"pattern":"^[a-z][0-9a-z._-]*$"})");
  expect_language(l, {q("abc"), q("a" + std::string(79, '0')), q("x.y-z")},
                  {q("ab"), q("a" + std::string(80, '0')), q("1bc"), q("abC")});
  EXPECT_TRUE(l.warnings().empty());
  // Search semantics: after the first letter anything goes.
  Lang s(R"({"type":"string","minLength":3,"maxLength":64,"pattern":"[A-z]+"})");
  expect_language(s, {q("--a"), q("a  "), q(std::string(63, '-') + "b")},
                  {q("---"), q("ab"), q(std::string(64, '-') + "b")});
  EXPECT_TRUE(s.warnings().empty());
}

TEST(JsonSchemaShapes, ExtraKeyTrieSharesEqualSubtries) {
  // Extra keys are every key but the named ones. Every key over {a,b,c} up to 4 letters
  // (and escaped characters) takes the named schema (string) or the extra one (integer), never
  // both; the trie of the named keys is written as its minimal DAG ("ab"/"cb", "abc"/"bbc" share
  // their ends), with the inner object's trie reusing the outer one's rules.
  Lang l(R"({"type":"object","properties":{"ab":{"type":"string"},"cb":{"type":"string"},
             "abc":{"type":"string"},"bbc":{"type":"string"},"o":{"type":"object",
             "properties":{"bc":{"type":"string"}},"additionalProperties":{"type":"integer"}}},
             "additionalProperties":{"type":"integer"}})");
  const std::set<std::string> named = {"ab", "cb", "abc", "bbc", "o"};
  std::vector<std::string> keys = {"", R"(a\")", R"(\n)", "o"};
  for (size_t len = 1; len <= 4; ++len) {
    size_t total = 1;
    for (size_t i = 0; i < len; ++i) total *= 3;
    for (size_t n = 0; n < total; ++n) {
      std::string k;
      for (size_t i = 0, x = n; i < len; ++i, x /= 3) k += static_cast<char>('a' + x % 3);
      keys.push_back(k);
    }
  }
  for (const std::string& k : keys) {
    bool is_named = named.count(k) != 0;
    std::string as_string = "{\"" + k + "\":\"s\"}", as_int = "{\"" + k + "\":1}";
    if (k == "o") {
      EXPECT_TRUE(l.accepts(R"({"o":{"bc":"s","bcd":1,"ab":2}})")) << l.gbnf();
      EXPECT_FALSE(l.accepts(R"({"o":{"bc":1}})"));
      EXPECT_FALSE(l.accepts(R"({"o":{"ab":"s"}})"));
      continue;
    }
    EXPECT_EQ(l.accepts(as_string), is_named) << k << "\n" << l.gbnf();
    EXPECT_EQ(l.accepts(as_int), !is_named) << k << "\n" << l.gbnf();
  }
  // Trie nodes: root, a, ab, abc, b, bb, bbc, c, cb, o = 10 for the outer keys; ends shared.
  size_t rules = 0;
  for (size_t at = 0; (at = l.gbnf().find("\nkey-other", at)) != std::string::npos; ++at) ++rules;
  EXPECT_LT(rules, 10u) << l.gbnf();
}

TEST(JsonSchemaShapes, KeyClassSelfLoopsAreRepetitions) {
  // patternProperties "\w+" (search: the key holds a word character) takes integers, other
  // keys strings. A key class state that loops on itself is written `c* ...` instead of
  // `s ::= c s | ...`; every key over {a, -, _, " "} up to 4 characters lands in its class.
  Lang l(R"({"type":"object","patternProperties":{"\\w+":{"type":"integer"}},
             "additionalProperties":{"type":"string"}})");
  const std::string alphabet = "a-_ ";
  size_t n_word = 0;
  for (size_t len = 0; len <= 4; ++len) {
    size_t total = 1;
    for (size_t i = 0; i < len; ++i) total *= alphabet.size();
    for (size_t n = 0; n < total; ++n) {
      std::string k;
      for (size_t i = 0, x = n; i < len; ++i, x /= alphabet.size())
        k += alphabet[x % alphabet.size()];
      bool word = k.find_first_of("a_") != std::string::npos;
      n_word += word;
      EXPECT_EQ(l.accepts("{\"" + k + "\":1}"), word) << k << "\n" << l.gbnf();
      EXPECT_EQ(l.accepts("{\"" + k + "\":\"s\"}"), !word) << k << "\n" << l.gbnf();
    }
  }
  EXPECT_GT(n_word, 100u);
  expect_language(l, {R"({"-\n-":"s","\"x":2})"}, {R"({"-\n-":1})", R"({"\"x":"s"})"});
  // No key-class rule refers to itself.
  const std::string& g = l.gbnf();
  for (size_t at = 0; (at = g.find("key-class", at)) != std::string::npos; ++at) {
    if (at > 0 && g[at - 1] != '\n') continue;
    size_t sp = g.find(' ', at), eol = g.find('\n', at);
    std::string name = g.substr(at, sp - at), body = g.substr(sp, eol - sp);
    EXPECT_EQ(body.find(" " + name + " "), std::string::npos) << g;
    EXPECT_NE(body.substr(body.size() - name.size() - 1), " " + name) << g;
  }
}

TEST(JsonSchemaShapes, SeparatorSharedByTheNextMembers) {
  // Flexible whitespace: a state lists its next members after one `ws "," ws`. Every order
  // of every subset of keys (named in schema order, "b" required, extra keys anywhere), with
  // three separator spellings, against the definition.
  lacuna::SchemaOptions flex;
  Lang l(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
             "c":{"type":"boolean"},"d":{"type":"null"}},"required":["b"],
             "additionalProperties":{"type":"integer"}})",
         flex);
  EXPECT_NE(l.gbnf().find("ws (\",\" ws ("), std::string::npos) << l.gbnf();
  const std::vector<std::pair<std::string, std::string>> members = {
      {"a", "1"}, {"b", R"("s")"}, {"c", "true"}, {"d", "null"}, {"x", "2"}};
  const std::vector<std::string> seps = {",", ", ", " ,\n  "};
  size_t accepted = 0;
  for (unsigned mask = 0; mask < 32; ++mask) {
    std::vector<size_t> keys;
    for (size_t k = 0; k < members.size(); ++k)
      if (mask & (1u << k)) keys.push_back(k);
    do {
      for (const std::string& sep : seps) {
        std::string doc = "{";
        long last_named = -1;
        bool ordered = true;
        for (size_t k : keys) {
          if (doc.size() > 1) doc += sep;
          doc += "\"" + members[k].first + "\": " + members[k].second;
          if (k < 4) {
            ordered &= static_cast<long>(k) > last_named;
            last_named = static_cast<long>(k);
          }
        }
        doc += " }";
        bool want = ordered && (mask & 2u);
        ASSERT_EQ(l.accepts(doc), want) << doc << "\n" << l.gbnf();
        accepted += want;
      }
    } while (std::next_permutation(keys.begin(), keys.end()));
  }
  EXPECT_GT(accepted, 30u);
  expect_language(l, {R"({"b":"s"})", R"({ "b" : "s" , "x" : 1 })"},
                  {R"({"b":"s",})", R"({,"b":"s"})", R"({"b":"s",,"x":1})", "{}"});
}

TEST(JsonSchemaShapes, UnionOfObjectsIsMergedWithTheSameLanguage) {
  // anyOf of objects is written as one member automaton (shared members read once). The
  // union must accept a document iff one of the branches alone does: checked on every
  // order of every subset of members drawn from a pool with values of several types.
  const std::vector<std::string> branches = {
      R"({"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"},
          "y":{"type":"string"}},"required":["kind"],"additionalProperties":false})",
      R"({"type":"object","properties":{"kind":{"const":"b"},"x":{"type":"integer"},
          "z":{"type":"boolean"}},"required":["kind","z"]})",
      R"({"type":"object","properties":{"x":{"type":"string"},"y":{"type":"string"}},
          "additionalProperties":{"type":"integer"},"maxProperties":2})"};
  std::string any = R"({"anyOf":[)";
  for (size_t i = 0; i < branches.size(); ++i) any += (i ? "," : "") + branches[i];
  any += "]}";
  for (const char* ws : {"compact", "flexible"}) {
    lacuna::SchemaOptions o = std::string(ws) == "compact" ? compact() : lacuna::SchemaOptions{};
    Lang u(any, o);
    EXPECT_NE(u.gbnf().find("-union"), std::string::npos) << u.gbnf();
    std::vector<Lang> each;
    for (const std::string& b : branches) each.emplace_back(b, o);
    const std::vector<std::pair<std::string, std::string>> pool = {
        {"kind", R"("a")"}, {"kind", R"("b")"}, {"x", "1"}, {"x", R"("s")"},
        {"y", R"("t")"},    {"z", "true"},      {"w", "2"}};
    size_t accepted = 0, docs = 0;
    for (unsigned mask = 0; mask < (1u << pool.size()); ++mask) {
      std::vector<size_t> keys;
      for (size_t k = 0; k < pool.size(); ++k)
        if (mask & (1u << k)) keys.push_back(k);
      if (keys.size() > 4) continue;
      do {
        std::string doc = "{";
        for (size_t k : keys) {
          if (doc.size() > 1) doc += ",";
          doc += "\"" + pool[k].first + "\":" + pool[k].second;
        }
        doc += "}";
        bool want = false;
        for (const Lang& b : each) want = want || b.accepts(doc);
        ASSERT_EQ(u.accepts(doc), want) << ws << " " << doc << "\n" << u.gbnf();
        accepted += want;
        ++docs;
      } while (std::next_permutation(keys.begin(), keys.end()));
    }
    EXPECT_GT(accepted, 10u);
    EXPECT_GT(docs, 1000u);
  }
}

TEST(JsonSchemaShapes, LargeObjectsSkipKeysByBlocks) {
  // 150 properties (past the direct listing): p40 and p100 required, extra keys integers,
  // 3..5 members. Documents with keys in and out of schema order, skipped blocks, extra
  // keys between, against the definition.
  std::string props;
  for (int i = 0; i < 150; ++i) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive inside
    // std::string) on the chained operator+ this was written with.
    if (i > 0) props += ',';
    props += "\"p";
    props += std::to_string(i);
    props += "\":{\"type\":\"string\"}";
  }
  for (const char* ws : {"compact", "flexible"}) {
    lacuna::SchemaOptions o = std::string(ws) == "compact" ? compact() : lacuna::SchemaOptions{};
    Lang l(R"({"type":"object","required":["p40","p100"],"minProperties":3,"maxProperties":5,
               "additionalProperties":{"type":"integer"},"properties":{)" +
               props + "}}",
           o);
    const std::vector<std::string> pool = {"p0",  "p15",  "p16",  "p17", "p40", "p41",
                                           "p99", "p100", "p149", "x",   "y"};
    size_t accepted = 0, docs = 0;
    uint32_t seed = 12345;
    for (int round = 0; round < 3000; ++round) {
      seed = seed * 1103515245u + 12345u;
      size_t len = 2 + (seed >> 16) % 5;
      std::vector<std::string> keys;
      for (size_t k = 0; k < len; ++k) {
        seed = seed * 1103515245u + 12345u;
        keys.push_back(pool[(seed >> 16) % pool.size()]);
      }
      // Half the documents: named keys sorted into schema order.
      if (round % 2 == 0) {
        std::vector<std::string> named;
        for (const std::string& k : keys)
          if (k[0] == 'p') named.push_back(k);
        std::sort(named.begin(), named.end(), [](const std::string& a, const std::string& b) {
          return std::stoi(a.substr(1)) < std::stoi(b.substr(1));
        });
        size_t at = 0;
        for (std::string& k : keys)
          if (k[0] == 'p') k = named[at++];
      }
      std::string doc = "{";
      long last = -1;
      bool ordered = true, has40 = false, has100 = false;
      for (const std::string& k : keys) {
        if (doc.size() > 1) doc += std::string(ws) == "compact" ? "," : ", ";
        bool named = k[0] == 'p';
        doc += "\"" + k + "\":" + (named ? "\"v\"" : "1");
        if (named) {
          long idx = std::stol(k.substr(1));
          ordered &= idx > last;
          last = idx;
          has40 |= idx == 40;
          has100 |= idx == 100;
        }
      }
      doc += "}";
      bool want = ordered && has40 && has100 && keys.size() >= 3 && keys.size() <= 5;
      ASSERT_EQ(l.accepts(doc), want) << ws << " " << doc;
      accepted += want;
      ++docs;
    }
    EXPECT_GT(accepted, 50u) << ws;
  }
}

}  // namespace
