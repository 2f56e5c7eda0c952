// cmd_bench_mask.cpp — `lacuna bench mask`: times lacuna's token masks against llama.cpp's
// grammar sampler on the same grammar, vocabulary and token walk, in the same process; with
// --grammar-dir, every grammar of a directory (each with its text) and the worst cases.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

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

// The bench process keeps the memory it frees for its next allocations, as a long-running
// server's heap does, rather than giving the heap's free top back to the OS inside whichever
// later free() finds it above glibc's trim threshold: in a directory run, freeing one
// grammar's compiles once put a 52-65 MB trim (2.5-4 ms of kernel time) inside one lazy mask
// of the next grammar. Giving the memory back before each timed step instead (malloc_trim)
// made the walks fault it in again (qwen2's stress set: mask p99 127-165 -> 170-184 µs).
// (docs/grammar.md, twenty-ninth pass.)
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // (Fixing the trim threshold stops glibc raising the mmap threshold as it would: set it to
  // the highest value glibc would raise it to, so that blocks below 32 MB are reused too.)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
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
  std::fprintf(
      stderr,
      "usage: lacuna bench mask [--vocab PATH.gguf] [--grammar FILE.gbnf] [--text FILE]\n"
      "                         [--grammar-dir DIR] [--json] [--no-baseline] [--repeat N]\n"
      "                         [--eager-ms MS] [--no-shared-masks] [--trace-slow-us US]\n"
      "defaults: llama-bpe vocabulary, grammars/json.gbnf, bench/data/sample.json\n"
      "--grammar-dir: every DIR/NAME.gbnf with its text DIR/NAME.txt; per grammar and overall:\n"
      "            compile (with the options, all masks eager, all masks lazy), masks of the\n"
      "            walk with the options and all lazy (avg/p99/max, thread CPU time), equality\n"
      "            with llama.cpp's masks, the slowest mask's grammar and position\n"
      "--eager-ms: compile-time budget for context masks (CompileOptions::eager_ms;\n"
      "            -1 = all at compile time, 0 = all on first use)\n"
      "--no-shared-masks: do not reuse rule-prefix masks across compiles (a cold start\n"
      "            every repeat; CompileOptions::share_masks)\n"
      "--trace-slow-us US: print each mask slower than US (thread CPU) with the text before it\n");
}

// Longest-match tokenization over the vocabulary's text pieces: a valid token sequence for
// texts where the tokenizer adds what the grammar cannot take (SentencePiece's leading
// space).
std::vector<llama_token> greedy_tokens(const lacuna::TokenIndex& index, const std::string& text) {
  std::map<std::string, lacuna::Token> pieces;
  for (size_t t = 0; t < index.n_vocab(); ++t) {
    const auto tok = static_cast<lacuna::Token>(t);
    if (index.kind(tok) != lacuna::TokenIndex::Kind::kText || index.is_control(tok)) continue;
    pieces.emplace(std::string(index.token_bytes(tok)), tok);
  }
  std::vector<llama_token> out;
  for (size_t i = 0; i < text.size();) {
    size_t len = std::min<size_t>(32, text.size() - i);
    for (; len > 0; --len) {
      auto it = pieces.find(text.substr(i, len));
      if (it != pieces.end()) {
        out.push_back(it->second);
        break;
      }
    }
    if (len == 0) throw std::runtime_error("no token for the text at byte " + std::to_string(i));
    i += len;
  }
  return out;
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, const lacuna::TokenIndex& index,
                                  const std::string& text) {
  std::vector<llama_token> toks(text.size() + 16);
  int32_t nt = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), toks.data(),
                              static_cast<int32_t>(toks.size()), false, false);
  if (nt < 0) throw std::runtime_error("tokenization failed");
  toks.resize(static_cast<size_t>(nt));
  std::string joined;
  for (llama_token t : toks) joined += index.token_bytes(t);
  if (joined != text) toks = greedy_tokens(index, text);
  return toks;
}

// One walk of `toks` through a matcher of `cg`: each mask timed (wall and thread CPU),
// optionally kept with whether a UTF-8 sequence was pending before it.
struct Walk {
  std::vector<double> mask_us, mask_cpu_us;
  std::vector<std::vector<uint32_t>> masks;
  std::vector<bool> partial_at;
};

