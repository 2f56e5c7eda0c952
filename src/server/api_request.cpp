// api_request.cpp — parsing and type checks of OpenAI request bodies (api_request.h).
#include "server/api_request.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace lacuna::server {

using json = nlohmann::json;

std::string error_body(const std::string& message, const std::string& type,
                       const std::string& param, const std::string& code) {
  json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_body(const ApiError& e) {
  return error_body(e.what(), e.type, e.param, e.code);
}

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& param) {
  throw ApiError(400, message, param);
}

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    bad(std::string("the body is not valid JSON: ") + e.what(), "");
  }
  if (!j.is_object()) bad("the body must be a JSON object", "");
  return j;
}

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& j, const char* key, bool def) {
  const json* v = field(j, key);
  if (!v) return def;
  if (!v->is_boolean()) bad(std::string("\"") + key + "\" must be a boolean", key);
  return v->get<bool>();
}

double get_number(const json& j, const char* key, double def, double lo, double hi) {
  const json* v = field(j, key);
  if (!v) return def;
  if (!v->is_number()) bad(std::string("\"") + key + "\" must be a number", key);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    bad(std::string("\"") + key + "\" must be between " + json(lo).dump() + " and " +
            json(hi).dump(),
        key);
  }
  return d;
}

int64_t get_int(const json& j, const char* key, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(j, key);
  if (!v) return def;
  if (!v->is_number_integer()) bad(std::string("\"") + key + "\" must be an integer", key);
  // Unsigned values above INT64_MAX read as negative through get<int64_t>: check first.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    bad(std::string("\"") + key + "\" must be between " + std::to_string(lo) + " and " +
            std::to_string(hi),
        key);
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) {
    bad(std::string("\"") + key + "\" must be between " + std::to_string(lo) + " and " +
            std::to_string(hi),
        key);
  }
  return i;
}

std::string get_string(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return {};
  if (!v->is_string()) bad(std::string("\"") + key + "\" must be a string", key);
  return v->get<std::string>();
}

std::vector<std::string> get_string_list(const json& j, const char* key, bool allow_single,
                                         size_t max_items) {
  const json* v = field(j, key);
  std::vector<std::string> out;
  if (!v) return out;
  // Sized before filling: no reallocating insert (libFuzzer links its own, uninstrumented
  // copy of std::vector<std::string>'s, which ASan then reports as a bad free).
  out.reserve(v->is_array() ? v->size() : 1);
  if (v->is_string() && allow_single) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        bad(std::string("\"") + key + "\" must hold strings",
            std::string(key) + "/" + std::to_string(i));
      }
      out.push_back((*v)[i].get<std::string>());
    }
  } else {
    bad(std::string("\"") + key + "\" must be " + (allow_single ? "a string or " : "") +
            "an array of strings",
        key);
  }
  if (out.size() > max_items) {
    bad(std::string("\"") + key + "\" has more than " + std::to_string(max_items) + " items", key);
  }
  return out;
}

