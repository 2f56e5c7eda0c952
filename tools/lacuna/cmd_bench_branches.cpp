// cmd_bench_branches.cpp — `lacuna bench branches`: N branches decoded in one BranchStore step
// per token against the same N branches decoded one after another, and against llama.cpp's own
// batched loop of N sequences measured in the same run (the ceiling); fork time and KV cells at
// two prefix lengths, Blink KV reseed time, and the mask's share of a step of N constrained
// branches. It prints figures and ratios and asserts nothing about speed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "lacuna/generator.h"
#include "lacuna/model.h"
#include "lacuna/runtime.h"

namespace {

using lacuna::Token;
using lacuna::runtime::Branch;
using lacuna::runtime::BranchParams;
using lacuna::runtime::ContextParams;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using Outputs = std::vector<std::vector<Token>>;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Pseudo-random text tokens: ids from 300 up to 30,000 (ordinary text in the usual BPE and SPM
// vocabularies), never a control or end-of-generation token.
std::vector<Token> random_text(const lacuna::Vocab& vocab, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t hi = std::min(vocab.n_vocab(), 30000) - 1;
  std::uniform_int_distribution<int32_t> d(std::min(300, hi), hi);
  std::vector<Token> out;
  out.reserve(n);
  while (out.size() < n) {
    const Token t = d(rng);
    if (!vocab.is_control(t) && !vocab.is_eog(t)) out.push_back(t);
  }
  return out;
}

// Fraction of positions where two sets of outputs hold the same token (a position one of them
// lacks counts as a difference).
double agreement(const Outputs& a, const Outputs& b) {
  size_t same = 0, total = 0;
  for (size_t s = 0; s < std::max(a.size(), b.size()); ++s) {
    const size_t na = s < a.size() ? a[s].size() : 0;
    const size_t nb = s < b.size() ? b[s].size() : 0;
    total += std::max(na, nb);
    for (size_t i = 0; i < std::min(na, nb); ++i) same += a[s][i] == b[s][i];
  }
  return total == 0 ? 1.0 : static_cast<double>(same) / static_cast<double>(total);
}

size_t count_tokens(const Outputs& o) {
  size_t n = 0;
  for (const auto& v : o) n += v.size();
  return n;
}

// The two best tokens of one position's logits: greedy's choice and its closest rival.
struct Top2 {
  Token t1 = -1, t2 = -1;
  float l1 = 0, l2 = 0;
};
using Trace = std::vector<std::vector<Top2>>;  // per sequence, per generated position

Top2 top2(const float* l, int32_t n) {
  Top2 r;
  for (int32_t i = 0; i < n; ++i) {
    if (r.t1 < 0 || l[i] > r.l1) {
      r.t2 = r.t1;
      r.l2 = r.l1;
      r.t1 = i;
      r.l1 = l[i];
    } else if (r.t2 < 0 || l[i] > r.l2) {
      r.t2 = i;
      r.l2 = l[i];
    }
  }
  return r;
}

Top2 top2(const Branch& b) {
  const std::vector<float> l = b.logits();
  if (l.empty()) throw std::logic_error("bench branches: a branch without logits");
  return top2(l.data(), static_cast<int32_t>(l.size()));
}

json top2_json(const Top2& t) {
  return {{"token", t.t1},
          {"logit", t.l1},
          {"rival", t.t2},
          {"rival_logit", t.l2},
          {"margin", t.l1 - t.l2}};
}

// Where two greedy runs of the same prompts part, from their traces: the largest difference
// of the chosen token's logit at the positions where both chose the same token (the numeric
// drift between the two ways of computing them), and the first position where they chose
// differently with both runs' two best logits there. A near-tie flip shows as a margin of the
// order of the drift in both runs.
json divergence(const Outputs& a, const Outputs& b, const Trace& ta, const Trace& tb) {
  double drift = 0;
  size_t compared = 0;
  json first = nullptr;
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    const size_t n = std::min({a[s].size(), b[s].size(), ta[s].size(), tb[s].size()});
    for (size_t i = 0; i < n; ++i) {
      if (a[s][i] != b[s][i]) {
        if (first.is_null() || i < first["position"].get<size_t>()) {
          first = {{"branch", s},
                   {"position", i},
                   {"a", top2_json(ta[s][i])},
                   {"b", top2_json(tb[s][i])}};
        }
        break;
      }
      drift = std::max(drift, static_cast<double>(std::fabs(ta[s][i].l1 - tb[s][i].l1)));
      ++compared;
    }
  }
  return {{"positions_compared", compared}, {"max_logit_drift", drift}, {"first", first}};
}

// One timed generation of a set of sequences.
struct Run {
  double ms = 0;     // wall time after the prompts' logits were ready
  size_t steps = 0;  // steps (lacuna) or llama_decode calls + 1 (plain loop)
  Outputs out;
};

// ---- lacuna: the runtime --------------------------------------------------------------------

// Puts every branch back to its prompt (keeping the prompt's KV, one token decoded again for its
// logits); a new generation starts.
void reset(std::vector<Branch>& bs, const std::vector<std::vector<Token>>& prompts) {
  for (size_t i = 0; i < bs.size(); ++i) bs[i].set_tokens(prompts[i]);
}

Outputs outputs_of(const std::vector<Branch>& bs) {
  Outputs o;
  for (const Branch& b : bs) o.push_back(b.generator().tokens());
  return o;
}

// store().step over the branches not done yet, until none is left.
Run step_loop(lacuna::runtime::Context& ctx, const std::vector<Branch>& bs) {
  Run r;
  std::vector<Branch> live;
  const auto t0 = Clock::now();
  for (;;) {
    live.clear();
    for (const Branch& b : bs) {
      if (!b.generator().done()) live.push_back(b);
    }
    if (live.empty()) break;
    ctx.store().step(live);
    ++r.steps;
  }
  r.ms = ms_since(t0);
  r.out = outputs_of(bs);
  return r;
}

// All branches in one store().step per token, from their prompts.
Run run_batched(lacuna::runtime::Context& ctx, std::vector<Branch>& bs,
                const std::vector<std::vector<Token>>& prompts) {
  reset(bs, prompts);
  return step_loop(ctx, bs);
}

// The first `count` branches one after another, each alone with Branch::next.
Run run_sequential(std::vector<Branch>& bs, const std::vector<std::vector<Token>>& prompts,
                   size_t count) {
  reset(bs, prompts);
  Run r;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < count; ++i) {
    while (!bs[i].next().done) ++r.steps;
    ++r.steps;
  }
  r.ms = ms_since(t0);
  r.out = outputs_of(bs);
  r.out.resize(count);
  return r;
}

