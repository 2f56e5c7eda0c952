// cmd_bench_schemas.cpp — `lacuna bench schemas DIR`: JSON Schema coverage and speed over
// MaskBench-format files (schema + valid/invalid instances), token by token through the
// grammar matcher. Prints a summary (JSON with --json) and writes per-file results.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "grammar/json_schema_parts.h"
#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "lacuna/token_index.h"

namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct FileResult {
  std::string file;
  std::string status;   // passed, failed, unsupported, error, grammar_error, timeout, no_tests
  std::string keyword;  // unsupported keyword, or the keywords approximated (failed files)
  std::string message;
  double compile_ms = -1;
  size_t tests = 0;
  size_t tokens = 0;
  double mask_avg_us = 0, mask_p99_us = 0, mask_max_us = 0;  // this file's masks
};

struct WorkerStats {
  std::vector<float> mask_us;
  std::vector<double> compile_ms;
};

struct Config {
  lacuna::SchemaOptions schema;
  bool keep_order = false;
  double timeout_ms = 10000;
  double eager_ms = lacuna::CompileOptions{}.eager_ms;
  bool share_masks = true;
  bool byte_level = false;
  bool cpu_clock = false;  // time masks in thread CPU time (steadier on a loaded machine)
  double trace_us = 0;     // print masks slower than this (0: none)
};

// Microseconds on the thread's CPU clock.
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// The per-file limit on walking the instances, on the clock the masks are timed with (a
// loaded machine does not turn slow files into timeouts under --cpu-clock), checked before
// every mask so one slow instance cannot run far past it.
struct Deadline {
  bool cpu = false;
  double limit_ms = 0;
  double start_us = 0;
  Clock::time_point start;
  Deadline(bool cpu_clock, double ms) : cpu(cpu_clock), limit_ms(ms) {
    start_us = cpu ? thread_cpu_us() : 0;
    start = Clock::now();
  }
  bool passed() const {
    return cpu ? (thread_cpu_us() - start_us) / 1000.0 > limit_ms : ms_since(start) > limit_ms;
  }
};

// Walks one serialized instance. Returns 1 accepted to completion, 0 refused or incomplete,
// -1 mask/accept disagreement, -2 past the deadline.
int walk(const std::shared_ptr<const lacuna::CompiledGrammar>& compiled, const lacuna::Vocab* vocab,
         const std::string& text, std::vector<uint32_t>& words, WorkerStats& ws, size_t& tokens,
         bool byte_level, bool cpu_clock, double trace_us, const std::string& file,
         const Deadline& deadline) {
  lacuna::GrammarMatcher m(compiled);
  if (byte_level || vocab == nullptr) {
    if (!m.accept_string(text)) return 0;
    return m.is_completed() ? 1 : 0;
  }
  std::vector<lacuna::Token> toks = lacuna::tokenize(*vocab, text, false, false);
  for (size_t at = 0; at < toks.size(); ++at) {
    const lacuna::Token t = toks[at];
    if (deadline.passed()) return -2;
    auto t0 = Clock::now();
    double c0 = cpu_clock ? thread_cpu_us() : 0;
    m.fill_next_token_bitmask(words.data());
    ws.mask_us.push_back(static_cast<float>(
        cpu_clock ? thread_cpu_us() - c0
                  : std::chrono::duration<double, std::micro>(Clock::now() - t0).count()));
    ++tokens;
    if (trace_us > 0 && ws.mask_us.back() >= trace_us) {
      // The text walked so far and the token whose mask was slow (to find the grammar
      // context that costs the matcher).
      std::string done;
      for (size_t i = 0; i < at; ++i) done += lacuna::token_to_piece(*vocab, toks[i]);
      std::fprintf(stderr, "slow mask %.0f us in %s before %s|%s\n", ws.mask_us.back(),
                   file.c_str(),
                   done.size() > 160 ? done.substr(done.size() - 160).c_str() : done.c_str(),
                   lacuna::token_to_piece(*vocab, t).c_str());
    }
    bool allowed = lacuna::bitmask_test(words.data(), t);
    bool accepted = allowed && m.accept_token(t);
    if (allowed != accepted) return -1;
    if (!accepted) return 0;
  }
  return m.is_completed() ? 1 : 0;
}

