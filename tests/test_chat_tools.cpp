// test_chat_tools.cpp — tool calls valid by construction: generations on the tiny models with
// their real chat templates (Qwen 2.5's <tool_call> JSON, Llama 3.1's bare JSON) always give
// calls that parse and match the declared schemas; tool_choice and parallel_tool_calls are
// obeyed; nothing is constrained inside <think>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "lacuna/chat.h"
#include "lacuna/generator.h"
#include "lacuna/model.h"
#include "test_models.h"

namespace {

using nlohmann::json;
namespace chat = lacuna::chat;

// Tool i of a family of small, bounded schemas (so random weights finish a call quickly).
json tool_json(int i) {
  json props = json::object();
  props["city"] = {{"type", "string"}, {"maxLength", 6}};
  if (i % 3 == 1) props["days"] = {{"type", "integer"}, {"minimum", 1}, {"maximum", 9}};
  if (i % 3 == 2) props["unit"] = {{"enum", {"c", "f"}}};
  if (i % 2 == 1) props["exact"] = {{"type", "boolean"}};
  json req = json::array({"city"});
  if (i % 3 == 2) req.push_back("unit");
  return {{"type", "function"},
          {"function",
           {{"name", "tool_" + std::to_string(i)},
            {"description", "tool number " + std::to_string(i)},
            {"parameters",
             {{"type", "object"},
              {"properties", props},
              {"required", req},
              {"additionalProperties", false}}}}}};
}

std::vector<chat::Tool> tools(int n) {
  json arr = json::array();
  for (int i = 0; i < n; ++i) arr.push_back(tool_json(i));
  return chat::tools_from_json(arr.dump());
}

// A tool "lookup" with these properties, "code" required.
json lookup_tool(const json& properties) {
  return {
      {"type", "function"},
      {"function",
       {{"name", "lookup"},
        {"parameters", {{"type", "object"}, {"properties", properties}, {"required", {"code"}}}}}}};
}

// An independent check of the arguments against tool_json(i)'s schema.
void expect_valid_call(const chat::ToolCall& call, int n_tools) {
  int idx = -1;
  for (int i = 0; i < n_tools; ++i) {
    if (call.name == "tool_" + std::to_string(i)) idx = i;
  }
  ASSERT_GE(idx, 0) << "undeclared tool " << call.name;
  const json schema = tool_json(idx)["function"]["parameters"];
  const json args = json::parse(call.arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.arguments;
  for (const auto& r : schema["required"]) EXPECT_TRUE(args.contains(r)) << call.arguments;
  for (const auto& [k, v] : args.items()) {
    ASSERT_TRUE(schema["properties"].contains(k)) << "extra property " << k;
    const json& p = schema["properties"][k];
    if (p.contains("enum")) {
      EXPECT_NE(std::find(p["enum"].begin(), p["enum"].end(), v), p["enum"].end()) << v;
    } else if (p["type"] == "string") {
      ASSERT_TRUE(v.is_string()) << call.arguments;
      size_t code_points = 0;
      for (unsigned char ch : v.get<std::string>()) code_points += (ch & 0xC0) != 0x80;
      EXPECT_LE(code_points, 6u) << v;
    } else if (p["type"] == "integer") {
      ASSERT_TRUE(v.is_number_integer()) << call.arguments;
      EXPECT_GE(v.get<int>(), 1);
      EXPECT_LE(v.get<int>(), 9);
    } else if (p["type"] == "boolean") {
      EXPECT_TRUE(v.is_boolean()) << call.arguments;
    }
  }
}

struct Loaded {
  lacuna::Model model;
  lacuna::Context ctx;
  chat::Template tmpl;
};

Loaded load(const std::string& preset) {
  lacuna::Model m = lacuna::Model::load(lacuna::testing::ensure_test_model(preset));
  lacuna::ContextParams cp;
  cp.n_ctx = 4096;
  cp.n_batch = 2048;
  cp.n_ubatch = 2048;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  lacuna::Context c = lacuna::Context::create(m, cp);
  chat::Template t = chat::Template::for_model(m.get());
  return {std::move(m), std::move(c), std::move(t)};
}

chat::Request request(int n_tools, const std::string& choice, bool parallel) {
  chat::Request r;
  r.messages = chat::messages_from_json(
      R"([{"role": "user", "content": "Use a tool for the weather in Paris."}])");
  r.tools = tools(n_tools);
  r.tool_choice = chat::ToolChoice::parse(choice);
  r.parallel_tool_calls = parallel;
  r.now_unix = 1721001600;
  return r;
}

// Generates one answer; returns the raw text. complete: whether the answer ended before the
// token budget (a random model allowed several calls may go on calling).
std::string generate(Loaded& L, const chat::Prompt& p, float temp, uint32_t seed, bool* complete,
                     int max_tokens = 160) {
  llama_memory_clear(llama_get_memory(L.ctx.get()), true);
  lacuna::GeneratorConfig cfg;
  cfg.temp = temp;
  cfg.seed = seed;
  cfg.max_tokens = max_tokens;
  cfg.stop_strings = p.stops;
  lacuna::Generator gen(L.ctx.get(), cfg, chat::make_constraint(L.model.vocab_ptr(), p));
  const std::vector<lacuna::Token> toks = chat::tokenize_prompt(L.model.vocab_ptr(), p.text);
  gen.prefill(toks);
  const lacuna::StopReason why = gen.generate();
  *complete = why != lacuna::StopReason::max_tokens;
  EXPECT_NE(why, lacuna::StopReason::constraint_dead_end) << gen.text();
  return gen.text();
}

// `n` sampled answers (seeds first_seed, first_seed + 1, ...): each ends, parses and is one
// call; its arguments (a JSON object) are returned for the caller's schema checks.
std::vector<json> sampled_call_args(Loaded& L, const chat::Prompt& p, uint32_t first_seed, int n,
                                    int max_tokens) {
  std::vector<json> out;
  for (int i = 0; i < n; ++i) {
    bool complete = false;
    const std::string text =
        generate(L, p, 1.0f, first_seed + static_cast<uint32_t>(i), &complete, max_tokens);
    EXPECT_TRUE(complete) << text;
    chat::Message m;
    try {
      m = chat::parse(p, text, false);
    } catch (const chat::ChatError& e) {
      ADD_FAILURE() << e.what() << "\n" << text;
      continue;
    }
    EXPECT_EQ(m.tool_calls.size(), 1u) << text;
    if (m.tool_calls.size() != 1) continue;
    const json args = json::parse(m.tool_calls[0].arguments, nullptr, false);
    EXPECT_TRUE(args.is_object()) << m.tool_calls[0].arguments;
    if (args.is_object()) out.push_back(args);
  }
  return out;
}

void run_calls(const std::string& preset) {
  Loaded L = load(preset);
  for (int n_tools : {1, 3, 10}) {
    for (const std::string choice : {"required", "tool_2"}) {
      if (choice == "tool_2" && n_tools < 3) continue;
      for (bool parallel : {false, true}) {
        chat::Request r = request(n_tools, choice, parallel);
        r.thinking_budget = 8;  // random weights may think past the token budget (gemma-4)
        const chat::Prompt p = L.tmpl.apply(r);
        ASSERT_TRUE(p.constraint_error.empty()) << p.constraint_error;
        for (int s = 0; s < 3; ++s) {
          SCOPED_TRACE(preset + " tools " + std::to_string(n_tools) + " " + choice +
                       (parallel ? " parallel" : " single") + " seed " + std::to_string(s));
          bool complete = false;
          const std::string out = generate(L, p, s == 0 ? 0.0f : 1.0f, 17u + s, &complete);
          // One call always ends within the budget; several may not (then the last one is
          // cut and the others are checked).
          if (!parallel) {
            EXPECT_TRUE(complete) << out;
          }
          chat::Message m;
          ASSERT_NO_THROW(m = chat::parse(p, out, !complete)) << out;
          if (!complete && !m.tool_calls.empty()) m.tool_calls.pop_back();
          if (complete) {
            ASSERT_FALSE(m.tool_calls.empty()) << out;
          }
          if (!parallel) {
            EXPECT_EQ(m.tool_calls.size(), 1u) << out;
          }
          for (const chat::ToolCall& c : m.tool_calls) {
            expect_valid_call(c, n_tools);
            if (choice == "tool_2") {
              EXPECT_EQ(c.name, "tool_2") << out;
            }
          }
        }
      }
    }
  }
}

TEST(ChatTools, QwenToolCallFormatAlwaysGivesValidCalls) {
  run_calls("tiny-qwen2");
}
TEST(ChatTools, Llama31FormatAlwaysGivesValidCalls) {
  run_calls("tiny-llama3");
}

// gemma-4: the large vocabulary (262,144 tokens) with its own tool-call tokens, and arguments
// in gemma-4's value notation rather than JSON.
TEST(ChatTools, Gemma4FormatAlwaysGivesValidCalls) {
  run_calls("tiny-gemma4");
}

// gemma-4's notation (bare keys, strings between <|"|>) follows the tool's schema: the
// grammar accepts the valid spellings and refuses the others, and answers parse to JSON that
// validates.
TEST(ChatTools, Gemma4ArgumentsFollowTheirSchema) {
  Loaded L = load("tiny-gemma4");
  const json tool =
      lookup_tool({{"code", {{"type", "string"}, {"pattern", "^[A-Z]{3}$"}}},
                   {"count", {{"type", "integer"}, {"minimum", 1}, {"maximum", 99}}},
                   {"kind", {{"enum", {"a<b", "c"}}}},
                   {"note", {{"type", "string"}, {"maxLength", 8}}},
                   {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 2}}},
                   {"where",
                    {{"type", "object"},
                     {"properties", {{"lat", {{"type", "number"}}}, {"ok", {{"type", "boolean"}}}}},
                     {"required", {"lat"}}}}});
  chat::Request r = request(1, "required", false);
  r.tools = chat::tools_from_json(json::array({tool}).dump());
  r.enable_thinking = false;
  const chat::Prompt p = L.tmpl.apply(r);
  ASSERT_TRUE(p.constraint_error.empty()) << p.constraint_error;
  const auto accepts = [&](const std::string& args) {
    auto c = chat::make_constraint(L.model.vocab_ptr(), p);
    const std::string text = "<|tool_call>call:lookup" + args + "<tool_call|>";
    for (lacuna::Token tok : lacuna::tokenize(L.model.vocab(), text, false, true)) {
      if (!c->accept_token(tok)) return false;
    }
    return c->is_completed();
  };
  const std::string q = "<|\"|>";
  EXPECT_TRUE(accepts("{code:" + q + "ABC" + q + "}"));
  EXPECT_FALSE(accepts("{}"));                                // code is required
  EXPECT_FALSE(accepts("{code:" + q + "AB1" + q + "}"));      // pattern
  EXPECT_FALSE(accepts("{\"code\":" + q + "ABC" + q + "}"));  // keys are bare
  EXPECT_FALSE(accepts("{code:\"ABC\"}"));                    // strings between <|"|>
  EXPECT_TRUE(accepts("{code:" + q + "ABC" + q + ",count:12,kind:" + q + "a<b" + q + "}"));
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",count:0}"));                   // minimum
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",kind:" + q + "b" + q + "}"));  // enum
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",note:" + q + "123456789" + q + "}"));
  EXPECT_TRUE(
      accepts("{code:" + q + "ABC" + q + ",tags:[" + q + "x" + q + "," + q + "y" + q + "]}"));
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",tags:[" + q + "x" + q + "," + q + "y" + q +
                       "," + q + "z" + q + "]}"));  // maxItems
  EXPECT_TRUE(accepts("{code:" + q + "ABC" + q + ",where:{lat:-1.5,ok:true}}"));
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",where:{ok:true}}"));  // nested required
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",extra:1}"));          // undeclared
  EXPECT_FALSE(accepts("{code:" + q + "ABC" + q + ",code:" + q + "ABC" + q + "}"));  // repeat

  for (const json& args : sampled_call_args(L, p, 60u, 4, 320)) {
    ASSERT_TRUE(args.contains("code")) << args.dump();
    EXPECT_TRUE(std::regex_match(args["code"].get<std::string>(), std::regex("[A-Z]{3}")));
    if (args.contains("count")) {
      EXPECT_TRUE(args["count"].is_number_integer());
      EXPECT_GE(args["count"].get<int>(), 1);
      EXPECT_LE(args["count"].get<int>(), 99);
    }
    if (args.contains("kind")) {
      EXPECT_TRUE(args["kind"] == "a<b" || args["kind"] == "c");
    }
    if (args.contains("tags")) {
      EXPECT_LE(args["tags"].size(), 2u);
    }
    if (args.contains("where")) {
      EXPECT_TRUE(args["where"].contains("lat")) << args.dump();
      EXPECT_TRUE(args["where"]["lat"].is_number()) << args.dump();
    }
  }
}

