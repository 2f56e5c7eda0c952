// cmd_bench_mask.cpp — `lacuna bench mask`: times lacuna's token masks against llama.cpp's
// grammar sampler on the same grammar, vocabulary and token walk, in the same process.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/token_index.h"
#include "llama.h"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// CPU time of this thread in microseconds: on a shared machine wall time also counts the
// time other processes held the core.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json summary(std::vector<double> v) {
  nlohmann::json j;
  if (v.empty()) return j;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto pct = [&](double p) {
    size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
  };
  j["avg"] = sum / static_cast<double>(v.size());
  j["p50"] = pct(0.50);
  j["p99"] = pct(0.99);
  j["max"] = v.back();
  return j;
}

void usage() {
  std::fprintf(stderr,
               "usage: lacuna bench mask [--vocab PATH.gguf] [--grammar FILE.gbnf] [--text FILE]\n"
               "                         [--json] [--no-baseline] [--repeat N] [--eager-ms MS]\n"
               "                         [--no-shared-masks]\n"
               "defaults: llama-bpe vocabulary, grammars/json.gbnf, bench/data/sample.json\n"
               "--eager-ms: compile-time budget for context masks (CompileOptions::eager_ms;\n"
               "            -1 = all at compile time, 0 = all on first use)\n"
               "--no-shared-masks: do not reuse rule-prefix masks across compiles (a cold start\n"
               "            every repeat; CompileOptions::share_masks)\n");
}

}  // namespace