// The fields both endpoints share: sampling, limits, stream, extensions.
void parse_common(const json& j, GenRequest& r, bool chat) {
  r.model = get_string(j, "model");
  r.stream = get_bool(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("\"stream_options\" must be an object", "stream_options");
    if (const json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) {
        bad("\"include_usage\" must be a boolean", "stream_options/include_usage");
      }
      r.include_usage = iu->get<bool>();
    }
  }
  r.temperature = static_cast<float>(get_number(j, "temperature", 1.0, 0.0, 2.0));
  r.top_p = static_cast<float>(get_number(j, "top_p", 1.0, 0.0, 1.0));
  r.min_p = static_cast<float>(get_number(j, "min_p", 0.05, 0.0, 1.0));
  r.top_k = static_cast<int32_t>(get_int(j, "top_k", 40, 0, 1 << 24));
  if (field(j, "seed")) {
    // OpenAI's seeds are 64-bit; the runtime's are 32-bit: the low bits are used.
    const int64_t s = get_int(j, "seed", 0, INT64_MIN, INT64_MAX);
    r.seed = static_cast<uint32_t>(static_cast<uint64_t>(s));
  }
  const int64_t mt = get_int(j, "max_tokens", -1, 1, 1 << 24);
  const int64_t mct = get_int(j, "max_completion_tokens", -1, 1, 1 << 24);
  r.max_tokens = mct > 0 ? mct : mt;
  r.stop = get_string_list(j, "stop", /*allow_single=*/true, 16);
  for (size_t i = 0; i < r.stop.size(); ++i) {
    if (r.stop[i].empty()) bad("a stop string must not be empty", "stop/" + std::to_string(i));
  }
  r.n = static_cast<int>(get_int(j, "n", 1, 1, GenRequest::max_choices));
  // Log-probabilities: chat's `logprobs` (bool) with `top_logprobs` (0 to 20); the legacy
  // completions' `logprobs` (the number of alternatives, 0 to 5; null: off).
  if (chat) {
    const bool on = get_bool(j, "logprobs", false);
    const json* top = field(j, "top_logprobs");
    if (top != nullptr && !top->is_null() && !on) {
      bad("\"top_logprobs\" needs \"logprobs\": true", "top_logprobs");
    }
    if (on) r.logprobs = static_cast<int>(get_int(j, "top_logprobs", 0, 0, 20));
  } else if (const json* lp = field(j, "logprobs"); lp != nullptr && !lp->is_null()) {
    r.logprobs = static_cast<int>(get_int(j, "logprobs", 0, 0, 5));
  }
  if (get_bool(j, "echo", false)) bad("echo is not supported", "echo");
  if (!get_string(j, "suffix").empty()) bad("suffix is not supported", "suffix");
  (void)get_number(j, "frequency_penalty", 0.0, -2.0, 2.0);  // accepted, not applied
  (void)get_number(j, "presence_penalty", 0.0, -2.0, 2.0);

  r.cache_prompt = get_bool(j, "cache_prompt", true);
  r.grammar = get_string(j, "grammar");
  r.regex = get_string(j, "regex");
  r.choices = get_string_list(j, "choices", /*allow_single=*/false, 100000);
  if (field(j, "choices") != nullptr && r.choices.empty()) {
    bad("\"choices\" must not be empty", "choices");
  }
  r.lazy_triggers = get_string_list(j, "lazy_triggers", /*allow_single=*/false, 64);
  if (const json* trie = field(j, "token_trie")) {
    // The payload as a JSON object, or its text.
    if (trie->is_object()) {
      r.token_trie = trie->dump();
    } else if (trie->is_string() && !trie->get<std::string>().empty()) {
      r.token_trie = trie->get<std::string>();
    } else {
      bad("\"token_trie\" must be a token-trie payload (an object, or its JSON text)",
          "token_trie");
    }
  }
  r.token_trie_path = get_string(j, "token_trie_path");
  if (!r.token_trie_path.empty() && r.token_trie.empty()) {
    bad("\"token_trie_path\" needs \"token_trie\"", "token_trie_path");
  }
  const int sources =
      !r.grammar.empty() + !r.regex.empty() + !r.choices.empty() + !r.token_trie.empty();
  if (sources > 1) {
    bad("give at most one of \"grammar\", \"regex\", \"choices\" and \"token_trie\"", "grammar");
  }
}

}  // namespace

