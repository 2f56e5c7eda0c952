// test_json_schema.cpp — JSON Schema → GBNF: per keyword, documents the grammar must accept
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
// and refuse (byte-level walk through lacuna's matcher), options, errors and limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
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

TEST(JsonSchemaType, Scalars) {
  expect_language(Lang(R"({"type":"string"})"), {R"("")", R"("a b")", R"("\n\u00e9\"")", "\"é\""},
                  {"1", "\"a", R"("\x")", "null"});
  expect_language(Lang(R"({"type":"integer"})"), {"0", "-7", "1234567890123"},
                  {"01", "1.5", "-", "\"1\"", "1e3"});
  expect_language(Lang(R"({"type":"number"})"), {"0", "-7.25", "1e10", "2.5E-3"},
                  {"01", ".5", "1.", "\"1\""});
  expect_language(Lang(R"({"type":"boolean"})"), {"true", "false"}, {"1", "\"true\"", "null"});
  expect_language(Lang(R"({"type":"null"})"), {"null"}, {"0", "\"null\""});
  expect_language(Lang(R"({"type":["string","null"]})"), {"null", "\"x\""}, {"1", "true"});
}

TEST(JsonSchemaType, NoTypeAcceptsEveryValue) {
  expect_language(Lang("{}"), {"1", "\"x\"", "[1,{\"a\":null}]", "{\"k\":[true]}", "null"},
                  {"", "[1,]", "{\"a\"}"});
  expect_language(Lang("true"), {"{}", "[]", "3.5"}, {"nul"});
}

TEST(JsonSchemaObject, PropertiesRequiredAndOrder) {
  Lang l(R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},
             "required":["a"],"additionalProperties":false})");
  expect_language(
      l, {R"({"b":1,"a":"x"})", R"({"a":"x"})"},
      {R"({"a":"x","b":1})", R"({"b":1})", R"({})", R"({"a":1})", R"({"a":"x","c":1})"});
}

TEST(JsonSchemaObject, AdditionalProperties) {
  // Default: extra properties allowed anywhere, but never under a named key.
  Lang open(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  expect_language(open, {R"({"a":1})", R"({"x":"s","a":1,"y":[]})", R"({})", R"({"ab":"s"})"},
                  {R"({"a":"s"})", R"({"x":1,"a":"s"})"});
  Lang typed(R"({"type":"object","additionalProperties":{"type":"boolean"}})");
  expect_language(typed, {R"({"q":true,"r":false})", "{}"}, {R"({"q":1})"});
  SchemaOptions closed = compact();
  closed.additional_properties_default = false;
  expect_language(Lang(R"({"type":"object","properties":{"a":{"type":"integer"}}})", closed),
                  {R"({"a":1})", "{}"}, {R"({"x":1})"});
}

// A key beside names that start with many letters: its first character's class leaves out
// those letters and reaches the last code point, and is written negated, as the string's own
// class is (positive, ending in `x-\U0010FFFF`, it treated the code points above ASCII apart
// from the rest of the string, and the engine's live search found no uniform set there).
TEST(JsonSchemaObject, KeyBesideManyNamesIsANegatedClass) {
  std::string schema = R"({"type":"object","properties":{)";
  for (const char* n : {"alpha", "beta", "delta", "echo", "golf", "hotel", "india", "lima", "mike",
                        "oscar", "papa", "romeo", "sierra", "tango", "victor", "whiskey"}) {
    schema += "\"" + std::string(n) + "\":{\"type\":\"integer\"},";
  }
  schema.back() = '}';
  schema += "}";
  const std::string gbnf = lacuna::json_schema_to_gbnf(schema);
  EXPECT_EQ(gbnf.find("\\U0010FFFF]"), std::string::npos) << gbnf;
  EXPECT_NE(gbnf.find("abdeg-ilmopr-tvw]"), std::string::npos) << gbnf;
  Lang l(schema);
  expect_language(l, {R"({"alpha":1,"zulu":"z","été":[]})", R"({"x":{},"papa":2})"},
                  {R"({"alpha":"s"})", R"({"papa":1,"papa":2})"});
}

TEST(JsonSchemaObject, PatternProperties) {
  Lang l(R"({"type":"object","patternProperties":{"^x-":{"type":"integer"}},
             "additionalProperties":false})");
  expect_language(l, {R"({"x-a":1,"x-b":2})", "{}"}, {R"({"y":1})", R"({"x-a":"s"})"});
}