// The diagnosis' greedy runs: produce() + commit() instead of next() / step(), which read the
// logits without keeping a copy, so that each position's two best logits can be recorded.
// Without a constraint or forced tokens the forward passes are the same as the timed runs'
// (one token per branch per pass); the caller checks that the tokens are too.
bool traced_take(const lacuna::Vocab& vocab, Branch& b, Trace& trace, size_t i, Outputs& out,
                 Token& t) {
  trace[i].push_back(top2(b));
  t = b.produce();
  if (vocab.is_eog(t)) return false;
  out[i].push_back(t);
  return true;
}

Run traced_batched(lacuna::runtime::Context& ctx, std::vector<Branch>& bs,
                   const std::vector<std::vector<Token>>& prompts, size_t max_tokens,
                   Trace& trace) {
  const lacuna::Vocab vocab = ctx.vocab();
  reset(bs, prompts);
  Run r;
  r.out.assign(bs.size(), {});
  std::vector<size_t> live(bs.size());
  for (size_t i = 0; i < bs.size(); ++i) live[i] = i;
  while (!live.empty()) {
    std::vector<std::pair<Branch, Token>> items;
    std::vector<size_t> still;
    for (const size_t i : live) {
      Token t = -1;
      if (!traced_take(vocab, bs[i], trace, i, r.out, t)) continue;
      items.emplace_back(bs[i], t);
      if (r.out[i].size() < max_tokens) still.push_back(i);
    }
    if (!items.empty()) ctx.store().commit(items);
    ++r.steps;
    live.swap(still);
  }
  return r;
}

Run traced_sequential(const lacuna::Vocab& vocab, std::vector<Branch>& bs,
                      const std::vector<std::vector<Token>>& prompts, size_t max_tokens,
                      Trace& trace) {
  reset(bs, prompts);
  Run r;
  r.out.assign(bs.size(), {});
  for (size_t i = 0; i < bs.size(); ++i) {
    Token t = -1;
    while (traced_take(vocab, bs[i], trace, i, r.out, t)) {
      bs[i].commit(t);
      ++r.steps;
      if (r.out[i].size() >= max_tokens) break;
    }
  }
  return r;
}

// ---- llama.cpp's own loop -------------------------------------------------------------------