// The templates whose tool calls lacuna's constraint is verified to keep valid (docs/chat.md
// lists them and the known gaps of the others).
const char* const kVerifiedCallTemplates[] = {
    "Apertus-8B-Instruct",
    "Bielik-11B-v3.0-Instruct",
    "Cohere2MoE",
    "CohereForAI-c4ai-command-r-plus-tool_use",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-ai-DeepSeek-V3.1",
    "deepseek-ai-DeepSeek-V3.2",
    "deepseek-ai-DeepSeek-V4",
    "deepseek-ai-DeepSeek-V4-Flash-0731",
    "fireworks-ai-llama-3-firefunction-v2",
    "GigaChat3-10B-A1.8B",
    "GigaChat3.1-10B-A1.8B",
    "google-gemma-4-31B-it",
    "google-gemma-4-31B-it-interleaved",
    "GLM-4.6",
    "GLM-4.7-Flash",
    "ibm-granite-granite-4.0",
    "ibm-granite-granite-4.1",
    "Kimi-K2-Instruct",
    "Kimi-K2-Thinking",
    "llama-cpp-deepseek-r1",
    "meetkai-functionary-medium-v3.1",
    "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct",
    "meta-llama-Llama-3.3-70B-Instruct",
    "MiMo-VL",
    "MiniMax-M1",
    "MiniMax-M2",
    "MiniMax-M3",
    "Mistral-Small-3.2-24B-Instruct-2506",
    "mistralai-Ministral-3-14B-Reasoning-2512",
    "moonshotai-Kimi-K2",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "NVIDIA-Nemotron-Nano-v2",
    "openai-gpt-oss-120b",
    "poolside-Laguna-S-2.1",
    "poolside-Laguna-XS-2.1",
    "poolside-Laguna-XS.2",
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B",
    "Qwen-QwQ-32B",
    "Qwen3-Coder",
    "Qwen3.5-4B",
    "Reka-Edge",
    "Spark2.5",
    "StepFun3.5-Flash",
    "tencent-Hy3",
    "unsloth-Apriel-1.5",
    "unsloth-mistral-Devstral-Small-2507",
    "upstage-Solar-Open-100B",
};

