// cmd_bench_decode.cpp — `lacuna bench decode`: constrained decoding modes side by side in one
// process (llama.cpp's grammar sampler, grammar-first and as common_sampler uses it, lacuna
// without and with skipping, tier-2 jump-forward, free generation), interleaved run by run: tokens,
// passes, drafts, medians, speed ratios; backend sampling and the overlapped mask beside them.
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
#include "llama/backend_mask.h"

namespace {

using lacuna::Token;
using nlohmann::json;

// llama-grammar: llama.cpp's grammar sampler then greedy in one chain (grammar first, over the
// whole vocabulary at every token); llama-common: the way common_sampler_sample samples by
// default (greedy first, the grammar checks that one token, full-vocabulary grammar pass only
// when it is rejected).
// lacuna-backend: lacuna with the mask and the greedy pick inside llama.cpp's graph (backend
// sampling: only the token comes back); lacuna-overlap: lacuna with each mask computed on a
// worker thread while the pass runs (docs/backend_sampling.md).
const char* kModes[] = {"llama-grammar", "llama-common",   "lacuna",         "lacuna-skip",
                        "lacuna-jump",   "lacuna-backend", "lacuna-overlap", "free"};
// Modes run only when --modes names them.
// lacuna-skip-always: drafting at every string; lacuna-skip-batch: lacuna-skip without
// split pending tokens (every pending token batch-filled, as before the split existed).
const char* kExtraModes[] = {"lacuna-skip-always", "lacuna-skip-batch"};

// One generation of one mode on one (schema, prompt) pair.
struct RunResult {
  std::vector<Token> tokens;
  lacuna::GenerationStats stats;
  double ms = 0;              // wall time after the prompt: passes, masks, sampling
  size_t resamples = 0;       // llama-common: tokens the grammar rejected (full-vocabulary pass)
  bool backend = false;       // the generator sampled inside the graph
  uint64_t upload_bytes = 0;  // mask bytes sent to the backend (backend sampling)
  uint64_t upload_ns = 0;     // time packing and sending them
};

// Sums over the pairs of one repetition of one mode.
struct RepTotals {
  size_t tokens = 0;
  double ms = 0;
};

// Counts of one mode over all pairs (from the first repetition: greedy runs repeat exactly).
struct ModeCounts {
  size_t runs = 0;
  size_t tokens = 0;
  size_t forward_passes = 0;
  size_t skipped = 0;
  size_t batch_filled = 0;
  size_t filled_alone = 0;
  size_t draft_proposed = 0;
  size_t draft_accepted = 0;
  size_t draft_declined = 0;
  size_t jump_tokens = 0;
  size_t grammar_resamples = 0;
  size_t output_rows = 0;     // rows with logits (or a backend-sampled token) after the prompt
  size_t backend_runs = 0;    // runs whose sampling ran inside the graph
  uint64_t upload_bytes = 0;  // mask bytes sent to the backend
  uint64_t upload_ns = 0;
  size_t completed = 0;  // runs that ended because the output was complete
  double mask_ms = 0;
  double sample_ms = 0;
  double mask_overlapped_ms = 0;
  size_t agree = 0;        // tokens equal to llama-grammar's at the same index, in a row
  size_t agree_of = 0;     // max(len) summed
  bool repeatable = true;  // every repetition gave the same tokens
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

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Pair {
  size_t schema = 0;
  std::vector<Token> prompt;
};

}  // namespace

LACUNA_COMMAND(cmd_bench_decode, "bench-decode",
               "constrained decoding modes side by side: passes, skip ratio, speed (JSON)") {
  std::string model_path;
  std::vector<std::string> schema_paths;
  std::string prompts_path;
  int32_t threads = 2;
  size_t n_predict = 128;
  uint32_t n_ctx = 2048;
  int repeats = 3;
  int warmup = 1;
  int cost_reps = 5;
  std::vector<size_t> cost_sizes = {1, 2, 3, 4, 6, 8, 12, 16};
  std::string cost_source = "measured";
  std::string draft_policy = "adaptive";
  std::string whitespace = "compact";
  bool json_out = false;
  bool cost_only = false;
  std::vector<std::string> modes(std::begin(kModes), std::end(kModes));
  CLI::App app{
      "Runs each mode on every (schema, prompt) pair with greedy decoding, the modes "
      "interleaved run by run (round-robin, the starting mode rotating) so that machine load "
      "falls on all of them alike, and reports per mode: tokens, forward passes, skip ratio, "
      "drafts, the median wall time per emitted token over the repetitions, and token "
      "agreement with llama.cpp's grammar sampler; the speed ratios the targets name; and the "
      "cost model (llama_decode time by batch size) the adaptive draft length uses.",
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
  app.add_option("--repeats", repeats, "repetitions of the whole sweep (default 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "uncounted runs of each mode first (default 1)")
      ->check(CLI::Range(0, 10));
  app.add_option("--modes", modes,
                 "modes to run (default: all but lacuna-skip-always, which is lacuna-skip "
                 "with a draft at every forced string)")
      ->delimiter(',');
  app.add_option("--cost-sizes", cost_sizes, "batch sizes of the cost model (first 1)")
      ->delimiter(',');
  app.add_option("--cost-reps", cost_reps, "timed decodes per batch size (median; default 5)")
      ->check(CLI::Range(1, 100));
  app.add_option("--cost", cost_source,
                 "cost model for adaptive drafts: measured (here, first) or default")
      ->check(CLI::IsMember({"measured", "default"}));
  app.add_option("--draft", draft_policy, "draft policy of lacuna-skip/-jump: adaptive or always")
      ->check(CLI::IsMember({"adaptive", "always"}));
  app.add_option("--whitespace", whitespace,
                 "JSON whitespace the schemas allow: compact (none, as tool calls are "
                 "usually written; default) or flexible")
      ->check(CLI::IsMember({"compact", "flexible"}));
  app.add_flag("--json", json_out, "print only the JSON report");
  app.add_flag("--cost-only", cost_only,
               "measure and print the cost model (llama_decode by batch size) only");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  for (const auto& m : modes) {
    if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes) &&
        std::find(std::begin(kExtraModes), std::end(kExtraModes), m) == std::end(kExtraModes)) {
      std::cerr << "lacuna bench decode: unknown mode '" << m << "'\n";
      return 2;
    }
  }
  if (modes.empty()) {
    std::cerr << "lacuna bench decode: no modes\n";
    return 2;
  }
  if (cost_sizes.empty() || cost_sizes[0] != 1 ||
      !std::is_sorted(cost_sizes.begin(), cost_sizes.end()) ||
      std::adjacent_find(cost_sizes.begin(), cost_sizes.end()) != cost_sizes.end() ||
      cost_sizes.back() > 256) {
    std::cerr << "lacuna bench decode: --cost-sizes must be increasing, start at 1, end <= 256\n";
    return 2;
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
  const auto prompt_texts = read_prompts(prompts_path);

  const lacuna::Model model = lacuna::Model::load(model_path);
  lacuna::ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  const llama_vocab* vocab = model.vocab_ptr();
  const double n_vocab = static_cast<double>(llama_vocab_n_tokens(vocab));
  const auto index = lacuna::TokenIndex::build(vocab);

  // Compile every schema once, outside the timed runs (reported on its own).
  std::vector<std::string> gbnfs;
  std::vector<std::shared_ptr<const lacuna::CompiledGrammar>> compiled;
  json compile_ms = json::object();
  for (const auto& file : files) {
    const auto t0 = std::chrono::steady_clock::now();
    lacuna::SchemaOptions so;
    so.whitespace = whitespace == "compact" ? lacuna::SchemaOptions::Whitespace::Compact
                                            : lacuna::SchemaOptions::Whitespace::Flexible;
    gbnfs.push_back(lacuna::json_schema_to_gbnf(lacuna::decode::read_text_file(file), so));
    compiled.push_back(lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnfs.back()), index));
    compile_ms[file] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<Pair> pairs;
  for (size_t s = 0; s < files.size(); ++s) {
    for (const auto& p : prompt_texts) {
      pairs.push_back(Pair{s, lacuna::tokenize(model.vocab(), p, true, true)});
    }
  }

  // Warm-up: the first decode builds the compute graphs.
  {
    lacuna::Batch b(2);
    b.add(lacuna::tokenize(model.vocab(), "warm", true, false).front(), 0, 0, true);
    ctx.decode(b);
    ctx.clear_memory();
  }

  // The cost model: llama_decode by batch size (every token with logits), after the first
  // prompt, as the generator's verification batches run.
  std::vector<double> cost_ms;
  {
    ctx.clear_memory();
    const auto& prompt = pairs[0].prompt;
    lacuna::Batch b(static_cast<int32_t>(prompt.size()));
    for (size_t i = 0; i < prompt.size(); ++i)
      b.add(prompt[i], static_cast<lacuna::Pos>(i), 0, i + 1 == prompt.size());
    ctx.decode(b);
  }
  std::vector<double> fill_ms;  // the same batches with logits for the last token only
  double no_logits_ms = 0;      // one token without logits
  {
    // Both tables interleaved, one repetition of each in turn, so that a change of machine
    // load falls on both alike; per size, the median over the repetitions.
    std::vector<std::vector<double>> all(cost_sizes.size()), last(cost_sizes.size());
    std::vector<double> one;
    std::vector<double> none;
    for (int r = 0; r < cost_reps; ++r) {
      lacuna::measure_decode_cost(ctx.get(), 0, cost_sizes, 1, &one);
      for (size_t i = 0; i < one.size(); ++i) all[i].push_back(one[i]);
      lacuna::measure_decode_cost(ctx.get(), 0, cost_sizes, 1, &one, false);
      for (size_t i = 0; i < one.size(); ++i) last[i].push_back(one[i]);
      none.push_back(lacuna::measure_decode_no_logits_ms(ctx.get(), 0, 1));
    }
    no_logits_ms = median(none);
    for (size_t i = 0; i < cost_sizes.size(); ++i) {
      cost_ms.push_back(median(all[i]));
      fill_ms.push_back(median(last[i]));
    }
  }
  lacuna::DecodeCost measured = lacuna::DecodeCost::from_ms(cost_sizes, cost_ms, fill_ms);
  measured.set_no_logits_ms(no_logits_ms, cost_ms[0]);
  ctx.clear_memory();
  auto cost_json = [&] {
    json jc;
    jc["sizes"] = cost_sizes;
    jc["ms"] = cost_ms;
    std::vector<double> rel;
    for (double v : cost_ms) rel.push_back(v / cost_ms[0]);
    jc["relative"] = rel;
    jc["ms_last_logits_only"] = fill_ms;
    jc["ms_one_no_logits"] = no_logits_ms;
    // What the adaptive policy and the pending split use (smoothed, made monotone).
    jc["table_relative"] = measured.relative;
    jc["table_relative_last"] = measured.relative_last;
    jc["table_one_no_logits"] = measured.one_no_logits;
    jc["used"] = cost_source;
    return jc;
  };
  if (cost_only) {
    json report;
    report["model"] = model_path;
    report["threads"] = threads;
    report["decode_cost"] = cost_json();
    std::cout << report.dump(2) << std::endl;
    return 0;
  }
  const lacuna::DecodeCost cost =
      cost_source == "measured" ? measured : lacuna::DecodeCost::cpu_default();

  auto run_mode = [&](const std::string& mode, const Pair& pair) {
    RunResult r;
    ctx.clear_memory();
    if (mode == "llama-grammar") {
      lacuna::SamplerPtr chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
      llama_sampler_chain_add(
          chain.get(), llama_sampler_init_grammar(vocab, gbnfs[pair.schema].c_str(), "root"));
      llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
      auto ref = lacuna::reference_generate(ctx.get(), chain.get(), pair.prompt, n_predict);
      r.tokens = std::move(ref.tokens);
      r.stats = ref.stats;
    } else if (mode == "llama-common") {
      lacuna::SamplerPtr grammar(
          llama_sampler_init_grammar(vocab, gbnfs[pair.schema].c_str(), "root"));
      lacuna::SamplerPtr chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
      llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
      auto ref = lacuna::reference_generate_rejection(ctx.get(), grammar.get(), chain.get(),
                                                      pair.prompt, n_predict);
      r.tokens = std::move(ref.tokens);
      r.stats = ref.stats;
      r.resamples = ref.grammar_resamples;
    } else {
      lacuna::GeneratorConfig cfg;
      cfg.max_tokens = n_predict;
      const bool fast = mode == "lacuna-skip" || mode == "lacuna-jump" ||
                        mode == "lacuna-skip-always" || mode == "lacuna-skip-batch";
      cfg.decode.skip_forced = fast;
      cfg.decode.verify_strings = fast;
      cfg.decode.jump_forward = mode == "lacuna-jump";
      cfg.decode.draft_policy = draft_policy == "always" || mode == "lacuna-skip-always"
                                    ? lacuna::DraftPolicy::always
                                    : lacuna::DraftPolicy::adaptive;
      cfg.decode.cost = cost;
      cfg.decode.split_pending = mode != "lacuna-skip-batch";
      cfg.decode.backend_sampling = mode == "lacuna-backend";
      cfg.decode.overlap_mask = mode == "lacuna-overlap";
      std::unique_ptr<lacuna::Constraint> c;
      if (mode != "free") c = std::make_unique<lacuna::GrammarMatcher>(compiled[pair.schema]);
      lacuna::Generator gen(ctx.get(), cfg, std::move(c));
      gen.prefill(pair.prompt);
      const auto up1 = lacuna::backend::upload_counters();
      gen.generate();
      r.tokens = gen.tokens();
      r.stats = gen.stats();
      r.backend = gen.backend_sampling();
      const auto up2 = lacuna::backend::upload_counters();
      r.upload_bytes = up2.bytes - up1.bytes;
      r.upload_ns = up2.ns - up1.ns;
    }
    r.ms = r.stats.total_ms - r.stats.prefill_ms;
    return r;
  };

  for (int w = 0; w < warmup; ++w) {
    for (const auto& mode : modes) run_mode(mode, pairs[0]);
  }

  const size_t n_modes = modes.size();
  // [mode][rep]
  std::vector<std::vector<RepTotals>> rep_totals(n_modes, std::vector<RepTotals>(repeats));
  // [pair][mode]: first repetition's tokens, for counts, agreement and repeatability
  std::vector<std::vector<RunResult>> first(pairs.size(), std::vector<RunResult>(n_modes));
  // [schema][mode][rep]
  std::vector<std::vector<std::vector<RepTotals>>> schema_totals(
      files.size(), std::vector<std::vector<RepTotals>>(n_modes, std::vector<RepTotals>(repeats)));
  std::vector<ModeCounts> counts(n_modes);
  for (int rep = 0; rep < repeats; ++rep) {
    for (size_t p = 0; p < pairs.size(); ++p) {
      for (size_t j = 0; j < n_modes; ++j) {
        const size_t m = (j + p + static_cast<size_t>(rep)) % n_modes;  // rotate the order
        RunResult r = run_mode(modes[m], pairs[p]);
        rep_totals[m][rep].tokens += r.tokens.size();
        rep_totals[m][rep].ms += r.ms;
        schema_totals[pairs[p].schema][m][rep].tokens += r.tokens.size();
        schema_totals[pairs[p].schema][m][rep].ms += r.ms;
        if (rep == 0) {
          first[p][m] = std::move(r);
        } else if (r.tokens != first[p][m].tokens) {
          counts[m].repeatable = false;
        }
      }
      if (!json_out)
        std::fprintf(stderr, "rep %d/%d pair %zu/%zu done\n", rep + 1, repeats, p + 1,
                     pairs.size());
    }
  }

  const auto ref_at = std::find(modes.begin(), modes.end(), "llama-grammar");
  const size_t ref_m = static_cast<size_t>(ref_at - modes.begin());
  for (size_t m = 0; m < n_modes; ++m) {
    ModeCounts& c = counts[m];
    for (size_t p = 0; p < pairs.size(); ++p) {
      const RunResult& r = first[p][m];
      const auto& st = r.stats;
      ++c.runs;
      c.tokens += r.tokens.size();
      c.forward_passes += st.forward_passes;
      c.skipped += st.tokens_skipped;
      c.batch_filled += st.tokens_batch_filled;
      c.filled_alone += st.tokens_filled_alone;
      c.draft_proposed += st.draft_proposed;
      c.draft_accepted += st.draft_accepted;
      c.draft_declined += st.draft_declined;
      c.jump_tokens += st.jump_tokens;
      c.grammar_resamples += r.resamples;
      // llama.cpp copies one row per output: n_vocab logits, or the sampled token alone when
      // the whole chain ran in the graph. Passes of pending tokens alone have no output.
      c.output_rows += st.forward_passes - st.tokens_filled_alone + st.draft_proposed;
      c.backend_runs += r.backend ? 1 : 0;
      c.upload_bytes += r.upload_bytes;
      c.upload_ns += r.upload_ns;
      c.completed += st.stop != lacuna::StopReason::max_tokens ? 1 : 0;
      c.mask_ms += st.mask_ms;
      c.sample_ms += st.sample_ms;
      c.mask_overlapped_ms += st.mask_overlapped_ms;
      if (ref_at != modes.end() && m != ref_m && modes[m] != "free") {
        const auto& ref = first[p][ref_m].tokens;
        const size_t n = std::min(r.tokens.size(), ref.size());
        size_t same = 0;
        while (same < n && r.tokens[same] == ref[same]) ++same;
        c.agree += same;
        c.agree_of += std::max(r.tokens.size(), ref.size());
      }
    }
  }

  // Per mode and repetition: wall ms per emitted token.
  auto per_tok = [](const RepTotals& t) {
    return t.tokens > 0 ? t.ms / static_cast<double>(t.tokens) : 0.0;
  };
  std::vector<std::vector<double>> ms_tok(n_modes);
  for (size_t m = 0; m < n_modes; ++m) {
    for (int rep = 0; rep < repeats; ++rep) ms_tok[m].push_back(per_tok(rep_totals[m][rep]));
  }
  auto mode_index = [&](const char* name) {
    return static_cast<size_t>(std::find(modes.begin(), modes.end(), name) - modes.begin());
  };

  json report;
  report["model"] = model_path;
  report["threads"] = threads;
  report["n_predict"] = n_predict;
  report["schemas"] = files;
  report["prompts"] = prompt_texts.size();
  report["repeats"] = repeats;
  report["warmup"] = warmup;
  report["draft_policy"] = draft_policy;
  report["whitespace"] = whitespace;
  report["compile_ms"] = compile_ms;
  report["decode_cost"] = cost_json();
  json jm = json::object();
  for (size_t m = 0; m < n_modes; ++m) {
    const ModeCounts& t = counts[m];
    const double med = median(ms_tok[m]);
    json j = {
        {"runs", t.runs},
        {"completed", t.completed},
        {"tokens", t.tokens},
        {"forward_passes", t.forward_passes},
        {"skip_ratio",
         t.tokens > 0 ? 1.0 - static_cast<double>(t.forward_passes) / static_cast<double>(t.tokens)
                      : 0.0},
        {"tokens_skipped", t.skipped},
        {"tokens_batch_filled", t.batch_filled},
        {"tokens_filled_alone", t.filled_alone},
        {"draft_proposed", t.draft_proposed},
        {"draft_accepted", t.draft_accepted},
        {"draft_declined", t.draft_declined},
        {"jump_tokens", t.jump_tokens},
        {"grammar_resamples", t.grammar_resamples},
        {"ms_per_token_median", med},
        {"ms_per_token_min", *std::min_element(ms_tok[m].begin(), ms_tok[m].end())},
        {"ms_per_token_max", *std::max_element(ms_tok[m].begin(), ms_tok[m].end())},
        {"ms_per_token_reps", ms_tok[m]},
        {"decode_tok_s", med > 0 ? 1000.0 / med : 0.0},
        {"mask_ms_per_token", t.tokens > 0 ? t.mask_ms / static_cast<double>(t.tokens) : 0.0},
        // Mask time left on the critical path (lacuna-overlap: only the wait for the worker).
        {"mask_critical_ms_per_token",
         t.tokens > 0 ? t.mask_ms / static_cast<double>(t.tokens) : 0.0},
        {"mask_overlapped_ms_per_token",
         t.tokens > 0 ? t.mask_overlapped_ms / static_cast<double>(t.tokens) : 0.0},
        {"backend_sampling_runs", t.backend_runs},
        {"bytes_from_backend_per_token",
         t.tokens > 0 ? static_cast<double>(t.output_rows) *
                            (t.backend_runs == t.runs && t.runs > 0 ? 4.0 : 4.0 * n_vocab) /
                            static_cast<double>(t.tokens)
                      : 0.0},
        {"mask_upload_ms_per_token",
         t.tokens > 0 ? static_cast<double>(t.upload_ns) / 1e6 / static_cast<double>(t.tokens)
                      : 0.0},
        {"mask_upload_bytes_per_token",
         t.tokens > 0 ? static_cast<double>(t.upload_bytes) / static_cast<double>(t.tokens) : 0.0},
        {"sample_ms_per_token", t.tokens > 0 ? t.sample_ms / static_cast<double>(t.tokens) : 0.0},
        {"repeatable", t.repeatable},
    };
    if (t.agree_of > 0)
      j["agreement_with_llama_grammar"] =
          static_cast<double>(t.agree) / static_cast<double>(t.agree_of);
    jm[modes[m]] = j;
  }
  report["modes"] = jm;

  // Ratios: the median over repetitions of the ratio within each repetition (paired, so a
  // slow stretch of the machine falls on both sides), and the ratio of the medians.
  json ratios = json::object();
  auto ratio = [&](const char* key, const char* num, const char* den) {
    if (!has_mode(num) || !has_mode(den)) return;
    const size_t a = mode_index(num);
    const size_t b = mode_index(den);
    std::vector<double> r;
    for (int rep = 0; rep < repeats; ++rep) {
      if (ms_tok[b][rep] > 0) r.push_back(ms_tok[a][rep] / ms_tok[b][rep]);
    }
    if (r.empty()) return;
    const double mb = median(ms_tok[b]);
    ratios[key] = {{"median_of_paired", median(r)},
                   {"of_medians", mb > 0 ? median(ms_tok[a]) / mb : 0.0},
                   {"paired", r}};
  };
  // Wall time per token of lacuna over free (target <= 1.03).
  ratio("lacuna_over_free", "lacuna", "free");
  // Speed-ups: ms per token of the slower mode over lacuna-skip's (targets >= 1.3, >= 2.5).
  ratio("lacuna_skip_speedup_vs_lacuna", "lacuna", "lacuna-skip");
  ratio("lacuna_skip_speedup_vs_llama_grammar", "llama-grammar", "lacuna-skip");
  ratio("lacuna_skip_speedup_vs_llama_common", "llama-common", "lacuna-skip");
  ratio("lacuna_speedup_vs_llama_grammar", "llama-grammar", "lacuna");
  ratio("lacuna_skip_over_free", "lacuna-skip", "free");
  // Backend sampling and the overlapped mask against lacuna (target: >= 0.98x its speed,
  // i.e. a time ratio <= 1.02).
  ratio("lacuna_backend_over_lacuna", "lacuna-backend", "lacuna");
  ratio("lacuna_overlap_over_lacuna", "lacuna-overlap", "lacuna");
  ratio("lacuna_skip_always_speedup_vs_lacuna", "lacuna", "lacuna-skip-always");
  ratio("lacuna_skip_batch_speedup_vs_lacuna", "lacuna", "lacuna-skip-batch");
  ratio("lacuna_skip_speedup_vs_lacuna_skip_batch", "lacuna-skip-batch", "lacuna-skip");
  report["ratios"] = ratios;

  json per_schema = json::array();
  for (size_t s = 0; s < files.size(); ++s) {
    json js = {{"schema", files[s]}};
    for (size_t m = 0; m < n_modes; ++m) {
      size_t tokens = 0;
      size_t passes = 0;
      for (size_t p = 0; p < pairs.size(); ++p) {
        if (pairs[p].schema != s) continue;
        tokens += first[p][m].tokens.size();
        passes += first[p][m].stats.forward_passes;
      }
      std::vector<double> v;
      for (int rep = 0; rep < repeats; ++rep) v.push_back(per_tok(schema_totals[s][m][rep]));
      js[modes[m]] = {
          {"tokens", tokens}, {"forward_passes", passes}, {"ms_per_token_median", median(v)}};
    }
    per_schema.push_back(js);
  }
  report["per_schema"] = per_schema;
  std::cout << report.dump(2) << std::endl;
  return 0;
}