TEST(JsonSchemaObject, MinMaxProperties) {
  Lang l(R"({"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":1,
             "maxProperties":2,"additionalProperties":false})");
  expect_language(l, {R"({"a":1})", R"({"a":1,"c":2})", R"({"b":1,"c":2})"},
                  {"{}", R"({"a":1,"b":2,"c":3})"});
}

TEST(JsonSchemaArray, ItemsAndBounds) {
  Lang l(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  expect_language(l, {"[1]", "[1,2,3]"}, {"[]", "[1,2,3,4]", "[\"a\"]", "[1,]"});
  expect_language(Lang(R"({"type":"array","items":{"type":"string"}})"), {"[]", "[\"a\",\"b\"]"},
                  {"[1]"});
}

TEST(JsonSchemaArray, PrefixItems) {
  Lang l(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})");
  expect_language(l, {"[]", "[1]", "[1,\"a\"]"}, {"[\"a\"]", "[1,\"a\",2]"});
  Lang old(R"({"type":"array","items":[{"type":"integer"}],"additionalItems":{"type":"null"},
               "minItems":2})");
  expect_language(old, {"[1,null]", "[1,null,null]"}, {"[1]", "[1,2]"});
}

TEST(JsonSchemaEnum, EnumAndConst) {
  expect_language(Lang(R"({"enum":["a",1,null,{"k":[1,2]}]})"),
                  {"\"a\"", "1", "null", R"({"k":[1,2]})"}, {"\"b\"", "2", R"({"k":[1]})"});
  expect_language(Lang(R"({"const":"x\"y"})"), {R"("x\"y")"}, {"\"x\""});
  // enum filtered by type
  expect_language(Lang(R"({"type":"string","enum":["a",1]})"), {"\"a\""}, {"1"});
}

// Sixteen literal values or more are written as a trie of their JSON texts (shared
// prefixes once, a rule per branching point): the same language as the alternatives.
TEST(JsonSchemaEnum, ManyLiteralsAsTrie) {
  std::vector<std::string> names = {
      "ac_debug", "ac_debugText", "ac_DebugFilter", "a_pose", "a_poseX",   "b",  "bé", "bé\"q",
      "b\\c",     "日本",         "日本語",         "",       "ac_debugZ", "zz", "z",  "ac"};
  std::string schema = R"({"enum":[true,null,7,{"k":1})";
  for (const std::string& n : names) schema += "," + nlohmann::json(n).dump();
  schema += "]}";
  const std::string gbnf = lacuna::json_schema_to_gbnf(schema);
  // A shared prefix is written once ("debug" of ac_debug, ac_debugText, ac_debugZ).
  const size_t first = gbnf.find("debug");
  ASSERT_NE(first, std::string::npos) << gbnf;
  EXPECT_EQ(gbnf.find("debug", first + 1), std::string::npos) << gbnf;
  std::vector<std::string> yes = {"true", "null", "7", R"({"k":1})"};
  for (const std::string& n : names) yes.push_back(nlohmann::json(n).dump());
  expect_language(Lang(schema), yes,
                  {"false", "\"ac_debu\"", "\"ac_debugTextX\"", "\"a_pos\"", "\"b\\\"\"", "\"日\"",
                   "\"ac_\"", "\"\"\"", "\"zzz\"", "8"});
}

TEST(JsonSchemaString, Length) {
  Lang l(R"({"type":"string","minLength":2,"maxLength":3})");
  expect_language(l, {"\"ab\"", "\"abc\"", "\"a\\n\"", "\"éé\""}, {"\"a\"", "\"abcd\"", "\"\""});
}

