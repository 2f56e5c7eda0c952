// test_chat_conversation.cpp — warm multi-turn: each turn's tokens equal a cold format of the
// whole conversation, and what it reuses is the common prefix with what the sequence holds.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
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

// Two turns of a conversation with template `t` on vocabulary `v`; returns how many tokens of
// the first prompt the second turn does not reuse (0: the whole first prompt).
size_t run_turns(const chat::Template& t, const llama_vocab* v, const std::string& first_answer,
                 bool whole_first_prompt_reused = true) {
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
  EXPECT_LE(t2.reused, t2.tokens.size());
  if (t2.reused > t2.tokens.size()) return 0;
  EXPECT_EQ(std::vector<lacuna::Token>(t2.tokens.begin(), t2.tokens.begin() + t2.reused),
            std::vector<lacuna::Token>(conv.held().begin(), conv.held().begin() + t2.reused));
  // The whole first prompt is reused; the delta is what follows.
  if (whole_first_prompt_reused) {
    EXPECT_GE(t2.reused, t1.tokens.size());
  }
  EXPECT_EQ(t2.delta.size(), t2.tokens.size() - t2.reused);
  return t2.reused >= t1.tokens.size() ? 0 : t1.tokens.size() - t2.reused;
}

void run(const std::string& preset, const std::string& first_answer) {
  lacuna::Model m = lacuna::Model::load(lacuna::testing::ensure_test_model(preset));
  run_turns(chat::Template::for_model(m.get()), m.vocab_ptr(), first_answer);
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

// Every template of the pinned llama.cpp that renders a plain two-turn conversation: the warm
// turn's tokens equal a cold format's and its reused prefix is what the sequence holds; the
// whole first prompt is reused except where the template itself re-renders the end of the
// previous prompt (listed with the tokens re-read: e.g. DeepSeek-R1 opens "<think>\n" in the
// generation prompt and drops it from a rendered answer; lacuna reuses the longest common
// prefix).
TEST(ChatConversation, WarmTurnsEqualColdFormatsForEveryTemplate) {
  lacuna::Model m = lacuna::Model::load(lacuna::testing::ensure_test_model("tiny-qwen2"));
  size_t checked = 0;
  std::string partial, unparsed;
  for (const std::string& name : chat::Template::known_names()) {
    std::optional<chat::Template> t;
    try {
      t.emplace(chat::Template::from_source(chat::Template::load_source(name), "<s>", "</s>"));
      chat::Request probe;
      probe.messages = {{"user", "x", "", {}, "", ""}};
      t->apply(probe);
    } catch (const chat::ChatError&) {
      continue;
    }
    SCOPED_TRACE(name);
    size_t lost = 0;
    try {
      lost = run_turns(*t, m.vocab_ptr(), "Hi! How can I help?", false);
    } catch (const chat::ChatError&) {
      unparsed += " " + name;  // plain text is not an answer in this format (gpt-oss's channels)
      continue;
    }
    if (lost > 0) partial += " " + name + " (" + std::to_string(lost) + ")";
    ++checked;
  }
  std::fprintf(stderr,
               "%zu templates; second turn re-reads (tokens) of the first prompt:%s; plain text is "
               "not an answer:%s\n",
               checked, partial.empty() ? " none" : partial.c_str(),
               unparsed.empty() ? " none" : unparsed.c_str());
  EXPECT_GT(checked, 50u);
}

}  // namespace
