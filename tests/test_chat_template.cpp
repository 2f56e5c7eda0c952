// test_chat_template.cpp — chat templates through llama.cpp's chat library: every template
// of the pinned models/templates/ renders a fixed conversation; six (Qwen 2.5, Qwen3, Llama
// 3.1, gpt-oss, DeepSeek-R1, Mistral) render it exactly as their documented format says; bad input
// gets a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "lacuna/chat.h"

namespace {

using lacuna::chat::ChatError;
using lacuna::chat::Message;
using lacuna::chat::Request;
using lacuna::chat::Template;

// system, user, assistant with a tool call, tool result, user.
Request fixed_conversation() {
  Request r;
  r.messages = lacuna::chat::messages_from_json(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C, sunny"},
    {"role": "user", "content": "Thanks!"}
  ])");
  r.tools = lacuna::chat::tools_from_json(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}
  ])");
  r.now_unix = 1721001600;  // 2024-07-15
  return r;
}

size_t refused_count(const std::string& refused) {
  return static_cast<size_t>(std::count(refused.begin(), refused.end(), '\n'));
}

TEST(ChatTemplate, EveryKnownTemplateRendersTheFixedConversation) {
  const auto names = Template::known_names();
  ASSERT_GT(names.size(), 20u);
  size_t rendered = 0;
  std::string refused;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    std::string src = Template::load_source(name);
    std::optional<Template> t;
    try {
      t.emplace(Template::from_source(src, "<s>", "</s>"));
    } catch (const ChatError& e) {
      refused += name + ": " + e.what() + "\n";  // llama.cpp's library does not accept it
      continue;
    }
    lacuna::chat::Prompt p;
    try {
      p = t->apply(fixed_conversation());
    } catch (const ChatError& e) {
      // Templates whose own Jinja raises on a tool round trip (strict user/assistant
      // alternation): the error must say so.
      static const std::set<std::string> strict = {
          "Mistral-Small-3.2-24B-Instruct-2506", "google-gemma-2-2b-it",
          "mistralai-Ministral-3-14B-Reasoning-2512", "mistralai-Mistral-Nemo-Instruct-2407"};
      if (strict.count(name) == 0) ADD_FAILURE() << e.what();
      EXPECT_NE(std::string(e.what()).find("alternate"), std::string::npos) << e.what();
      continue;
    }
    EXPECT_NE(p.text.find("Paris"), std::string::npos) << p.text;
    EXPECT_NE(p.text.find("Thanks!"), std::string::npos) << p.text;
    ++rendered;
  }
  if (const char* v = std::getenv("LACUNA_TEST_VERBOSE"); v != nullptr) {
    std::fprintf(stderr, "%zu of %zu rendered; refused:\n%s", rendered, names.size(),
                 refused.c_str());
  }
  EXPECT_EQ(rendered + refused_count(refused), names.size() - 4);
}

// The Qwen 2.5 / Qwen3 format of the fixed conversation (the same Hermes-style text).
std::string qwen_golden() {
  return "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou may call one or more "
         "functions to assist with the user query.\n\nYou are provided with function signatures "
         "within <tools></tools> XML tags:\n<tools>\n"
         "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
         "\"Get the weather\", \"parameters\": {\"properties\": {\"city\": {\"type\": "
         "\"string\"}}, \"required\": [\"city\"], \"type\": \"object\"}}}\n</tools>\n\n"
         "For each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
         "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
         "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n"
         "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
         "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
         "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>\n"
         "<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n";
}

// Qwen 2.5's documented format: ChatML turns, the tools as JSON lines inside <tools> in the
// system turn, a call as {"name", "arguments"} inside <tool_call>, a tool result as a user
// turn inside <tool_response>.
TEST(ChatTemplate, Qwen25RendersItsDocumentedFormat) {
  Template t = Template::from_source(Template::load_source("Qwen-Qwen2.5-7B-Instruct"));
  const std::string want = qwen_golden();
  EXPECT_EQ(t.apply(fixed_conversation()).text, want);
}

