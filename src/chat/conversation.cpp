// conversation.cpp — a conversation kept warm across turns: every turn is a cold format of
// the whole conversation (so warm and cold prompts are the same tokens); what it reuses is
// the longest common prefix with the tokens the sequence already holds.
#include <chrono>
#include <stdexcept>

#include "lacuna/chat.h"

namespace lacuna::chat {

std::vector<Token> tokenize_prompt(const llama_vocab* vocab, const std::string& text) {
  if (vocab == nullptr) throw ChatError("tokenize_prompt: null vocabulary");
  const int32_t n = -llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), nullptr,
                                    0, false, true);
  std::vector<Token> out(static_cast<size_t>(std::max(n, 0)));
  if (n > 0) {
    const int32_t got = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()),
                                       out.data(), n, false, true);
    if (got != n) throw ChatError("tokenize_prompt: llama_tokenize failed");
  }
  const Token bos = llama_vocab_bos(vocab);
  if (llama_vocab_get_add_bos(vocab) && bos != LLAMA_TOKEN_NULL &&
      (out.empty() || out.front() != bos)) {
    out.insert(out.begin(), bos);
  }
  return out;
}

Conversation::Conversation(const Template& tmpl, const llama_vocab* vocab, Request base)
    : tmpl_(&tmpl), vocab_(vocab), request_(std::move(base)) {
  if (vocab_ == nullptr) throw ChatError("Conversation: null vocabulary");
  if (request_.now_unix < 0) {
    request_.now_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  }
}

void Conversation::add(Message message) {
  request_.messages.push_back(std::move(message));
}

Conversation::Turn Conversation::next_turn() {
  Request r = request_;
  r.add_generation_prompt = true;
  Turn turn;
  turn.prompt = tmpl_->apply(r);
  turn.tokens = tokenize_prompt(vocab_, turn.prompt.text);
  size_t k = 0;
  while (k < held_.size() && k < turn.tokens.size() && held_[k] == turn.tokens[k]) ++k;
  turn.reused = k;
  turn.delta.assign(turn.tokens.begin() + static_cast<std::ptrdiff_t>(k), turn.tokens.end());
  last_prompt_ = turn.prompt;
  tokens_ = turn.tokens;
  held_ = turn.tokens;
  return turn;
}

Message Conversation::add_output(std::string_view output, std::span<const Token> output_tokens) {
  Message m = parse(last_prompt_, output, false);
  held_.insert(held_.end(), output_tokens.begin(), output_tokens.end());
  request_.messages.push_back(m);
  return m;
}

}  // namespace lacuna::chat