TEST(JsonSchemaString, PatternIsUnanchoredUnlessAnchored) {
  expect_language(Lang(R"({"type":"string","pattern":"ab+"})"), {"\"ab\"", "\"xxabbby\""},
                  {"\"a\"", "\"ba\""});
  expect_language(Lang(R"({"type":"string","pattern":"^\\d{3}-\\w+$"})"), {"\"123-abc_9\""},
                  {"\"123-\"", "\"x123-abc\"", "\"12-a\""});
  // Characters a JSON string must escape are matched in their escaped form.
  expect_language(Lang(R"({"type":"string","pattern":"^a\"b\\\\c$"})"), {R"("a\"b\\c")"},
                  {R"("a"b\c")"});
  // Anchored single-class repetitions combine exactly with length bounds.
  expect_language(Lang(R"({"type":"string","pattern":"^[a-z]+$","maxLength":3})"), {"\"abc\""},
                  {"\"abcd\"", "\"\"", "\"A\""});
}

TEST(JsonSchemaString, Formats) {
  auto f = [](const char* fmt) {
    return Lang(std::string(R"({"type":"string","format":")") + fmt + "\"}");
  };
  expect_language(f("date"), {"\"2024-02-29\"", "\"1999-12-31\""},
                  {"\"2024-13-01\"", "\"2024-04-31\"", "\"24-01-01\""});
  expect_language(f("time"), {"\"23:59:60Z\"", "\"08:30:00.5+02:00\""},
                  {"\"24:00:00Z\"", "\"08:30\""});
  expect_language(f("date-time"), {"\"2024-01-05T10:00:00Z\""}, {"\"2024-01-05 10:00\""});
  expect_language(f("duration"), {"\"P1Y2M\"", "\"PT5M\"", "\"P3W\"", "\"P1DT2H\""},
                  {"\"P\"", "\"PT\"", "\"P1H\""});
  expect_language(f("uuid"), {"\"123e4567-e89b-12d3-a456-426614174000\""},
                  {"\"123e4567e89b12d3a456426614174000\""});
  expect_language(f("email"), {"\"a.b+c@example.com\""}, {"\"a@\"", "\"@b.c\"", "\"ab.c\""});
  expect_language(f("hostname"), {"\"example.com\"", "\"a-b.c\""}, {"\"-a.com\"", "\"a..b\""});
  expect_language(f("ipv4"), {"\"192.168.0.255\""}, {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""});
  expect_language(f("ipv6"), {"\"::1\"", "\"2001:db8::8a2e:370:7334\"", "\"::ffff:1.2.3.4\""},
                  {"\"1::2::3\"", "\"12345::\""});
  expect_language(f("uri"), {"\"https://x.org/a?b=1#c\"", "\"urn:isbn:123\""}, {"\"no scheme\""});
  // Unknown formats are annotations: any string.
  expect_language(f("my-format"), {"\"anything\""}, {"1"});
}

// A pattern's automaton is built once per schema and shared by the properties that repeat
// the pattern: each keeps its own length bounds and gets the pattern's warnings at its own
// pointer.
TEST(JsonSchemaString, RepeatedPatternKeepsBoundsAndWarnings) {
  const std::string schema = R"({"type":"object","properties":{
      "x":{"type":"string","pattern":"^(a b|c){0,2000}$","minLength":2},
      "y":{"type":"string","pattern":"^(a b|c){0,2000}$","maxLength":3}}})";
  std::vector<std::string> warned;
  SchemaOptions lenient;
  lenient.on_warning = [&](const std::string& k, const std::string& p, const std::string&) {
    warned.push_back(k + "@" + p);
  };
  Lang l(schema, lenient);
  EXPECT_EQ(warned, (std::vector<std::string>{"pattern@/properties/x", "pattern@/properties/y"}));
  expect_language(l, {R"({"x":"cc","y":"a b"})", R"({"x":"a bc","y":""})"},
                  {R"({"x":"c"})", R"({"y":"a bc"})", R"({"x":"a"})"});
}

