// fuzz_chat_parse.cpp — libFuzzer target: arbitrary model output through lacuna::chat::parse
// for the prompts of ten chat formats (complete and partial, as a stream gives it), and
// arbitrary text as OpenAI's messages / tools arrays formatted by a template. Each must end
// with a result or ChatError; never a crash, a hang or another exception. And arbitrary text as
// a tool's parameters schema through gemma-4's argument grammar, which must parse.
//
// Input: byte 0 picks the prompt (or, past the last one, the messages mode), bit 0 of byte 1
// asks for partial parsing, bit 1 tools instead of messages, bit 2 the gemma-4 grammar; the
// rest is the output (or the JSON text).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/gemma4_grammar.h"
#include "lacuna/chat.h"
#include "lacuna/grammar.h"

namespace {

using lacuna::chat::ChatError;
using lacuna::chat::Prompt;
using lacuna::chat::Request;
using lacuna::chat::Template;

struct Setup {
  std::vector<Template> templates;
  std::vector<Prompt> prompts;
};

Request base_request(bool with_tools) {
  Request r;
  r.messages = lacuna::chat::messages_from_json(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}])");
  if (with_tools) {
    r.tools = lacuna::chat::tools_from_json(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}}}}])");
  }
  r.now_unix = 1721001600;
  return r;
}

const Setup& setup() {
  static const Setup s = [] {
    Setup out;
    const char* names[] = {"Qwen-Qwen2.5-7B-Instruct",
                           "Qwen-Qwen3-0.6B",
                           "meta-llama-Llama-3.1-8B-Instruct",
                           "openai-gpt-oss-120b",
                           "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                           "unsloth-mistral-Devstral-Small-2507",
                           "google-gemma-4-31B-it",
                           "moonshotai-Kimi-K2",
                           "GLM-4.6",
                           "MiniMax-M2"};
    for (const char* name : names) {
      try {
        out.templates.push_back(Template::from_source(Template::load_source(name), "<s>", "</s>"));
      } catch (const ChatError&) {
        continue;  // a template the pinned library refuses is not this target's subject
      }
      for (bool tools : {true, false}) {
        try {
          out.prompts.push_back(out.templates.back().apply(base_request(tools)));
        } catch (const ChatError&) {
        }
      }
    }
    return out;
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  const Setup& s = setup();
  const size_t pick = data[0] % (s.prompts.size() + 1);
  const bool partial = (data[1] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (pick < s.prompts.size()) {
    try {
      lacuna::chat::parse(s.prompts[pick], text, partial);
    } catch (const ChatError&) {
    }
    return 0;
  }
  // A tool's parameters (bit 2) as gemma-4's argument notation: whatever the schema, no
  // crash, and a grammar it returns parses.
  if ((data[1] & 4) != 0) {
    const std::optional<std::string> g = lacuna::chat::detail::gemma4_args_gbnf(std::string(text));
    if (g) (void)lacuna::parse_gbnf(*g);
    return 0;
  }
  // Messages (or tools, by bit 1) as JSON, then formatted by the first template.
  try {
    Request r = base_request(false);
    if ((data[1] & 2) != 0) {
      r.tools = lacuna::chat::tools_from_json(text);
    } else {
      r.messages = lacuna::chat::messages_from_json(text);
    }
    if (!s.templates.empty()) s.templates.front().apply(r);
  } catch (const ChatError&) {
  }
  return 0;
}
