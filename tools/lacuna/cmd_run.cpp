// cmd_run.cpp — `lacuna run`: text generation (free or constrained by a grammar, JSON Schema,
// regex or choices) that streams tokens to stdout and ends with one stats line on stderr.
//
// Defaults: greedy decoding (--temp 0) so that a run is deterministic; the prompt is
// tokenized with the model's BOS (when it asks for one) and with special-token text parsed.
// The decode loop is lacuna::Generator: forced tokens are emitted without forward passes
// (LACUNA_SKIP=0 / LACUNA_VERIFY=0 switch that off, docs/generator.md).
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

namespace {

struct RunStats {
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  int32_t n_forward = 0;   // llama_decode calls
  double prefill_s = 0.0;  // prompt forward passes
  double decode_s = 0.0;   // from the end of prefill to the last generated token
  size_t n_reused = 0;     // prompt tokens whose KV came from the disk cache (kv::Session)
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prefill (through the KV session when there is one) and generation with the Generator.
// With a session, the session restores/decodes all prompt tokens but the last; the
// generator decodes the last one and takes it from there.
RunStats generate(lacuna::Context& ctx, const lacuna::GeneratorConfig& config,
                  std::unique_ptr<lacuna::Constraint> constraint,
                  std::span<const lacuna::Token> prompt,
                  const std::function<void(std::string_view)>& on_text,
                  lacuna::kv::Session* session, lacuna::GenerationStats& gen_stats) {
  RunStats st;
  st.n_prompt = static_cast<int32_t>(prompt.size());
  const int32_t n_batch = static_cast<int32_t>(ctx.n_batch());
  lacuna::Batch batch(n_batch);

  // Warm-up pass (not counted): the first llama_decode also builds and allocates the
  // compute graph, which would otherwise be billed to prefill.
  batch.add(prompt[0], 0, 0, true);
  ctx.decode(batch);
  ctx.clear_memory();

  auto t0 = std::chrono::steady_clock::now();
  std::span<const lacuna::Token> rest = prompt;
  if (session != nullptr && prompt.size() > 1) {
    const lacuna::kv::PrefillResult r = session->prefill(prompt.first(prompt.size() - 1));
    st.n_reused = r.n_reused;
    st.n_forward += r.n_computed > 0 ? 1 : 0;
    rest = prompt.last(1);
  }
  lacuna::Generator gen(ctx.get(), config, std::move(constraint));
  gen.prefill(rest);
  if (session != nullptr) session->append_external(rest);
  st.n_forward += static_cast<int32_t>((rest.size() + static_cast<size_t>(n_batch) - 1) /
                                       static_cast<size_t>(n_batch));
  st.prefill_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  if (config.max_tokens > 0) {  // -n 0: prefill only
    gen.generate([&](const lacuna::Step& step) {
      if (!step.text.empty()) on_text(step.text);
      return true;
    });
  }
  st.decode_s = seconds_since(t0);
  if (session != nullptr) {
    // Generated tokens whose KV is in the sequence (the last ones may still be pending).
    const size_t in_kv = static_cast<size_t>(gen.n_past()) - prompt.size();
    session->append_external(std::span<const lacuna::Token>(gen.tokens()).first(in_kv));
  }
  st.n_generated = static_cast<int32_t>(gen.tokens().size());
  st.n_forward += static_cast<int32_t>(gen.stats().forward_passes);
  gen_stats = gen.stats();
  return st;
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
  lacuna::ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_threads = threads;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  const lacuna::Vocab vocab = model.vocab();

  const std::vector<lacuna::Token> tokens =
      lacuna::tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) {
    std::cerr << "lacuna run: the prompt gives no tokens\n";
    return 2;
  }
  if (tokens.size() + static_cast<size_t>(n_predict) > ctx.n_ctx()) {
    std::cerr << "lacuna run: the prompt (" << tokens.size() << " tokens) plus -n " << n_predict
              << " does not fit the context of " << ctx.n_ctx() << " tokens (use --ctx)\n";
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

  lacuna::GeneratorConfig gc;
  gc.temp = temp;
  gc.seed = seed;
  gc.max_tokens = static_cast<size_t>(n_predict);
  gc.stop_strings = stop_strings;
  try {
    gc.decode = lacuna::decode_options_from_env();
    gc.print_stats = lacuna::stats_enabled_from_env();
  } catch (const std::exception& e) {
    std::cerr << "lacuna run: " << e.what() << "\n";
    return 2;
  }

  // KV reuse across runs (src/kv): only with a persistent cache directory.
  lacuna::kv::KvConfig kv_config = lacuna::kv::KvConfig::from_env();
  if (!persist_dir.empty()) kv_config.persist_dir = persist_dir;
  if (kv_block != 0) kv_config.block_size = kv_block;
  std::unique_ptr<lacuna::kv::PersistentStore> kv_store;
  std::unique_ptr<lacuna::kv::Session> kv_session;
  if (!no_kv_reuse && !kv_config.persist_dir.empty()) {
    kv_store = std::make_unique<lacuna::kv::PersistentStore>(
        kv_config.persist_dir,
        lacuna::kv::PersistentStore::model_fingerprint(kv_config.persist_dir, model_path),
        kv_config.block_size);
    kv_session =
        std::make_unique<lacuna::kv::Session>(ctx.get(), 0, kv_config, nullptr, kv_store.get());
  }

  lacuna::GenerationStats gen_stats;
  const RunStats st = generate(
      ctx, gc, std::move(constraint), tokens,
      [&](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      },
      kv_session.get(), gen_stats);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const double prefill_tps = st.prefill_s > 0 ? st.n_prompt / st.prefill_s : 0.0;
  const double decode_tps = st.decode_s > 0 ? st.n_generated / st.decode_s : 0.0;
  std::fprintf(stderr,
               "prompt %d tokens, generated %d tokens, %d forward passes, "
               "prefill %.1f tokens/s, decode %.1f tokens/s\n",
               st.n_prompt, st.n_generated, st.n_forward, prefill_tps, decode_tps);
  if (json_stats) std::fprintf(stderr, "%s\n", gen_stats.to_json().c_str());
  if (kv_session) {
    const uint64_t written = kv_session->persist();
    kv_store->cleanup(kv_config.persist_max_age_s, kv_config.persist_max_bytes);
    std::fprintf(stderr,
                 "kv: %zu prompt tokens reused from the disk cache, %llu bytes read, "
                 "%llu bytes written\n",
                 st.n_reused, static_cast<unsigned long long>(kv_session->stats().bytes_loaded),
                 static_cast<unsigned long long>(written));
  }
  return 0;
}
