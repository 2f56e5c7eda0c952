// chat_template.cpp — lacuna::chat::Template: formats a request with llama.cpp's Jinja chat
// library (common/chat.h) and derives lacuna's constraint for the answer.
#include <chat.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "chat/tool_grammar.h"
#include "lacuna/chat.h"
#include "lacuna/json_schema.h"

#ifndef LACUNA_LLAMA_SRC_DIR
#define LACUNA_LLAMA_SRC_DIR ""
#endif

namespace lacuna::chat {

namespace {

using nlohmann::json;

std::string templates_dir() {
  const std::string src = LACUNA_LLAMA_SRC_DIR;
  return src.empty() ? std::string() : src + "/models/templates";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ChatError("cannot read chat template file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

common_chat_msg to_common(const Message& m) {
  common_chat_msg out;
  out.role = m.role;
  out.content = m.content;
  out.reasoning_content = m.reasoning_content;
  out.tool_name = m.tool_name;
  out.tool_call_id = m.tool_call_id;
  for (const ToolCall& c : m.tool_calls) out.tool_calls.push_back({c.name, c.arguments, c.id});
  return out;
}

// The parameters schema lacuna compiles: "{}" / empty mean no arguments.
std::string parameters_or_empty(const Tool& t) {
  if (t.parameters.empty()) return R"({"type":"object","properties":{}})";
  json p = json::parse(t.parameters, nullptr, false);
  if (p.is_object() && p.empty()) return R"({"type":"object","properties":{}})";
  return t.parameters;
}

// Validates the request before llama.cpp sees it: roles, tool names, tool schemas (compiled
// by lacuna, errors with JSON pointers), tool_choice.
void validate(const Request& r) {
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const Message& m = r.messages[i];
    const std::string ptr = "/messages/" + std::to_string(i);
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool" &&
        m.role != "developer") {
      throw ChatError("unknown role \"" + m.role + "\"", ptr + "/role");
    }
    for (size_t j = 0; j < m.tool_calls.size(); ++j) {
      if (m.tool_calls[j].name.empty()) {
        throw ChatError("a tool call needs a name",
                        ptr + "/tool_calls/" + std::to_string(j) + "/function/name");
      }
    }
  }
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Tool& t = r.tools[i];
    const std::string ptr = "/tools/" + std::to_string(i) + "/function";
    if (t.name.empty()) throw ChatError("a tool needs a name", ptr + "/name");
    for (size_t k = 0; k < i; ++k) {
      if (r.tools[k].name == t.name) {
        throw ChatError("two tools are named \"" + t.name + "\"", ptr + "/name");
      }
    }
    try {
      json_schema_to_gbnf(parameters_or_empty(t));
    } catch (const SchemaError& e) {
      throw ChatError("invalid parameters schema of tool \"" + t.name + "\": " + e.what(),
                      ptr + "/parameters" + e.pointer);
    }
  }
  if (r.tool_choice.mode == ToolChoice::Mode::named) {
    bool found = false;
    for (const Tool& t : r.tools) found = found || t.name == r.tool_choice.name;
    if (!found) {
      throw ChatError("tool_choice names \"" + r.tool_choice.name +
                      "\", which is not one of the declared tools");
    }
  }
  if ((r.tool_choice.mode == ToolChoice::Mode::required) && r.tools.empty()) {
    throw ChatError("tool_choice \"required\" needs at least one tool");
  }
  if (!r.response_schema.empty()) {
    try {
      json_schema_to_gbnf(r.response_schema);
    } catch (const SchemaError& e) {
      throw ChatError(std::string("invalid response_format schema: ") + e.what(),
                      "/response_format/json_schema/schema" + e.pointer);
    }
  }
  for (const auto& [k, v] : r.template_kwargs) {
    if (json::parse(v, nullptr, false).is_discarded()) {
      throw ChatError("template kwarg \"" + k + "\" is not JSON text",
                      "/chat_template_kwargs/" + k);
    }
  }
}

// Names llama.cpp's parsers give their schema nodes -> the JSON Schema lacuna compiles.
std::map<std::string, std::string> schema_names(const Request& r) {
  std::map<std::string, std::string> out;
  for (const Tool& t : r.tools) {
    const std::string params = parameters_or_empty(t);
    out["tool-" + t.name + "-schema"] = params;
    const json p = json::parse(params);
    if (!p.contains("properties") || !p["properties"].is_object()) continue;
    for (const auto& [name, sub] : p["properties"].items()) {
      json s = sub;
      // Keep references into the tool's definitions resolvable.
      for (const char* defs : {"$defs", "definitions"}) {
        if (p.contains(defs) && s.is_object() && !s.contains(defs)) s[defs] = p[defs];
      }
      out["tool-" + t.name + "-arg-" + name + "-schema"] = s.dump();
    }
  }
  if (!r.response_schema.empty()) {
    out["response-format-schema"] = r.response_schema;
    out["response-format"] = r.response_schema;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The first character every string of rule `rule` starts with, found by following its
// first item through empty literals, `space`, parentheses and rule references ('\0': not
// one fixed character).
char first_literal_char(const std::string& gbnf, const std::string& rule, int depth = 0) {
  if (depth > 8) return '\0';
  const std::string head = rule + " ::= ";
  size_t at = gbnf.compare(0, head.size(), head) == 0 ? 0 : gbnf.find("\n" + head);
  if (at == std::string::npos) return '\0';
  if (at != 0) ++at;
  const size_t eol = gbnf.find('\n', at);
  const std::string rhs =
      gbnf.substr(at + head.size(), eol == std::string::npos ? eol : eol - at - head.size());
  size_t i = 0;
  while (i < rhs.size()) {
    if (rhs[i] == ' ' || rhs[i] == '(') {
      ++i;
    } else if (rhs.compare(i, 2, "\"\"") == 0) {
      i += 2;
    } else if (rhs.compare(i, 5, "space") == 0 && (i + 5 == rhs.size() || rhs[i + 5] == ' ')) {
      i += 5;  // whitespace may come first; the trigger pattern allows it
    } else if (rhs[i] == '"') {
      return (i + 1 < rhs.size() && rhs[i + 1] != '\\') ? rhs[i + 1] : '\0';
    } else {
      size_t j = i;
      while (j < rhs.size() && (std::isalnum(static_cast<unsigned char>(rhs[j])) || rhs[j] == '-'))
        ++j;
      if (j == i || (j < rhs.size() && rhs[j] != ' ' && rhs[j] != ')')) return '\0';
      return first_literal_char(gbnf, rhs.substr(i, j - i), depth + 1);
    }
  }
  return '\0';
}

// Templates that print the time call strftime_now(FORMAT), which llama.cpp's Jinja answers
// with the clock, whatever the request's fixed time says. Such a template gets a macro of
// the same name in front, which looks the formatted time up in a template variable: apply()
// fills it for every FORMAT literal of the source, at the request's time.
constexpr const char* kStrftimeVar = "lacuna_strftime_now";

std::vector<std::string> strftime_formats(const std::string& source) {
  static const std::regex call(R"re(strftime_now\(\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\))re");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), call);
       it != std::sregex_iterator(); ++it) {
    std::string f = (*it)[1].matched ? (*it)[1].str() : (*it)[2].str();
    if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(std::move(f));
  }
  return out;
}