FileResult run_file_walks(const std::filesystem::path& path, const Config& cfg,
                          const std::shared_ptr<const lacuna::TokenIndex>& index,
                          const lacuna::Vocab* vocab, WorkerStats& ws) {
  FileResult r;
  r.file = path.filename().string();
  ojson doc;
  try {
    std::ifstream in(path);
    doc = ojson::parse(in);
  } catch (const std::exception& e) {
    r.status = "error";
    r.message = std::string("unreadable file: ") + e.what();
    return r;
  }
  if (!doc.contains("tests") || !doc["tests"].is_array() || doc["tests"].empty()) {
    r.status = "no_tests";
    return r;
  }
  r.tests = doc["tests"].size();
  std::string schema = doc["schema"].dump(-1, ' ', false, ojson::error_handler_t::replace);
  std::set<std::string> approximated;
  lacuna::SchemaOptions so = cfg.schema;
  so.on_warning = [&](const std::string& k, const std::string&, const std::string&) {
    approximated.insert(k);
  };
  auto t0 = Clock::now();
  const double c0 = thread_cpu_us();
  std::shared_ptr<const lacuna::CompiledGrammar> compiled;
  try {
    std::string gbnf = lacuna::json_schema_to_gbnf(schema, so);
    lacuna::Grammar g = lacuna::parse_gbnf(gbnf);
    lacuna::CompileOptions co;
    co.max_compile_ms = cfg.timeout_ms;
    co.eager_ms = cfg.eager_ms;
    co.share_masks = cfg.share_masks;
    compiled = lacuna::CompiledGrammar::compile(g, cfg.byte_level ? nullptr : index, co);
  } catch (const lacuna::SchemaError& e) {
    r.status = "unsupported";
    r.keyword = e.keyword.empty() ? "(schema)" : e.keyword;
    r.message = e.what();
    return r;
  } catch (const lacuna::GrammarError& e) {
    r.status = "grammar_error";
    r.message = e.what();
    return r;
  } catch (const lacuna::GrammarLimitError& e) {
    r.status = ms_since(t0) >= cfg.timeout_ms ? "timeout" : "error";
    r.message = e.what();
    return r;
  } catch (const std::exception& e) {
    r.status = "error";
    r.message = e.what();
    return r;
  }
  // Compiling runs on this thread, so its CPU clock holds the whole compile.
  r.compile_ms = cfg.cpu_clock ? (thread_cpu_us() - c0) / 1000.0 : ms_since(t0);
  ws.compile_ms.push_back(r.compile_ms);
  std::vector<uint32_t> words(lacuna::bitmask_words(compiled->n_vocab() ? compiled->n_vocab() : 1));
  bool flexible = cfg.schema.whitespace == lacuna::SchemaOptions::Whitespace::Flexible;
  const Deadline deadline(cfg.cpu_clock, cfg.timeout_ms);
  bool ok = true;
  for (const ojson& t : doc["tests"]) {
    bool valid = t.value("valid", false);
    std::string data = t["data"].dump(-1, ' ', false, ojson::error_handler_t::replace);
    std::vector<std::string> texts;
    try {
      if (cfg.keep_order) {
        texts.push_back(data);
      } else {
        texts.push_back(lacuna::schema_detail::canonical_instance(schema, data, false, so));
      }
      if (flexible)
        texts.push_back(lacuna::schema_detail::canonical_instance(cfg.keep_order ? "true" : schema,
                                                                  data, true, so));
    } catch (const std::exception& e) {
      texts = {data};
    }
    for (const std::string& text : texts) {
      int res;
      try {
        res = walk(compiled, vocab, text, words, ws, r.tokens, cfg.byte_level, cfg.cpu_clock,
                   cfg.trace_us, r.file, deadline);
      } catch (const std::exception& e) {
        r.status = "error";
        r.message = std::string("matcher: ") + e.what();
        return r;
      }
      if (res == -2 || deadline.passed()) {
        r.status = "timeout";
        r.message = "instances took longer than the timeout";
        return r;
      }
      if (res < 0) {
        r.status = "error";
        r.message = "mask allows a token that accept_token refuses: " + text.substr(0, 200);
        return r;
      }
      if ((res == 1) != valid) {
        ok = false;
        if (r.message.empty()) {
          r.message =
              std::string(valid ? "valid instance refused: " : "invalid instance accepted: ") +
              text.substr(0, 300);
        }
      }
    }
  }
  r.status = ok ? "passed" : "failed";
  if (!ok) {
    for (const std::string& k : approximated) r.keyword += (r.keyword.empty() ? "" : ",") + k;
    if (r.keyword.empty()) r.keyword = "(exact)";
  }
  return r;
}