// llama.cpp's plain batched decode of N sequences: one llama_decode per step with one token per
// live sequence, greedy argmax on the host. Nothing of lacuna runs inside it.
class PlainLoop {
 public:
  PlainLoop(const lacuna::Model& model, const llama_context_params& cp)
      : ctx_(lacuna::Context::create(model, cp)),
        vocab_(model.vocab_ptr()),
        n_vocab_(llama_vocab_n_tokens(vocab_)),
        n_batch_(static_cast<int32_t>(cp.n_batch)),
        batch_(llama_batch_init(n_batch_, 0, 1)) {}
  ~PlainLoop() { llama_batch_free(batch_); }
  PlainLoop(const PlainLoop&) = delete;
  PlainLoop& operator=(const PlainLoop&) = delete;

  llama_context* raw() const { return ctx_.get(); }

  // Decodes each prompt into its sequence (0, 1, ...), n_batch tokens per call.
  void prefill(const std::vector<std::vector<Token>>& prompts) {
    llama_memory_t mem = llama_get_memory(raw());
    for (size_t s = 0; s < prompts.size(); ++s) {
      const auto seq = static_cast<llama_seq_id>(s);
      llama_memory_seq_rm(mem, seq, -1, -1);
      for (size_t done = 0; done < prompts[s].size();) {
        const size_t n = std::min<size_t>(static_cast<size_t>(n_batch_), prompts[s].size() - done);
        batch_.n_tokens = 0;
        for (size_t i = 0; i < n; ++i) add(prompts[s][done + i], done + i, seq, false);
        decode("prefill");
        done += n;
      }
    }
  }

  // Greedy generation of up to max_tokens tokens per sequence (stopping a sequence at an
  // end-of-generation token, not counted), after its prompt. Untimed first: the generated
  // tokens of the last run are removed and the last prompt token of every sequence is decoded
  // again in one batch, so that each sequence's first token comes from its prompt's logits
  // (as a lacuna branch's does after set_tokens).
  Run generate(const std::vector<std::vector<Token>>& prompts, size_t max_tokens,
               Trace* trace = nullptr) {
    llama_memory_t mem = llama_get_memory(raw());
    const size_t n = prompts.size();
    batch_.n_tokens = 0;
    for (size_t s = 0; s < n; ++s) {
      const auto seq = static_cast<llama_seq_id>(s);
      const size_t last = prompts[s].size() - 1;
      llama_memory_seq_rm(mem, seq, static_cast<llama_pos>(last), -1);
      add(prompts[s][last], last, seq, true);
    }
    decode("reset");
    Run r;
    r.out.assign(n, {});
    std::vector<size_t> live, row;  // live sequences; their row in the last batch
    for (size_t s = 0; s < n; ++s) {
      live.push_back(s);
      row.push_back(s);
    }
    const auto t0 = Clock::now();
    for (;;) {
      ++r.steps;
      std::vector<size_t> still;
      for (size_t k = 0; k < live.size(); ++k) {
        const size_t s = live[k];
        const float* logits = llama_get_logits_ith(raw(), static_cast<int32_t>(row[k]));
        const Token t = argmax(logits);
        if (trace != nullptr) (*trace)[s].push_back(top2(logits, n_vocab_));
        if (llama_vocab_is_eog(vocab_, t)) continue;
        r.out[s].push_back(t);
        if (r.out[s].size() < max_tokens) still.push_back(s);
      }
      live.swap(still);
      if (live.empty()) break;
      batch_.n_tokens = 0;
      row.clear();
      for (const size_t s : live) {
        row.push_back(static_cast<size_t>(batch_.n_tokens));
        add(r.out[s].back(), prompts[s].size() + r.out[s].size() - 1, static_cast<llama_seq_id>(s),
            true);
      }
      decode("step");
    }
    r.ms = ms_since(t0);
    return r;
  }

 private:
  void add(Token t, size_t pos, llama_seq_id seq, bool logits) {
    const int32_t i = batch_.n_tokens++;
    batch_.token[i] = t;
    batch_.pos[i] = static_cast<llama_pos>(pos);
    batch_.n_seq_id[i] = 1;
    batch_.seq_id[i][0] = seq;
    batch_.logits[i] = logits ? 1 : 0;
  }
  void decode(const char* what) {
    const int32_t rc = llama_decode(raw(), batch_);
    if (rc != 0) {
      throw std::runtime_error(std::string("llama.cpp loop: llama_decode failed (") + what +
                               ", status " + std::to_string(rc) + ")");
    }
  }
  Token argmax(const float* l) const {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab_; ++i) {
      if (l[i] > l[best]) best = i;
    }
    return best;
  }

  lacuna::Context ctx_;
  const llama_vocab* vocab_;
  int32_t n_vocab_;
  int32_t n_batch_;
  llama_batch batch_;
};

