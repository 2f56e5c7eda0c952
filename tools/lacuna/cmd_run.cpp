// cmd_run.cpp — `lacuna run`: text generation (free or constrained by a grammar, JSON Schema,
// regex or choices) that streams tokens to stdout and ends with one stats line on stderr.
//
// Defaults: greedy decoding (--temp 0) so that a run is deterministic; the prompt is
// tokenized with the model's BOS (when it asks for one) and with special-token text parsed.
// Decoding is one runtime::Branch (docs/runtime.md): prefill through KV reuse, forced tokens
// emitted without forward passes (LACUNA_SKIP=0 / LACUNA_VERIFY=0 switch that off,
// docs/generator.md). This file keeps no decode logic of its own.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "decode/constraint_factory.h"
#include "lacuna/generator.h"
#include "lacuna/json_schema.h"
#include "lacuna/kv.h"
#include "lacuna/model.h"
#include "lacuna/runtime.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

LACUNA_COMMAND(cmd_run, "run", "generate text from a prompt (streams to stdout)") {
  std::string model_path;
  std::string prompt;
  int32_t n_predict = 64;
  float temp = 0.0f;
  uint32_t seed = 0;
  int32_t threads = 0;
  uint32_t n_ctx = 4096;
  std::string persist_dir;
  bool no_kv_reuse = false;
  bool backend_sampling = false;
  uint32_t kv_block = 0;
  lacuna::decode::ConstraintSpec spec;
  std::string choices;
  std::string schema_whitespace = "flexible";
  bool json_stats = false;
  std::vector<std::string> stop_strings;
  CLI::App app{
      "Generate text from a prompt; the text streams to stdout, one stats line "
      "goes to stderr at the end. Greedy by default (--temp 0).",
      "lacuna run"};
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("-p,--prompt", prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate at most (default 64)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--temp", temp, "sampling temperature; 0 = greedy (default)")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--seed", seed, "sampling seed for --temp > 0 (default 0)");
  app.add_option("--threads", threads, "CPU threads (default: all)")->check(CLI::Range(1, 1024));
  app.add_option("--ctx", n_ctx, "context size in tokens (default 4096)")
      ->check(CLI::Range(16u, 1u << 24));
  app.add_option("--persist-dir", persist_dir,
                 "persistent KV cache directory: a later run whose prompt starts the same way "
                 "starts warm (default: $LACUNA_PERSIST_DIR)");
  app.add_flag("--no-kv-reuse,--no-prefix-cache", no_kv_reuse,
               "plain prefill: ignore --persist-dir and LACUNA_PERSIST_DIR");
  app.add_flag("--backend-sampling", backend_sampling,
               "run the constraint's mask and the sampler inside llama.cpp's graph; only the "
               "sampled token comes back (default: $LACUNA_BACKEND_SAMPLING, else off)");
  app.add_option("--kv-block", kv_block, "KV cache block size in tokens (default 64)")
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--grammar", spec.grammar_file, "constrain the output to a GBNF grammar file");
  app.add_option("--schema", spec.schema_file, "constrain the output to a JSON Schema file");
  app.add_option("--schema-whitespace", schema_whitespace,
                 "whitespace a --schema allows: flexible (default) or compact")
      ->check(CLI::IsMember({"flexible", "compact"}));
  app.add_option("--regex", spec.regex, "constrain the output to a regular expression");
  app.add_option("--choices", choices, "the output is exactly one of these, comma-separated");
  app.add_option("--lazy-trigger", spec.lazy_triggers,
                 "constrain only after this string appears in the output (repeatable)");
  app.add_option("--stop", stop_strings, "stop once the text contains this string (repeatable)");
  app.add_flag("--json-stats", json_stats,
               "print the generation's stats as one JSON line on stderr at the end");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;

  const lacuna::Model model = lacuna::Model::load(model_path);
  const lacuna::Vocab vocab = model.vocab();

  const std::vector<lacuna::Token> tokens =
      lacuna::tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) {
    std::cerr << "lacuna run: the prompt gives no tokens\n";
    return 2;
  }
  if (tokens.size() + static_cast<size_t>(n_predict) > n_ctx) {
    std::cerr << "lacuna run: the prompt (" << tokens.size() << " tokens) plus -n " << n_predict
              << " does not fit the context of " << n_ctx << " tokens (use --ctx)\n";
    return 2;
  }

  if (!choices.empty()) {
    size_t at = 0;
    while (at <= choices.size()) {
      const size_t comma = std::min(choices.find(',', at), choices.size());
      spec.choices.push_back(choices.substr(at, comma - at));
      at = comma + 1;
    }
  }
  std::unique_ptr<lacuna::Constraint> constraint;
  if (!spec.empty()) {
    std::string gbnf;
    try {
      if (!spec.schema_file.empty()) {
        lacuna::SchemaOptions so;
        so.whitespace = schema_whitespace == "compact"
                            ? lacuna::SchemaOptions::Whitespace::Compact
                            : lacuna::SchemaOptions::Whitespace::Flexible;
        so.on_warning = [](const std::string& keyword, const std::string& pointer,
                           const std::string& message) {
          std::cerr << "lacuna run: schema: " << keyword << " at " << pointer << ": " << message
                    << "\n";
        };
        const int n_sources =
            !spec.grammar_file.empty() + !spec.regex.empty() + !spec.choices.empty();
        if (n_sources > 0) {
          throw std::invalid_argument(
              "give one of --grammar, --schema, --regex, --choices, not several");
        }
        gbnf = lacuna::json_schema_to_gbnf(lacuna::decode::read_text_file(spec.schema_file), so);
      } else {
        gbnf = lacuna::decode::spec_to_gbnf(spec);
      }
      constraint =
          lacuna::decode::make_grammar_constraint(model.vocab_ptr(), gbnf, spec.lazy_triggers);
    } catch (const std::exception& e) {
      std::cerr << "lacuna run: " << e.what() << "\n";
      return 2;
    }
  } else if (!spec.lazy_triggers.empty()) {
    std::cerr << "lacuna run: --lazy-trigger needs --grammar, --schema, --regex or --choices\n";
    return 2;
  }

  lacuna::runtime::ContextParams rp;
  lacuna::runtime::BranchParams bp;
  try {
    rp.decode = lacuna::decode_options_from_env();
    if (backend_sampling) rp.decode.backend_sampling = true;
    bp.print_stats = lacuna::stats_enabled_from_env();
    rp.kv = lacuna::kv::KvConfig::from_env();
  } catch (const std::exception& e) {
    std::cerr << "lacuna run: " << e.what() << "\n";
    return 2;
  }
  rp.n_ctx = n_ctx;
  rp.n_threads = threads;
  rp.n_branches = 1;
  rp.n_cache_holders = 1;
  rp.model_path = model_path;
  // KV reuse across runs: the persistent store (--persist-dir or LACUNA_PERSIST_DIR).
  if (!persist_dir.empty()) rp.kv.persist_dir = persist_dir;
  if (kv_block != 0) rp.kv.block_size = kv_block;
  if (no_kv_reuse) {
    rp.kv.persist_dir.clear();
    rp.kv.prefix_cache = false;
  }
  bp.temp = temp;
  bp.seed = seed;
  bp.max_tokens = static_cast<size_t>(n_predict);
  bp.stop_strings = stop_strings;

  lacuna::runtime::Context rt(model, rp);
  {
    // Warm-up pass (not counted): the first llama_decode also builds and allocates the
    // compute graph, which would otherwise be billed to prefill.
    lacuna::runtime::Branch warm = rt.create_branch();
    warm.prefill(std::span<const lacuna::Token>(tokens).first(1));
    warm.prune();
  }
  lacuna::runtime::Branch branch = rt.create_branch(bp);
  branch.set_constraint(std::move(constraint));

  auto t0 = std::chrono::steady_clock::now();
  branch.prefill(tokens);
  const double prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  if (n_predict > 0) {  // -n 0: prefill only
    branch.generate([&](const lacuna::Step& step) {
      if (!step.text.empty()) {
        std::fwrite(step.text.data(), 1, step.text.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
  }
  const double decode_s = seconds_since(t0);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const lacuna::GenerationStats& gs = branch.generator().stats();
  const size_t n_generated = branch.generator().tokens().size();
  const double prefill_tps = prefill_s > 0 ? static_cast<double>(tokens.size()) / prefill_s : 0.0;
  const double decode_tps = decode_s > 0 ? static_cast<double>(n_generated) / decode_s : 0.0;
  std::fprintf(stderr,
               "prompt %zu tokens, generated %zu tokens, %zu forward passes, "
               "prefill %.1f tokens/s, decode %.1f tokens/s\n",
               tokens.size(), n_generated, gs.forward_passes, prefill_tps, decode_tps);
  if (json_stats) std::fprintf(stderr, "%s\n", gs.to_json().c_str());
  if (rt.persistent_store() != nullptr) {
    const uint64_t written = branch.persist();
    rt.persistent_store()->cleanup(rp.kv.persist_max_age_s, rp.kv.persist_max_bytes);
    const lacuna::kv::KvStats& ks = branch.kv_stats();
    std::fprintf(stderr,
                 "kv: %llu prompt tokens reused from the disk cache, %llu bytes read, "
                 "%llu bytes written\n",
                 static_cast<unsigned long long>(ks.tokens_reused_disk),
                 static_cast<unsigned long long>(ks.bytes_loaded),
                 static_cast<unsigned long long>(written));
  }
  return 0;
}
