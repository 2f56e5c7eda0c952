// test_chat_runtime.cpp — chat on the runtime: warm multi-turn on one Branch (each turn sets
// the whole conversation's tokens, only the new ones decoded) gives the greedy answers of a
// cold context per turn; and the `lacuna chat` / `lacuna template` commands (valid tool calls,
// clear errors).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_test_support.h"
#include "lacuna/chat.h"
#include "lacuna/runtime.h"
#include "test_models.h"

namespace {

namespace chat = lacuna::chat;
using lacuna::runtime::Branch;
using lacuna::runtime::BranchParams;
using lacuna::runtime::Context;
using lacuna::runtime::ContextParams;

ContextParams small() {
  ContextParams p;
  p.n_ctx = 2048;
  p.n_threads = 1;
  p.n_threads_batch = 1;
  p.n_branches = 1;
  return p;
}

// Greedy answer of a cold context to `tokens` with the turn's constraint.
std::vector<lacuna::Token> cold_answer(const lacuna::Model& m, const chat::Prompt& prompt,
                                       const std::vector<lacuna::Token>& tokens) {
  Context ctx(m, small());
  BranchParams bp;
  bp.max_tokens = 24;
  bp.stop_strings = prompt.stops;
  Branch b = ctx.create_branch(bp);
  b.set_constraint(chat::make_constraint(m.vocab_ptr(), prompt));
  b.prefill(tokens);
  b.generate();
  return b.generator().tokens();
}

class ChatRuntime : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatRuntime, WarmTurnsAnswerLikeColdOnes) {
  const lacuna::Model m = lacuna::Model::load(lacuna::testing::ensure_test_model(GetParam()));
  const chat::Template t = chat::Template::for_model(m.get());
  chat::Request base;
  base.now_unix = 1721001600;
  base.tools = chat::tools_from_json(
      R"([{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string","maxLength":8}},"required":["q"],"additionalProperties":false}}}])");
  chat::Conversation conv(t, m.vocab_ptr(), base);
  conv.add({"system", "Be brief.", "", {}, "", ""});
  Context ctx(m, small());
  BranchParams bp;
  bp.max_tokens = 24;
  std::optional<Branch> b;
  const std::vector<std::string> users = {"Hello there", "Look something up", "Thanks"};
  for (size_t turn = 0; turn < users.size(); ++turn) {
    conv.add({"user", users[turn], "", {}, "", ""});
    const chat::Conversation::Turn tn = conv.next_turn();
    if (!b) {
      bp.stop_strings = tn.prompt.stops;
      b = ctx.create_branch(bp);
    }
    b->set_constraint(chat::make_constraint(m.vocab_ptr(), tn.prompt));
    const uint64_t own_before = b->kv_stats().tokens_reused_own;
    // What the sequence's KV holds: its tokens but the last sampled one (still pending).
    const auto held = b->tokens().first(static_cast<size_t>(b->generator().n_past()));
    size_t common = 0;
    while (common < held.size() && common < tn.tokens.size() && held[common] == tn.tokens[common])
      ++common;
    b->set_tokens(tn.tokens);
    if (turn > 0) {
      EXPECT_GT(tn.reused, 0u);
      EXPECT_GE(common + 1, tn.reused);  // the whole previous prompt and answer but the last token
      EXPECT_EQ(b->kv_stats().tokens_reused_own - own_before,
                std::min(common, tn.tokens.size() - 1));
    }
    b->generate();
    const std::vector<lacuna::Token> warm = b->generator().tokens();
    EXPECT_EQ(warm, cold_answer(m, tn.prompt, tn.tokens)) << "turn " << turn;
    const chat::Message msg = conv.add_output(b->generator().text(), warm);
    if (turn == 1) {
      // A tool result follows the assistant's turn.
      chat::Message tool{"tool", R"({"result": 42})", "", {}, "lookup", "call_0"};
      if (!msg.tool_calls.empty()) tool.tool_call_id = msg.tool_calls[0].id;
      conv.add(tool);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatRuntime, ::testing::Values("tiny-qwen2", "tiny-llama3"));

using lacuna::testing::CliResult;

CliResult cli(const std::string& args) {
  return lacuna::testing::run_cli(args);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ChatCli, ToolCallsAreValidAndBadInputIsClear) {
  if (std::getenv("LACUNA_CLI") == nullptr) GTEST_SKIP() << "LACUNA_CLI not set";
  const std::string model = lacuna::testing::ensure_test_model("tiny-qwen2");
  const std::string messages = write_temp(
      "chat_messages.json",
      R"([{"role":"system","content":"You are helpful."},{"role":"user","content":"Weather in Paris?"}])");
  const std::string tools = write_temp(
      "chat_tools.json",
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string","maxLength":24},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["location","unit","days"],"additionalProperties":false}}}])");
  const std::string base = "-m " + model + " --messages " + messages + " --tools " + tools;

  const CliResult t = cli("template " + base);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("<|im_start|>user\nWeather in Paris?<|im_end|>"), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("get_weather"), std::string::npos);

  for (const char* seed : {"0", "1", "2"}) {
    const CliResult r = cli(
        "chat " + base + " --tool-choice get_weather --json --threads 1 --temp 0.9 --seed " + seed);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto msg = nlohmann::json::parse(r.out);
    ASSERT_EQ(msg.at("tool_calls").size(), 1u) << r.out;
    const auto& fn = msg["tool_calls"][0]["function"];
    EXPECT_EQ(fn.at("name"), "get_weather");
    const auto a = nlohmann::json::parse(fn.at("arguments").get<std::string>());
    EXPECT_EQ(a.size(), 3u);
    EXPECT_TRUE(a.at("unit") == "celsius" || a.at("unit") == "fahrenheit");
    EXPECT_GE(a.at("days").get<int>(), 1);
    EXPECT_LE(a.at("days").get<int>(), 14);
  }
  const CliResult none = cli("chat " + base + " --tool-choice none --json --threads 1 -n 8");
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_FALSE(nlohmann::json::parse(none.out).contains("tool_calls")) << none.out;

  const CliResult unknown = cli("chat " + base + " --tool-choice no_such_tool --json");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("no_such_tool"), std::string::npos) << unknown.err;
  const std::string bad_role =
      write_temp("chat_bad_role.json", R"([{"role":"wizard","content":"x"}])");
  const CliResult br = cli("chat -m " + model + " --messages " + bad_role);
  EXPECT_NE(br.status, 0);
  EXPECT_NE(br.err.find("wizard"), std::string::npos) << br.err;
  const CliResult bt =
      cli("template -m " + model + " --messages " + messages + " --chat-template no-such-template");
  EXPECT_EQ(bt.status, 2);
  EXPECT_NE(bt.err.find("no-such-template"), std::string::npos) << bt.err;
}

}  // namespace