// One template's check: its calls are constrained (greedy and sampled answers on the tiny
// Qwen model, whose vocabulary spells any format's markers in text tokens, are one call that
// parses and validates), or make_constraint refuses with a reason. Returns a report line.
std::string check_template_calls(Loaded& L, const std::string& name, bool* refused) {
  chat::Template t = chat::Template::from_source(chat::Template::load_source(name), "<s>", "</s>");
  // 3 tools: greedy and one sampled answer (LACUNA_TEST_TEMPLATE_SAMPLES=N: N sampled
  // answers); 1 and 10 tools: the greedy answer.
  const char* env = std::getenv("LACUNA_TEST_TEMPLATE_SAMPLES");
  const int samples = env != nullptr ? std::max(1, std::atoi(env)) : 1;
  for (int n_tools : {3, 1, 10}) {
    chat::Request r = request(n_tools, "required", false);
    r.enable_thinking = false;  // random weights may think past the token budget
    r.thinking_budget = 8;      // where the prompt opens reasoning all the same (MiniMax-M2)
    const chat::Prompt p = t.apply(r);
    SCOPED_TRACE(name + " (" + p.format + "), " + std::to_string(n_tools) + " tools");
    *refused = !p.constraint_error.empty();
    if (*refused) {
      EXPECT_THROW(chat::make_constraint(L.model.vocab_ptr(), p), chat::ChatError);
      return "refused " + name + ": " + p.constraint_error;
    }
    for (int s = 0; s <= (n_tools == 3 ? samples : 0); ++s) {
      bool complete = false;
      const std::string out = generate(L, p, s == 0 ? 0.0f : 1.0f, 5u + s, &complete, 320);
      EXPECT_TRUE(complete) << out;
      chat::Message m;
      try {
        m = chat::parse(p, out, !complete);
      } catch (const chat::ChatError& e) {
        ADD_FAILURE() << e.what() << "\n" << out;
        continue;
      }
      EXPECT_EQ(m.tool_calls.size(), 1u) << out;
      if (m.tool_calls.size() == 1) expect_valid_call(m.tool_calls[0], n_tools);
    }
  }
  return "constrained " + name;
}