std::string with_fixed_clock(const std::string& source) {
  if (source.find("strftime_now") == std::string::npos) return source;
  return std::string("{%- macro strftime_now(f) -%}{{- ") + kStrftimeVar +
         "[f] -}}{%- endmacro -%}\n" + source;
}

// llama.cpp's grammar of a formatting and its triggers, as its sampler setup reads them.
void set_llama_grammar(Prompt& p, const common_chat_params& c) {
  p.llama_grammar = c.grammar;
  p.llama_grammar_lazy = c.grammar_lazy;
  p.llama_trigger_patterns.clear();
  p.llama_trigger_tokens.clear();
  for (const common_grammar_trigger& t : c.grammar_triggers) {
    switch (t.type) {
      case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:
        p.llama_trigger_tokens.push_back(t.token);
        break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_WORD:
        p.llama_trigger_patterns.push_back(detail::regex_escape(t.value));
        break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:
        p.llama_trigger_patterns.push_back(t.value);
        break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: {
        std::string a = t.value;
        if (a.empty() || a.front() != '^') a.insert(a.begin(), '^');
        if (a.back() != '$') a.push_back('$');
        p.llama_trigger_patterns.push_back(a);
        break;
      }
    }
  }
}

}  // namespace

struct Template::Impl {
  common_chat_templates_ptr tmpls;
  std::string source;
  std::vector<std::string> time_formats;  // strftime_now's FORMAT literals in the source

