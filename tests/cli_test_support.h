// cli_test_support.h — runs the `lacuna` command the tests were built with (LACUNA_CLI) and
// collects its exit status, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace lacuna::testing {

struct CliResult {
  int status = -1;  // -1: not run (LACUNA_CLI unset) or killed
  std::string out;  // stdout
  std::string err;  // stderr
};

// `env` (e.g. "LACUNA_SKIP=0") is put before the command.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  const char* cli = std::getenv("LACUNA_CLI");
  CliResult r;
  if (cli == nullptr) return r;
  // One file per process and call: ctest runs test programs side by side, and a shared name
  // let one test read another's stderr.
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "lacuna_cli_stderr_" +
                               std::to_string(getpid()) + "_" + std::to_string(++calls) + ".txt";
  const std::string cmd = env + " \"" + cli + "\" " + args + " 2>" + err_file;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(err_file.c_str());
  return r;
}

}  // namespace lacuna::testing
