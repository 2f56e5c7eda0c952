// api_response.h — OpenAI response bodies: the assistant message of a finished chat, the
// streamed deltas of a growing output (content, reasoning, tool calls by index), usage and
// timings.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lacuna/chat.h"
#include "lacuna/model.h"
#include "server/scheduler.h"

namespace lacuna::server {

// The assistant message of a complete output. Without tools and without a reasoning block
// the whole output is the content. Otherwise the format's parser; output it cannot parse
// (cut by max_tokens, say) is read as partial output, and failing that is plain content.
chat::Message final_message(const chat::Prompt& prompt, bool has_tools, const std::string& output);

// The assistant message in OpenAI's shape (content null when empty and there are calls).
nlohmann::json message_json(const chat::Message& m);

// OpenAI's finish_reason of a stop reason ("tool_calls" when the message has calls).
std::string finish_reason(StopReason stop, bool has_tool_calls);

// usage (with prompt_tokens_details.cached_tokens) of a request's choices (the prompt counted
// once, as the first choice read it; completion tokens summed) and lacuna's timings of a result.
nlohmann::json usage_json(const std::vector<JobResult>& choices);
nlohmann::json timings_json(const JobResult& r);

// Log-probabilities in OpenAI's shapes: chat's `{"content": [{token, logprob, bytes,
// top_logprobs}], "refusal": null}` and the legacy completions' `{tokens, token_logprobs,
// top_logprobs, text_offset}` (offsets from `text_offset`, the bytes of the answer before
// these tokens, which it advances past them). A token's text that is not whole UTF-8 is shown with
// U+FFFD; `bytes` holds it exactly.
nlohmann::json chat_logprobs_json(const Vocab& vocab, std::span<const TokenLogprob> lp);
nlohmann::json completion_logprobs_json(const Vocab& vocab, std::span<const TokenLogprob> lp,
                                        size_t& text_offset);

// The length of `text` without a UTF-8 sequence cut at its end (a token may end inside a
// character): what a stream may send now so that its pieces join to the whole text.
size_t utf8_complete_prefix(std::string_view text);

// The deltas of a streamed chat answer. feed() gets the whole output so far and returns the
// delta objects not sent yet. Plain answers (no tools, no reasoning) stream as they grow;
// otherwise llama.cpp's partial parse of the output so far gives reasoning, content and tool
// calls as they are written: a call is announced (index, id, type, name, empty arguments)
// once the parser has moved past its name into its arguments, then its arguments follow as
// fragments. Only growth is sent (text the parser takes back is held until it agrees again),
// cut at UTF-8 boundaries. The concatenated deltas equal final_message() of the output
// whenever that extends what was sent; when it does not (a call cut by max_tokens, which the
// final parse returns as plain content) the stream ends with the partial parse's view.
class ChatStream {
 public:
  // Keeps its own copy of the prompt (the stream outlives the request handler).
  ChatStream(const chat::Prompt& prompt, bool has_tools) : prompt_(prompt), has_tools_(has_tools) {}
  std::vector<nlohmann::json> feed(const std::string& output, bool final);
  // The message the deltas describe once final (for usage / finish_reason).
  const chat::Message& message() const { return message_; }

 private:
  struct SentCall {
    std::string id;
    std::string name;
    std::string arguments;
  };
  // Whether `m` extends what was sent (every sent call still there, same id and name).
  bool extends_sent(const chat::Message& m) const;
  void append_deltas(const chat::Message& m, bool final, std::vector<nlohmann::json>& out);

  chat::Prompt prompt_;
  bool has_tools_;
  chat::Message message_;
  std::string sent_content_;
  std::string sent_reasoning_;
  std::vector<SentCall> sent_calls_;
};

}  // namespace lacuna::server
