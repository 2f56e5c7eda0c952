// cmd_schema.cpp — `lacuna schema`: prints the GBNF grammar a JSON Schema (or a regex)
// compiles to, and checks JSON documents against it, for users debugging their schemas.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "grammar/json_schema_parts.h"
#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/regex.h"

namespace {

bool read_file(const std::string& path, std::string& out) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    out = ss.str();
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace

LACUNA_COMMAND(cmd_schema, "schema",
               "print the grammar of a JSON Schema or regex; check documents against it") {
  std::string schema_path, regex;
  std::vector<std::string> docs;
  bool strict = false, compact = false, quiet = false, search = false, closed = false,
       schema_order = false;
  int max_ws = 20;
  CLI::App app{
      "Converts a JSON Schema (file, or - for stdin) to GBNF and prints it; with --check, "
      "walks each JSON document through the grammar and says whether it is accepted.",
      "lacuna schema"};
  app.add_option("schema", schema_path, "JSON Schema file, - for stdin");
  app.add_option("--regex", regex, "convert this ECMAScript regex instead of a schema");
  app.add_flag("--search", search, "regex: match anywhere (like JSON Schema's pattern)");
  app.add_option("--check", docs, "JSON document file(s) to check against the grammar");
  app.add_flag("--strict", strict, "unsupported keywords are errors (default: warnings)");
  app.add_flag("--compact", compact, "no whitespace in the JSON (default: flexible)");
  app.add_option("--max-ws", max_ws, "longest whitespace run in flexible mode (default 20)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--no-additional", closed,
               "objects without additionalProperties accept no extra properties");
  app.add_flag("-q,--quiet", quiet, "do not print the grammar");
  app.add_flag("--schema-order", schema_order,
               "re-serialize each document compactly with its keys in the grammar's property "
               "order before checking (as bench schemas does)");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  if (schema_path.empty() == regex.empty()) {
    std::cerr << "lacuna schema: give a schema file or --regex (one of them)\n\n" << app.help();
    return 2;
  }
  std::string gbnf, schema_text;
  lacuna::SchemaOptions so;
  if (!regex.empty()) {
    lacuna::RegexOptions ro;
    ro.search = search;
    ro.on_warning = [](const std::string& m) { std::cerr << "warning: " << m << "\n"; };
    try {
      gbnf = lacuna::regex_to_gbnf(regex, ro);
    } catch (const lacuna::RegexError& e) {
      std::cerr << "lacuna schema: regex: " << e.what() << "\n";
      return 1;
    }
  } else {
    std::string& text = schema_text;
    if (!read_file(schema_path, text)) {
      std::cerr << "lacuna schema: cannot read " << schema_path << "\n";
      return 1;
    }
    so.strict = strict;
    so.max_whitespace = max_ws;
    so.additional_properties_default = !closed;
    if (compact) so.whitespace = lacuna::SchemaOptions::Whitespace::Compact;
    so.on_warning = [](const std::string& k, const std::string& p, const std::string& m) {
      std::cerr << "warning: " << (p.empty() ? "/" : p) << ": " << k << ": " << m << "\n";
    };
    try {
      gbnf = lacuna::json_schema_to_gbnf(text, so);
    } catch (const lacuna::SchemaError& e) {
      std::cerr << "lacuna schema: " << e.what() << "\n";
      return 1;
    }
  }
  if (!quiet) std::cout << gbnf;
  if (docs.empty()) return 0;
  std::shared_ptr<const lacuna::CompiledGrammar> compiled;
  try {
    compiled = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf), nullptr);
  } catch (const std::exception& e) {
    std::cerr << "lacuna schema: the grammar does not compile: " << e.what() << "\n";
    return 1;
  }
  int rc = 0;
  for (const std::string& d : docs) {
    std::string text;
    if (!read_file(d, text)) {
      std::cerr << "lacuna schema: cannot read " << d << "\n";
      return 1;
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (schema_order && regex.empty()) {
      try {
        lacuna::SchemaOptions quiet_so = so;
        quiet_so.on_warning = nullptr;
        text = lacuna::schema_detail::canonical_instance(schema_text, text, false, quiet_so);
      } catch (const std::exception& e) {
        std::cerr << "lacuna schema: " << d << ": not JSON: " << e.what() << "\n";
        return 1;
      }
    }
    lacuna::GrammarMatcher m(compiled);
    // Find the first refused byte for a useful message.
    size_t ok_bytes = 0;
    bool refused = false;
    for (size_t i = 0; i < text.size(); ++i) {
      if (!m.accept_string(std::string_view(text).substr(i, 1))) {
        refused = true;
        break;
      }
      ok_bytes = i + 1;
    }
    if (refused) {
      std::printf(
          "%s: refused at byte %zu: ...%s<<here>>%s\n", d.c_str(), ok_bytes,
          text.substr(ok_bytes > 40 ? ok_bytes - 40 : 0, std::min<size_t>(ok_bytes, 40)).c_str(),
          text.substr(ok_bytes, 20).c_str());
      rc = 1;
    } else if (!m.is_completed()) {
      std::printf("%s: incomplete: the document ends where the grammar expects more\n", d.c_str());
      rc = 1;
    } else {
      std::printf("%s: accepted\n", d.c_str());
    }
  }
  return rc;
}
