// test_chat_conversation.cpp — warm multi-turn: each turn's tokens equal a cold format of the
// whole conversation, and what it reuses is the common prefix with what the sequence holds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lacuna/chat.h"
#include "lacuna/model.h"
#include "test_models.h"

namespace {

namespace chat = lacuna::chat;

std::vector<lacuna::Token> cold(const chat::Template& t, const llama_vocab* v,
                                const std::vector<chat::Message>& msgs, int64_t now) {
  chat::Request r;
  r.messages = msgs;
  r.now_unix = now;
  return chat::tokenize_prompt(v, t.apply(r).text);
}

void run(const std::string& preset, const std::string& first_answer) {
  lacuna::ModelParams mp;
  lacuna::Model m = lacuna::Model::load(lacuna::testing::ensure_test_model(preset), mp);
  const llama_vocab* v = m.vocab_ptr();
  chat::Template t = chat::Template::for_model(m.get());
  chat::Request base;
  base.now_unix = 1721001600;
  chat::Conversation conv(t, v, base);
  conv.add({"system", "Be brief.", "", {}, "", ""});
  conv.add({"user", "Hello there", "", {}, "", ""});
  chat::Conversation::Turn t1 = conv.next_turn();
  EXPECT_EQ(t1.tokens, cold(t, v, conv.messages(), base.now_unix));
  EXPECT_EQ(t1.reused, 0u);
  const std::vector<lacuna::Token> out = chat::tokenize_prompt(v, first_answer);
  conv.add_output(first_answer, out);
  conv.add({"user", "And again?", "", {}, "", ""});
  chat::Conversation::Turn t2 = conv.next_turn();
  EXPECT_EQ(t2.tokens, cold(t, v, conv.messages(), base.now_unix));
  ASSERT_LE(t2.reused, t2.tokens.size());
  EXPECT_EQ(std::vector<lacuna::Token>(t2.tokens.begin(), t2.tokens.begin() + t2.reused),
            std::vector<lacuna::Token>(conv.held().begin(), conv.held().begin() + t2.reused));
  // The whole first prompt is reused; the delta is what follows.
  EXPECT_GE(t2.reused, t1.tokens.size());
  EXPECT_EQ(t2.delta.size(), t2.tokens.size() - t2.reused);
}

TEST(ChatConversation, WarmTurnsEqualColdFormatsQwen25) {
  run("tiny-qwen2", "Hi! How can I help?");
}
TEST(ChatConversation, WarmTurnsEqualColdFormatsLlama31) {
  run("tiny-llama3", "Hi! How can I help?");
}
TEST(ChatConversation, WarmTurnsEqualColdFormatsAfterReasoningQwen3) {
  run("tiny-qwen3", "<think>\nshort\n</think>\n\nHi!");
}

}  // namespace