TEST(JsonSchemaNumber, IntegerRangesAreExact) {
  const std::vector<std::pair<long, long>> ranges = {{0, 9},     {1, 100}, {-15, 7}, {-200, -13},
                                                     {95, 1005}, {7, 7},   {-1, 0}};
  for (auto [lo, hi] : ranges) {
    Lang l("{\"type\":\"integer\",\"minimum\":" + std::to_string(lo) +
           ",\"maximum\":" + std::to_string(hi) + "}");
    for (long n = lo - 30; n <= hi + 30; ++n) {
      EXPECT_EQ(l.accepts(std::to_string(n)), n >= lo && n <= hi)
          << n << " in [" << lo << "," << hi << "]\n"
          << l.gbnf();
    }
  }
  Lang excl(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  expect_language(excl, {"1", "9"}, {"0", "10", "-1"});
  Lang draft4(R"({"type":"integer","minimum":0,"exclusiveMinimum":true})");
  expect_language(draft4, {"1", "123456"}, {"0", "-3"});
  Lang half(R"({"type":"integer","minimum":-5})");
  expect_language(half, {"-5", "0", "99999999"}, {"-6", "-10"});
}

TEST(JsonSchemaNumber, NumberRanges) {
  Lang l(R"({"type":"number","minimum":0,"maximum":1})");
  expect_language(l, {"0", "0.5", "1", "1.0", "0.999"}, {"-0.1", "1.01", "2", "-1"});
  Lang e(R"({"type":"number","exclusiveMinimum":0})");
  expect_language(e, {"0.001", "5", "12.5"}, {"0", "0.0", "-0.5"});
  Lang neg(R"({"type":"number","minimum":-2.0,"exclusiveMaximum":-1})");
  expect_language(neg, {"-2", "-1.5", "-1.0001"}, {"-1", "-2.5", "0"});
}

TEST(JsonSchemaNumber, DecimalBoundsAreExact) {
  // Values in hundredths, so every comparison below is exact.
  struct Case {
    const char* lo;
    bool lo_excl;
    const char* hi;
    bool hi_excl;
  };
  const std::vector<Case> cases = {{"-4.5", false, "0.25", true},   {"0.1", true, "1.5", false},
                                   {"-2.05", false, "-1", true},    {"0", true, nullptr, false},
                                   {nullptr, false, "-0.5", false}, {"1.25", false, "1.3", false}};
  auto hundredths = [](const std::string& t) {
    double d = std::stod(t);
    return static_cast<long>(d * 100 + (d < 0 ? -0.5 : 0.5));
  };
  for (const Case& c : cases) {
    std::string schema = "{\"type\":\"number\"";
    if (c.lo)
      schema += std::string(",\"") + (c.lo_excl ? "exclusiveMinimum" : "minimum") + "\":" + c.lo;
    if (c.hi)
      schema += std::string(",\"") + (c.hi_excl ? "exclusiveMaximum" : "maximum") + "\":" + c.hi;
    schema += "}";
    Lang l(schema);
    for (long v = -520; v <= 320; v += 5) {
      long a = v < 0 ? -v : v;
      std::string text = (v < 0 ? "-" : "") + std::to_string(a / 100);
      if (a % 100) text += "." + std::string(a % 100 < 10 ? "0" : "") + std::to_string(a % 100);
      if (text.size() > 2 && text.back() == '0' && text.find('.') != std::string::npos)
        text.pop_back();
      bool in = true;
      if (c.lo) in = in && (c.lo_excl ? v > hundredths(c.lo) : v >= hundredths(c.lo));
      if (c.hi) in = in && (c.hi_excl ? v < hundredths(c.hi) : v <= hundredths(c.hi));
      EXPECT_EQ(l.accepts(text), in) << schema << " on " << text << "\n" << l.gbnf();
    }
  }
}

TEST(JsonSchemaNumber, MultipleOf) {
  Lang l(R"({"type":"integer","multipleOf":3})");
  for (int n = -40; n <= 40; ++n) EXPECT_EQ(l.accepts(std::to_string(n)), n % 3 == 0) << n;
  expect_language(Lang(R"({"type":"number","multipleOf":0.01})"), {"1.25", "3"}, {"1.255"});
}

TEST(JsonSchemaCombinators, AnyOfOneOf) {
  Lang l(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})");
  expect_language(l, {"1", "\"a\""}, {"\"ab\"", "null"});
  Lang one(R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})");
  expect_language(one, {"true", "null"}, {"1"});
}