// The llama_context parameters runtime::Context uses for `p` (no prefix-cache sequences).
llama_context_params plain_params(const ContextParams& p) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = p.n_ctx;
  cp.n_batch = p.n_batch;
  cp.n_ubatch = std::min(p.n_ubatch, p.n_batch);
  cp.n_seq_max = p.n_branches;
  cp.n_threads = p.n_threads;
  cp.n_threads_batch = p.n_threads_batch;
  cp.kv_unified = true;
  cp.no_perf = true;
  return cp;
}

// ---- the scenarios --------------------------------------------------------------------------

struct Settings {
  std::vector<size_t> branches{1, 2, 4, 8, 16};
  size_t tokens = 32;
  size_t prefix = 128;
  int reps = 3;
  std::vector<size_t> fork_prefixes{200, 2000};
  int fork_reps = 50;
  size_t sinks = 4;
  size_t tail = 256;
  size_t constrained = 8;
  size_t constrained_tokens = 128;
  std::string schemas;
  bool diagnose = false;
};

// One row: N branches batched vs sequential vs llama.cpp's loop, interleaved per repetition.
json bench_n(lacuna::runtime::Context& ctx, PlainLoop& plain, const Settings& s, size_t n) {
  const lacuna::Vocab vocab = ctx.vocab();
  std::vector<std::vector<Token>> prompts;
  for (size_t i = 0; i < n; ++i)
    prompts.push_back(random_text(vocab, s.prefix, 1000 + static_cast<uint32_t>(i)));
  BranchParams bp;
  bp.max_tokens = s.tokens;
  std::vector<Branch> bs;
  std::vector<std::pair<Branch, std::vector<Token>>> pre;
  for (size_t i = 0; i < n; ++i) {
    bs.push_back(ctx.create_branch(bp));
    pre.emplace_back(bs.back(), prompts[i]);
  }
  ctx.store().prefill(pre);
  plain.prefill(prompts);
  // Warm-up: each mode once (the sequential one on one branch), untimed.
  run_batched(ctx, bs, prompts);
  plain.generate(prompts, s.tokens);
  run_sequential(bs, prompts, 1);
  std::vector<double> batched_tps, seq_tps, plain_tps, batched_ms, seq_ms, plain_ms;
  Run b, q, p;
  for (int rep = 0; rep < s.reps; ++rep) {
    b = run_batched(ctx, bs, prompts);
    p = plain.generate(prompts, s.tokens);
    q = run_sequential(bs, prompts, n);
    batched_ms.push_back(b.ms);
    plain_ms.push_back(p.ms);
    seq_ms.push_back(q.ms);
    batched_tps.push_back(static_cast<double>(count_tokens(b.out)) * 1000.0 / b.ms);
    plain_tps.push_back(static_cast<double>(count_tokens(p.out)) * 1000.0 / p.ms);
    seq_tps.push_back(static_cast<double>(count_tokens(q.out)) * 1000.0 / q.ms);
  }
  json diag = nullptr;
  if (s.diagnose) {  // one more run of each, untimed, with the two best logits of every position
    Trace tb(n), tq(n), tp(n);
    const Run db = traced_batched(ctx, bs, prompts, s.tokens, tb);
    const Run dp = plain.generate(prompts, s.tokens, &tp);
    const Run dq = traced_sequential(vocab, bs, prompts, s.tokens, tq);
    diag = {{"traced_runs_equal_timed", db.out == b.out && dq.out == q.out && dp.out == p.out},
            {"step_vs_sequential", divergence(db.out, dq.out, tb, tq)},
            {"step_vs_llama", divergence(db.out, dp.out, tb, tp)},
            {"sequential_vs_llama", divergence(dq.out, dp.out, tq, tp)}};
  }
  for (Branch& br : bs) br.prune();
  const double bt = median(batched_tps), st = median(seq_tps), pt = median(plain_tps);
  return {{"n", n},
          {"divergence", diag},
          {"tokens_batched", count_tokens(b.out)},
          {"tokens_sequential", count_tokens(q.out)},
          {"tokens_llama", count_tokens(p.out)},
          {"steps_batched", b.steps},
          {"batched_ms", median(batched_ms)},
          {"sequential_ms", median(seq_ms)},
          {"llama_ms", median(plain_ms)},
          {"batched_tok_s", bt},
          {"sequential_tok_s", st},
          {"llama_tok_s", pt},
          {"ratio_batched_vs_sequential", st > 0 ? bt / st : 0.0},
          {"ratio_batched_vs_llama", pt > 0 ? bt / pt : 0.0},
          {"agreement_batched_vs_sequential", agreement(b.out, q.out)},
          {"agreement_batched_vs_llama", agreement(b.out, p.out)},
          {"agreement_sequential_vs_llama", agreement(q.out, p.out)}};
}

