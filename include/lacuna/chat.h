// chat.h — chat templates (llama.cpp's Jinja chat library), tool calls that are valid by
// construction (the format's syntax with lacuna's JSON-Schema grammars), reasoning, output
// parsing and warm multi-turn conversations. Semantics: docs/chat.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lacuna/constraint.h"
#include "llama.h"

namespace lacuna::chat {

// Every chat error: bad messages or tools (with a JSON pointer), unknown or failing
// templates, invalid tool schemas, a tool_choice naming no declared tool, output that does
// not parse. `pointer` is the JSON pointer into the offending document when there is one.
struct ChatError : std::runtime_error {
  explicit ChatError(const std::string& message, std::string pointer = {})
      : std::runtime_error(pointer.empty() ? message : message + " (at " + pointer + ")"),
        pointer(std::move(pointer)) {}
  std::string pointer;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct Message {
  std::string role;  // system, user, assistant, tool (developer is mapped by the template)
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::string tool_name;     // role tool: the tool's name ("name" in OpenAI's shape)
  std::string tool_call_id;  // role tool: the call answered
};

struct Tool {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema text of the arguments ("{}" or empty: no arguments)
};

struct ToolChoice {
  enum class Mode { automatic, none, required, named };
  Mode mode = Mode::automatic;
  std::string name;  // Mode::named: the function that must be called
  // "auto", "none", "required" or a function name.
  static ToolChoice parse(std::string_view text);
};

struct Request {
  std::vector<Message> messages;
  std::vector<Tool> tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = false;
  bool add_generation_prompt = true;
  bool enable_thinking = true;
  // Extra template variables: name -> JSON text of the value.
  std::map<std::string, std::string> template_kwargs;
  // The time templates print (e.g. Llama 3.1's "Today Date"), in seconds since the epoch;
  // negative: now. A conversation fixes it once so every turn formats alike.
  int64_t now_unix = -1;
  // response_format: a JSON Schema the whole answer (after any reasoning) must match;
  // json_object is the schema {"type": "object"}. Empty: none.
  std::string response_schema;
  // Thinking templates: after this many tokens of reasoning, its end tag is forced (then the
  // answer goes on as usual). Negative: no budget.
  int32_t thinking_budget = -1;
};

// OpenAI's shapes. Throw ChatError naming the JSON pointer of the bad part.
std::vector<Message> messages_from_json(std::string_view json_text);
std::vector<Tool> tools_from_json(std::string_view json_text);
// {"role": "assistant", "content": ..., "reasoning_content": ..., "tool_calls": [{"id",
// "type": "function", "function": {"name", "arguments"}}]}; empty fields are left out
// (content is null when empty and there are tool calls).
std::string message_to_json(const Message& message, int indent = -1);

// What formatting a request gives: the prompt, and what generation and parsing need.
struct Prompt {
  std::string text;                       // the formatted conversation
  std::string format;                     // llama.cpp's name of the output format
  std::string generation_prompt;          // the prompt's tail that opens the assistant's turn
  std::string thinking_start;             // e.g. "<think>" (empty: the format has no reasoning)
  std::vector<std::string> thinking_end;  // e.g. "</think>"
  bool thinking_open = false;             // the prompt ends inside the reasoning block
  int32_t thinking_budget = -1;           // Request::thinking_budget
  std::vector<std::string> stops;         // extra stop strings of the format
  // The constraint: lacuna GBNF of what follows the reasoning (empty: unconstrained), and
  // the triggers before which text is free (empty: constrained from the start): ECMAScript
  // patterns whose capture group starts the constrained text (the trigger text included).
  std::string gbnf;
  std::vector<std::string> triggers;
  // Why the answer cannot be constrained although it should be (a format without a tool-call
  // syntax lacuna knows how to constrain); make_constraint() throws it. Empty: no problem.
  std::string constraint_error;
  // llama.cpp's own grammar for the same answer (its JSON-Schema converter; what its server
  // would enforce), for side-by-side comparisons: GBNF, whether it waits for a trigger, and
  // the triggers as anchored or unanchored ECMAScript patterns and as token ids.
  std::string llama_grammar;
  bool llama_grammar_lazy = false;
  std::vector<std::string> llama_trigger_patterns;
  std::vector<int32_t> llama_trigger_tokens;
  // The serialized parser (llama.cpp's PEG arena) and its format id.
  std::string parser;
  int parser_format = 0;
  bool parse_tool_calls = true;
};

// A chat template: the model's own, one of the pinned llama.cpp's models/templates/ by name
// (file name without .jinja), or a Jinja file.
class Template {
 public:
  // The model's template (tokenizer.chat_template), or `name_or_file` when not empty.
  // Throws ChatError for an unknown name, an unreadable file, a template that does not
  // parse, or a model without template when none is given.
  static Template for_model(const llama_model* model, std::string_view name_or_file = {});
  // From Jinja source with the given BOS/EOS texts.
  static Template from_source(const std::string& source, const std::string& bos = {},
                              const std::string& eos = {});
  // The Jinja source of a template name or file (models/templates/NAME.jinja of the pinned
  // llama.cpp, else a file path). Throws ChatError.
  static std::string load_source(std::string_view name_or_file);
  // Names of the pinned llama.cpp's models/templates/*.jinja, sorted.
  static std::vector<std::string> known_names();

  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // Formats the request. Throws ChatError (bad role, missing fields, invalid tool schema
  // with its JSON pointer, tool_choice naming an unknown tool, the template failing).
  Prompt apply(const Request& request) const;
  const std::string& source() const;