LACUNA_COMMAND(cmd_bench_mask, "bench-mask", "time token masks vs llama.cpp's grammar sampler") {
  std::string src = LACUNA_LLAMA_SRC_DIR;
  std::string vocab_path = src + "/models/ggml-vocab-llama-bpe.gguf";
  std::string grammar_path = src + "/grammars/json.gbnf";
  std::string text_path = "bench/data/sample.json";
  bool json = false, baseline = true;
  int repeat = 1;
  lacuna::CompileOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      return argv[++i];
    };
    if (a == "--vocab") {
      vocab_path = next();
    } else if (a == "--grammar") {
      grammar_path = next();
    } else if (a == "--text") {
      text_path = next();
    } else if (a == "--json") {
      json = true;
    } else if (a == "--no-baseline") {
      baseline = false;
    } else if (a == "--repeat") {
      repeat = std::max(1, std::stoi(next()));
    } else if (a == "--eager-ms") {
      options.eager_ms = std::stod(next());
    } else if (a == "--no-shared-masks") {
      options.share_masks = false;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      usage();
      return 2;
    }
  }
  llama_backend_init();
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(vocab_path.c_str(), mp);
  if (model == nullptr) throw std::runtime_error("cannot load vocabulary " + vocab_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  auto index = lacuna::TokenIndex::build(vocab);
  const size_t n_vocab = index->n_vocab();

  const std::string gbnf = read_file(grammar_path);
  const std::string text = read_file(text_path);
  std::vector<llama_token> toks(text.size() + 16);
  int32_t nt = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), toks.data(),
                              static_cast<int32_t>(toks.size()), false, false);
  if (nt < 0) throw std::runtime_error("tokenization failed");
  toks.resize(static_cast<size_t>(nt));

  // lacuna: compile (parse + compile), then the walk.
  std::vector<double> compile_us, mask_us, compile_cpu_us, mask_cpu_us;
  std::shared_ptr<const lacuna::CompiledGrammar> cg;
  std::vector<std::vector<uint32_t>> our_masks;
  std::vector<bool> partial_at;  // a UTF-8 sequence was pending before that step
  size_t computed_at_compile = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    double c0 = thread_cpu_us();
    cg = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf), index, options);
    compile_cpu_us.push_back(thread_cpu_us() - c0);
    compile_us.push_back(us_since(t0));
    computed_at_compile = cg->n_contexts_computed();
    lacuna::GrammarMatcher m(cg);
    std::vector<uint32_t> words(lacuna::bitmask_words(n_vocab));
    for (size_t i = 0; i < toks.size(); ++i) {
      auto t1 = Clock::now();
      double c1 = thread_cpu_us();
      m.fill_next_token_bitmask(words.data());
      mask_cpu_us.push_back(thread_cpu_us() - c1);
      mask_us.push_back(us_since(t1));
      if (r == 0 && baseline) {
        our_masks.push_back(words);
        partial_at.push_back(m.in_partial_utf8());
      }
      if (!lacuna::bitmask_test(words.data(), toks[i]) || !m.accept_token(toks[i])) {
        throw std::runtime_error("the text does not match the grammar at token " +
                                 std::to_string(i) + " ('" +
                                 std::string(index->token_bytes(toks[i])) + "')");
      }
    }
  }
  nlohmann::json out;
  out["grammar"] = grammar_path;
  out["vocab"] = vocab_path;
  out["n_vocab"] = n_vocab;
  out["tokens"] = toks.size();
  out["token_index_build_ms"] = index->build_ms();
  out["token_index_memory_bytes"] = index->memory_bytes();
  out["lacuna"]["compile_us"] = summary(compile_us)["p50"];
  // The first compile is cold; later repeats reuse the masks shared through the TokenIndex
  // (CompileOptions::share_masks, off with --no-shared-masks).
  out["lacuna"]["compile_first_us"] = compile_us.front();
  out["lacuna"]["compile_first_cpu_us"] = compile_cpu_us.front();
  out["lacuna"]["share_masks"] = options.share_masks;
  out["lacuna"]["mask_us"] = summary(mask_us);
  out["lacuna"]["compile_cpu_us"] = summary(compile_cpu_us)["p50"];
  // The fastest repeat: on a busy machine, the best estimate of the compile's own cost.
  out["lacuna"]["compile_cpu_min_us"] =
      *std::min_element(compile_cpu_us.begin(), compile_cpu_us.end());
  out["lacuna"]["mask_cpu_us"] = summary(mask_cpu_us);
  out["lacuna"]["memory_bytes"] = cg->memory_bytes();
  out["lacuna"]["contexts"] = cg->n_contexts();
  out["lacuna"]["eager_ms"] = options.eager_ms;
  out["lacuna"]["contexts_computed_at_compile"] = computed_at_compile;
  out["lacuna"]["contexts_computed_after_walk"] = cg->n_contexts_computed();

  if (baseline) {
    auto t0 = Clock::now();
    llama_sampler* smpl = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
    const double base_compile = us_since(t0);
    if (smpl == nullptr) throw std::runtime_error("llama.cpp refused the grammar");
    std::vector<double> base_us, base_cpu_us;
    std::vector<llama_token_data> data(n_vocab);
    size_t mismatched_steps = 0, excluded_bits = 0;
    for (size_t i = 0; i < toks.size(); ++i) {
      for (size_t k = 0; k < n_vocab; ++k) data[k] = {static_cast<llama_token>(k), 0.0f, 0.0f};
      llama_token_data_array arr{data.data(), data.size(), -1, false};
      auto t1 = Clock::now();
      double c1 = thread_cpu_us();
      llama_sampler_apply(smpl, &arr);
      base_cpu_us.push_back(thread_cpu_us() - c1);
      base_us.push_back(us_since(t1));
      std::vector<uint32_t> theirs(lacuna::bitmask_words(n_vocab), 0);
      for (size_t k = 0; k < arr.size; ++k) {
        if (!std::isinf(arr.data[k].logit)) lacuna::bitmask_set(theirs.data(), arr.data[k].id);
      }
      if (partial_at[i]) {
        // Documented difference (docs/grammar.md): llama.cpp allows end-of-generation
        // inside a UTF-8 sequence, lacuna does not. Not counted as a mismatch.
        for (lacuna::Token t : index->eog_tokens()) {
          if (lacuna::bitmask_test(theirs.data(), t)) ++excluded_bits;
          theirs[static_cast<size_t>(t) >> 5] &= ~(1u << (static_cast<uint32_t>(t) & 31u));
        }
      }
      if (theirs != our_masks[i]) ++mismatched_steps;
      llama_sampler_accept(smpl, toks[i]);
    }
    llama_sampler_free(smpl);
    out["baseline"]["compile_us"] = base_compile;
    out["baseline"]["mask_us"] = summary(base_us);
    out["baseline"]["mask_cpu_us"] = summary(base_cpu_us);
    out["ratio_avg"] = out["baseline"]["mask_us"]["avg"].get<double>() /
                       out["lacuna"]["mask_us"]["avg"].get<double>();
    out["ratio_cpu_avg"] = out["baseline"]["mask_cpu_us"]["avg"].get<double>() /
                           out["lacuna"]["mask_cpu_us"]["avg"].get<double>();
    out["ratio_p50"] = out["baseline"]["mask_us"]["p50"].get<double>() /
                       out["lacuna"]["mask_us"]["p50"].get<double>();
    out["masks_equal"] = mismatched_steps == 0;
    out["mismatched_steps"] = mismatched_steps;
    out["excluded_eog_in_partial_utf8"] = excluded_bits;
  }
  llama_model_free(model);
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("grammar %s, %zu tokens, vocab %zu\n", grammar_path.c_str(), toks.size(), n_vocab);
    std::printf("contexts: %zu, masks computed at compile %zu, after the walk %zu\n",
                cg->n_contexts(), computed_at_compile, cg->n_contexts_computed());
    std::printf("lacuna cpu: compile %.0f us, mask avg %.2f us p50 %.2f p99 %.2f max %.2f\n",
                out["lacuna"]["compile_cpu_us"].get<double>(),
                out["lacuna"]["mask_cpu_us"]["avg"].get<double>(),
                out["lacuna"]["mask_cpu_us"]["p50"].get<double>(),
                out["lacuna"]["mask_cpu_us"]["p99"].get<double>(),
                out["lacuna"]["mask_cpu_us"]["max"].get<double>());
    std::printf(
        "lacuna:   compile %.0f us, mask avg %.2f us p50 %.2f p99 %.2f max %.2f, memory %zu "
        "bytes\n",
        out["lacuna"]["compile_us"].get<double>(), out["lacuna"]["mask_us"]["avg"].get<double>(),
        out["lacuna"]["mask_us"]["p50"].get<double>(),
        out["lacuna"]["mask_us"]["p99"].get<double>(),
        out["lacuna"]["mask_us"]["max"].get<double>(), cg->memory_bytes());
    if (baseline) {
      std::printf("llama.cpp: compile %.0f us, mask avg %.0f us p50 %.0f p99 %.0f max %.0f\n",
                  out["baseline"]["compile_us"].get<double>(),
                  out["baseline"]["mask_us"]["avg"].get<double>(),
                  out["baseline"]["mask_us"]["p50"].get<double>(),
                  out["baseline"]["mask_us"]["p99"].get<double>(),
                  out["baseline"]["mask_us"]["max"].get<double>());
      std::printf("ratio avg %.0fx, masks equal: %s\n", out["ratio_avg"].get<double>(),
                  out["masks_equal"].get<bool>() ? "yes" : "no");
    }
  }
  return 0;
}