TEST(ChatTools, VerifiedTemplatesAlwaysGiveValidCalls) {
  Loaded L = load("tiny-qwen2");
  for (const char* name : kVerifiedCallTemplates) {
    bool refused = false;
    check_template_calls(L, name, &refused);
    EXPECT_FALSE(refused) << name;
  }
}

// XML-like formats write a string parameter as raw text up to a closing tag: the text obeys
// the parameter's string keywords and cannot hold the tag; optional parameters come at most
// once.
TEST(ChatTools, XmlValuesFollowTheirStringSchema) {
  Loaded L = load("tiny-qwen2");
  const json tool =
      lookup_tool({{"code", {{"type", "string"}, {"pattern", "^[A-Z]{3}$"}}},
                   {"note", {{"type", "string"}, {"maxLength", 40}}},
                   {"kind", {{"enum", {"a<b", "c"}}}},
                   {"count", {{"type", "integer"}, {"minimum", 1}, {"maximum", 99}}}});
  chat::Request r = request(1, "required", false);
  r.tools = chat::tools_from_json(json::array({tool}).dump());
  r.enable_thinking = false;
  struct Case {
    const char* tmpl;
    std::string open;                      // the call up to the first value
    std::string (*arg)(const char* name);  // a parameter's opening
    std::string close;                     // a value's closing tag
  };
  const Case cases[] = {
      {"Qwen3-Coder", "<tool_call>\n<function=lookup>\n",
       [](const char* n) { return "<parameter=" + std::string(n) + ">\n"; }, "\n</parameter>\n"},
      {"GLM-4.7-Flash", "<tool_call>lookup",
       [](const char* n) { return "<arg_key>" + std::string(n) + "</arg_key><arg_value>"; },
       "</arg_value>"},
      // DeepSeek V3.2's DSML: the raw value runs to its closing tag by an `until` rule.
      {"deepseek-ai-DeepSeek-V3.2",
       "<\xEF\xBD\x9C"
       "DSML\xEF\xBD\x9C"
       "function_calls>\n<\xEF\xBD\x9C"
       "DSML\xEF\xBD\x9C"
       "invoke name=\"lookup\">\n",
       [](const char* n) {
         return "<\xEF\xBD\x9C"
                "DSML\xEF\xBD\x9C"
                "parameter name=\"" +
                std::string(n) + "\" string=\"" + (std::string(n) == "count" ? "false" : "true") +
                "\">";
       },
       "</\xEF\xBD\x9C"
       "DSML\xEF\xBD\x9C"
       "parameter>"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.tmpl);
    chat::Template t =
        chat::Template::from_source(chat::Template::load_source(k.tmpl), "<s>", "</s>");
    const chat::Prompt p = t.apply(r);
    ASSERT_TRUE(p.constraint_error.empty()) << p.constraint_error;
    const auto accepts = [&](const std::string& text) {
      auto c = chat::make_constraint(L.model.vocab_ptr(), p);
      for (lacuna::Token tok : chat::tokenize_prompt(L.model.vocab_ptr(), text)) {
        if (!c->accept_token(tok)) return false;
      }
      return true;
    };
    const std::string code = k.open + k.arg("code");
    EXPECT_TRUE(accepts(code + "ABC" + k.close));
    EXPECT_FALSE(accepts(code + "AB1"));                  // pattern
    EXPECT_FALSE(accepts(code + "ABCD"));                 // pattern's end
    EXPECT_FALSE(accepts(k.open + k.arg("note") + "x"));  // the required code first
    const std::string after_code = code + "XYZ" + k.close;
    EXPECT_TRUE(accepts(after_code + k.arg("note") + "two\nlines" + k.close));
    EXPECT_FALSE(accepts(after_code + k.arg("note") + std::string(41, 'n')));  // maxLength
    // The closing tag ends the value: what follows is the next parameter or the call's end.
    EXPECT_FALSE(accepts(after_code + k.arg("note") + "x" + k.close + "y"));
    EXPECT_TRUE(accepts(after_code + k.arg("kind") + "a<b" + k.close));
    EXPECT_FALSE(accepts(after_code + k.arg("kind") + "b"));  // enum
    EXPECT_TRUE(accepts(after_code + k.arg("count") + "12" + k.close));
    EXPECT_FALSE(accepts(after_code + k.arg("count") + "0"));  // minimum
    // Each optional parameter at most once (a repeated key would be a duplicate in JSON).
    const std::string note = k.arg("note") + "n" + k.close;
    EXPECT_FALSE(accepts(after_code + note + note));

    // Sampled answers parse, and their values obey the schema.
    // DSML's tags take some 25 tokens a parameter: a longer budget than the others need.
    for (const json& args : sampled_call_args(L, p, 40u, 2, 320)) {
      ASSERT_TRUE(args.contains("code")) << args.dump();
      EXPECT_TRUE(std::regex_match(args["code"].get<std::string>(), std::regex("[A-Z]{3}")))
          << args.dump();
      if (args.contains("note")) {
        size_t code_points = 0;
        for (unsigned char ch : args["note"].get<std::string>()) code_points += (ch & 0xC0) != 0x80;
        EXPECT_LE(code_points, 40u) << args.dump();
      }
      if (args.contains("kind")) {
        EXPECT_TRUE(args["kind"] == "a<b" || args["kind"] == "c") << args.dump();
      }
      if (args.contains("count")) {
        EXPECT_GE(args["count"].get<int>(), 1) << args.dump();
        EXPECT_LE(args["count"].get<int>(), 99) << args.dump();
      }
    }
  }
}