// --trace-slow-us: each mask slower than this on the thread CPU clock goes to stderr.
double trace_slow_us = 0;

// `label` names the walk in that trace (a directory's grammars are walked twice).
Walk walk_text(const std::shared_ptr<const lacuna::CompiledGrammar>& cg,
               const lacuna::TokenIndex& index, const std::vector<llama_token>& toks, bool keep,
               const std::string& label = "") {
  Walk w;
  lacuna::GrammarMatcher m(cg);
  std::vector<uint32_t> words(lacuna::bitmask_words(index.n_vocab()));
  for (size_t i = 0; i < toks.size(); ++i) {
    auto t1 = Clock::now();
    double c1 = thread_cpu_us();
    m.fill_next_token_bitmask(words.data());
    w.mask_cpu_us.push_back(thread_cpu_us() - c1);
    w.mask_us.push_back(us_since(t1));
    if (trace_slow_us > 0 && w.mask_cpu_us.back() > trace_slow_us) {
      std::string before;
      for (size_t k = i > 12 ? i - 12 : 0; k < i; ++k) before += index.token_bytes(toks[k]);
      std::fprintf(stderr, "slow mask %.0f us (cpu)%s at token %zu after '%s'\n",
                   w.mask_cpu_us.back(), label.c_str(), i, before.c_str());
    }
    if (keep) {
      w.masks.push_back(words);
      w.partial_at.push_back(m.in_partial_utf8());
    }
    if (!lacuna::bitmask_test(words.data(), toks[i]) || !m.accept_token(toks[i])) {
      throw std::runtime_error("the text does not match the grammar at token " + std::to_string(i) +
                               " ('" + std::string(index.token_bytes(toks[i])) + "')");
    }
  }
  return w;
}

// llama.cpp's sampler over the same walk: its mask times and whether every mask equals
// `ours` (llama.cpp's end-of-generation tokens inside a UTF-8 sequence excluded: a
// documented difference).
struct Baseline {
  double compile_us = 0;
  std::vector<double> mask_us, mask_cpu_us;
  size_t mismatched_steps = 0, excluded_bits = 0;
};

Baseline run_baseline(const llama_vocab* vocab, const lacuna::TokenIndex& index,
                      const std::string& gbnf, const std::vector<llama_token>& toks,
                      const std::vector<const Walk*>& ours) {
  Baseline b;
  const size_t n_vocab = index.n_vocab();
  auto t0 = Clock::now();
  llama_sampler* smpl = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
  b.compile_us = us_since(t0);
  if (smpl == nullptr) throw std::runtime_error("llama.cpp refused the grammar");
  std::vector<llama_token_data> data(n_vocab);
  for (size_t i = 0; i < toks.size(); ++i) {
    for (size_t k = 0; k < n_vocab; ++k) data[k] = {static_cast<llama_token>(k), 0.0f, 0.0f};
    llama_token_data_array arr{data.data(), data.size(), -1, false};
    auto t1 = Clock::now();
    double c1 = thread_cpu_us();
    llama_sampler_apply(smpl, &arr);
    b.mask_cpu_us.push_back(thread_cpu_us() - c1);
    b.mask_us.push_back(us_since(t1));
    std::vector<uint32_t> theirs(lacuna::bitmask_words(n_vocab), 0);
    for (size_t k = 0; k < arr.size; ++k) {
      if (!std::isinf(arr.data[k].logit)) lacuna::bitmask_set(theirs.data(), arr.data[k].id);
    }
    if (ours.front()->partial_at[i]) {
      for (lacuna::Token t : index.eog_tokens()) {
        if (lacuna::bitmask_test(theirs.data(), t)) ++b.excluded_bits;
        theirs[static_cast<size_t>(t) >> 5] &= ~(1u << (static_cast<uint32_t>(t) & 31u));
      }
    }
    bool equal = true;
    for (const Walk* w : ours) equal = equal && theirs == w->masks[i];
    if (!equal) ++b.mismatched_steps;
    llama_sampler_accept(smpl, toks[i]);
  }
  llama_sampler_free(smpl);
  return b;
}

