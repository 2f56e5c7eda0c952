// chat_json.cpp — messages, tools and the assistant's answer in OpenAI's JSON shapes, with
// errors that name the JSON pointer of the bad part.
#include <nlohmann/json.hpp>
#include <string>

#include "lacuna/chat.h"

namespace lacuna::chat {

namespace {

using nlohmann::json;

json parse_json(std::string_view text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number past a double's range (1e999999).
    throw ChatError(std::string(what) + " are not valid JSON: " + e.what());
  }
}

std::string string_field(const json& obj, const char* key, const std::string& ptr, bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) throw ChatError(std::string("missing \"") + key + "\"", ptr);
    return {};
  }
  if (!it->is_string()) {
    throw ChatError(std::string("\"") + key + "\" must be a string", ptr + "/" + key);
  }
  return it->get<std::string>();
}

// "content": a string, null, or an array of text parts (joined with "\n").
std::string content_field(const json& msg, const std::string& ptr) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    throw ChatError("\"content\" must be a string, null or an array of text parts",
                    ptr + "/content");
  }
  std::string out;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    const std::string pp = ptr + "/content/" + std::to_string(i);
    if (!part.is_object() || part.value("type", "") != "text") {
      throw ChatError("only parts of type \"text\" are supported", pp);
    }
    if (!out.empty()) out += "\n";
    out += string_field(part, "text", pp, true);
  }
  return out;
}

}  // namespace

std::vector<Message> messages_from_json(std::string_view json_text) {
  const json doc = parse_json(json_text, "messages");
  const json* arr = &doc;
  std::string base;
  if (doc.is_object() && doc.contains("messages")) {
    arr = &doc["messages"];
    base = "/messages";
  }
  if (!arr->is_array()) throw ChatError("messages must be an array", base);
  std::vector<Message> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const json& m = (*arr)[i];
    const std::string ptr = base + "/" + std::to_string(i);
    if (!m.is_object()) throw ChatError("a message must be an object", ptr);
    Message msg;
    msg.role = string_field(m, "role", ptr, true);
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool" && msg.role != "developer") {
      throw ChatError(
          "unknown role \"" + msg.role + "\" (expected system, developer, user, assistant or tool)",
          ptr + "/role");
    }
    msg.content = content_field(m, ptr);
    msg.reasoning_content = string_field(m, "reasoning_content", ptr, false);
    if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
      if (msg.role != "assistant") {
        throw ChatError("only assistant messages have tool_calls", ptr + "/tool_calls");
      }
      if (!it->is_array()) throw ChatError("tool_calls must be an array", ptr + "/tool_calls");
      for (size_t j = 0; j < it->size(); ++j) {
        const json& tc = (*it)[j];
        const std::string tp = ptr + "/tool_calls/" + std::to_string(j);
        if (!tc.is_object()) throw ChatError("a tool call must be an object", tp);
        if (tc.contains("type") && tc["type"] != "function") {
          throw ChatError("only tool calls of type \"function\" are supported", tp + "/type");
        }
        auto fn = tc.find("function");
        if (fn == tc.end() || !fn->is_object()) {
          throw ChatError("missing \"function\" object", tp);
        }
        ToolCall call;
        call.id = string_field(tc, "id", tp, false);
        call.name = string_field(*fn, "name", tp + "/function", true);
        auto args = fn->find("arguments");
        if (args == fn->end() || args->is_null()) {
          call.arguments = "{}";
        } else if (args->is_string()) {
          call.arguments = args->get<std::string>();
          json parsed = json::parse(call.arguments, nullptr, false);
          if (parsed.is_discarded() || !parsed.is_object()) {
            throw ChatError("arguments must be a JSON object (as text or as an object)",
                            tp + "/function/arguments");
          }
        } else if (args->is_object()) {
          call.arguments = args->dump();
        } else {
          throw ChatError("arguments must be a JSON object (as text or as an object)",
                          tp + "/function/arguments");
        }
        msg.tool_calls.push_back(std::move(call));
      }
    }
    if (msg.role == "tool") {
      msg.tool_call_id = string_field(m, "tool_call_id", ptr, false);
      msg.tool_name = string_field(m, "name", ptr, false);
    }
    if (!m.contains("content") && msg.tool_calls.empty()) {
      throw ChatError("a message needs \"content\" (or \"tool_calls\")", ptr);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<Tool> tools_from_json(std::string_view json_text) {
  const json doc = parse_json(json_text, "tools");
  const json* arr = &doc;
  std::string base;
  if (doc.is_object() && doc.contains("tools")) {
    arr = &doc["tools"];
    base = "/tools";
  }
  if (!arr->is_array()) throw ChatError("tools must be an array", base);
  std::vector<Tool> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const json& t = (*arr)[i];
    const std::string ptr = base + "/" + std::to_string(i);
    if (!t.is_object()) throw ChatError("a tool must be an object", ptr);
    if (t.contains("type") && t["type"] != "function") {
      throw ChatError("only tools of type \"function\" are supported", ptr + "/type");
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) throw ChatError("missing \"function\" object", ptr);
    Tool tool;
    tool.name = string_field(*fn, "name", ptr + "/function", true);
    tool.description = string_field(*fn, "description", ptr + "/function", false);
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) {
        throw ChatError("parameters must be a JSON Schema object", ptr + "/function/parameters");
      }
      tool.parameters = p->dump();
    }
    out.push_back(std::move(tool));
  }
  return out;
}

std::string message_to_json(const Message& message, int indent) {
  json j = json::object();
  j["role"] = message.role.empty() ? "assistant" : message.role;
  if (!message.content.empty() || message.tool_calls.empty()) {
    j["content"] = message.content;
  } else {
    j["content"] = nullptr;
  }
  if (!message.reasoning_content.empty()) j["reasoning_content"] = message.reasoning_content;
  if (!message.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& c : message.tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  if (!message.tool_call_id.empty()) j["tool_call_id"] = message.tool_call_id;
  if (!message.tool_name.empty()) j["name"] = message.tool_name;
  return j.dump(indent);
}

ToolChoice ToolChoice::parse(std::string_view text) {
  ToolChoice c;
  if (text == "auto" || text.empty()) {
    c.mode = Mode::automatic;
  } else if (text == "none") {
    c.mode = Mode::none;
  } else if (text == "required") {
    c.mode = Mode::required;
  } else {
    c.mode = Mode::named;
    c.name = std::string(text);
  }
  return c;
}

}  // namespace lacuna::chat