GenRequest parse_chat_request(std::string_view body) {
  const json j = parse_body(body);
  GenRequest r;
  r.kind = GenRequest::Kind::chat;
  parse_common(j, r, /*chat=*/true);

  const json* msgs = field(j, "messages");
  if (!msgs) bad("\"messages\" is required", "messages");
  if (!msgs->is_array() || msgs->empty()) bad("\"messages\" must be a non-empty array", "messages");
  try {
    r.chat.messages = chat::messages_from_json(json{{"messages", *msgs}}.dump());
    if (const json* tools = field(j, "tools")) {
      r.chat.tools = chat::tools_from_json(json{{"tools", *tools}}.dump());
    }
  } catch (const chat::ChatError& e) {
    throw ApiError(400, e.what(), e.pointer.empty() ? "messages" : e.pointer.substr(1));
  }
  if (const json* tc = field(j, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s != "auto" && s != "none" && s != "required") {
        bad("\"tool_choice\" must be auto, none, required or {\"type\": \"function\", ...}",
            "tool_choice");
      }
      r.chat.tool_choice = chat::ToolChoice::parse(s);
    } else if (tc->is_object()) {
      const json* fn = field(*tc, "function");
      if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
        bad("\"tool_choice\" needs {\"type\": \"function\", \"function\": {\"name\": ...}}",
            "tool_choice/function/name");
      }
      r.chat.tool_choice.mode = chat::ToolChoice::Mode::named;
      r.chat.tool_choice.name = (*fn)["name"].get<std::string>();
    } else {
      bad("\"tool_choice\" must be a string or an object", "tool_choice");
    }
    if (r.chat.tool_choice.mode != chat::ToolChoice::Mode::automatic &&
        r.chat.tool_choice.mode != chat::ToolChoice::Mode::none && r.chat.tools.empty()) {
      bad("\"tool_choice\" asks for a tool call but no \"tools\" are given", "tool_choice");
    }
  }
  r.chat.parallel_tool_calls = get_bool(j, "parallel_tool_calls", false);
  if (const json* rf = field(j, "response_format")) {
    if (!rf->is_object()) bad("\"response_format\" must be an object", "response_format");
    const std::string type = get_string(*rf, "type");
    if (type == "json_object") {
      r.chat.response_schema = R"({"type":"object"})";
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      const json* schema = nullptr;
      if (js) {
        if (!js->is_object()) {
          bad("\"json_schema\" must be an object", "response_format/json_schema");
        }
        schema = field(*js, "schema");
      } else {
        schema = field(*rf, "schema");  // llama-server's shorter form
      }
      if (!schema || !(schema->is_object() || schema->is_boolean())) {
        bad("\"json_schema.schema\" must be a JSON Schema object",
            "response_format/json_schema/schema");
      }
      r.chat.response_schema = schema->dump();
    } else if (type != "text" && !type.empty()) {
      bad("\"response_format.type\" must be text, json_object or json_schema",
          "response_format/type");
    }
  }
  if (r.has_extension_constraint() && (!r.chat.tools.empty() || !r.chat.response_schema.empty())) {
    bad("\"grammar\", \"regex\", \"choices\" and \"token_trie\" cannot be combined with tools or "
        "response_format",
        !r.grammar.empty()   ? "grammar"
        : !r.regex.empty()   ? "regex"
        : !r.choices.empty() ? "choices"
                             : "token_trie");
  }
  if (const json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("\"chat_template_kwargs\" must be an object", "chat_template_kwargs");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      r.chat.template_kwargs[it.key()] = it.value().dump();
    }
    if (auto e = kw->find("enable_thinking"); e != kw->end() && e->is_boolean()) {
      r.chat.enable_thinking = e->get<bool>();
    }
  }
  return r;
}

GenRequest parse_completion_request(std::string_view body) {
  const json j = parse_body(body);
  GenRequest r;
  r.kind = GenRequest::Kind::completion;
  parse_common(j, r, /*chat=*/false);
  const json* p = field(j, "prompt");
  if (!p) bad("\"prompt\" is required", "prompt");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else {
    bad("\"prompt\" must be a string (or an array of one string)", "prompt");
  }
  if (r.prompt.empty()) bad("\"prompt\" must not be empty", "prompt");
  return r;
}

}  // namespace lacuna::server
