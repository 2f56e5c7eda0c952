// cmd_bench_decode.cpp — `lacuna bench decode`: constrained decoding modes side by side in one
// process (llama.cpp's grammar sampler, lacuna without and with skipping, tier-2 jump-forward,
// free generation): tokens, forward passes, skip ratio, drafts, speed, token agreement.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "decode/constraint_factory.h"
#include "lacuna/generator.h"
#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "lacuna/token_index.h"

namespace {

using lacuna::Token;
using nlohmann::json;

const char* kModes[] = {"llama-grammar", "lacuna", "lacuna-skip", "lacuna-jump", "free"};

struct ModeTotals {
  size_t runs = 0;
  size_t tokens = 0;
  size_t forward_passes = 0;
  size_t skipped = 0;
  size_t batch_filled = 0;
  size_t draft_proposed = 0;
  size_t draft_accepted = 0;
  size_t jump_tokens = 0;
  size_t completed = 0;  // runs that ended because the output was complete
  double wall_ms = 0;    // prefill + decode
  double decode_ms = 0;  // after the prompt: everything (passes, masks, sampling)
  double mask_ms = 0;
  size_t agree = 0;     // tokens equal to llama-grammar's at the same index
  size_t agree_of = 0;  // max(len) summed
};

// Prompts file: one prompt per line, "\n" written as a backslash-n.
std::vector<std::string> read_prompts(const std::string& path) {
  const std::string text = lacuna::decode::read_text_file(path);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    std::string p;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
        p += '\n';
        ++i;
      } else {
        p += line[i];
      }
    }
    out.push_back(p);
  }
  if (out.empty()) throw std::runtime_error(path + ": no prompts");
  return out;
}

}  // namespace

