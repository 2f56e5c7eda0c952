// cmd_bench_kv.cpp — `lacuna bench kv`: KV reuse against cold prefill, measured in the same
// run: (a) a growing multi-turn chat, (b) requests sharing a long system prompt, (c) a fresh
// context restoring a prefix from disk, (d) tier-2 edit reuse with its divergence figures.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "lacuna/kv.h"
#include "lacuna/model.h"

namespace {

using lacuna::Token;
using namespace lacuna::kv;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Bench {
  lacuna::Model model;
  uint32_t n_ctx;
  int32_t threads;
  uint32_t block;
  int32_t n_vocab;
  std::mt19937 rng{1234};

  lacuna::Context make_ctx(uint32_t n_seq) const {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_seq_max = n_seq;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.kv_unified = true;
    cp.no_perf = true;
    return lacuna::Context::create(model, cp);
  }

  std::vector<Token> tokens(size_t n) {
    std::uniform_int_distribution<int32_t> d(300, std::min(n_vocab, 30000) - 1);
    std::vector<Token> t(n);
    for (auto& x : t) x = d(rng);
    return t;
  }
};

Token argmax(const float* l, int32_t n) {
  int32_t b = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (l[i] > l[b]) b = i;
  }
  return b;
}

// Cold baseline: empty `seq`, decode the whole prompt, pick the first token. Returns TTFT ms
// and copies the first position's logits.
double cold_ttft(llama_context* ctx, SeqId seq, const std::vector<Token>& prompt,
                 std::vector<float>& logits, int32_t n_vocab, bool keep = false) {
  llama_memory_t mem = llama_get_memory(ctx);
  llama_memory_seq_rm(mem, seq, -1, -1);
  const auto t0 = Clock::now();
  llama_batch b = llama_batch_init(512, 0, 1);
  size_t done = 0;
  while (done < prompt.size()) {
    const size_t n = std::min<size_t>(512, prompt.size() - done);
    b.n_tokens = static_cast<int32_t>(n);
    for (size_t i = 0; i < n; ++i) {
      b.token[i] = prompt[done + i];
      b.pos[i] = static_cast<int32_t>(done + i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = seq;
      b.logits[i] = done + i + 1 == prompt.size();
    }
    if (llama_decode(ctx, b) != 0) {
      llama_batch_free(b);
      throw std::runtime_error("cold prefill failed (context too small?)");
    }
    done += n;
  }
  const float* l = llama_get_logits_ith(ctx, -1);
  (void)argmax(l, n_vocab);
  const double ms = ms_since(t0);
  logits.assign(l, l + n_vocab);
  llama_batch_free(b);
  if (!keep) llama_memory_seq_rm(mem, seq, -1, -1);
  return ms;
}

double warm_ttft(llama_context* ctx, Session& s, const std::vector<Token>& prompt,
                 std::vector<float>& logits, int32_t n_vocab, PrefillResult* r = nullptr) {
  const auto t0 = Clock::now();
  const PrefillResult res = s.prefill(prompt);
  const float* l = llama_get_logits_ith(ctx, -1);
  (void)argmax(l, n_vocab);
  const double ms = ms_since(t0);
  logits.assign(l, l + n_vocab);
  if (r) *r = res;
  return ms;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// KL(p || q) of the softmax distributions of two logit vectors.
double kl_div(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  auto log_softmax = [](const std::vector<float>& l) {
    const float mx = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (float x : l) z += std::exp(static_cast<double>(x - mx));
    std::vector<double> out(l.size());
    const double lz = std::log(z);
    for (size_t i = 0; i < l.size(); ++i) out[i] = static_cast<double>(l[i] - mx) - lz;
    return out;
  };
  const auto lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

json stats_json(const KvStats& s) {
  return json::parse(s.to_json());
}

// (a) An agent loop: a long fixed preamble, then turns of user text + a generated answer.
json scenario_chat(Bench& b, size_t preamble, size_t turn_tokens, int turns, int answer_tokens,
                   int cold_every, float& max_diff) {
  auto ctx = b.make_ctx(4);
  KvConfig cfg;
  cfg.block_size = b.block;
  PrefixCache cache(ctx.get(), {2}, b.block, b.n_ctx / 2);
  Session s(ctx.get(), 0, cfg, &cache);
  std::vector<Token> history = b.tokens(preamble);
  json per_turn = json::array();
  double warm_sum = 0, cold_sum = 0, warm_steady = 0, cold_steady = 0;
  int steady_n = 0;
  size_t recomputed = 0;
  std::vector<float> lw, lc;
  for (int t = 0; t < turns; ++t) {
    const auto user = b.tokens(turn_tokens);
    history.insert(history.end(), user.begin(), user.end());
    PrefillResult r;
    const double w = warm_ttft(ctx.get(), s, history, lw, b.n_vocab, &r);
    // The answer: greedy tokens decoded through the session (they become history).
    std::vector<Token> answer;
    Token next = argmax(lw.data(), b.n_vocab);
    for (int k = 0; k < answer_tokens; ++k) {
      answer.push_back(next);
      s.decode(next);
      next = argmax(llama_get_logits_ith(ctx.get(), -1), b.n_vocab);
    }
    // Cold baseline on this turn's prompt (every `cold_every` turns, and the last one).
    const bool measure = t % cold_every == 0 || t + 1 == turns;
    const double c = measure ? cold_ttft(ctx.get(), 1, history, lc, b.n_vocab) : -1.0;
    if (measure && t > 0) max_diff = std::max(max_diff, max_abs_diff(lw, lc));
    per_turn.push_back({{"turn", t + 1},
                        {"prompt_tokens", history.size()},
                        {"reused", r.n_reused},
                        {"recomputed", r.n_computed},
                        {"ttft_ms", w},
                        {"cold_ttft_ms", c}});
    if (measure) {
      warm_sum += w;
      cold_sum += c;
      if (t > 0) warm_steady += w, cold_steady += c, ++steady_n;
    }
    recomputed += r.n_computed;
    history.insert(history.end(), answer.begin(), answer.end());
  }
  return {{"name", "a_multi_turn_chat"},
          {"turns", turns},
          {"final_tokens", history.size()},
          {"cold_measured_every", cold_every},
          {"ttft_ms_total_measured_turns", warm_sum},
          {"cold_ttft_ms_total_measured_turns", cold_sum},
          {"ratio_measured_turns", cold_sum / warm_sum},
          {"ttft_ms_mean_turns_2_on", warm_steady / std::max(1, steady_n)},
          {"cold_ttft_ms_mean_turns_2_on", cold_steady / std::max(1, steady_n)},
          {"ratio_turns_2_on", cold_steady / warm_steady},
          {"tokens_recomputed", recomputed},
          {"stats", stats_json(s.stats())},
          {"per_turn", per_turn}};
}

// (b) Requests in different sequences sharing a long system prompt.
json scenario_shared(Bench& b, size_t system, size_t question, int requests, int cold_samples,
                     float& max_diff) {
  auto ctx = b.make_ctx(static_cast<uint32_t>(requests) + 2);
  KvConfig cfg;
  cfg.block_size = b.block;
  const SeqId cold_seq = requests, holder = requests + 1;
  PrefixCache cache(ctx.get(), {holder}, b.block, b.n_ctx / 2);
  const auto sys = b.tokens(system);
  std::vector<std::unique_ptr<Session>> sessions;
  double warm_first = 0, warm_rest = 0, cold_total = 0;
  int cold_n = 0;
  size_t recomputed = 0;
  KvStats total;
  json per = json::array();
  std::vector<float> lw, lc;
  for (int i = 0; i < requests; ++i) {
    auto p = sys;
    const auto q = b.tokens(question);
    p.insert(p.end(), q.begin(), q.end());
    sessions.push_back(std::make_unique<Session>(ctx.get(), i, cfg, &cache));
    PrefillResult r;
    const double w = warm_ttft(ctx.get(), *sessions.back(), p, lw, b.n_vocab, &r);
    double c = -1;
    if (i < cold_samples || i == 1) {
      c = cold_ttft(ctx.get(), cold_seq, p, lc, b.n_vocab);
      cold_total += c;
      ++cold_n;
      if (i > 0) max_diff = std::max(max_diff, max_abs_diff(lw, lc));
    }
    (i == 0 ? warm_first : warm_rest) += w;
    recomputed += r.n_computed;
    per.push_back({{"request", i + 1},
                   {"source", reuse_source_name(r.source)},
                   {"reused", r.n_reused},
                   {"recomputed", r.n_computed},
                   {"ttft_ms", w},
                   {"cold_ttft_ms", c}});
  }
  for (auto& s : sessions) total += s->stats();
  const double cold_mean = cold_total / std::max(1, cold_n);
  const double warm_mean = warm_rest / std::max(1, requests - 1);
  const uint64_t kv_bytes =
      cache.cached_tokens() * memory_traits(ctx.get(), true).kv_bytes_per_token;
  return {{"name", "b_shared_system_prompt"},
          {"requests", requests},
          {"system_tokens", system},
          {"ttft_ms_first", warm_first},
          {"ttft_ms_mean_requests_2_on", warm_mean},
          {"cold_ttft_ms_mean", cold_mean},
          {"ratio", cold_mean / warm_mean},
          {"tokens_recomputed", recomputed},
          {"index_bytes", cache.index_bytes()},
          {"kv_bytes_described", kv_bytes},
          {"index_overhead_ratio", kv_bytes ? double(cache.index_bytes()) / double(kv_bytes) : 0.0},
          {"stats", stats_json(total)},
          {"per_request", per}};
}

// (c) A fresh context (as after a restart) restores a long prefix from the disk cache.
json scenario_disk(Bench& b, const std::string& model_path, const std::string& dir, size_t prefix,
                   size_t question, float& max_diff) {
  KvConfig cfg;
  cfg.block_size = b.block;
  const auto t_fp = Clock::now();
  const Fingerprint fp = PersistentStore::model_fingerprint(dir, model_path);
  const double fp_ms = ms_since(t_fp);
  const auto pre = b.tokens(prefix);
  uint64_t written = 0;
  double persist_ms = 0;
  {
    auto ctx = b.make_ctx(1);
    PersistentStore store(dir, fp, b.block);
    Session s(ctx.get(), 0, cfg, nullptr, &store);
    s.prefill(pre);
    const auto t0 = Clock::now();
    written = s.persist();
    persist_ms = ms_since(t0);
  }
  auto prompt = pre;
  const auto q = b.tokens(question);
  prompt.insert(prompt.end(), q.begin(), q.end());
  auto ctx = b.make_ctx(2);
  std::vector<float> lw, lc;
  const auto t0 = Clock::now();
  const Fingerprint fp2 = PersistentStore::model_fingerprint(dir, model_path);  // cached
  PersistentStore store(dir, fp2, b.block);
  Session s(ctx.get(), 0, cfg, nullptr, &store);
  PrefillResult r;
  warm_ttft(ctx.get(), s, prompt, lw, b.n_vocab, &r);
  const double w = ms_since(t0);
  const double c = cold_ttft(ctx.get(), 1, prompt, lc, b.n_vocab);
  max_diff = std::max(max_diff, max_abs_diff(lw, lc));
  return {{"name", "c_restore_from_disk"},
          {"prompt_tokens", prompt.size()},
          {"source", reuse_source_name(r.source)},
          {"reused", r.n_reused},
          {"tokens_recomputed", r.n_computed},
          {"ttft_ms", w},
          {"cold_ttft_ms", c},
          {"ratio", c / w},
          {"bytes_read", s.stats().bytes_loaded},
          {"bytes_written", written},
          {"persist_ms", persist_ms},
          {"first_fingerprint_ms", fp_ms},
          {"stats", stats_json(s.stats())}};
}

// (d) Tier 2: edits in the middle of a long context; speed and divergence against full
// recomputation (top-1 agreement and KL at the first position and `follow` teacher-forced
// positions after it).
json scenario_edit(Bench& b, size_t context, int follow) {
  auto ctx = b.make_ctx(3);
  KvConfig cfg;
  cfg.block_size = b.block;
  cfg.edit_reuse = true;
  const auto base = b.tokens(context);
  struct Edit {
    const char* name;
    std::vector<Token> tokens;
  };
  std::vector<Edit> edits;
  {
    auto e = base;
    const auto r = b.tokens(8);
    std::copy(r.begin(), r.end(), e.begin() + static_cast<long>(context / 2));
    edits.push_back({"replace_8_middle", e});
    e = base;
    const auto ins = b.tokens(32);
    e.insert(e.begin() + static_cast<long>(context / 2), ins.begin(), ins.end());
    edits.push_back({"insert_32_middle", e});
    e = base;
    e.erase(e.begin() + static_cast<long>(context / 2),
            e.begin() + static_cast<long>(context / 2 + 32));
    edits.push_back({"delete_32_middle", e});
  }
  json per = json::array();
  double warm_sum = 0, cold_sum = 0, kl_sum = 0;
  int agree = 0, positions = 0;
  size_t recomputed = 0;
  // The base context is computed once; each edit starts from a private copy of its state
  // (set_data makes new cells: an edit's shifts must not move cells another sequence has).
  std::vector<uint8_t> base_state;
  {
    Session s(ctx.get(), 0, cfg);
    s.prefill(base);
    base_state.resize(llama_state_seq_get_size(ctx.get(), 0));
    base_state.resize(llama_state_seq_get_data(ctx.get(), base_state.data(), base_state.size(), 0));
  }
  for (const Edit& ed : edits) {
    Session s(ctx.get(), 0, cfg, nullptr, nullptr, 2);
    if (llama_state_seq_set_data(ctx.get(), base_state.data(), base_state.size(), 0) == 0) {
      throw std::runtime_error("could not restore the base state");
    }
    s.append_external(base);
    std::vector<float> lw, lc;
    PrefillResult r;
    const double w = warm_ttft(ctx.get(), s, ed.tokens, lw, b.n_vocab, &r);
    // Cold reference in sequence 1, kept to follow the same continuation.
    const double c = cold_ttft(ctx.get(), 1, ed.tokens, lc, b.n_vocab, /*keep=*/true);
    warm_sum += w;
    cold_sum += c;
    recomputed += r.n_computed;
    // Teacher-forced continuation: the cold path's greedy tokens fed to both.
    std::vector<float> cold_l = lc, warm_l = lw;
    llama_memory_t mem = llama_get_memory(ctx.get());
    int agree_here = 0;
    double kl_here = 0;
    for (int k = 0; k <= follow; ++k) {
      const Token tc = argmax(cold_l.data(), b.n_vocab);
      agree_here += argmax(warm_l.data(), b.n_vocab) == tc;
      kl_here += kl_div(cold_l, warm_l);
      if (k == follow) break;
      llama_batch one = llama_batch_init(1, 0, 1);
      one.n_tokens = 1;
      one.token[0] = tc;
      one.pos[0] = static_cast<int32_t>(ed.tokens.size()) + k;
      one.n_seq_id[0] = 1;
      one.seq_id[0][0] = 1;
      one.logits[0] = 1;
      llama_decode(ctx.get(), one);
      const float* l = llama_get_logits_ith(ctx.get(), -1);
      cold_l.assign(l, l + b.n_vocab);
      llama_batch_free(one);
      s.decode(tc);
      l = llama_get_logits_ith(ctx.get(), -1);
      warm_l.assign(l, l + b.n_vocab);
    }
    llama_memory_seq_rm(mem, 1, -1, -1);
    agree += agree_here;
    kl_sum += kl_here;
    positions += follow + 1;
    per.push_back({{"edit", ed.name},
                   {"edit_reuse", r.edit_reuse},
                   {"reused", r.n_reused},
                   {"recomputed", r.n_computed},
                   {"ttft_ms", w},
                   {"cold_ttft_ms", c},
                   {"top1_agreement", double(agree_here) / (follow + 1)},
                   {"mean_kl", kl_here / (follow + 1)}});
  }
  return {{"name", "d_edit_reuse_tier2"},
          {"context_tokens", context},
          {"ttft_ms_mean", warm_sum / edits.size()},
          {"cold_ttft_ms_mean", cold_sum / edits.size()},
          {"ratio", cold_sum / warm_sum},
          {"tokens_recomputed", recomputed},
          {"positions_compared", positions},
          {"top1_agreement", double(agree) / positions},
          {"mean_kl", kl_sum / positions},
          {"per_edit", per}};
}

}  // namespace

LACUNA_COMMAND(cmd_bench_kv, "bench-kv", "benchmark KV reuse against cold prefill (JSON)") {
  std::string model_path, persist_dir, only;
  int32_t threads = 2;
  uint32_t block = 64, n_ctx = 8192;
  size_t preamble = 1200, turn_tokens = 80, shared = 2048, question = 48, edit_ctx = 2048;
  int turns = 10, answer = 16, requests = 8, cold_samples = 2, follow = 8, cold_every = 1;
  bool as_json = false;
  CLI::App app{"Measure KV reuse (prefix cache, disk cache, edit reuse) against cold prefill.",
               "lacuna bench kv"};
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_flag("--json", as_json, "print one JSON object (the default output is JSON too)");
  app.add_option("--threads", threads, "CPU threads (default 2)")->check(CLI::Range(1, 1024));
  app.add_option("--block", block, "tokens per block (default 64)")->check(CLI::Range(1u, 65536u));
  app.add_option("--ctx", n_ctx, "context size (default 8192)")->check(CLI::Range(256u, 1u << 20));
  app.add_option("--persist-dir", persist_dir, "disk cache directory (default: a temporary one)");
  app.add_option("--only", only, "run only these scenarios, e.g. \"ab\" (default abcd)");
  app.add_option("--preamble", preamble, "(a) fixed preamble tokens (default 1200)");
  app.add_option("--turn-tokens", turn_tokens, "(a) user tokens per turn (default 80)");
  app.add_option("--turns", turns, "(a) turns (default 10)")->check(CLI::Range(1, 1000));
  app.add_option("--answer", answer, "(a) generated tokens per turn (default 16)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--cold-every", cold_every, "(a) measure cold prefill every N turns (default 1)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--shared", shared, "(b, c) shared prefix tokens (default 2048)");
  app.add_option("--question", question, "(b, c) tokens after the shared prefix (default 48)");
  app.add_option("--requests", requests, "(b) requests (default 8)")->check(CLI::Range(2, 64));
  app.add_option("--cold-samples", cold_samples, "(b) requests also measured cold (default 2)")
      ->check(CLI::Range(1, 64));
  app.add_option("--edit-ctx", edit_ctx, "(d) context tokens (default 2048)");
  app.add_option("--follow", follow, "(d) teacher-forced positions compared (default 8)")
      ->check(CLI::Range(0, 1024));
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  if (only.empty()) only = "abcd";
  const auto fits = [&](size_t n) { return n + 64 < n_ctx; };
  if (!fits(preamble + static_cast<size_t>(turns) * (turn_tokens + answer)) ||
      !fits(shared + question) || !fits(edit_ctx + 64)) {
    std::cerr << "lacuna bench kv: the scenarios do not fit --ctx " << n_ctx << "\n";
    return 2;
  }

  Bench b{lacuna::Model::load(model_path), n_ctx, threads, block, 0};
  b.n_vocab = llama_vocab_n_tokens(b.model.vocab_ptr());
  std::filesystem::path tmp_dir;
  if (persist_dir.empty()) {
    tmp_dir = std::filesystem::temp_directory_path() /
              ("lacuna-bench-kv-" + std::to_string(std::random_device{}()));
    persist_dir = tmp_dir.string();
  }
  json out = {{"bench", "kv"},      {"model", model_path}, {"model_desc", b.model.description()},
              {"threads", threads}, {"block_size", block}, {"n_ctx", n_ctx}};
  json scenarios = json::array();
  float max_diff = 0;
  try {
    if (only.find('a') != std::string::npos) {
      scenarios.push_back(
          scenario_chat(b, preamble, turn_tokens, turns, answer, cold_every, max_diff));
    }
    if (only.find('b') != std::string::npos) {
      scenarios.push_back(scenario_shared(b, shared, question, requests, cold_samples, max_diff));
    }
    if (only.find('c') != std::string::npos) {
      scenarios.push_back(scenario_disk(b, model_path, persist_dir, shared, question, max_diff));
    }
    if (only.find('d') != std::string::npos)
      scenarios.push_back(scenario_edit(b, edit_ctx, follow));
  } catch (...) {
    if (!tmp_dir.empty()) std::filesystem::remove_all(tmp_dir);
    throw;
  }
  if (!tmp_dir.empty()) std::filesystem::remove_all(tmp_dir);
  out["scenarios"] = scenarios;
  out["tier1_max_abs_logit_diff_first_position"] = max_diff;
  std::cout << out.dump(as_json ? -1 : 2) << "\n";
  return 0;
}
