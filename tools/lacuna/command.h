// command.h — the subcommand registry of the `lacuna` executable.
//
// Each tools/lacuna/cmd_*.cpp defines one subcommand with LACUNA_COMMAND; main.cpp finds
// it by name. `lacuna bench <what>` dispatches to the command named "bench-<what>".
// A command receives argc/argv with argv[0] = its own name and returns the exit code:
// 0 success, 1 failure, 2 bad usage (print usage to stderr first).
// Options are parsed with CLI11 (<CLI/CLI.hpp>, Debian's libcli11-dev) or by hand.
#pragma once

#include <string>
#include <vector>

namespace lacuna::cli {

using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string name;
  std::string summary;
  CommandFn fn;
};

// All registered commands, sorted by name.
std::vector<Command>& commands();

struct Registrar {
  Registrar(const char* name, const char* summary, CommandFn fn);
};

}  // namespace lacuna::cli

#define LACUNA_COMMAND_CONCAT2(a, b) a##b
#define LACUNA_COMMAND_CONCAT(a, b) LACUNA_COMMAND_CONCAT2(a, b)
// Usage: LACUNA_COMMAND(cmd_run, "run", "generate text") { ... return 0; }
#define LACUNA_COMMAND(fn_name, name, summary)                                               \
  static int fn_name(int argc, char** argv);                                                 \
  static const ::lacuna::cli::Registrar LACUNA_COMMAND_CONCAT(fn_name, _registrar){name, summary, \
                                                                                   fn_name};  \
  static int fn_name([[maybe_unused]] int argc, [[maybe_unused]] char** argv)