// One file, with its own mask figures (for --out) from the masks it added.
FileResult run_file(const std::filesystem::path& path, const Config& cfg,
                    const std::shared_ptr<const lacuna::TokenIndex>& index,
                    const lacuna::Vocab* vocab, WorkerStats& ws) {
  const size_t first = ws.mask_us.size();
  FileResult r = run_file_walks(path, cfg, index, vocab, ws);
  if (ws.mask_us.size() > first) {
    std::vector<float> v(ws.mask_us.begin() + static_cast<std::ptrdiff_t>(first), ws.mask_us.end());
    double sum = 0;
    for (float f : v) sum += f;
    std::sort(v.begin(), v.end());
    r.mask_avg_us = sum / static_cast<double>(v.size());
    r.mask_p99_us =
        v[std::min(v.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(v.size())))];
    r.mask_max_us = v.back();
  }
  return r;
}

// One --out line.
ojson file_line(const FileResult& r) {
  ojson line = {{"file", r.file},     {"status", r.status},         {"keyword", r.keyword},
                {"error", r.message}, {"compile_ms", r.compile_ms}, {"tests", r.tests}};
  if (r.tokens) {
    line["tokens"] = r.tokens;
    line["mask_us"] = {{"avg", r.mask_avg_us}, {"p99", r.mask_p99_us}, {"max", r.mask_max_us}};
  }
  return line;
}

template <typename T>
double pct(std::vector<T>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return static_cast<double>(v[i]);
}

}  // namespace