TEST(JsonSchemaCombinators, OneOfWithSiblingProperties) {
  // The sibling keywords apply to every branch (llama.cpp's converter drops them).
  Lang l(R"({"type":"object","properties":{"kind":{"type":"string"},"n":{"type":"integer"}},
             "required":["kind"],"additionalProperties":false,
             "oneOf":[{"properties":{"kind":{"const":"a"}}},{"properties":{"kind":{"const":"b"}},
                      "required":["n"]}]})");
  expect_language(l, {R"({"kind":"a"})", R"({"kind":"a","n":1})", R"({"kind":"b","n":2})"},
                  {R"({"kind":"b"})", R"({"kind":"c"})", R"({"kind":"a","n":"x"})", R"({"n":1})"});
}

TEST(JsonSchemaCombinators, AllOfMerges) {
  Lang l(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer","minimum":0}},
                        "required":["a"]},
                       {"properties":{"a":{"maximum":5},"b":{"type":"string"}},"required":["b"]}]})");
  expect_language(l, {R"({"a":3,"b":"x"})"},
                  {R"({"a":6,"b":"x"})", R"({"a":3})", R"({"b":"x"})", R"({"a":-1,"b":"x"})"});
  // additionalProperties:false in one part forbids the other part's properties.
  Lang strict_part(R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},
                                {"properties":{"b":{}}}]})");
  expect_language(strict_part, {R"({"a":1})", "{}"}, {R"({"b":1})"});
  // A key named on one side only meets the other side's additionalProperties as that side
  // gave it, even where the merge has already combined both sides' additionalProperties
  // (the second part lists it first): y is a string of 5 or more, x a string of 3 or less.
  Lang add_first(R"({"allOf":[{"properties":{"x":{}},"additionalProperties":{"type":"string"}},
                             {"additionalProperties":{"maxLength":3},
                              "properties":{"y":{"minLength":5}}}]})");
  expect_language(add_first, {R"({"y":"abcdef"})", R"({"x":"abc","y":"abcde"})"},
                  {R"({"y":"abc"})", R"({"x":"abcd"})", R"({"y":1})", R"({"z":"abcd"})"});
  // An allOf chain merged item by item, each item into the schema built so far, with an
  // anyOf beside it (each branch gets its own copy of the chain's schema).
  Lang chain(R"({"allOf":[{"properties":{"a":{"type":"integer"}}},{"required":["a"]},
                         {"properties":{"b":{"type":"string"}}},{"required":["b"]}],
                "anyOf":[{"properties":{"a":{"minimum":10}}},{"properties":{"b":{"maxLength":1}}}]})");
  expect_language(chain, {R"({"a":10,"b":"xyz"})", R"({"a":1,"b":"x"})"},
                  {R"({"a":1,"b":"xy"})", R"({"a":10})", R"({"b":"x"})", R"({"a":"1","b":"x"})"});
  // Contradictory types: nothing matches.
  EXPECT_THROW(Lang(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"), lacuna::SchemaError);
}

TEST(JsonSchemaCombinators, NotType) {
  expect_language(Lang(R"({"not":{"type":"string"}})"), {"1", "null", "[]"}, {"\"a\""});
}

TEST(JsonSchemaRef, DefinitionsPointersAndRecursion) {
  Lang l(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
             "next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},
             "$ref":"#/$defs/node"})");
  expect_language(l, {R"({"v":1})", R"({"v":1,"next":{"v":2,"next":{"v":3}}})"},
                  {R"({"v":1,"next":{}})", R"({"next":{"v":1}})"});
  Lang into_array(R"({"definitions":{"pair":[{"type":"integer"},{"type":"string"}]},
                      "type":"array","items":{"$ref":"#/definitions/pair/1"}})");
  expect_language(into_array, {"[\"a\",\"b\"]"}, {"[1]"});
  Lang root_ref(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})");
  expect_language(root_ref, {"[1,[2,[]]]"}, {"[1,\"a\"]"});
  Lang by_id(R"({"$id":"http://x.org/s.json#","definitions":{"a":{"type":"null"}},
                 "type":"array","items":[{"$ref":"http://x.org/s.json#/definitions/a"},
                                         {"$ref":"#/definitions/a"}]})");
  expect_language(by_id, {"[null,null]"}, {"[1]", "[null,1]"});
  Lang escaped(R"({"definitions":{"a/b":{"type":"null"}},"$ref":"#/definitions/a~1b"})");
  expect_language(escaped, {"null"}, {"1"});
}

