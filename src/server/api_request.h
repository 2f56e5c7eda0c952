// api_request.h — OpenAI request bodies (/v1/chat/completions, /v1/completions) parsed and
// type-checked into a GenRequest; every client mistake is an ApiError with its HTTP status.
// Needs no model: the model-dependent checks (template, tokens, constraints) come after.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lacuna/chat.h"

namespace lacuna::server {

// An error for the client, in OpenAI's shape (error_body). Never used for a server fault.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string param = {},
           std::string type = "invalid_request_error", std::string code = {})
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param;  // the offending field (a JSON pointer into the body), or empty
  std::string type;
  std::string code;
};

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
std::string error_body(const std::string& message, const std::string& type,
                       const std::string& param = {}, const std::string& code = {});
std::string error_body(const ApiError& e);

struct GenRequest {
  enum class Kind { chat, completion };
  Kind kind = Kind::chat;
  chat::Request chat;  // Kind::chat (response_format lands in chat.response_schema)
  std::string prompt;  // Kind::completion
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Choices: n branches of the same prompt (seeds seed, seed + 1, ...), each its own job.
  static constexpr int max_choices = 16;
  int n = 1;
  // Sampling. OpenAI's defaults (temperature 1, top_p 1); top_k / min_p are extensions.
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 40;
  float min_p = 0.05f;
  std::optional<uint32_t> seed;
  int64_t max_tokens = -1;  // -1: the server's default
  std::vector<std::string> stop;
  // Log-probabilities of the answer's tokens with this many alternatives each (-1: none).
  int logprobs = -1;
  // false: the request neither takes over a slot's kept branch nor leaves its own kept
  // (llama-server's field; the block prefix cache still serves it).
  bool cache_prompt = true;
  // lacuna extensions: one constraint source at most (besides tools / response_format).
  std::string grammar;  // GBNF
  std::string regex;
  std::vector<std::string> choices;
  std::vector<std::string> lazy_triggers;
  std::string token_trie;       // a token-trie payload (JSON text, docs/token_trie.md)
  std::string token_trie_path;  // its descriptor (empty: the first)

  bool has_extension_constraint() const {
    return !grammar.empty() || !regex.empty() || !choices.empty() || !token_trie.empty();
  }
};

// Throws ApiError (400) naming the field for invalid JSON, wrong types or ranges, unknown
// roles, conflicting constraints, unsupported options (n > 16, echo, suffix).
GenRequest parse_chat_request(std::string_view body);
GenRequest parse_completion_request(std::string_view body);

}  // namespace lacuna::server