// Llama 3.1's documented format: header ids, the ipython environment and dates in the
// system turn, the tools in the first user turn, a call as {"name", "parameters"}, a tool
// result in an ipython turn.
TEST(ChatTemplate, Llama31RendersItsDocumentedFormat) {
  Template t =
      Template::from_source(Template::load_source("meta-llama-Llama-3.1-8B-Instruct"), "<s>");
  const std::string text = t.apply(fixed_conversation()).text;
  const std::string head =
      "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting "
      "Knowledge Date: December 2023\nToday Date: 15 Jul 2024\n\nYou are a helpful "
      "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n";
  const std::string tail =
      "What is the weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
      "<|start_header_id|>ipython<|end_header_id|>\n\n\"18 C, sunny\"<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  ASSERT_GE(text.size(), head.size() + tail.size());
  EXPECT_EQ(text.substr(0, head.size()), head);
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

// Qwen3's documented format: Qwen 2.5's (ChatML, <tools> in the system turn, calls in
// <tool_call>, results in <tool_response> user turns); the generation prompt opens the
// assistant turn and leaves the reasoning block to the model.
TEST(ChatTemplate, Qwen3RendersItsDocumentedFormat) {
  Template t = Template::from_source(Template::load_source("Qwen-Qwen3-0.6B"));
  const std::string want = qwen_golden();
  const lacuna::chat::Prompt p = t.apply(fixed_conversation());
  EXPECT_EQ(p.text, want);
  EXPECT_EQ(p.thinking_start, "<think>");
}

// gpt-oss's documented format (harmony): a system message with the knowledge cutoff, the
// date, the reasoning effort and the channels; the system prompt and the tools as a
// TypeScript-like namespace in the developer message; a call as a commentary-channel message
// to functions.NAME ending in <|call|>; the result as a message from functions.NAME.
TEST(ChatTemplate, GptOssRendersItsDocumentedFormat) {
  Template t = Template::from_source(Template::load_source("openai-gpt-oss-120b"));
  const std::string want =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2024-07-15\n\nReasoning: medium\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
      "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant.\n\n"
      "# Tools\n\n## functions\n\nnamespace functions {\n\n// Get the weather\n"
      "type get_weather = (_: {\ncity: string,\n}) => any;\n\n} // namespace functions<|end|>"
      "<|start|>user<|message|>What is the weather in Paris?<|end|>"
      "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
      "{\"city\": \"Paris\"}<|call|>"
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
      "\"18 C, sunny\"<|end|><|start|>user<|message|>Thanks!<|end|><|start|>assistant";
  EXPECT_EQ(t.apply(fixed_conversation()).text, want);
}

// DeepSeek-R1's documented format: BOS and the system prompt, <｜User｜> / <｜Assistant｜>
// turns, a call as function<｜tool▁sep｜>NAME and a ```json block inside the tool-call
// markers, results inside the tool-output markers, and a generation prompt that opens
// <think>. (The template's own quirks are kept: an empty assistant turn after the call, no
// outputs-end marker before the next user turn.)
TEST(ChatTemplate, DeepSeekR1RendersItsDocumentedFormat) {
  Template t =
      Template::from_source(Template::load_source("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"),
                            "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  const std::string want =
      "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>What is the weather in "
      "Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
      "<｜end▁of▁sentence｜><｜Assistant｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜>"
      "<｜tool▁output▁begin｜>18 C, sunny<｜tool▁output▁end｜><｜User｜>Thanks!"
      "<｜Assistant｜><think>\n";
  const lacuna::chat::Prompt p = t.apply(fixed_conversation());
  EXPECT_EQ(p.text, want);
  EXPECT_TRUE(p.thinking_open);
}

// Mistral's documented format (v7/tekken, here Devstral's template): BOS, the system prompt
// in [SYSTEM_PROMPT], the tools as a JSON array in [AVAILABLE_TOOLS], user turns in [INST],
// a call as [TOOL_CALLS]NAME[ARGS]{...} closed by EOS, results in [TOOL_RESULTS].
TEST(ChatTemplate, MistralRendersItsDocumentedFormat) {
  Template t = Template::from_source(Template::load_source("unsloth-mistral-Devstral-Small-2507"),
                                     "<s>", "</s>");
  const std::string want =
      "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT][AVAILABLE_TOOLS]"
      "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
      "\"Get the weather\", \"parameters\": {\"properties\": {\"city\": {\"type\": "
      "\"string\"}}, \"required\": [\"city\"], \"type\": \"object\"}}}][/AVAILABLE_TOOLS]"
      "[INST]What is the weather in Paris?[/INST][TOOL_CALLS]get_weather[ARGS]"
      "{\"city\": \"Paris\"}</s>[TOOL_RESULTS]18 C, sunny[/TOOL_RESULTS]"
      "[INST]Thanks![/INST]";
  EXPECT_EQ(t.apply(fixed_conversation()).text, want);
}

}  // namespace
