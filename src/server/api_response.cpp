// api_response.cpp — OpenAI response bodies and streamed deltas (api_response.h).
#include "server/api_response.h"

namespace lacuna::server {

using json = nlohmann::json;

namespace {

bool plain_answer(const chat::Prompt& prompt, bool has_tools) {
  return !has_tools && prompt.thinking_start.empty() && !prompt.thinking_open;
}

}  // namespace

chat::Message final_message(const chat::Prompt& prompt, bool has_tools, const std::string& output) {
  if (plain_answer(prompt, has_tools)) {
    chat::Message m;
    m.role = "assistant";
    m.content = output;
    return m;
  }
  try {
    return chat::parse(prompt, output, /*partial=*/false);
  } catch (const chat::ChatError&) {
  }
  try {
    chat::Message m = chat::parse(prompt, output, /*partial=*/true);
    // A cut call's arguments are not a complete object: keep the text, not the call.
    bool calls_ok = true;
    for (const auto& c : m.tool_calls) {
      if (!json::accept(c.arguments)) calls_ok = false;
    }
    if (calls_ok) return m;
  } catch (const chat::ChatError&) {
  }
  chat::Message m;
  m.role = "assistant";
  m.content = output;
  return m;
}

json message_json(const chat::Message& m) {
  json j = {{"role", "assistant"}};
  j["content"] = m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content);
  if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
  if (!m.tool_calls.empty()) {
    json calls = json::array();
    for (const chat::ToolCall& c : m.tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

std::string finish_reason(StopReason stop, bool has_tool_calls) {
  if (has_tool_calls) return "tool_calls";
  switch (stop) {
    case StopReason::max_tokens:
    case StopReason::context_full:
      return "length";
    default:
      return "stop";
  }
}

json usage_json(const std::vector<JobResult>& choices) {
  const JobResult& first = choices.front();
  size_t completion = 0;
  for (const JobResult& r : choices) completion += r.completion_tokens;
  return {{"prompt_tokens", first.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", first.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", first.cached_tokens}}}};
}

json timings_json(const JobResult& r) {
  const GenerationStats& s = r.stats;
  return {{"queue_ms", r.queue_ms},
          {"prefill_ms", r.prefill_ms},
          {"ttft_ms", r.ttft_ms},
          {"generate_ms", r.generate_ms},
          {"prompt_tokens", r.prompt_tokens},
          {"cached_tokens", r.cached_tokens},
          {"predicted_n", r.completion_tokens},
          {"predicted_per_second",
           r.generate_ms > 0 && r.completion_tokens > 1
               ? static_cast<double>(r.completion_tokens - 1) * 1000.0 / r.generate_ms
               : 0.0},
          {"decode_ms", s.decode_ms},
          {"mask_ms", s.mask_ms},
          {"sample_ms", s.sample_ms},
          {"forward_passes", s.forward_passes},
          {"tokens_skipped", s.tokens_skipped},
          {"draft_accepted", s.draft_accepted},
          {"stop", stop_reason_name(s.stop)}};
}

namespace {

// The token's bytes, and as text with every byte that is not part of whole UTF-8 replaced.
std::string piece_of(const Vocab& vocab, Token t) {
  return detokenize(vocab, std::span<const Token>(&t, 1), /*remove_special=*/false,
                    /*unparse_special=*/true);
}

std::string valid_utf8(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

nlohmann::json bytes_of(const std::string& piece) {
  nlohmann::json b = nlohmann::json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

nlohmann::json chat_logprobs_json(const Vocab& vocab, std::span<const TokenLogprob> lp) {
  nlohmann::json content = nlohmann::json::array();
  for (const TokenLogprob& r : lp) {
    const std::string piece = piece_of(vocab, r.token);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [t, l] : r.top) {
      const std::string p = piece_of(vocab, t);
      top.push_back({{"token", valid_utf8(p)}, {"logprob", l}, {"bytes", bytes_of(p)}});
    }
    content.push_back({{"token", valid_utf8(piece)},
                       {"logprob", r.logprob},
                       {"bytes", bytes_of(piece)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

nlohmann::json completion_logprobs_json(const Vocab& vocab, std::span<const TokenLogprob> lp,
                                        size_t& text_offset) {
  nlohmann::json tokens = nlohmann::json::array(), token_logprobs = nlohmann::json::array(),
                 top_logprobs = nlohmann::json::array(), offsets = nlohmann::json::array();
  for (const TokenLogprob& r : lp) {
    const std::string piece = piece_of(vocab, r.token);
    tokens.push_back(valid_utf8(piece));
    token_logprobs.push_back(r.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [t, l] : r.top) top[valid_utf8(piece_of(vocab, t))] = l;
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += piece.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

size_t utf8_complete_prefix(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? n - back : n;
  }
  return n;
}

namespace {

// The part of `now` after `sent` when `now` extends it; nothing otherwise (the parser has
// taken back text it showed before: wait until it agrees again).
std::optional<std::string> growth(const std::string& sent, const std::string& now) {
  if (now.size() <= sent.size() || now.compare(0, sent.size(), sent) != 0) return std::nullopt;
  return now.substr(sent.size());
}

}  // namespace

bool ChatStream::extends_sent(const chat::Message& m) const {
  if (!m.reasoning_content.starts_with(sent_reasoning_) || !m.content.starts_with(sent_content_) ||
      m.tool_calls.size() < sent_calls_.size()) {
    return false;
  }
  for (size_t i = 0; i < sent_calls_.size(); ++i) {
    const chat::ToolCall& c = m.tool_calls[i];
    const SentCall& s = sent_calls_[i];
    if (c.id != s.id || c.name != s.name || !c.arguments.starts_with(s.arguments)) return false;
  }
  return true;
}

void ChatStream::append_deltas(const chat::Message& m, bool final, std::vector<json>& out) {
  const auto cut = [final](const std::string& s) {
    return final ? s : s.substr(0, utf8_complete_prefix(s));
  };
  if (auto g = growth(sent_reasoning_, cut(m.reasoning_content))) {
    out.push_back({{"reasoning_content", *g}});
    sent_reasoning_ += *g;
  }
  if (auto g = growth(sent_content_, cut(m.content))) {
    out.push_back({{"content", *g}});
    sent_content_ += *g;
  }
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    const chat::ToolCall& c = m.tool_calls[i];
    if (i == sent_calls_.size()) {
      // A call is announced once its name is whole: the parser is past it, into the
      // arguments (more than the "{" it opens them with) or on to the next call.
      const bool named = final || i + 1 < m.tool_calls.size() || c.arguments.size() > 1;
      if (c.name.empty() || !named) break;
      sent_calls_.push_back({c.id, c.name, ""});
      out.push_back(
          {{"tool_calls", json::array({{{"index", i},
                                        {"id", c.id},
                                        {"type", "function"},
                                        {"function", {{"name", c.name}, {"arguments", ""}}}}})}});
    }
    SentCall& s = sent_calls_[i];
    if (auto g = growth(s.arguments, cut(c.arguments))) {
      out.push_back(
          {{"tool_calls", json::array({{{"index", i}, {"function", {{"arguments", *g}}}}})}});
      s.arguments += *g;
    }
  }
}

std::vector<json> ChatStream::feed(const std::string& output, bool final) {
  std::vector<json> out;
  chat::Message m;
  const bool plain = plain_answer(prompt_, has_tools_);
  if (plain) {
    m.content = output;
  } else if (final) {
    m = final_message(prompt_, has_tools_, output);
    if (!extends_sent(m)) {
      // The final parse disagrees with what was streamed (a call cut by max_tokens becomes
      // plain content): the stream keeps the partial parse's view.
      try {
        m = chat::parse(prompt_, output, /*partial=*/true);
      } catch (const chat::ChatError&) {
      }
    }
  } else {
    try {
      m = chat::parse(prompt_, output, /*partial=*/true);
    } catch (const chat::ChatError&) {
      return out;
    }
  }
  append_deltas(m, final, out);
  if (final) message_ = std::move(m);
  return out;
}

}  // namespace lacuna::server
