// test_json_schema_oracle.cpp — cross-check against llama.cpp: for schemas that llama.cpp's
// own converter handles correctly, the equivalent GBNF (written by hand here) run through
// llama.cpp's grammar sampler on tokenized instances must accept the same instances as
// lacuna's grammar for the schema.
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "llama.h"

namespace {

struct Case {
  const char* schema;
  const char* llama_gbnf;  // the language, written by hand in llama.cpp's dialect
  std::vector<std::pair<std::string, bool>> instances;  // text, valid
};

const char* kCommon = R"(
string ::= "\"" ([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\""
integer ::= "-"? ("0" | [1-9] [0-9]*)
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
)";

std::vector<Case> cases() {
  return {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
           "required":["name","age"],"additionalProperties":false})",
       R"(root ::= "{\"name\":" string ",\"age\":" integer "}")",
       {{R"({"name":"Ann","age":31})", true},
        {R"({"name":"Ann \"A\"","age":-2})", true},
        {R"({"age":31,"name":"Ann"})", false},
        {R"({"name":"Ann"})", false},
        {R"({"name":"Ann","age":3.5})", false},
        {R"({"name":"Ann","age":31,"x":1})", false}}},
      {R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})",
       R"(root ::= "[" number ("," number)? ("," number)? "]")",
       {{"[1]", true},
        {"[1.5,2e3,-4]", true},
        {"[]", false},
        {"[1,2,3,4]", false},
        {"[\"1\"]", false}}},
      {R"({"enum":["red","green",3,null]})",
       R"(root ::= "\"red\"" | "\"green\"" | "3" | "null")",
       {{"\"red\"", true}, {"3", true}, {"null", true}, {"\"blue\"", false}, {"30", false}}},
      {R"({"type":"string","pattern":"^[A-Z]{2}\\d{2,4}$"})",
       R"(root ::= "\"" [A-Z] [A-Z] [0-9] [0-9] [0-9]? [0-9]? "\"")",
       {{"\"AB12\"", true},
        {"\"XY1234\"", true},
        {"\"AB1\"", false},
        {"\"ab12\"", false},
        {"\"AB12345\"", false}}},
      {R"({"type":"integer","minimum":-5,"maximum":120})",
       R"(root ::= "-" [1-5] | [0-9] | [1-9] [0-9] | "1" [01] [0-9] | "120")",
       {{"-5", true},
        {"0", true},
        {"99", true},
        {"120", true},
        {"-6", false},
        {"121", false},
        {"007", false}}},
      {R"({"anyOf":[{"type":"boolean"},{"type":"string","format":"date"}]})",
       R"(root ::= "true" | "false" | "\"" [0-9] [0-9] [0-9] [0-9] "-" ( ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | [12] [0-9]) ) "\"")",
       {{"true", true},
        {"\"2024-02-29\"", true},
        {"\"2024-06-31\"", false},
        {"\"2024-1-01\"", false},
        {"1", false}}},
  };
}

class Oracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    lacuna::ModelParams mp;
    mp.vocab_only = true;
    model_ = new lacuna::Model(lacuna::Model::load(
        std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-llama-bpe.gguf", mp));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  // llama.cpp's grammar sampler over the tokens of `text`: every token must survive
  // apply(), and an end-of-generation token must be allowed at the end.
  static bool llama_accepts(const std::string& gbnf, const std::string& text) {
    const llama_vocab* vocab = model_->vocab_ptr();
    llama_sampler* s = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
    EXPECT_NE(s, nullptr) << gbnf;
    if (!s) return false;
    lacuna::Vocab v(vocab);
    std::vector<lacuna::Token> toks = lacuna::tokenize(v, text, false, false);
    toks.push_back(llama_vocab_eos(vocab));
    bool ok = true;
    for (size_t i = 0; i < toks.size() && ok; ++i) {
      llama_token_data d{toks[i], 1.0f, 0.0f};
      llama_token_data_array arr{&d, 1, -1, false};
      llama_sampler_apply(s, &arr);
      if (std::isinf(d.logit) && d.logit < 0) {
        ok = false;
      } else if (i + 1 < toks.size()) {
        llama_sampler_accept(s, toks[i]);
      }
    }
    llama_sampler_free(s);
    return ok;
  }

  static lacuna::Model* model_;
};

lacuna::Model* Oracle::model_ = nullptr;

TEST_F(Oracle, SameLanguageAsLlamaCppOnInstances) {
  lacuna::SchemaOptions opt;
  opt.whitespace = lacuna::SchemaOptions::Whitespace::Compact;
  for (const Case& c : cases()) {
    std::string ours = lacuna::json_schema_to_gbnf(c.schema, opt);
    auto compiled = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(ours), nullptr);
    std::string theirs = std::string(c.llama_gbnf) + kCommon;
    for (const auto& [text, valid] : c.instances) {
      lacuna::GrammarMatcher m(compiled);
      bool lacuna_ok = m.accept_string(text) && m.is_completed();
      bool llama_ok = llama_accepts(theirs, text);
      EXPECT_EQ(lacuna_ok, llama_ok) << c.schema << "\non " << text << "\nours:\n" << ours;
      EXPECT_EQ(lacuna_ok, valid) << c.schema << "\non " << text;
    }
  }
}

}  // namespace