// Fork time at each prefix length (a root prefilled with `prefix` tokens, forked and the child
// pruned `fork_reps` times) and the KV cells the store counts before and after one fork; then
// Blink KV reseeds of a fork of the longest root (sinks + tail, `reps` times after a warm-up).
json bench_fork_reseed(lacuna::runtime::Context& ctx, const Settings& s, json& reseed) {
  const lacuna::Vocab vocab = ctx.vocab();
  json rows = json::array();
  Branch longest;
  for (size_t prefix : s.fork_prefixes) {
    BranchParams bp;
    bp.max_tokens = 1;
    Branch root = ctx.create_branch(bp);
    const auto t0 = Clock::now();
    root.prefill(random_text(vocab, prefix, 7 + static_cast<uint32_t>(prefix)));
    const double prefill_ms = ms_since(t0);
    const uint32_t before = ctx.store().kv_pressure().cells_used;
    uint32_t after = 0;
    std::vector<double> us;
    for (int r = 0; r <= s.fork_reps; ++r) {  // the first one warms up
      const auto f0 = Clock::now();
      Branch child = root.fork();
      const double t = ms_since(f0) * 1000.0;
      if (r == 0) after = ctx.store().kv_pressure().cells_used;
      if (r > 0) us.push_back(t);
      child.prune();
    }
    // For comparison: a new empty branch (what every fork also pays for its sequence).
    std::vector<double> create_us;
    for (int r = 0; r <= s.fork_reps; ++r) {
      const auto c0 = Clock::now();
      Branch fresh = ctx.create_branch(bp);
      const double t = ms_since(c0) * 1000.0;
      if (r > 0) create_us.push_back(t);
      fresh.prune();
    }
    rows.push_back({{"prefix", prefix},
                    {"fork_us_median", median(us)},
                    {"create_branch_us_median", median(create_us)},
                    {"fork_us_min", *std::min_element(us.begin(), us.end())},
                    {"fork_us_max", *std::max_element(us.begin(), us.end())},
                    {"cells_used_before", before},
                    {"cells_used_after", after},
                    {"prefill_ms", prefill_ms}});
    if (longest.valid()) {
      if (prefix > longest.tokens().size()) {
        longest.prune();
        longest = root;
      } else {
        root.prune();
      }
    } else {
      longest = root;
    }
  }
  reseed = json::object();
  if (longest.valid() && s.sinks + s.tail > 0 && s.sinks + s.tail < longest.tokens().size()) {
    std::vector<double> ms;
    size_t kept = 0;
    for (int r = 0; r <= s.reps; ++r) {
      Branch child = longest.fork();
      const auto hist = child.tokens();
      const std::vector<Token> sinks(hist.begin(), hist.begin() + static_cast<long>(s.sinks));
      const std::vector<Token> tail(hist.end() - static_cast<long>(s.tail), hist.end());
      const auto t0 = Clock::now();
      child.clear_and_reseed(sinks, tail);
      const double t = ms_since(t0);
      if (r > 0) ms.push_back(t);
      kept = child.tokens().size();
      child.prune();
    }
    reseed = {{"from_tokens", longest.tokens().size()},
              {"sinks", s.sinks},
              {"tail", s.tail},
              {"tokens_after", kept},
              {"reseed_ms_median", median(ms)}};
  }
  if (longest.valid()) longest.prune();
  return rows;
}

std::vector<std::string> schema_files(const std::string& where) {
  std::vector<std::string> files;
  if (std::filesystem::is_directory(where)) {
    for (const auto& e : std::filesystem::directory_iterator(where)) {
      if (e.path().extension() == ".json") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(where);
  }
  if (files.empty()) throw std::runtime_error("no .json schema in '" + where + "'");
  return files;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Prompts for the constrained row: the lines of bench/data/prompts.txt ("\n" written as two
// characters) when it is there, else random text.
std::vector<std::vector<Token>> tool_prompts(const lacuna::Vocab& vocab, size_t n,
                                             size_t fallback_len) {
  std::vector<std::string> lines;
  std::ifstream in("bench/data/prompts.txt");
  for (std::string line; std::getline(in, line);) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
        text += '\n';
        ++i;
      } else {
        text += line[i];
      }
    }
    if (!text.empty()) lines.push_back(text);
  }
  std::vector<std::vector<Token>> out;
  for (size_t i = 0; i < n; ++i) {
    if (lines.empty()) {
      out.push_back(random_text(vocab, fallback_len, 500 + static_cast<uint32_t>(i)));
    } else {
      out.push_back(lacuna::tokenize(vocab, lines[i % lines.size()], true, false));
    }
  }
  return out;
}