// A $ref target's alternatives are made once and reused (the converter keeps them): each
// use still gives the target's warnings, keeps its language, and the depth limit still
// counts from where the reference is.
TEST(JsonSchemaRef, SharedExpansionKeepsWarningsAndDepth) {
  const std::string schema = R"({"$defs":{"t":{"allOf":[
      {"properties":{"k":{"enum":["a","b"]}}},
      {"if":{"properties":{"k":{"const":"a"}}},"then":{"required":["x"]}},
      {"if":{"type":"string","pattern":"^q"},"then":{"minLength":2}}]}},
    "type":"object","properties":{
      "p":{"allOf":[{"$ref":"#/$defs/t"}],"description":"one"},
      "q":{"allOf":[{"$ref":"#/$defs/t"}],"description":"two"}}})";
  std::vector<std::string> warned;
  SchemaOptions lenient;
  lenient.on_warning = [&](const std::string& k, const std::string& p, const std::string&) {
    warned.push_back(k + "@" + p);
  };
  Lang l(schema, lenient);
  // Once for each of p and q (the if that cannot be negated).
  EXPECT_EQ(warned, std::vector<std::string>(2, "if@/$defs/t/allOf/2/if"));
  for (const char* key : {"p", "q"}) {
    const std::string k = key;
    expect_language(l, {R"({")" + k + R"(":{"k":"a","x":1}})", R"({")" + k + R"(":{"k":"b"}})"},
                    {R"({")" + k + R"(":{"k":"a"}})", R"({")" + k + R"(":{"k":"c"}})"});
  }
  // The chain below `c` needs three more levels than where it is named. `a` names it at
  // depth 2 (within a limit of 5); `b`, under two more allOf, at depth 4, past the limit:
  // reusing what `a` made must not hide that.
  const std::string chain = R"({"$defs":{"c":{"allOf":[{"$ref":"#/$defs/d"}]},
                                         "d":{"allOf":[{"type":"string"}]}},
    "type":"object","properties":{
      "a":{"allOf":[{"$ref":"#/$defs/c"}]},
      "b":{"allOf":[{"allOf":[{"allOf":[{"$ref":"#/$defs/c"}]}]}]}}})";
  SchemaOptions shallow;
  shallow.max_inline_depth = 5;
  try {
    lacuna::json_schema_to_gbnf(chain, shallow);
    FAIL() << "the deeper reference passed the depth limit";
  } catch (const lacuna::SchemaError& e) {
    EXPECT_EQ(e.keyword, "$ref");
  }
  shallow.max_inline_depth = 7;
  expect_language(Lang(chain, shallow), {R"({"a":"x","b":"y"})"}, {R"({"a":1})", R"({"b":1})"});
}

TEST(JsonSchemaMisc, NullableAndBooleanSchemas) {
  expect_language(Lang(R"({"type":"string","nullable":true})"), {"null", "\"a\""}, {"1"});
  Lang l(R"({"type":"object","properties":{"a":true,"b":false}})");
  expect_language(l, {R"({"a":[1]})", "{}"}, {R"({"b":1})"});
  EXPECT_THROW(Lang("false"), lacuna::SchemaError);
}