// Every other template of the pinned llama.cpp (LACUNA_TEST_ALL_TEMPLATES=1: a survey, not
// part of the suite; =NAME,NAME: those templates): prints which constrain valid calls, which fail,
// which are refused.
TEST(ChatTools, SurveyOfTheOtherTemplates) {
  if (std::getenv("LACUNA_TEST_ALL_TEMPLATES") == nullptr) {
    GTEST_SKIP() << "set LACUNA_TEST_ALL_TEMPLATES=1 to survey every template";
  }
  // LACUNA_TEST_ALL_TEMPLATES=NAME,NAME: only those (verified or not).
  const std::string only = std::getenv("LACUNA_TEST_ALL_TEMPLATES");
  const auto listed = [&](const std::string& name) {
    return ("," + only + ",").find("," + name + ",") != std::string::npos;
  };
  Loaded L = load("tiny-qwen2");
  for (const std::string& name : chat::Template::known_names()) {
    const bool verified =
        std::find(std::begin(kVerifiedCallTemplates), std::end(kVerifiedCallTemplates), name) !=
        std::end(kVerifiedCallTemplates);
    if (only == "1" ? verified : !listed(name)) continue;
    bool refused = false;
    std::string line;
    try {
      line = check_template_calls(L, name, &refused);
    } catch (const chat::ChatError& e) {
      line = "skipped " + name + ": " + e.what();
    }
    std::fprintf(stderr, "[survey] %s\n", line.c_str());
  }
}