// N branches, each with a tool-call schema, stepping in one batch: the share of the step loop's
// wall time spent in the constraints (GenerationStats::mask_ms summed over the branches).
json bench_constrained(lacuna::runtime::Context& ctx, const Settings& s) {
  const lacuna::Vocab vocab = ctx.vocab();
  const auto files = schema_files(s.schemas);
  std::vector<std::string> schemas;
  for (const auto& f : files) schemas.push_back(read_file(f));
  const auto prompts = tool_prompts(vocab, s.constrained, s.prefix);
  BranchParams bp;
  bp.max_tokens = s.constrained_tokens;
  std::vector<Branch> bs;
  std::vector<std::pair<Branch, std::vector<Token>>> pre;
  for (size_t i = 0; i < s.constrained; ++i) {
    bs.push_back(ctx.create_branch(bp));
    pre.emplace_back(bs.back(), prompts[i]);
  }
  ctx.store().prefill(pre);
  std::vector<double> wall, mask, sample, share;
  size_t tokens = 0, passes = 0, completed = 0, steps = 0;
  for (int rep = 0; rep <= s.reps; ++rep) {  // the first one warms up
    for (size_t i = 0; i < bs.size(); ++i) {
      bs[i].set_json_schema(schemas[i % schemas.size()], /*compact=*/true);
      bs[i].set_tokens(prompts[i]);
    }
    const Run r = step_loop(ctx, bs);
    double m = 0, sm = 0;
    tokens = passes = completed = 0;
    for (const Branch& b : bs) {
      const auto& st = b.generator().stats();
      m += st.mask_ms;
      sm += st.sample_ms;
      tokens += st.tokens_emitted;
      passes += st.forward_passes;
      completed += st.stop == lacuna::StopReason::constraint_completed;
    }
    steps = r.steps;
    if (rep == 0) continue;
    wall.push_back(r.ms);
    mask.push_back(m);
    sample.push_back(sm);
    share.push_back(r.ms > 0 ? m / r.ms : 0.0);
  }
  for (Branch& b : bs) b.prune();
  json names = json::array();
  for (const auto& f : files) names.push_back(std::filesystem::path(f).filename().string());
  const double w = median(wall);
  return {{"n", s.constrained},
          {"schemas", names},
          {"tokens", tokens},
          {"steps", steps},
          {"forward_passes_summed", passes},
          {"completed", completed},
          {"step_loop_ms", w},
          {"tok_s", w > 0 ? static_cast<double>(tokens) * 1000.0 / w : 0.0},
          {"mask_ms_summed", median(mask)},
          {"sample_ms_summed", median(sample)},
          {"mask_share", median(share)}};
}

}  // namespace