TEST(JsonSchemaOptions, Whitespace) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"array"}}})";
  Lang compact(schema);
  expect_language(compact, {R"({"a":[1,2]})"}, {R"({"a": [1, 2]})", R"( {"a":[]})"});
  SchemaOptions flex;
  flex.max_whitespace = 8;
  Lang flexible(schema, flex);
  expect_language(flexible,
                  {R"({"a":[1,2]})", R"({"a": [1, 2]})", "{\n  \"a\": [\n    1\n  ]\n}", "{ }"},
                  {"{          \"a\":[]}", R"( {"a":[]})"});
  EXPECT_EQ(SchemaOptions().whitespace, SchemaOptions::Whitespace::Flexible);
}

TEST(JsonSchemaOptions, StrictNamesKeywordAndPointer) {
  const std::string schema =
      R"({"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}})";
  SchemaOptions strict;
  strict.strict = true;
  try {
    lacuna::json_schema_to_gbnf(schema, strict);
    FAIL() << "strict mode accepted uniqueItems";
  } catch (const lacuna::SchemaError& e) {
    EXPECT_EQ(e.keyword, "uniqueItems");
    EXPECT_EQ(e.pointer, "/properties/tags");
  }
  std::vector<std::string> warned;
  SchemaOptions lenient;
  lenient.on_warning = [&](const std::string& k, const std::string& p, const std::string&) {
    warned.push_back(k + "@" + p);
  };
  EXPECT_NO_THROW(lacuna::json_schema_to_gbnf(schema, lenient));
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_EQ(warned[0], "uniqueItems@/properties/tags");
}

TEST(JsonSchemaErrors, BadInputGivesClearErrors) {
  auto err = [](const std::string& s) -> std::string {
    try {
      lacuna::json_schema_to_gbnf(s);
    } catch (const lacuna::SchemaError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(err("{\"type\":"), "");
  EXPECT_NE(err(R"({"type":"strin"})").find("unknown type"), std::string::npos);
  EXPECT_NE(err(R"({"$ref":"#/definitions/missing"})").find("not found"), std::string::npos);
  EXPECT_NE(err(R"({"$ref":"other.json#/a"})").find("another document"), std::string::npos);
  EXPECT_NE(err(R"({"type":"string","minLength":-1})").find("minLength"), std::string::npos);
  EXPECT_NE(err("[1,2]").find("object or a boolean"), std::string::npos);
}

TEST(JsonSchemaLimits, HostileSchemasEndQuickly) {
  auto t0 = std::chrono::steady_clock::now();
  // A $ref cycle that never reaches a type.
  EXPECT_THROW(
      lacuna::json_schema_to_gbnf(
          R"({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},
                       "$ref":"#/$defs/a"})"),
      lacuna::SchemaError);
  // Huge enum: above the limit, a clear error; below it, a grammar.
  std::string big = "{\"enum\":[";
  for (int i = 0; i < 20000; ++i) big += (i ? "," : "") + std::to_string(i);
  big += "]}";
  EXPECT_THROW(lacuna::json_schema_to_gbnf(big), lacuna::SchemaError);
  SchemaOptions roomy;
  roomy.max_enum = 50000;
  EXPECT_FALSE(lacuna::json_schema_to_gbnf(big, roomy).empty());
  // maxLength 100000: the bound is dropped (warned), the grammar stays small.
  std::string g = lacuna::json_schema_to_gbnf(R"({"type":"string","maxLength":100000})");
  EXPECT_LT(g.size(), 2000u);
  // minItems near maxItems with large bounds: a clear error naming minItems.
  try {
    lacuna::json_schema_to_gbnf(R"({"type":"array","minItems":99999,"maxItems":100000})");
    FAIL();
  } catch (const lacuna::SchemaError& e) {
    EXPECT_EQ(e.keyword, "minItems");
  }
  // Deep nesting.
  std::string deep;
  for (int i = 0; i < 500; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 500; ++i) deep += "}";
  EXPECT_THROW(lacuna::json_schema_to_gbnf(deep), lacuna::SchemaError);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0);
}

}  // namespace
