// test_generator_cli.cpp — `lacuna run` with constraints (--schema, --grammar, --regex,
// --choices, --lazy-trigger, --json-stats): valid outputs, the skipping switches, clear
// errors for bad options.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli_test_support.h"
#include "generator_fixtures.h"

namespace {

using Result = lacuna::testing::CliResult;

Result run(const std::string& args, const std::string& env = "") {
  return lacuna::testing::run_cli("run " + args, env);
}

std::string repo_file(const std::string& rel) {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / rel).string();
}

std::string base_args() {
  return "-m " + lacuna::testing::model_path("tiny-llama3") + " --threads 1 --ctx 512 ";
}

// The JSON stats line is the last line of stderr that starts with '{'.
nlohmann::json stats_line(const std::string& err) {
  size_t at = err.rfind("\n{");
  const std::string line = err.substr(at == std::string::npos ? 0 : at + 1);
  return nlohmann::json::parse(line.substr(0, line.find('\n')));
}

class RunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("LACUNA_CLI") == nullptr)
      GTEST_SKIP() << "LACUNA_CLI is not set (run through ctest)";
  }
};

TEST_F(RunCli, SchemaOutputValidatesAndStatsArePrinted) {
  const Result r = run(base_args() + "-p 'Call the weather tool:' -n 128 --schema " +
                       repo_file("examples/tool_call_schema.json") +
                       " --schema-whitespace compact --json-stats");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // stdout is the JSON text and a newline
  EXPECT_EQ(j.at("name"), "get_weather");
  const auto& a = j.at("arguments");
  EXPECT_TRUE(a.at("unit") == "celsius" || a.at("unit") == "fahrenheit");
  EXPECT_GE(a.at("days").get<int>(), 1);
  EXPECT_LE(a.at("days").get<int>(), 14);
  size_t code_points = 0;  // maxLength counts characters, not bytes
  for (unsigned char c : a.at("location").get<std::string>()) code_points += (c & 0xC0) != 0x80;
  EXPECT_LE(code_points, 24u);
  const auto st = stats_line(r.err);
  EXPECT_GT(st.at("tokens_emitted").get<int>(), 0);
  EXPECT_LT(st.at("forward_passes").get<int>(), st.at("tokens_emitted").get<int>());
  EXPECT_EQ(st.at("stop"), "constraint_completed");

  // The plain path (no skipping) prints the same text with one pass per token.
  const Result plain = run(base_args() + "-p 'Call the weather tool:' -n 128 --schema " +
                               repo_file("examples/tool_call_schema.json") +
                               " --schema-whitespace compact --json-stats",
                           "LACUNA_SKIP=0 LACUNA_VERIFY=0");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out, r.out);
  const auto pst = stats_line(plain.err);
  EXPECT_EQ(pst.at("tokens_skipped").get<int>(), 0);
  EXPECT_EQ(pst.at("forward_passes").get<int>(), pst.at("tokens_emitted").get<int>());
}

TEST_F(RunCli, ChoicesRegexAndGrammar) {
  Result r = run(base_args() + "-p 'Pick one:' --choices 'red,green,blue sky'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out == "red\n" || r.out == "green\n" || r.out == "blue sky\n") << r.out;

  r = run(base_args() + "-p 'A date:' --regex '2026-(0[1-9]|1[0-2])-[0-2][0-9]'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("2026-(0[1-9]|1[0-2])-[0-2][0-9]\n"))) << r.out;

  const std::string gbnf = ::testing::TempDir() + "lacuna_cli_test.gbnf";
  {
    std::ofstream g(gbnf);
    g << "root ::= \"move(\" [0-9] \",\" [0-9] \")\"\n";
  }
  r = run(base_args() + "-p 'Move:' --grammar " + gbnf);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("move\\([0-9],[0-9]\\)\n"))) << r.out;
}

TEST_F(RunCli, LazyTriggerLeavesTextFreeUntilTheTrigger) {
  // Random weights never write "</think>": the constraint stays inactive, so the output is
  // the free generation's, to the token budget.
  const Result lazy = run(base_args() +
                          "-p 'Think, then answer:' -n 16 --choices yes,no "
                          "--lazy-trigger '</think>' --json-stats");
  ASSERT_EQ(lazy.status, 0) << lazy.err;
  const Result free_run = run(base_args() + "-p 'Think, then answer:' -n 16");
  ASSERT_EQ(free_run.status, 0) << free_run.err;
  EXPECT_EQ(lazy.out, free_run.out);
  const auto st = stats_line(lazy.err);
  EXPECT_EQ(st.at("tokens_emitted").get<int>(), 16);
  EXPECT_EQ(st.at("stop"), "max_tokens");
}

TEST_F(RunCli, BadOptionsGetClearErrors) {
  Result r = run(base_args() + "-p x --choices a --regex b");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not several"), std::string::npos) << r.err;
  r = run(base_args() + "-p x --schema /nonexistent/schema.json");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("/nonexistent/schema.json"), std::string::npos) << r.err;
  r = run(base_args() + "-p x --regex '(unclosed'");
  EXPECT_EQ(r.status, 2);
  EXPECT_FALSE(r.err.empty());
  r = run(base_args() + "-p x --lazy-trigger '</think>'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--lazy-trigger needs"), std::string::npos) << r.err;
  r = run(base_args() + "-p x --choices a", "LACUNA_SKIP=maybe");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("LACUNA_SKIP"), std::string::npos) << r.err;
}

}  // namespace