// The text before token i of the walk (its last 60 bytes), for the slowest mask's position.
std::string text_before(const lacuna::TokenIndex& index, const std::vector<llama_token>& toks,
                        size_t i) {
  std::string done;
  for (size_t k = 0; k < i; ++k) done += index.token_bytes(toks[k]);
  return done.size() > 60 ? done.substr(done.size() - 60) : done;
}

double compile_cpu_us(const lacuna::Grammar& g,
                      const std::shared_ptr<const lacuna::TokenIndex>& index,
                      const lacuna::CompileOptions& o) {
  const double c0 = thread_cpu_us();
  auto cg = lacuna::CompiledGrammar::compile(g, index, o);
  return thread_cpu_us() - c0;
}

// --grammar-dir: every grammar of `dir` with its text. The walk with the given options, and
// a second one with every mask computed on first use from a cold compile (no masks shared
// across compiles): the first-use worst case. Compiles with every mask eager and every mask
// lazy are cold too. All times are thread CPU time.
int run_grammar_dir(const std::string& dir, const llama_vocab* vocab,
                    const std::shared_ptr<const lacuna::TokenIndex>& index,
                    const lacuna::CompileOptions& options, bool baseline, bool json,
                    const std::string& vocab_path) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".gbnf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no .gbnf files in " + dir);
  nlohmann::json out, rows = nlohmann::json::array();
  std::vector<double> all_mask, all_lazy;
  double worst_compile = 0, worst_eager = 0, worst_lazy_compile = 0, worst_mask = -1;
  std::string worst_compile_g, worst_eager_g, slowest_g, slowest_before;
  size_t slowest_at = 0, mismatched_grammars = 0, failed = 0, over_1ms = 0, tokens = 0;
  lacuna::CompileOptions cold = options;
  cold.share_masks = false;
  lacuna::CompileOptions eager = cold, lazy = cold;
  eager.eager_ms = -1;
  lazy.eager_ms = 0;
  for (const auto& path : files) {
    nlohmann::json row;
    const std::string name = path.stem().string();
    row["grammar"] = name;
    try {
      const std::string gbnf = read_file(path.string());
      std::filesystem::path text_path = path;
      text_path.replace_extension(".txt");
      const std::string text = read_file(text_path.string());
      const std::vector<llama_token> toks = tokenize(vocab, *index, text);
      const lacuna::Grammar g = lacuna::parse_gbnf(gbnf);
      const double c0 = thread_cpu_us();
      auto cg = lacuna::CompiledGrammar::compile(g, index, options);
      const double compile_us = thread_cpu_us() - c0;
      const size_t computed = cg->n_contexts_computed();
      Walk w = walk_text(cg, *index, toks, baseline, " [" + name + "]");
      const double lc0 = thread_cpu_us();
      auto lazy_cg = lacuna::CompiledGrammar::compile(g, index, lazy);
      const double lazy_compile_us = thread_cpu_us() - lc0;
      Walk lw = walk_text(lazy_cg, *index, toks, baseline, " [" + name + ", all lazy]");
      const double eager_us = compile_cpu_us(g, index, eager);
      row["tokens"] = toks.size();
      row["contexts"] = cg->n_contexts();
      row["contexts_computed_at_compile"] = computed;
      row["compile_cpu_us"] = compile_us;
      row["compile_eager_cpu_us"] = eager_us;
      row["compile_lazy_cpu_us"] = lazy_compile_us;
      row["mask_cpu_us"] = summary(w.mask_cpu_us);
      row["mask_lazy_cpu_us"] = summary(lw.mask_cpu_us);
      const auto slow = std::max_element(lw.mask_cpu_us.begin(), lw.mask_cpu_us.end());
      const auto slow_i = static_cast<size_t>(slow - lw.mask_cpu_us.begin());
      row["slowest_lazy_mask"] = {
          {"cpu_us", *slow}, {"token", slow_i}, {"before", text_before(*index, toks, slow_i)}};
      tokens += toks.size();
      all_mask.insert(all_mask.end(), w.mask_cpu_us.begin(), w.mask_cpu_us.end());
      all_lazy.insert(all_lazy.end(), lw.mask_cpu_us.begin(), lw.mask_cpu_us.end());
      const double gmax =
          std::max(*slow, *std::max_element(w.mask_cpu_us.begin(), w.mask_cpu_us.end()));
      if (gmax > 1000) ++over_1ms;
      if (*slow > worst_mask) {
        worst_mask = *slow;
        slowest_g = name;
        slowest_at = slow_i;
        slowest_before = text_before(*index, toks, slow_i);
      }
      if (compile_us > worst_compile) {
        worst_compile = compile_us;
        worst_compile_g = name;
      }
      if (eager_us > worst_eager) {
        worst_eager = eager_us;
        worst_eager_g = name;
      }
      worst_lazy_compile = std::max(worst_lazy_compile, lazy_compile_us);
      if (baseline) {
        const Baseline b = run_baseline(vocab, *index, gbnf, toks, {&w, &lw});
        row["masks_equal"] = b.mismatched_steps == 0;
        row["mismatched_steps"] = b.mismatched_steps;
        row["llama_mask_cpu_us"] = summary(b.mask_cpu_us);
        if (b.mismatched_steps != 0) ++mismatched_grammars;
      }
    } catch (const std::exception& e) {
      row["error"] = e.what();
      ++failed;
    }
    if (!json) {
      if (row.contains("error")) {
        std::printf("%-22s error: %s\n", name.c_str(), row["error"].get<std::string>().c_str());
      } else {
        std::printf(
            "%-22s %4zu tok  compile %7.0f us (eager %8.0f, lazy %6.0f)  mask avg %6.1f p99 "
            "%7.1f max %7.1f  lazy avg %6.1f p99 %7.1f max %7.1f us%s\n",
            name.c_str(), row["tokens"].get<size_t>(), row["compile_cpu_us"].get<double>(),
            row["compile_eager_cpu_us"].get<double>(), row["compile_lazy_cpu_us"].get<double>(),
            row["mask_cpu_us"]["avg"].get<double>(), row["mask_cpu_us"]["p99"].get<double>(),
            row["mask_cpu_us"]["max"].get<double>(), row["mask_lazy_cpu_us"]["avg"].get<double>(),
            row["mask_lazy_cpu_us"]["p99"].get<double>(),
            row["mask_lazy_cpu_us"]["max"].get<double>(),
            !baseline                        ? ""
            : row["masks_equal"].get<bool>() ? "  equal"
                                             : "  MISMATCH");
      }
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  out["vocab"] = vocab_path;
  out["n_vocab"] = index->n_vocab();
  out["grammar_dir"] = dir;
  out["eager_ms"] = options.eager_ms;
  out["share_masks"] = options.share_masks;
  out["clock"] = "thread_cpu";
  out["grammars"] = rows;
  out["overall"] = {{"grammars", files.size()},
                    {"errors", failed},
                    {"tokens", tokens},
                    {"mask_cpu_us", summary(all_mask)},
                    {"mask_lazy_cpu_us", summary(all_lazy)},
                    {"grammars_with_mask_over_1ms", over_1ms},
                    {"compile_cpu_us_max", worst_compile},
                    {"compile_cpu_us_max_grammar", worst_compile_g},
                    {"compile_eager_cpu_us_max", worst_eager},
                    {"compile_eager_cpu_us_max_grammar", worst_eager_g},
                    {"compile_lazy_cpu_us_max", worst_lazy_compile},
                    {"slowest_mask",
                     {{"cpu_us", worst_mask},
                      {"grammar", slowest_g},
                      {"token", slowest_at},
                      {"before", slowest_before}}}};
  if (baseline) out["overall"]["grammars_with_mask_mismatch"] = mismatched_grammars;
  if (json) {
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    const auto& o = out["overall"];
    std::printf(
        "overall (%s, thread CPU): %zu grammars, %zu errors, %zu tokens; compile max %.0f us "
        "(%s), eager max %.0f us (%s), lazy max %.0f us\n",
        vocab_path.c_str(), files.size(), failed, tokens, worst_compile, worst_compile_g.c_str(),
        worst_eager, worst_eager_g.c_str(), worst_lazy_compile);
    if (!all_mask.empty()) {
      std::printf(
          "  masks: avg %.1f p99 %.1f max %.1f us; all lazy: avg %.1f p99 %.1f max %.1f us\n",
          o["mask_cpu_us"]["avg"].get<double>(), o["mask_cpu_us"]["p99"].get<double>(),
          o["mask_cpu_us"]["max"].get<double>(), o["mask_lazy_cpu_us"]["avg"].get<double>(),
          o["mask_lazy_cpu_us"]["p99"].get<double>(), o["mask_lazy_cpu_us"]["max"].get<double>());
      std::printf("  slowest mask %.0f us: %s token %zu after '%s'\n", worst_mask,
                  slowest_g.c_str(), slowest_at, slowest_before.c_str());
      std::printf("  grammars with a mask over 1 ms: %zu", over_1ms);
      if (baseline) std::printf(", with masks unequal to llama.cpp's: %zu", mismatched_grammars);
      std::printf("\n");
    }
  }
  return failed == 0 && mismatched_grammars == 0 ? 0 : 1;
}

}  // namespace

