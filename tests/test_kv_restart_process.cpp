// test_kv_restart_process.cpp — a real process restart: `lacuna run --persist-dir` twice on
// the same prompt; the second process starts from the disk cache and prints the same text.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kv_test_util.h"

namespace {

// Runs a shell command, returns stdout+stderr and the exit status.
std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  status = pclose(p);
  return out;
}

TEST(KvRestart, SecondProcessStartsWarmWithTheSameOutput) {
  const char* cli = std::getenv("LACUNA_CLI");
  if (cli == nullptr) GTEST_SKIP() << "LACUNA_CLI is not set (run through ctest)";
  kvtest::TempDir dir;
  const std::string cmd = std::string(cli) + " run -m " + kvtest::model_path("tiny-spm") +
                          " -n 16 --threads 1 --kv-block 16 --persist-dir " + dir.path.string() +
                          " -p 'Once upon a time there was a small cache that remembered every "
                          "prompt it had ever seen, and it was very proud of that fact indeed.'";
  int s1 = 0, s2 = 0;
  const std::string first = run(cmd, s1);
  const std::string second = run(cmd, s2);
  ASSERT_EQ(s1, 0) << first;
  ASSERT_EQ(s2, 0) << second;
  EXPECT_NE(first.find("kv: 0 prompt tokens reused"), std::string::npos) << first;
  EXPECT_EQ(second.find("kv: 0 prompt tokens reused"), std::string::npos) << second;
  // The generated text is the first line of each output.
  const std::string text1 = first.substr(0, first.find('\n'));
  const std::string text2 = second.substr(0, second.find('\n'));
  EXPECT_FALSE(text1.empty());
  EXPECT_EQ(text1, text2);
  // A plain third run (no reuse) prints the same text as well.
  int s3 = 0;
  const std::string third = run(cmd + " --no-kv-reuse", s3);
  ASSERT_EQ(s3, 0) << third;
  EXPECT_EQ(third.substr(0, third.find('\n')), text1);
}

}  // namespace