TEST(ChatTools, AutoLeavesTextFreeUntilTheTrigger) {
  Loaded L = load("tiny-qwen2");
  const chat::Prompt p = L.tmpl.apply(request(3, "auto", false));
  ASSERT_FALSE(p.triggers.empty());
  auto c = chat::make_constraint(L.model.vocab_ptr(), p);
  ASSERT_NE(c, nullptr);
  std::vector<uint32_t> mask(lacuna::bitmask_words(c->n_vocab()));
  c->fill_next_token_bitmask(mask.data());
  size_t allowed = 0;
  for (size_t t = 0; t < c->n_vocab(); ++t) allowed += lacuna::bitmask_test(mask.data(), t);
  EXPECT_EQ(allowed, c->n_vocab());
  // After the trigger text the call syntax is enforced: a name that is not declared fails.
  const auto feed = [&](const std::string& text) {
    for (lacuna::Token t : chat::tokenize_prompt(L.model.vocab_ptr(), text)) {
      if (!c->accept_token(t)) return false;
    }
    return true;
  };
  ASSERT_TRUE(feed("Sure. <tool_call>\n{\"name\": \"tool_"));
  EXPECT_FALSE(feed("9"));
  EXPECT_TRUE(feed("1\""));
}

TEST(ChatTools, NoneParsesToolCallTextAsContent) {
  Loaded L = load("tiny-qwen2");
  const chat::Prompt p = L.tmpl.apply(request(3, "none", false));
  EXPECT_EQ(chat::make_constraint(L.model.vocab_ptr(), p), nullptr);
  const chat::Message m =
      chat::parse(p, "<tool_call>\n{\"name\": \"tool_1\", \"arguments\": {}}\n</tool_call>");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_NE(m.content.find("tool_1"), std::string::npos);
}