LACUNA_COMMAND(cmd_bench_schemas, "bench-schemas",
               "JSON Schema coverage and speed over MaskBench-format files") {
  std::string dir, vocab_path, out_path;
  bool as_json = false, strict = false, compact = false;
  int jobs = 1;
  size_t limit = 0;
  std::string filter;
  Config cfg;
  bool no_shared = false;
  CLI::App app{"JSON Schema coverage and speed over a directory of MaskBench-format files.",
               "lacuna bench schemas"};
  app.add_option("dir", dir, "directory of *.json test files (jsonschemabench)")->required();
  app.add_flag("--json", as_json, "print the summary as JSON");
  app.add_option("--jobs", jobs, "worker threads (default 1)")->check(CLI::Range(1, 256));
  app.add_option("--vocab", vocab_path,
                 "vocabulary GGUF (default: llama.cpp's models/ggml-vocab-llama-bpe.gguf)");
  app.add_option("--out", out_path, "per-file results, one JSON object a line");
  app.add_option("--limit", limit, "stop after this many files with tests");
  app.add_option("--filter", filter, "only files whose name contains this");
  app.add_option("--timeout-ms", cfg.timeout_ms,
                 "per-file limit on compiling, and on walking the instances (on the thread CPU "
                 "clock with --cpu-clock; default 10000)");
  app.add_option("--eager-ms", cfg.eager_ms,
                 "compile-time budget for context masks, the rest on first use "
                 "(CompileOptions::eager_ms; -1 all at compile, 0 all on first use)");
  app.add_flag("--no-shared-masks", no_shared,
               "compile every schema cold: no rule-prefix masks reused across schemas "
               "(CompileOptions::share_masks)");
  app.add_flag("--strict", strict, "strict mode: unsupported keywords are errors");
  app.add_flag("--compact", compact, "compact whitespace mode (default: flexible)");
  app.add_flag("--keep-order", cfg.keep_order,
               "serialize instances in the file's key order instead of the schema's");
  app.add_flag("--byte-level", cfg.byte_level, "walk bytes instead of tokens (no masks)");
  app.add_flag("--cpu-clock", cfg.cpu_clock,
               "time compiles and masks on the thread's CPU clock instead of the wall clock "
               "(for A/B comparisons on a shared machine)");
  app.add_option("--trace-slow-us", cfg.trace_us,
                 "print each mask slower than this (µs) to stderr with the text before it");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  cfg.schema.strict = strict;
  cfg.share_masks = !no_shared;
  if (compact) cfg.schema.whitespace = lacuna::SchemaOptions::Whitespace::Compact;
  if (vocab_path.empty())
    vocab_path = std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-llama-bpe.gguf";

  std::vector<std::filesystem::path> files;
  try {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      if (!filter.empty() && e.path().filename().string().find(filter) == std::string::npos)
        continue;
      files.push_back(e.path());
    }
  } catch (const std::exception& e) {
    std::cerr << "lacuna bench schemas: cannot list " << dir << ": " << e.what() << "\n";
    return 1;
  }
  std::sort(files.begin(), files.end());

  std::optional<lacuna::Model> model;
  std::optional<lacuna::Vocab> vocab;
  std::shared_ptr<const lacuna::TokenIndex> index;
  if (!cfg.byte_level) {
    try {
      lacuna::ModelParams mp;
      mp.vocab_only = true;
      model.emplace(lacuna::Model::load(vocab_path, mp));
      vocab.emplace(model->vocab_ptr());
      index = lacuna::TokenIndex::build(model->vocab_ptr());
    } catch (const std::exception& e) {
      std::cerr << "lacuna bench schemas: " << e.what() << "\n";
      return 1;
    }
  }

  std::vector<FileResult> results(files.size());
  // Per-file lines are written as the files finish (a long run can be followed, and what
  // finished is kept if it is stopped), in completion order.
  std::ofstream out;
  if (!out_path.empty()) {
    out.open(out_path);
    if (!out) {
      std::cerr << "lacuna bench schemas: cannot write " << out_path << "\n";
      return 1;
    }
  }
  std::mutex out_mutex;
  std::vector<WorkerStats> stats(static_cast<size_t>(jobs));
  std::atomic<size_t> next{0};
  std::atomic<size_t> with_tests{0};
  auto worker = [&](size_t w) {
    while (true) {
      size_t i = next.fetch_add(1);
      if (i >= files.size()) break;
      if (limit && with_tests.load() >= limit) break;
      results[i] = run_file(files[i], cfg, index, vocab ? &*vocab : nullptr, stats[w]);
      if (out && results[i].status != "no_tests") {
        std::string text =
            file_line(results[i]).dump(-1, ' ', false, ojson::error_handler_t::replace);
        std::lock_guard<std::mutex> lock(out_mutex);
        out << text << std::endl;
      }
      if (results[i].status != "no_tests") with_tests.fetch_add(1);
    }
  };
  auto t_all = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < jobs; ++w) threads.emplace_back(worker, static_cast<size_t>(w));
  for (auto& t : threads) t.join();
  double total_s = ms_since(t_all) / 1000.0;

  size_t n_files = 0, n_tests = 0, compiled = 0, passed = 0, failed = 0, errors = 0, timeouts = 0,
         grammar_errors = 0, crashes = 0, tokens = 0;
  // Worst cases: files with at least one mask above 1 ms and 10 ms, and the slowest files.
  size_t over_1ms = 0, over_10ms = 0;
  std::vector<std::pair<double, std::string>> slowest;
  std::map<std::string, size_t> unsupported, failed_by;
  for (const FileResult& r : results) {
    if (r.file.empty()) continue;  // not reached (--limit)
    ++n_files;
    if (r.status == "no_tests") continue;
    ++n_tests;
    tokens += r.tokens;
    if (r.tokens > 0) {
      over_1ms += r.mask_max_us > 1000 ? 1 : 0;
      over_10ms += r.mask_max_us > 10000 ? 1 : 0;
      slowest.emplace_back(r.mask_max_us, r.file);
    }
    if (r.compile_ms >= 0) ++compiled;
    if (r.status == "passed") ++passed;
    if (r.status == "failed") {
      ++failed;
      size_t start = 0;
      while (start <= r.keyword.size()) {
        size_t comma = r.keyword.find(',', start);
        if (comma == std::string::npos) comma = r.keyword.size();
        ++failed_by[r.keyword.substr(start, comma - start)];
        start = comma + 1;
      }
    }
    if (r.status == "unsupported") ++unsupported[r.keyword];
    if (r.status == "error") ++errors;
    if (r.status == "grammar_error") ++grammar_errors;
    if (r.status == "timeout") ++timeouts;
  }
  size_t n_unsupported = 0;
  for (auto& [k, v] : unsupported) n_unsupported += v;
  std::vector<double> cms;
  std::vector<float> mus;
  for (WorkerStats& s : stats) {
    cms.insert(cms.end(), s.compile_ms.begin(), s.compile_ms.end());
    mus.insert(mus.end(), s.mask_us.begin(), s.mask_us.end());
  }
  std::sort(cms.begin(), cms.end());
  std::sort(mus.begin(), mus.end());
  std::sort(slowest.rbegin(), slowest.rend());
  if (slowest.size() > 5) slowest.resize(5);
  ojson slowest_files = ojson::array();
  for (const auto& [us, file] : slowest)
    slowest_files.push_back({{"file", file}, {"mask_max_us", us}});
  double mask_sum = 0;
  for (float f : mus) mask_sum += f;
  ojson summary = {
      {"files", n_files},
      {"files_with_tests", n_tests},
      {"compiled", compiled},
      {"passed", passed},
      {"pass_rate", n_tests ? static_cast<double>(passed) / static_cast<double>(n_tests) : 0.0},
      {"failed", failed},
      {"failed_by_keyword", failed_by},
      {"unsupported", unsupported},
      {"errors", errors},
      {"grammar_errors", grammar_errors},
      {"crashes", crashes},
      {"timeouts", timeouts},
      {"compile_ms",
       {{"p50", pct(cms, 0.5)},
        {"p90", pct(cms, 0.9)},
        {"p99", pct(cms, 0.99)},
        {"max", cms.empty() ? 0.0 : cms.back()}}},
      {"mask_us",
       {{"avg", mus.empty() ? 0.0 : mask_sum / static_cast<double>(mus.size())},
        {"p50", pct(mus, 0.5)},
        {"p99", pct(mus, 0.99)},
        {"max", mus.empty() ? 0.0 : static_cast<double>(mus.back())}}},
      {"files_with_mask_over_1ms", over_1ms},
      {"files_with_mask_over_10ms", over_10ms},
      {"slowest_mask_files", slowest_files},
      {"tokens", tokens},
      {"mode",
       {{"whitespace", compact ? "compact" : "flexible"},
        {"strict", strict},
        {"instance_key_order", cfg.keep_order ? "file" : "schema"},
        {"walk", cfg.byte_level ? "bytes" : "tokens"},
        {"vocab", cfg.byte_level ? "" : vocab_path},
        {"shared_masks", cfg.share_masks},
        {"eager_ms", cfg.eager_ms},
        {"jobs", jobs},
        {"mask_clock", cfg.cpu_clock ? "thread_cpu" : "wall"},
        {"compile_clock", cfg.cpu_clock ? "thread_cpu" : "wall"}}},
      {"wall_s", total_s}};
  if (as_json) {
    std::cout << summary.dump(2) << "\n";
  } else {
    std::printf(
        "files %zu (with tests %zu): passed %zu (%.1f%%), failed %zu, unsupported %zu, "
        "errors %zu, grammar errors %zu, timeouts %zu, crashes %zu\n",
        n_files, n_tests, passed,
        n_tests ? 100.0 * static_cast<double>(passed) / static_cast<double>(n_tests) : 0.0, failed,
        n_unsupported, errors, grammar_errors, timeouts, crashes);
    std::printf("compile ms p50 %.3f p90 %.3f p99 %.3f max %.3f\n", pct(cms, 0.5), pct(cms, 0.9),
                pct(cms, 0.99), cms.empty() ? 0.0 : cms.back());
    std::printf("mask us avg %.2f p50 %.2f p99 %.2f max %.2f over %zu tokens\n",
                mus.empty() ? 0.0 : mask_sum / static_cast<double>(mus.size()), pct(mus, 0.5),
                pct(mus, 0.99), mus.empty() ? 0.0 : static_cast<double>(mus.back()), tokens);
    std::printf("files with a mask over 1 ms: %zu, over 10 ms: %zu; slowest:", over_1ms, over_10ms);
    for (const auto& [us, file] : slowest) std::printf(" %s (%.0f us)", file.c_str(), us);
    std::printf("\n");
    std::printf("failed by keyword:");
    for (auto& [k, v] : failed_by) std::printf(" %s=%zu", k.c_str(), v);
    std::printf("\nunsupported:");
    for (auto& [k, v] : unsupported) std::printf(" %s=%zu", k.c_str(), v);
    std::printf("\n");
  }
  return 0;
}