 private:
  struct Impl;
  explicit Template(std::unique_ptr<Impl> impl);
  static Template make(const llama_model* model, const std::string& source, const std::string& bos,
                       const std::string& eos);
  std::unique_ptr<Impl> impl_;
};

// Parses the assistant's output for a prompt: content, reasoning and tool calls (llama.cpp's
// parser for the format). partial: the output may be cut anywhere (streaming). Throws
// ChatError when complete output does not match the format.
Message parse(const Prompt& prompt, std::string_view output, bool partial = false);

// The constraint for the prompt's answer (nullptr when the prompt has none): free text until
// a trigger (tool_choice auto), then the call syntax; reasoning is never constrained: the
// constraint starts after the reasoning block's end (or at once when the answer does not
// open one), except that past a thinking budget only the end tag's tokens are allowed. Throws
// ChatError when the grammar does not compile or the prompt has a constraint_error.
std::unique_ptr<Constraint> make_constraint(const llama_vocab* vocab, const Prompt& prompt);

// A conversation kept warm across turns: each turn's prompt tokens are exactly those of a
// cold format of the whole conversation, and `delta` what is new after the tokens the
// previous turn ended with (docs/chat.md, "Warm multi-turn").
class Conversation {
 public:
  Conversation(const Template& tmpl, const llama_vocab* vocab, Request base = {});

  // Adds a message (user, tool, system, or an assistant message given by the caller).
  void add(Message message);
  // Formats the conversation with a generation prompt and tokenizes it.
  struct Turn {
    Prompt prompt;
    std::vector<Token> tokens;  // the whole prompt
    size_t reused = 0;          // tokens shared with the previous turn's tokens
    std::vector<Token> delta;   // tokens[reused:]
  };
  Turn next_turn();
  // Records the assistant's output of the last turn (its text and the tokens the sequence
  // now holds after the prompt): parsed and added as a message.
  Message add_output(std::string_view output, std::span<const Token> output_tokens = {});

  const std::vector<Message>& messages() const { return request_.messages; }
  // The last turn's prompt tokens, and what the sequence holds (prompt + output).
  const std::vector<Token>& tokens() const { return tokens_; }
  const std::vector<Token>& held() const { return held_; }

 private:
  const Template* tmpl_;
  const llama_vocab* vocab_;
  Request request_;
  Prompt last_prompt_;
  std::vector<Token> tokens_;  // tokens of the last turn's prompt
  std::vector<Token> held_;    // tokens_ and the output tokens after them
};

// Tokenizes a formatted prompt the way llama.cpp's server does (special tokens parsed, BOS
// added when the vocabulary asks for it and the text does not start with it).
std::vector<Token> tokenize_prompt(const llama_vocab* vocab, const std::string& text);

}  // namespace lacuna::chat