LACUNA_COMMAND(cmd_bench_mask, "bench-mask", "time token masks vs llama.cpp's grammar sampler") {
  std::string src = LACUNA_LLAMA_SRC_DIR;
  std::string vocab_path = src + "/models/ggml-vocab-llama-bpe.gguf";
  std::string grammar_path = src + "/grammars/json.gbnf";
  std::string text_path = "bench/data/sample.json";
  std::string grammar_dir;
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
    } else if (a == "--grammar-dir") {
      grammar_dir = next();
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
    } else if (a == "--trace-slow-us") {
      trace_slow_us = std::stod(next());
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      usage();
      return 2;
    }
  }
  keep_freed_memory();
  llama_backend_init();
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(vocab_path.c_str(), mp);
  if (model == nullptr) throw std::runtime_error("cannot load vocabulary " + vocab_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  auto index = lacuna::TokenIndex::build(vocab);
  const size_t n_vocab = index->n_vocab();
  if (!grammar_dir.empty()) {
    const int rc = run_grammar_dir(grammar_dir, vocab, index, options, baseline, json, vocab_path);
    llama_model_free(model);
    return rc;
  }

  const std::string gbnf = read_file(grammar_path);
  const std::string text = read_file(text_path);
  const std::vector<llama_token> toks = tokenize(vocab, *index, text);

  // lacuna: compile (parse + compile), then the walk.
  std::vector<double> compile_us, mask_us, compile_cpu_us, mask_cpu_us;
  std::shared_ptr<const lacuna::CompiledGrammar> cg;
  Walk first;
  size_t computed_at_compile = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    double c0 = thread_cpu_us();
    cg = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf), index, options);
    compile_cpu_us.push_back(thread_cpu_us() - c0);
    compile_us.push_back(us_since(t0));
    computed_at_compile = cg->n_contexts_computed();
    Walk w = walk_text(cg, *index, toks, r == 0 && baseline);
    mask_us.insert(mask_us.end(), w.mask_us.begin(), w.mask_us.end());
    mask_cpu_us.insert(mask_cpu_us.end(), w.mask_cpu_us.begin(), w.mask_cpu_us.end());
    if (r == 0) first = std::move(w);
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
    const Baseline b = run_baseline(vocab, *index, gbnf, toks, {&first});
    out["baseline"]["compile_us"] = b.compile_us;
    out["baseline"]["mask_us"] = summary(b.mask_us);
    out["baseline"]["mask_cpu_us"] = summary(b.mask_cpu_us);
    out["ratio_avg"] = out["baseline"]["mask_us"]["avg"].get<double>() /
                       out["lacuna"]["mask_us"]["avg"].get<double>();
    out["ratio_cpu_avg"] = out["baseline"]["mask_cpu_us"]["avg"].get<double>() /
                           out["lacuna"]["mask_cpu_us"]["avg"].get<double>();
    out["ratio_p50"] = out["baseline"]["mask_us"]["p50"].get<double>() /
                       out["lacuna"]["mask_us"]["p50"].get<double>();
    out["masks_equal"] = b.mismatched_steps == 0;
    out["mismatched_steps"] = b.mismatched_steps;
    out["excluded_eog_in_partial_utf8"] = b.excluded_bits;
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