LACUNA_COMMAND(cmd_bench_branches, "bench-branches",
               "N branches in one batched step vs one after another vs llama.cpp's batched loop") {
  std::string model_path;
  Settings s;
  int32_t threads = 2;
  uint32_t n_ctx = 0, n_batch = 512;
  bool as_json = false;
  s.schemas = std::filesystem::is_directory("bench/data/tool_schemas")
                  ? "bench/data/tool_schemas"
                  : "examples/tool_call_schema.json";
  CLI::App app{
      "Measure N branches decoded in one BranchStore step per token against the same N decoded "
      "one after another and against llama.cpp's own batched loop of N sequences (same run, "
      "same context parameters); fork time and KV cells at two prefix lengths; Blink KV reseed "
      "time; the mask's share of a step of N constrained branches. Greedy; medians over --reps "
      "after one warm-up. Prints figures and ratios, asserts nothing.",
      "lacuna bench branches"};
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("--branches", s.branches, "branch counts N (default 1,2,4,8,16)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{256}));
  app.add_flag("--json", as_json, "print one JSON object instead of the table");
  app.add_option("--threads", threads, "CPU threads (default 2)")->check(CLI::Range(1, 1024));
  app.add_option("--tokens", s.tokens, "tokens generated per branch (default 32)")
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  app.add_option("--prefix", s.prefix, "prompt tokens per branch (default 128)")
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--reps", s.reps, "timed repetitions, after one warm-up (default 3)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--fork-prefix", s.fork_prefixes,
                 "prefix lengths at which forks are timed (default 200,2000)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  app.add_option("--fork-reps", s.fork_reps, "forks timed per prefix length (default 50)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--sinks", s.sinks, "Blink KV reseed: sink tokens kept (default 4)");
  app.add_option("--tail", s.tail, "Blink KV reseed: last tokens kept (default 256)");
  app.add_option("--constrained", s.constrained,
                 "constrained branches stepping in one batch (default 8; 0: skip the row)");
  app.add_option("--constrained-tokens", s.constrained_tokens,
                 "most tokens per constrained branch (default 128)")
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  app.add_option("--schemas", s.schemas,
                 "tool-call JSON Schema file, or a directory of them (default " + s.schemas + ")");
  app.add_flag("--diagnose", s.diagnose,
               "after the timed runs, one more run of each mode recording the two best logits "
               "of every position: the largest logit drift between modes and where they first "
               "choose differently, with both margins");
  app.add_option("--ctx", n_ctx, "context size (default: what the scenarios need)");
  app.add_option("--batch", n_batch, "n_batch and n_ubatch (default 512)")
      ->check(CLI::Range(2u, 1u << 20));
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  std::sort(s.branches.begin(), s.branches.end());
  s.branches.erase(std::unique(s.branches.begin(), s.branches.end()), s.branches.end());
  const size_t max_n = s.branches.back();
  if (max_n > n_batch) {
    std::cerr << "lacuna bench branches: N = " << max_n << " exceeds --batch " << n_batch << "\n";
    return 2;
  }
  const size_t max_fork = *std::max_element(s.fork_prefixes.begin(), s.fork_prefixes.end());
  // Every branch of a row is alive at once; the fork roots and the constrained row come after.
  const size_t need =
      std::max({max_n * (s.prefix + s.tokens + 2), max_fork * 2 + s.fork_prefixes.size() * 2,
                s.constrained * (std::max<size_t>(s.prefix, 256) + s.constrained_tokens + 2)}) +
      64;
  if (n_ctx == 0) n_ctx = static_cast<uint32_t>((need + 255) / 256 * 256);
  if (n_ctx < need) {
    std::cerr << "lacuna bench branches: the scenarios need --ctx " << need << " or more\n";
    return 2;
  }

  lacuna::Model model = lacuna::Model::load(model_path);
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_batch;
  cp.n_branches =
      static_cast<uint32_t>(std::max({max_n, s.constrained, s.fork_prefixes.size() + 1}));
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.kv = lacuna::kv::KvConfig{};
  cp.kv.prefix_cache = false;  // the same sequences as the plain loop; prompts stay in place
  cp.decode = lacuna::decode_options_from_env();
  lacuna::runtime::Context ctx(model, cp);
  PlainLoop plain(model, plain_params(cp));
  // The two contexts must agree on what shapes the decode cost.
  llama_context* a = ctx.raw();
  llama_context* b = plain.raw();
  if (llama_n_ctx(a) != llama_n_ctx(b) || llama_n_batch(a) != llama_n_batch(b) ||
      llama_n_ubatch(a) != llama_n_ubatch(b) || llama_n_seq_max(a) != llama_n_seq_max(b) ||
      llama_n_threads(a) != llama_n_threads(b) ||
      llama_n_threads_batch(a) != llama_n_threads_batch(b)) {
    std::cerr << "lacuna bench branches: the llama.cpp loop's context differs from the runtime's\n";
    return 1;
  }

  const char* omp = std::getenv("OMP_WAIT_POLICY");
  if (omp == nullptr && threads > 1) {
    std::cerr << "lacuna bench branches: OMP_WAIT_POLICY is not set; on a busy machine run with "
                 "OMP_WAIT_POLICY=passive (the Makefile sets it)\n";
  }
  json out = {{"bench", "branches"},
              {"model", model_path},
              {"model_desc", model.description()},
              {"threads", threads},
              {"n_ctx", llama_n_ctx(a)},
              {"n_batch", llama_n_batch(a)},
              {"n_seq_max", llama_n_seq_max(a)},
              {"prefix", s.prefix},
              {"tokens", s.tokens},
              {"reps", s.reps},
              {"omp_wait_policy", omp ? omp : ""}};
  json rows = json::array();
  for (size_t n : s.branches) {
    rows.push_back(bench_n(ctx, plain, s, n));
    if (!as_json) std::fprintf(stderr, "N = %zu done\n", n);
  }
  out["rows"] = rows;
  json reseed;
  out["fork"] = bench_fork_reseed(ctx, s, reseed);
  out["reseed"] = reseed;
  if (s.constrained > 0) out["constrained"] = bench_constrained(ctx, s);

  if (as_json) {
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  std::printf(
      "lacuna bench branches: %s (%s), %d threads, n_ctx %u, prefix %zu, %zu tokens "
      "per branch, greedy, medians of %d reps\n",
      model_path.c_str(), model.description().c_str(), threads, llama_n_ctx(a), s.prefix, s.tokens,
      s.reps);
  // Agreement (share of equal tokens): step vs sequential, step vs llama.cpp, sequential vs
  // llama.cpp.
  std::printf("%4s %12s %12s %7s %12s %9s %23s\n", "N", "step tok/s", "seq tok/s", "ratio",
              "llama tok/s", "vs llama", "agree st/sq st/ll sq/ll");
  for (const auto& r : rows) {
    std::printf("%4zu %12.1f %12.1f %6.2fx %12.1f %8.3fx %11.3f %5.3f %5.3f\n",
                r["n"].get<size_t>(), r["batched_tok_s"].get<double>(),
                r["sequential_tok_s"].get<double>(), r["ratio_batched_vs_sequential"].get<double>(),
                r["llama_tok_s"].get<double>(), r["ratio_batched_vs_llama"].get<double>(),
                r["agreement_batched_vs_sequential"].get<double>(),
                r["agreement_batched_vs_llama"].get<double>(),
                r["agreement_sequential_vs_llama"].get<double>());
  }
  for (const auto& r : rows) {
    if (r["divergence"].is_null()) continue;
    for (const char* pair : {"step_vs_sequential", "step_vs_llama", "sequential_vs_llama"}) {
      const auto& d = r["divergence"][pair];
      std::printf("N = %zu %s: max logit drift %.3g over %zu equal positions", r["n"].get<size_t>(),
                  pair, d["max_logit_drift"].get<double>(), d["positions_compared"].get<size_t>());
      if (d["first"].is_null()) {
        std::printf("; no divergence\n");
        continue;
      }
      const auto& f = d["first"];
      std::printf(
          "; first differs at branch %zu position %zu: token %d (margin %.3g) vs token %d "
          "(margin %.3g)\n",
          f["branch"].get<size_t>(), f["position"].get<size_t>(), f["a"]["token"].get<int>(),
          f["a"]["margin"].get<double>(), f["b"]["token"].get<int>(),
          f["b"]["margin"].get<double>());
    }
  }
  for (const auto& f : out["fork"]) {
    std::printf(
        "fork at %zu tokens of prefix: median %.1f us (min %.1f, max %.1f; an empty "
        "create_branch: %.1f us); KV cells used %u -> %u\n",
        f["prefix"].get<size_t>(), f["fork_us_median"].get<double>(),
        f["fork_us_min"].get<double>(), f["fork_us_max"].get<double>(),
        f["create_branch_us_median"].get<double>(), f["cells_used_before"].get<uint32_t>(),
        f["cells_used_after"].get<uint32_t>());
  }
  if (!reseed.empty()) {
    std::printf("Blink KV reseed of %zu tokens to %zu sinks + %zu tail: median %.1f ms\n",
                reseed["from_tokens"].get<size_t>(), s.sinks, s.tail,
                reseed["reseed_ms_median"].get<double>());
  }
  if (out.contains("constrained")) {
    const auto& c = out["constrained"];
    std::printf(
        "constrained: %zu branches (%zu schemas) in one step: %zu tokens, %zu steps, "
        "%.1f tok/s, %zu/%zu completed; mask %.2f ms of %.1f ms = %.2f%% of the step\n",
        c["n"].get<size_t>(), c["schemas"].size(), c["tokens"].get<size_t>(),
        c["steps"].get<size_t>(), c["tok_s"].get<double>(), c["completed"].get<size_t>(),
        c["n"].get<size_t>(), c["mask_ms_summed"].get<double>(), c["step_loop_ms"].get<double>(),
        100.0 * c["mask_share"].get<double>());
  }
  // The targets (bench-0.5b, 2 threads), next to what this run measured.
  std::printf("targets:");
  for (const auto& r : rows) {
    if (r["n"].get<size_t>() == 8) {
      std::printf(" 8 branches %.2fx sequential (>= 2.5x);",
                  r["ratio_batched_vs_sequential"].get<double>());
    }
  }
  double worst = 1e30;
  for (const auto& r : rows) worst = std::min(worst, r["ratio_batched_vs_llama"].get<double>());
  std::printf(" lowest ratio to llama.cpp's loop %.3fx (>= 0.95x);", worst);
  for (const auto& f : out["fork"]) {
    if (f["prefix"].get<size_t>() == max_fork) {
      std::printf(" fork at %zu tokens %.1f us (<= 100 us at 2,000);", max_fork,
                  f["fork_us_median"].get<double>());
    }
  }
  if (out.contains("constrained")) {
    std::printf(" mask %.2f%% of the step (<= 3%%)",
                100.0 * out["constrained"]["mask_share"].get<double>());
  }
  std::printf("\n");
  return 0;
}
