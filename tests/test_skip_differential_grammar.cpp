// test_skip_differential_grammar.cpp — exactness of tier 1 with the real grammar engine:
// JSON Schemas and GBNF grammars, llama.cpp's grammar sampler versus the GrammarMatcher
// without skipping, with skipping, with verified forced strings; greedy, three vocabularies.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "decode/constraint_factory.h"
#include "generator_fixtures.h"
#include "lacuna/generator.h"
#include "lacuna/json_schema.h"

namespace lacuna {
namespace {

using testing::ContextHandle;
using testing::ModelHandle;
using testing::SamplerHandle;

const char* kToolSchema = R"({
  "type": "object",
  "properties": {
    "name": {"enum": ["get_weather", "search_flights"]},
    "arguments": {
      "type": "object",
      "properties": {
        "city": {"enum": ["Paris", "Rome", "Berlin"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "metric": {"type": "boolean"}
      },
      "required": ["city", "days", "metric"],
      "additionalProperties": false
    }
  },
  "required": ["name", "arguments"],
  "additionalProperties": false
})";

const char* kListSchema = R"({
  "type": "object",
  "properties": {
    "action": {"const": "reply"},
    "tags": {"type": "array", "items": {"enum": ["urgent", "later", "spam"]}, "minItems": 1, "maxItems": 3}
  },
  "required": ["action", "tags"],
  "additionalProperties": false
})";

// A GBNF grammar (not from a schema): a tiny function-call syntax.
const char* kCallGrammar = R"g(root ::= "call " name "(" arg ("," arg)* ")"
name ::= "open" | "close" | "move"
arg ::= [0-9] [0-9]?
)g";

struct Case {
  std::string label;
  std::string gbnf;
  bool is_json;
};

std::vector<Case> cases() {
  SchemaOptions compact;
  compact.whitespace = SchemaOptions::Whitespace::Compact;
  SchemaOptions flexible;
  flexible.whitespace = SchemaOptions::Whitespace::Flexible;
  flexible.max_whitespace = 2;
  return {
      {"tool/compact", json_schema_to_gbnf(kToolSchema, compact), true},
      {"tool/flexible", json_schema_to_gbnf(kToolSchema, flexible), true},
      {"list/compact", json_schema_to_gbnf(kListSchema, compact), true},
      {"call/gbnf", kCallGrammar, false},
  };
}

void check_tool_json(const std::string& label, const std::string& text) {
  const auto j = nlohmann::json::parse(text);  // throws on invalid JSON
  if (label.rfind("tool", 0) == 0) {
    ASSERT_TRUE(j.is_object());
    EXPECT_TRUE(j.at("name") == "get_weather" || j.at("name") == "search_flights");
    const auto& a = j.at("arguments");
    EXPECT_TRUE(a.at("city") == "Paris" || a.at("city") == "Rome" || a.at("city") == "Berlin");
    EXPECT_GE(a.at("days").get<int>(), 1);
    EXPECT_LE(a.at("days").get<int>(), 7);
    EXPECT_TRUE(a.at("metric").is_boolean());
    EXPECT_EQ(a.size(), 3u);
  } else {
    EXPECT_EQ(j.at("action"), "reply");
    EXPECT_GE(j.at("tags").size(), 1u);
    EXPECT_LE(j.at("tags").size(), 3u);
  }
}

class GrammarDifferential : public ::testing::TestWithParam<std::string> {};

TEST_P(GrammarDifferential, GreedyTokensIdenticalAcrossPaths) {
  ModelHandle model = testing::load_model(GetParam());
  ASSERT_NE(model, nullptr) << testing::model_path(GetParam());
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = testing::make_context(model.get(), 512, 128);
  ASSERT_NE(ctx, nullptr);
  const std::vector<std::string> prompts = {"Call a tool:", "Output JSON only.\n"};

  size_t plain_passes = 0;
  size_t fast_passes = 0;
  size_t completed = 0;
  for (const Case& c : cases()) {
    for (const auto& prompt_text : prompts) {
      SCOPED_TRACE(c.label + " / " + prompt_text);
      const auto prompt = testing::tokenize(vocab, prompt_text, true);
      SamplerHandle chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
      llama_sampler* grammar = llama_sampler_init_grammar(vocab, c.gbnf.c_str(), "root");
      ASSERT_NE(grammar, nullptr) << c.gbnf;
      llama_sampler_chain_add(chain.get(), grammar);
      llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
      const auto ref = reference_generate(ctx.get(), chain.get(), prompt, 64);

      struct Mode {
        const char* name;
        bool skip, verify;
        DraftPolicy policy;
      };
      for (const Mode m : {Mode{"plain", false, false, DraftPolicy::always},
                           Mode{"skip", true, false, DraftPolicy::always},
                           Mode{"skip+verify", true, true, DraftPolicy::always},
                           Mode{"skip+verify/adaptive", true, true, DraftPolicy::adaptive}}) {
        SCOPED_TRACE(m.name);
        llama_memory_clear(llama_get_memory(ctx.get()), true);
        GeneratorConfig cfg;
        cfg.max_tokens = 64;
        cfg.decode.skip_forced = m.skip;
        cfg.decode.verify_strings = m.verify;
        cfg.decode.draft_policy = m.policy;
        Generator gen(ctx.get(), cfg, decode::make_grammar_constraint(vocab, c.gbnf));
        gen.prefill(prompt);
        gen.generate();
        ASSERT_EQ(gen.tokens(), ref.tokens) << testing::detokenize(vocab, ref.tokens);
        if (ref.stats.stop == StopReason::eog) {
          EXPECT_TRUE(gen.stats().stop == StopReason::constraint_completed ||
                      gen.stats().stop == StopReason::eog);
        } else {
          EXPECT_EQ(gen.stats().stop, StopReason::max_tokens);
        }
        if (m.skip && m.verify && m.policy == DraftPolicy::always) {
          fast_passes += gen.stats().forward_passes;
          if (gen.stats().stop != StopReason::max_tokens) {
            ++completed;
            if (c.is_json) check_tool_json(c.label, gen.text());
          }
        }
        if (!m.skip && !m.verify) plain_passes += gen.stats().forward_passes;
      }
    }
  }
  EXPECT_GT(completed, 0u);
  EXPECT_LT(fast_passes, plain_passes);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GrammarDifferential,
                         ::testing::Values("tiny-llama3", "tiny-spm", "tiny-qwen2"));

TEST(ConstraintFactory, ChoicesAndErrors) {
  EXPECT_EQ(decode::choices_to_gbnf({"a", "b\"c"}), "root ::= \"a\" | \"b\\\"c\"\n");
  EXPECT_THROW(decode::choices_to_gbnf({}), std::invalid_argument);
  EXPECT_THROW(decode::choices_to_gbnf({"x", ""}), std::invalid_argument);
  decode::ConstraintSpec none;
  EXPECT_THROW(decode::spec_to_gbnf(none), std::invalid_argument);
  decode::ConstraintSpec two;
  two.regex = "a+";
  two.choices = {"a"};
  EXPECT_THROW(decode::spec_to_gbnf(two), std::invalid_argument);
  decode::ConstraintSpec missing;
  missing.schema_file = "/nonexistent/schema.json";
  EXPECT_THROW(decode::spec_to_gbnf(missing), std::runtime_error);
  decode::ConstraintSpec re;
  re.regex = "[0-9]{2}";
  EXPECT_FALSE(decode::spec_to_gbnf(re).empty());
}

}  // namespace
}  // namespace lacuna
