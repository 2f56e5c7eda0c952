// chat_parse.cpp — the assistant's output to {content, reasoning_content, tool_calls} with
// llama.cpp's parser for the format; never aborts, bad output is a ChatError.
#include <chat.h>

#include <nlohmann/json.hpp>

#include "lacuna/chat.h"

namespace lacuna::chat {

Message parse(const Prompt& prompt, std::string_view output, bool partial) {
  common_chat_parser_params params;
  params.format = static_cast<common_chat_format>(prompt.parser_format);
  params.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
  params.generation_prompt = prompt.generation_prompt;
  params.parse_tool_calls = prompt.parse_tool_calls;
  common_chat_msg msg;
  try {
    if (!prompt.parser.empty()) params.parser.load(prompt.parser);
    msg = common_chat_parse(std::string(output), partial, params);
  } catch (const std::exception& e) {
    throw ChatError("the output does not parse as the chat format '" + prompt.format +
                    "': " + e.what());
  }
  Message out;
  out.role = "assistant";
  out.content = msg.content;
  out.reasoning_content = msg.reasoning_content;
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
    const common_chat_tool_call& c = msg.tool_calls[i];
    ToolCall call{c.id, c.name, c.arguments};
    // llama.cpp's parser is lenient: complete output with a cut call still yields the call.
    if (!partial) {
      const nlohmann::json args = nlohmann::json::parse(call.arguments, nullptr, false);
      if (call.name.empty() || args.is_discarded() || !args.is_object()) {
        throw ChatError("the output does not parse as the chat format '" + prompt.format +
                        "': tool call " + std::to_string(i) + " (" + call.name +
                        ") has no complete JSON object of arguments");
      }
    }
    if (call.id.empty()) call.id = "call_" + std::to_string(i);
    out.tool_calls.push_back(std::move(call));
  }
  return out;
}

}  // namespace lacuna::chat
