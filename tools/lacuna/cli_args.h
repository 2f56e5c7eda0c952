// cli_args.h — one way for every subcommand to parse its options with CLI11 and answer
// --help and bad usage alike.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>

namespace lacuna::cli {

// Parses argv into `app`. Returns -1 when the command should go on, otherwise the exit code
// to return: 0 after printing --help, 2 after printing the error and the usage.
inline int parse_args(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n\n" << app.help();
    return 2;
  }
  return -1;
}

}  // namespace lacuna::cli
