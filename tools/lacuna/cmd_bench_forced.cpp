// cmd_bench_forced.cpp — `lacuna bench forced DIR`: with no model (a vocabulary only), over
// the valid instances of MaskBench-format files, the share of tokens the schema forces: what
// forced-token skipping and verified forced strings could save at most.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "decode/forced_string.h"
#include "grammar/json_schema_parts.h"
#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "lacuna/token_index.h"

namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Counts {
  size_t instances = 0;
  size_t tokens = 0;
  size_t single = 0;  // exactly one token allowed at that position
  size_t string = 0;  // the token lies inside the forced string (jump_forward_string)
};

// Walks one instance token by token; false when the grammar refuses it.
bool walk(const std::shared_ptr<const lacuna::CompiledGrammar>& compiled,
          const lacuna::Vocab& vocab, const std::string& text, std::vector<uint32_t>& words,
          Counts& c) {
  lacuna::GrammarMatcher m(compiled);
  const std::vector<lacuna::Token> toks = lacuna::tokenize(vocab, text, false, false);
  Counts local;
  std::string piece;
  for (lacuna::Token t : toks) {
    m.fill_next_token_bitmask(words.data());
    size_t allowed = 0;
    for (uint32_t w : words) allowed += static_cast<size_t>(std::popcount(w));
    if (!lacuna::bitmask_test(words.data(), t)) return false;
    const std::string forced = m.jump_forward_string();
    lacuna::decode::token_piece(vocab.get(), t, piece);
    ++local.tokens;
    if (allowed == 1) ++local.single;
    if (allowed == 1 || (!piece.empty() && forced.compare(0, piece.size(), piece) == 0))
      ++local.string;
    if (!m.accept_token(t)) return false;
  }
  if (!m.is_completed()) return false;
  ++c.instances;
  c.tokens += local.tokens;
  c.single += local.single;
  c.string += local.string;
  return true;
}

}  // namespace

LACUNA_COMMAND(cmd_bench_forced, "bench-forced",
               "share of tokens a JSON Schema forces over a dataset (no model needed)") {
  std::string dir;
  std::string vocab_path = std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-qwen2.gguf";
  size_t limit = 200;
  bool compact = true;
  bool json_out = false;
  CLI::App app{
      "Over the valid instances of MaskBench-format files (schema + tests), counts "
      "the tokens that are forced: exactly one token allowed (single), or the token "
      "lies inside the string every continuation must start with (string).",
      "lacuna bench forced"};
  app.add_option("dir", dir, "directory of *.json files {schema, tests: [{data, valid}]}")
      ->required();
  app.add_option("--vocab", vocab_path, "GGUF whose tokenizer is used (vocab-only is enough)");
  app.add_option("--limit", limit, "most files (default 200)");
  app.add_flag("!--flexible", compact, "serialize with \", \" and \": \" and allow whitespace");
  app.add_flag("--json", json_out, "print only the JSON report");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  if (!std::filesystem::is_directory(dir)) {
    std::cerr << "lacuna bench forced: " << dir << " is not a directory\n";
    return 2;
  }
  lacuna::ModelParams mp;
  mp.vocab_only = true;
  const lacuna::Model model = lacuna::Model::load(vocab_path, mp);
  const lacuna::Vocab vocab = model.vocab();
  const auto index = lacuna::TokenIndex::build(vocab.get());

  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.size() > limit) files.resize(limit);

  lacuna::SchemaOptions so;
  so.whitespace = compact ? lacuna::SchemaOptions::Whitespace::Compact
                          : lacuna::SchemaOptions::Whitespace::Flexible;
  so.on_warning = [](const std::string&, const std::string&, const std::string&) {};
  Counts total;
  size_t files_used = 0;
  size_t files_skipped = 0;
  size_t refused = 0;
  std::map<std::string, size_t> skip_reasons;
  std::vector<uint32_t> words(lacuna::bitmask_words(static_cast<size_t>(vocab.n_vocab())));
  const auto t0 = Clock::now();
  for (const auto& path : files) {
    try {
      std::ifstream in(path);
      const ojson doc = ojson::parse(in);
      if (!doc.contains("schema") || !doc.contains("tests") || !doc["tests"].is_array()) {
        ++files_skipped;
        continue;
      }
      const std::string schema =
          doc["schema"].dump(-1, ' ', false, ojson::error_handler_t::replace);
      lacuna::CompileOptions co;
      co.max_compile_ms = 5000;
      const auto compiled = lacuna::CompiledGrammar::compile(
          lacuna::parse_gbnf(lacuna::json_schema_to_gbnf(schema, so)), index, co);
      bool used = false;
      for (const ojson& t : doc["tests"]) {
        if (!t.value("valid", false)) continue;
        const std::string data = t["data"].dump(-1, ' ', false, ojson::error_handler_t::replace);
        const std::string text =
            lacuna::schema_detail::canonical_instance(schema, data, !compact, so);
        if (walk(compiled, vocab, text, words, total)) {
          used = true;
        } else {
          ++refused;
        }
      }
      files_used += used ? 1 : 0;
    } catch (const std::exception& e) {
      ++files_skipped;  // unsupported schema, limit, malformed file
      std::string why = e.what();
      why = why.substr(0, std::min(why.find(" ("), std::min<size_t>(why.size(), 60)));
      ++skip_reasons[why];
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  auto share = [&](size_t n) {
    return total.tokens > 0 ? static_cast<double>(n) / static_cast<double>(total.tokens) : 0.0;
  };
  ojson r;
  r["dir"] = dir;
  r["vocab"] = vocab_path;
  r["whitespace"] = compact ? "compact" : "flexible";
  r["files"] = files.size();
  r["files_used"] = files_used;
  r["files_skipped"] = files_skipped;
  r["skip_reasons"] = skip_reasons;
  r["instances"] = total.instances;
  r["instances_refused"] = refused;
  r["tokens"] = total.tokens;
  r["forced_single_tokens"] = total.single;
  r["forced_string_tokens"] = total.string;
  r["forced_single_share"] = share(total.single);
  r["forced_string_share"] = share(total.string);
  r["seconds"] = secs;
  std::cout << r.dump(2) << std::endl;
  if (!json_out) {
    std::fprintf(
        stderr,
        "%zu tokens over %zu instances: %.1f%% single forced, %.1f%% inside forced strings\n",
        total.tokens, total.instances, 100 * share(total.single), 100 * share(total.string));
  }
  return 0;
}