  common_chat_params apply_common(const Request& r, const std::vector<Tool>& tools,
                                  common_chat_tool_choice choice) const {
    common_chat_templates_inputs in;
    for (const Message& m : r.messages) in.messages.push_back(to_common(m));
    for (const Tool& t : tools) {
      in.tools.push_back({t.name, t.description, t.parameters.empty() ? "{}" : t.parameters});
    }
    in.tool_choice = choice;
    in.parallel_tool_calls = r.parallel_tool_calls;
    in.add_generation_prompt = r.add_generation_prompt;
    in.enable_thinking = r.enable_thinking;
    in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
    in.chat_template_kwargs = r.template_kwargs;
    if (r.now_unix >= 0) {
      // llama.cpp gives templates today's date (date_string, datetime); a fixed time instead.
      const std::time_t t = static_cast<std::time_t>(r.now_unix);
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[64];
      std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
      in.chat_template_kwargs.try_emplace("date_string", json(buf).dump());
      std::strftime(buf, sizeof(buf), "%b %d %Y", &tm);
      in.chat_template_kwargs.try_emplace("datetime", json(buf).dump());
    }
    if (!time_formats.empty()) {
      // The clock in local time, as llama.cpp's strftime_now; a fixed time in UTC, as the
      // date_string above, so a fixed time formats alike on every machine.
      std::tm tm{};
      if (r.now_unix >= 0) {
        const std::time_t t = static_cast<std::time_t>(r.now_unix);
        gmtime_r(&t, &tm);
      } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      json formatted = json::object();
      for (const std::string& f : time_formats) {
        char buf[128];
        formatted[f] = std::strftime(buf, sizeof(buf), f.c_str(), &tm) > 0 ? buf : "";
      }
      in.chat_template_kwargs[kStrftimeVar] = formatted.dump();
    }
    in.json_schema = r.response_schema;
    in.now = std::chrono::system_clock::time_point(std::chrono::seconds(r.now_unix));
    if (r.now_unix < 0) in.now = std::chrono::system_clock::now();
    try {
      return common_chat_templates_apply(tmpls.get(), in);
    } catch (const std::exception& e) {
      throw ChatError(std::string("the chat template failed: ") + e.what());
    }
  }
};

Template::Template(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

const std::string& Template::source() const {
  return impl_->source;
}

std::vector<std::string> Template::known_names() {
  std::vector<std::string> out;
  const std::string dir = templates_dir();
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".jinja") out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Template::load_source(std::string_view name_or_file) {
  const std::string arg(name_or_file);
  if (arg.empty()) throw ChatError("empty chat template name");
  const std::string dir = templates_dir();
  if (!dir.empty() && arg.find('/') == std::string::npos) {
    const std::string path = dir + "/" + arg + ".jinja";
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return read_file(path);
  }
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) return read_file(arg);
  throw ChatError("unknown chat template '" + arg + "': neither a file nor a name in " +
                  (dir.empty() ? std::string("llama.cpp's models/templates/") : dir));
}

Template Template::make(const llama_model* model, const std::string& source, const std::string& bos,
                        const std::string& eos) {
  auto impl = std::make_unique<Impl>();
  impl->time_formats = strftime_formats(source);
  try {
    impl->tmpls = common_chat_templates_init(
        model, impl->time_formats.empty() ? source : with_fixed_clock(source), bos, eos);
  } catch (const std::exception& e) {
    throw ChatError(std::string("the chat template does not parse: ") + e.what());
  }
  if (!impl->tmpls) throw ChatError("the chat template could not be loaded");
  impl->source = source;
  return Template(std::move(impl));
}

Template Template::for_model(const llama_model* model, std::string_view name_or_file) {
  if (model == nullptr) throw ChatError("Template::for_model: null model");
  std::string source;
  if (!name_or_file.empty()) {
    source = load_source(name_or_file);
  } else {
    const char* s = llama_model_chat_template(model, nullptr);
    if (s == nullptr || *s == '\0') {
      throw ChatError(
          "the model has no chat template (tokenizer.chat_template); give one by "
          "name or file");
    }
    source = s;
  }
  return make(model, source, "", "");
}

Template Template::from_source(const std::string& source, const std::string& bos,
                               const std::string& eos) {
  if (source.empty()) throw ChatError("empty chat template source");
  return make(nullptr, source, bos, eos);
}