TEST(ChatTools, NothingIsConstrainedInsideThinking) {
  Loaded L = load("tiny-qwen3");
  const chat::Prompt p = L.tmpl.apply(request(3, "required", false));
  ASSERT_EQ(p.thinking_start, "<think>");
  auto c = chat::make_constraint(L.model.vocab_ptr(), p);
  ASSERT_NE(c, nullptr);
  std::vector<uint32_t> mask(lacuna::bitmask_words(c->n_vocab()));
  const auto n_allowed = [&] {
    c->fill_next_token_bitmask(mask.data());
    size_t n = 0;
    for (size_t t = 0; t < c->n_vocab(); ++t) n += lacuna::bitmask_test(mask.data(), t);
    return n;
  };
  const auto feed = [&](const std::string& text) {
    for (lacuna::Token t : chat::tokenize_prompt(L.model.vocab_ptr(), text)) {
      if (!c->accept_token(t)) return false;
    }
    return true;
  };
  EXPECT_LT(n_allowed(), c->n_vocab());  // before <think>: a call, or the start of thinking
  ASSERT_TRUE(feed("<think>"));
  EXPECT_EQ(n_allowed(), c->n_vocab());
  ASSERT_TRUE(feed("I could call tool_9 with {bad json <tool_call> here"));
  EXPECT_EQ(n_allowed(), c->n_vocab());
  ASSERT_TRUE(feed("</think>\n\n"));
  EXPECT_LT(n_allowed(), c->n_vocab());  // the required call starts
  EXPECT_FALSE(feed("plain text"));
  // Rolling back into the reasoning frees the mask again.
  ASSERT_TRUE(c->rollback(1));
  while (n_allowed() != c->n_vocab() && c->rollback(1)) {
  }
  EXPECT_EQ(n_allowed(), c->n_vocab());
  EXPECT_TRUE(feed("more thoughts"));
  EXPECT_EQ(n_allowed(), c->n_vocab());
}

