// test_json_schema_coverage.cpp — JSON Schema cases found failing on JSONSchemaBench: key order
// of required-only keys, instance key order under if/then branches, draft-7 $ref siblings,
// numeric enum spellings, 64-bit integer bounds, propertyNames, warnings inside branches.
#include <gtest/gtest.h>

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
