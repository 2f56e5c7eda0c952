// main.cpp — entry point of the `lacuna` command: dispatches to registered subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "command.h"

namespace lacuna::cli {

std::vector<Command>& commands() {
  static std::vector<Command> registry;
  return registry;
}

Registrar::Registrar(const char* name, const char* summary, CommandFn fn) {
  auto& all = commands();
  all.push_back({name, summary, fn});
  std::sort(all.begin(), all.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
}

}  // namespace lacuna::cli

namespace {

void print_usage(FILE* out) {
  std::fprintf(out,
               "usage: lacuna <command> [options]\n"
               "       lacuna bench <what> [options]\n"
               "       lacuna <command> --help\n\ncommands:\n");
  for (const auto& c : lacuna::cli::commands()) {
    std::string shown = c.name;
    if (shown.rfind("bench-", 0) == 0) shown = "bench " + shown.substr(6);
    std::fprintf(out, "  %-18s %s\n", shown.c_str(), c.summary.c_str());
  }
}

const lacuna::cli::Command* find(const std::string& name) {
  for (const auto& c : lacuna::cli::commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  int skip = 1;
  if (name == "bench") {
    if (argc < 3) {
      std::fprintf(stderr, "lacuna bench: say what to benchmark\n\n");
      print_usage(stderr);
      return 2;
    }
    name = std::string("bench-") + argv[2];
    skip = 2;
  }
  const lacuna::cli::Command* cmd = find(name);
  if (cmd == nullptr) {
    std::fprintf(stderr, "lacuna: unknown command '%s'\n\n", name.c_str());
    print_usage(stderr);
    return 2;
  }
  // The command sees its own name as argv[0].
  std::vector<char*> args;
  std::string own_name = cmd->name;
  args.push_back(own_name.data());
  for (int i = skip + 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  try {
    return cmd->fn(static_cast<int>(args.size()) - 1, args.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lacuna %s: error: %s\n", own_name.c_str(), e.what());
    return 1;
  }
}