// A thinking budget: past N tokens of reasoning only the end tag's tokens are allowed; after
// it the answer is free again (no tools), and rolling back below the budget frees the mask.
TEST(ChatTools, ThinkingBudgetForcesTheEndOfReasoning) {
  Loaded L = load("tiny-qwen3");
  chat::Request r;
  r.messages = chat::messages_from_json(R"([{"role": "user", "content": "Think briefly."}])");
  r.thinking_budget = 6;
  const chat::Prompt p = L.tmpl.apply(r);
  ASSERT_EQ(p.thinking_start, "<think>");
  auto c = chat::make_constraint(L.model.vocab_ptr(), p);
  ASSERT_NE(c, nullptr);  // no tools, but a budget: a gate over a free answer
  std::vector<uint32_t> mask(lacuna::bitmask_words(c->n_vocab()));
  const auto allowed = [&] {
    c->fill_next_token_bitmask(mask.data());
    std::vector<lacuna::Token> out;
    for (size_t t = 0; t < c->n_vocab(); ++t) {
      if (lacuna::bitmask_test(mask.data(), t)) out.push_back(static_cast<lacuna::Token>(t));
    }
    return out;
  };
  const auto tokens = [&](const std::string& text) {
    return chat::tokenize_prompt(L.model.vocab_ptr(), text);
  };
  for (lacuna::Token t : tokens("<think>")) ASSERT_TRUE(c->accept_token(t));
  const std::vector<lacuna::Token> words = tokens(" one two three four five six seven");
  ASSERT_GE(words.size(), 7u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(allowed().size(), c->n_vocab()) << i;
    ASSERT_TRUE(c->accept_token(words[i]));
  }
  // The budget is spent: only tokens spelling "</think>" (its pieces from the start).
  const std::vector<lacuna::Token> closing = allowed();
  ASSERT_FALSE(closing.empty());
  EXPECT_LT(closing.size(), 16u);
  const std::vector<lacuna::Token> end = tokens("</think>");
  EXPECT_NE(std::find(closing.begin(), closing.end(), end[0]), closing.end());
  EXPECT_FALSE(c->accept_token(words[6]));  // more reasoning is refused
  ASSERT_EQ(allowed().size(), closing.size());
  // Rolling back below the budget frees the mask again.
  ASSERT_TRUE(c->rollback(1));
  EXPECT_EQ(allowed().size(), c->n_vocab());
  ASSERT_TRUE(c->accept_token(words[5]));
  for (lacuna::Token t : end) {  // each piece of the tag is among the allowed ones
    const std::vector<lacuna::Token> now = allowed();
    EXPECT_NE(std::find(now.begin(), now.end(), t), now.end());
    ASSERT_TRUE(c->accept_token(t));
  }
  EXPECT_EQ(allowed().size(), c->n_vocab());  // after the reasoning: free
  // A generation with the budget, on a template whose prompt opens the reasoning block
  // (DeepSeek-R1's), ends its reasoning within the budget and the tag's pieces.
  Loaded Q = load("tiny-qwen2");
  const chat::Template r1 = chat::Template::from_source(
      chat::Template::load_source("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"), "<s>", "</s>");
  const chat::Prompt open = r1.apply(r);
  ASSERT_TRUE(open.thinking_open);
  for (uint32_t seed : {1u, 2u}) {
    bool complete = false;
    const std::string out = generate(Q, open, 1.0f, seed, &complete);
    const size_t close = out.find("</think>");
    ASSERT_NE(close, std::string::npos) << out;
    EXPECT_LE(chat::tokenize_prompt(Q.model.vocab_ptr(), out.substr(0, close)).size(), 6u + 2u)
        << out;  // retokenized text may merge or split a little
    chat::Message m;
    ASSERT_NO_THROW(m = chat::parse(open, out, !complete)) << out;
    EXPECT_EQ(m.content.find("</think>"), std::string::npos) << out;  // the tag ended it
  }
}

TEST(ChatTools, BadInputGetsClearErrors) {
  Loaded L = load("tiny-qwen2");
  chat::Request r = request(3, "tool_7", false);
  try {
    L.tmpl.apply(r);
    FAIL() << "no error for an unknown tool";
  } catch (const chat::ChatError& e) {
    EXPECT_NE(std::string(e.what()).find("tool_7"), std::string::npos) << e.what();
  }
  r = request(1, "auto", false);
  r.tools[0].parameters = R"({"type": "object", "properties": {"a": {"type": "strin"}}})";
  try {
    L.tmpl.apply(r);
    FAIL() << "no error for a bad schema";
  } catch (const chat::ChatError& e) {
    EXPECT_EQ(e.pointer.rfind("/tools/0/function/parameters/properties/a", 0), 0u) << e.what();
  }
  EXPECT_THROW(chat::messages_from_json(R"([{"role": "robot", "content": "x"}])"), chat::ChatError);
  // A number past a double's range is out_of_range in nlohmann::json: an error, not an abort
  // (found by fuzz_chat_parse).
  EXPECT_THROW(chat::messages_from_json("[5e111111111111122]"), chat::ChatError);
  EXPECT_THROW(chat::tools_from_json("[1e999999]"), chat::ChatError);
  try {
    chat::messages_from_json(R"([{"role": "user", "content": "x"}, {"content": "y"}])");
    FAIL();
  } catch (const chat::ChatError& e) {
    EXPECT_EQ(e.pointer, "/1") << e.what();
  }
  EXPECT_THROW(chat::Template::load_source("no-such-template"), chat::ChatError);
  EXPECT_THROW(chat::Template::from_source("{% if %}"), chat::ChatError);
  // Output that does not match the format: an error, not an abort.
  const chat::Prompt p = L.tmpl.apply(request(3, "required", false));
  // A cut call is never reported as a call: an error or content.
  try {
    EXPECT_TRUE(chat::parse(p, "<tool_call>\n{\"name\": \"tool_1\", \"argu").tool_calls.empty());
  } catch (const chat::ChatError& e) {
    EXPECT_NE(std::string(e.what()).find("does not parse"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(chat::parse(p, "<tool_call>\n{\"name\": \"tool_1\", \"argu", true));
}

}  // namespace