LACUNA_COMMAND(cmd_bench_decode, "bench-decode",
               "constrained decoding modes side by side: passes, skip ratio, speed (JSON)") {
  std::string model_path;
  std::vector<std::string> schema_paths;
  std::string prompts_path;
  int32_t threads = 2;
  size_t n_predict = 128;
  uint32_t n_ctx = 2048;
  int repeats = 1;
  bool json_out = false;
  std::vector<std::string> modes(std::begin(kModes), std::end(kModes));
  CLI::App app{
      "Runs each mode on every (schema, prompt) pair with greedy decoding and reports "
      "per mode: tokens, forward passes, skip ratio, drafts, decode speed, wall time "
      "and token agreement with llama.cpp's grammar sampler.",
      "lacuna bench decode"};
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("--schema", schema_paths, "JSON Schema file or directory of *.json (repeatable)")
      ->required();
  app.add_option("--prompts", prompts_path, "prompts file, one per line (\\n for newlines)")
      ->required();
  app.add_option("--threads", threads, "CPU threads (default 2)")->check(CLI::Range(1, 256));
  app.add_option("-n,--n-predict", n_predict, "most tokens per generation (default 128)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--ctx", n_ctx, "context size (default 2048)")->check(CLI::Range(64u, 1u << 20));
  app.add_option("--repeats", repeats, "runs of each pair and mode (default 1)")
      ->check(CLI::Range(1, 100));
  app.add_option("--modes", modes, "subset of modes to run")->delimiter(',');
  app.add_flag("--json", json_out, "print only the JSON report");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  for (const auto& m : modes) {
    if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes)) {
      std::cerr << "lacuna bench decode: unknown mode '" << m << "'\n";
      return 2;
    }
  }
  auto has_mode = [&](const char* m) {
    return std::find(modes.begin(), modes.end(), m) != modes.end();
  };

  // Schema files.
  std::vector<std::string> files;
  for (const auto& p : schema_paths) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::string> in_dir;
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.path().extension() == ".json") in_dir.push_back(e.path().string());
      }
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.push_back(p);
    }
  }
  if (files.empty()) {
    std::cerr << "lacuna bench decode: no schema files\n";
    return 2;
  }
  const auto prompts = read_prompts(prompts_path);

  const lacuna::Model model = lacuna::Model::load(model_path);
  lacuna::ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  const llama_vocab* vocab = model.vocab_ptr();
  const auto index = lacuna::TokenIndex::build(vocab);

  // Warm-up: the first decode builds the compute graphs.
  {
    lacuna::Batch b(2);
    b.add(lacuna::tokenize(model.vocab(), "warm", true, false).front(), 0, 0, true);
    ctx.decode(b);
    ctx.clear_memory();
  }

  std::map<std::string, ModeTotals> totals;
  json per_schema = json::array();
  for (const auto& file : files) {
    lacuna::SchemaOptions so;
    const std::string gbnf = lacuna::json_schema_to_gbnf(lacuna::decode::read_text_file(file), so);
    const auto compiled = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf), index);
    std::map<std::string, ModeTotals> local;
    for (const auto& prompt_text : prompts) {
      const auto prompt = lacuna::tokenize(model.vocab(), prompt_text, true, true);
      for (int rep = 0; rep < repeats; ++rep) {
        std::vector<Token> reference;
        for (const auto& mode : modes) {
          ModeTotals& t = local[mode];
          std::vector<Token> out;
          lacuna::GenerationStats st;
          ctx.clear_memory();
          if (mode == "llama-grammar") {
            lacuna::SamplerPtr chain(
                llama_sampler_chain_init(llama_sampler_chain_default_params()));
            llama_sampler_chain_add(chain.get(),
                                    llama_sampler_init_grammar(vocab, gbnf.c_str(), "root"));
            llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
            auto r = lacuna::reference_generate(ctx.get(), chain.get(), prompt, n_predict);
            out = std::move(r.tokens);
            st = r.stats;
            reference = out;
          } else {
            lacuna::GeneratorConfig cfg;
            cfg.max_tokens = n_predict;
            cfg.decode.skip_forced = mode == "lacuna-skip" || mode == "lacuna-jump";
            cfg.decode.verify_strings = mode == "lacuna-skip" || mode == "lacuna-jump";
            cfg.decode.jump_forward = mode == "lacuna-jump";
            std::unique_ptr<lacuna::Constraint> c;
            if (mode != "free") c = std::make_unique<lacuna::GrammarMatcher>(compiled);
            lacuna::Generator gen(ctx.get(), cfg, std::move(c));
            gen.prefill(prompt);
            gen.generate();
            out = gen.tokens();
            st = gen.stats();
          }
          ++t.runs;
          t.tokens += out.size();
          t.forward_passes += st.forward_passes;
          t.skipped += st.tokens_skipped;
          t.batch_filled += st.tokens_batch_filled;
          t.draft_proposed += st.draft_proposed;
          t.draft_accepted += st.draft_accepted;
          t.jump_tokens += st.jump_tokens;
          t.completed += st.stop != lacuna::StopReason::max_tokens ? 1 : 0;
          t.wall_ms += st.total_ms;
          t.decode_ms += st.total_ms - st.prefill_ms;
          t.mask_ms += st.mask_ms;
          if (has_mode("llama-grammar") && mode != "llama-grammar" && mode != "free") {
            const size_t n = std::min(out.size(), reference.size());
            size_t same = 0;
            while (same < n && out[same] == reference[same]) ++same;
            t.agree += same;
            t.agree_of += std::max(out.size(), reference.size());
          }
        }
      }
    }
    json js = {{"schema", file}};
    for (const auto& [mode, t] : local) {
      ModeTotals& g = totals[mode];
      g.runs += t.runs;
      g.tokens += t.tokens;
      g.forward_passes += t.forward_passes;
      g.skipped += t.skipped;
      g.batch_filled += t.batch_filled;
      g.draft_proposed += t.draft_proposed;
      g.draft_accepted += t.draft_accepted;
      g.jump_tokens += t.jump_tokens;
      g.completed += t.completed;
      g.wall_ms += t.wall_ms;
      g.decode_ms += t.decode_ms;
      g.mask_ms += t.mask_ms;
      g.agree += t.agree;
      g.agree_of += t.agree_of;
      js[mode] = {{"tokens", t.tokens}, {"forward_passes", t.forward_passes}};
    }
    per_schema.push_back(js);
    if (!json_out) std::fprintf(stderr, "done %s\n", file.c_str());
  }

  json report;
  report["model"] = model_path;
  report["threads"] = threads;
  report["n_predict"] = n_predict;
  report["schemas"] = files.size();
  report["prompts"] = prompts.size();
  report["repeats"] = repeats;
  json jm = json::object();
  for (const auto& mode : modes) {
    const ModeTotals& t = totals[mode];
    const double ms_per_tok = t.tokens > 0 ? t.decode_ms / static_cast<double>(t.tokens) : 0.0;
    json m = {
        {"runs", t.runs},
        {"completed", t.completed},
        {"tokens", t.tokens},
        {"forward_passes", t.forward_passes},
        {"skip_ratio",
         t.tokens > 0 ? 1.0 - static_cast<double>(t.forward_passes) / static_cast<double>(t.tokens)
                      : 0.0},
        {"tokens_skipped", t.skipped},
        {"tokens_batch_filled", t.batch_filled},
        {"draft_proposed", t.draft_proposed},
        {"draft_accepted", t.draft_accepted},
        {"jump_tokens", t.jump_tokens},
        {"decode_tok_s",
         t.decode_ms > 0 ? 1000.0 * static_cast<double>(t.tokens) / t.decode_ms : 0.0},
        {"ms_per_token", ms_per_tok},
        {"wall_ms", t.wall_ms},
        {"mask_ms", t.mask_ms},
    };
    if (t.agree_of > 0)
      m["agreement_with_llama_grammar"] =
          static_cast<double>(t.agree) / static_cast<double>(t.agree_of);
    jm[mode] = m;
  }
  report["modes"] = jm;
  auto per_tok = [&](const char* m) {
    const ModeTotals& t = totals[m];
    return t.tokens > 0 ? t.decode_ms / static_cast<double>(t.tokens) : 0.0;
  };
  json ratios = json::object();
  if (has_mode("lacuna") && has_mode("free") && per_tok("free") > 0) {
    ratios["lacuna_over_free_ms_per_token"] = per_tok("lacuna") / per_tok("free");
  }
  if (has_mode("lacuna") && has_mode("lacuna-skip") && per_tok("lacuna-skip") > 0) {
    ratios["lacuna_skip_speedup_vs_lacuna"] = per_tok("lacuna") / per_tok("lacuna-skip");
  }
  if (has_mode("llama-grammar") && has_mode("lacuna-skip") && per_tok("lacuna-skip") > 0) {
    ratios["lacuna_skip_speedup_vs_llama_grammar"] =
        per_tok("llama-grammar") / per_tok("lacuna-skip");
  }
  if (has_mode("llama-grammar") && has_mode("lacuna") && per_tok("lacuna") > 0) {
    ratios["lacuna_speedup_vs_llama_grammar"] = per_tok("llama-grammar") / per_tok("lacuna");
  }
  report["ratios"] = ratios;
  report["per_schema"] = per_schema;
  std::cout << report.dump(2) << std::endl;
  return 0;
}
