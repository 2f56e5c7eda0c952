// api_response.h — OpenAI response bodies: the assistant message of a finished chat, the
// streamed deltas of a growing output (content, reasoning, tool calls by index), usage and
// timings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lacuna/chat.h"
#include "server/scheduler.h"

namespace lacuna::server {

// The assistant message of a complete output: the format's parser; output it cannot parse
// (cut by max_tokens, say) is read as partial output, and failing that is plain content.
chat::Message final_message(const chat::Prompt& prompt, const std::string& output);

// OpenAI's finish_reason of a stop reason ("tool_calls" when the message has calls).
std::string finish_reason(StopReason stop, bool has_tool_calls);

// usage (with prompt_tokens_details.cached_tokens) and lacuna's timings of a result.
nlohmann::json usage_json(const JobResult& r);
nlohmann::json timings_json(const JobResult& r);

// The deltas of a streamed chat answer. feed() gets the whole output so far and returns the
// delta objects not sent yet; content and reasoning stream as they grow (parsed as partial
// output), a tool call is sent whole (id, name, arguments) once it is complete: when a later
// call starts or at the end. The concatenated deltas equal final_message() of the output.
class ChatStream {
 public:
  explicit ChatStream(const chat::Prompt* prompt) : prompt_(prompt) {}
  std::vector<nlohmann::json> feed(const std::string& output, bool final);
  // The message the deltas describe once final (for usage / finish_reason).
  const chat::Message& message() const { return message_; }

 private:
  const chat::Prompt* prompt_;
  chat::Message message_;
  std::string sent_content_;
  std::string sent_reasoning_;
  size_t sent_calls_ = 0;
};

}  // namespace lacuna::server