Prompt Template::apply(const Request& r) const {
  validate(r);
  const bool has_tools = !r.tools.empty();
  common_chat_tool_choice choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
  switch (r.tool_choice.mode) {
    case ToolChoice::Mode::automatic:
      choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
      break;
    case ToolChoice::Mode::none:
      choice = COMMON_CHAT_TOOL_CHOICE_NONE;
      break;
    case ToolChoice::Mode::required:
    case ToolChoice::Mode::named:
      choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
      break;
  }
  // The prompt shows every declared tool, whatever tool_choice says.
  const common_chat_params shown = impl_->apply_common(r, r.tools, choice);

  Prompt p;
  p.text = shown.prompt;
  p.format = common_chat_format_name(shown.format);
  p.generation_prompt = shown.generation_prompt;
  p.stops = shown.additional_stops;
  p.parser = shown.parser;
  p.parser_format = static_cast<int>(shown.format);
  p.parse_tool_calls = has_tools && r.tool_choice.mode != ToolChoice::Mode::none;
  // A generation prompt that opens the reasoning block: the answer starts inside it. With
  // thinking off, only where the format's parser still reads a call at the answer's start as
  // reasoning (MiniMax-M2; Cohere2MoE's parser reads it as a call).
  const std::string gp = trim(shown.generation_prompt);
  const std::string start = trim(shown.thinking_start_tag);
  const bool prompt_opens = !start.empty() && gp.size() >= start.size() &&
                            gp.compare(gp.size() - start.size(), start.size(), start) == 0;
  bool reasoning_open = r.enable_thinking;
  if (!reasoning_open && prompt_opens && shown.supports_thinking) {
    // Ask the parser: is an answer that starts with a call (its trigger) read as reasoning?
    std::string probe = "probe";
    for (const common_grammar_trigger& t : shown.grammar_triggers) {
      if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD) {
        probe = t.value + probe;
        break;
      }
    }
    try {
      reasoning_open = !parse(p, probe, false).reasoning_content.empty();
    } catch (const ChatError&) {
      reasoning_open = false;
    }
  }
  if (shown.supports_thinking && reasoning_open) {
    p.thinking_budget = r.thinking_budget;
    p.thinking_start = shown.thinking_start_tag;
    p.thinking_end = shown.thinking_end_tags;
    p.thinking_open = prompt_opens;
    for (const std::string& end : p.thinking_end) {
      const std::string e = trim(end);
      if (!e.empty() && gp.size() >= e.size() &&
          gp.compare(gp.size() - e.size(), e.size(), e) == 0) {
        p.thinking_start.clear();  // the prompt already closed the reasoning block
        p.thinking_open = false;
      }
    }
  }

  set_llama_grammar(p, shown);
  if (!r.response_schema.empty()) {
    SchemaOptions opt;
    opt.whitespace = SchemaOptions::Whitespace::Compact;
    p.gbnf = "root ::= [ \\t\\n]{0,4} answer\n" +
             detail::prefix_gbnf_rules(json_schema_to_gbnf(r.response_schema, opt), "answer");
    return p;
  }
  if (!has_tools || r.tool_choice.mode == ToolChoice::Mode::none) return p;

  // The call syntax: the format's trigger rules (lazy), for the tools that may be called.
  std::vector<Tool> callable = r.tools;
  if (r.tool_choice.mode == ToolChoice::Mode::named) {
    callable.clear();
    for (const Tool& t : r.tools) {
      if (t.name == r.tool_choice.name) callable.push_back(t);
    }
  }
  // auto: the format's parser for optional calls, whose trigger rules (lazy) follow free
  // text. required / named: the parser that demands a call, and its outermost call syntax
  // from the start of the answer.
  const bool automatic = r.tool_choice.mode == ToolChoice::Mode::automatic;
  const common_chat_params syntax =
      automatic ? shown : impl_->apply_common(r, callable, COMMON_CHAT_TOOL_CHOICE_REQUIRED);
  if (!automatic) p.parser = syntax.parser;
  set_llama_grammar(p, syntax);
  std::vector<std::string> words;
  for (const common_grammar_trigger& t : syntax.grammar_triggers) {
    if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD) words.push_back(t.value);
  }
  if (syntax.parser.empty()) {
    p.constraint_error = "the chat format '" + p.format + "' has no parser";
    return p;
  }
  Request for_names = r;
  for_names.tools = callable;
  std::string calls;
  try {
    calls = detail::arena_to_gbnf(syntax.parser, schema_names(for_names), true,
                                  !r.parallel_tool_calls, /*outer_only=*/!automatic);
  } catch (const std::exception& e) {
    p.constraint_error = e.what();
    return p;
  }
  if (words.empty() && r.tool_choice.mode == ToolChoice::Mode::automatic) {
    // A format whose call has no marker (Llama 3.x: the answer is the call's JSON): a call
    // is an answer that starts, after whitespace, with the call's first character.
    const char first = first_literal_char(calls, "tool-call");
    if (first == '\0') {
      p.constraint_error = "the chat format '" + p.format +
                           "' has no tool-call syntax lacuna can constrain (no trigger)" +
                           (std::getenv("LACUNA_CHAT_DEBUG") ? "\n" + calls : std::string());
      return p;
    }
    p.gbnf = calls;
    p.triggers.push_back("^[ \\t\\n]*(" + detail::regex_escape(std::string(1, first)) + ")");
    return p;
  }
  if (r.tool_choice.mode == ToolChoice::Mode::automatic) {
    p.gbnf = calls;
    for (const std::string& w : words) p.triggers.push_back("(" + detail::regex_escape(w) + ")");
  } else {
    // At least one call, from the start of the answer: after optional whitespace where the
    // parser reads whitespace there (gpt-oss's parser wants its header at once).
    const bool leading_space = detail::parser_reads_prefix(p.parser, p.generation_prompt + "\n");
    p.gbnf = std::string(leading_space ? "root ::= [ \\t\\n]{0,4} calls\n" : "root ::= calls\n") +
             detail::prefix_gbnf_rules(calls, "calls");
  }
  return p;
}

}  // namespace lacuna::chat
