// chat_args.h — the options `lacuna template` and `lacuna chat` share (messages, tools,
// tool choice, template) and the request they make.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "decode/constraint_factory.h"
#include "lacuna/chat.h"

namespace lacuna::cli {

struct ChatArgs {
  std::string model_path;
  std::string messages_file;
  std::string tools_file;
  std::string tool_choice = "auto";
  std::string chat_template;  // NAME of models/templates/ or a FILE; empty: the model's
  std::string system;
  bool parallel_tool_calls = false;
  bool no_thinking = false;
  int thinking_budget = -1;

  void add_to(CLI::App& app, bool messages_required) {
    app.add_option("-m,--model", model_path, "GGUF model file")->required();
    auto* m = app.add_option("--messages", messages_file, "JSON file with OpenAI's messages array");
    if (messages_required) m->required();
    app.add_option("--tools", tools_file, "JSON file with OpenAI's tools array");
    app.add_option("--tool-choice", tool_choice, "auto (default), none, required or a tool name");
    app.add_flag("--parallel-tool-calls", parallel_tool_calls, "allow several calls in one answer");
    app.add_option("--chat-template", chat_template,
                   "a template name of llama.cpp's models/templates/ or a Jinja file "
                   "(default: the model's own)");
    app.add_flag("--no-thinking", no_thinking, "enable_thinking = false for thinking templates");
    app.add_option("--thinking-budget", thinking_budget,
                   "thinking templates: force the end of reasoning after N tokens of it")
        ->check(CLI::NonNegativeNumber);
  }

  // The request of the files and flags. Throws ChatError / std::runtime_error.
  chat::Request request() const {
    chat::Request r;
    if (!messages_file.empty()) {
      r.messages = chat::messages_from_json(decode::read_text_file(messages_file));
    }
    if (!tools_file.empty()) r.tools = chat::tools_from_json(decode::read_text_file(tools_file));
    r.tool_choice = chat::ToolChoice::parse(tool_choice);
    r.parallel_tool_calls = parallel_tool_calls;
    r.enable_thinking = !no_thinking;
    r.thinking_budget = thinking_budget;
    return r;
  }
};

}  // namespace lacuna::cli
