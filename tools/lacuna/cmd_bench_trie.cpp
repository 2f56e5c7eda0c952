// cmd_bench_trie.cpp — `lacuna bench trie`: the token trie against the equivalent grammar
// (an alternation of the same names) for leaf sets of 30, 300 and 3,000 names: build and
// cache-hit time, memory, mask time per step, adapter apply time, and with -m a model:
// forward passes, skip ratio, decode tok/s and token agreement.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "command.h"
#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "lacuna/sampler.h"
#include "lacuna/token_index.h"
#include "lacuna/token_trie.h"

namespace {

using Clock = std::chrono::steady_clock;
using lacuna::Token;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Deterministic, plausible action names: VERB_NOUN or VERB_NOUN_QUALIFIER, shuffled by a
// fixed seed so every size is a different mix.
std::vector<std::string> make_names(size_t n) {
  static const char* verbs[] = {
      "SEARCH", "SEND",    "CREATE", "DELETE",  "UPDATE",  "LIST",   "GET",      "SET",
      "OPEN",   "CLOSE",   "REPLY",  "FORWARD", "ARCHIVE", "MOVE",   "COPY",     "RENAME",
      "SHARE",  "INVITE",  "REMOVE", "ADD",     "FETCH",   "UPLOAD", "DOWNLOAD", "SCHEDULE",
      "CANCEL", "APPROVE", "REJECT", "ASSIGN",  "MERGE",   "SPLIT",  "EXPORT",   "IMPORT",
      "SYNC",   "PING",    "LOCK",   "UNLOCK",  "START",   "STOP",   "PAUSE",    "RESUME"};
  static const char* nouns[] = {
      "EMAIL",   "FILE",     "WEB",     "THREAD",   "MESSAGE",  "CALENDAR", "EVENT",   "TASK",
      "NOTE",    "CONTACT",  "FOLDER",  "DOCUMENT", "TICKET",   "ISSUE",    "BRANCH",  "COMMIT",
      "USER",    "GROUP",    "CHANNEL", "INVOICE",  "ORDER",    "PAYMENT",  "REPORT",  "IMAGE",
      "VIDEO",   "PLAYLIST", "DEVICE",  "SENSOR",   "ALARM",    "REMINDER", "PROJECT", "SPRINT",
      "RELEASE", "BUILD",    "DEPLOY",  "SERVER",   "DATABASE", "TABLE",    "QUERY",   "INDEX"};
  static const char* quals[] = {"", "_ALL", "_NOW", "_LATER", "_BATCH"};
  std::vector<std::string> all;
  for (const char* v : verbs) {
    for (const char* o : nouns) {
      for (const char* q : quals) all.push_back(std::string(v) + "_" + o + q);
    }
  }
  std::mt19937 rng(12345);
  std::shuffle(all.begin(), all.end(), rng);
  if (n > all.size())
    throw std::invalid_argument("at most " + std::to_string(all.size()) + " names");
  all.resize(n);
  return all;
}

std::string make_payload(const std::vector<std::string>& names,
                         const std::vector<std::vector<Token>>& tokens) {
  nlohmann::json leaves = nlohmann::json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    leaves.push_back({{"name", names[i]}, {"tokens", tokens[i]}});
  }
  nlohmann::json j = {{"modelId", "bench"},
                      {"descriptors", {{{"path", "action"}, {"leaves", leaves}}}}};
  return j.dump();
}

std::string make_gbnf(const std::vector<std::string>& names) {
  std::string g = "root ::= ";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) g += " | ";
    g += "\"" + names[i] + "\"";
  }
  g += "\n";
  return g;
}

struct Timing {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  size_t n = 0;
};

Timing summarize(std::vector<double> v) {
  Timing t;
  if (v.empty()) return t;
  std::sort(v.begin(), v.end());
  t.n = v.size();
  t.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  t.p50 = v[v.size() / 2];
  t.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  t.max = v.back();
  return t;
}

nlohmann::json to_json(const Timing& t) {
  return {{"mean", t.mean}, {"p50", t.p50}, {"p99", t.p99}, {"max", t.max}, {"n", t.n}};
}

// Times fill_next_token_bitmask along the paths of (up to) `max_paths` names and their end.
Timing mask_timing(lacuna::Constraint& c, const std::vector<std::vector<Token>>& paths,
                   Token end_token, size_t max_paths) {
  std::vector<uint32_t> words(lacuna::bitmask_words(c.n_vocab()));
  std::vector<double> us;
  for (size_t p = 0; p < paths.size() && p < max_paths; ++p) {
    c.reset();
    for (size_t i = 0; i <= paths[p].size(); ++i) {
      const auto t0 = Clock::now();
      c.fill_next_token_bitmask(words.data());
      us.push_back(us_since(t0));
      const Token next = i < paths[p].size() ? paths[p][i] : end_token;
      if (!c.accept_token(next)) break;
    }
  }
  return summarize(std::move(us));
}

// Times the sampler adapter's apply() on a full id-ordered candidate array.
Timing apply_timing(llama_sampler* smpl, lacuna::Constraint& c,
                    const std::vector<std::vector<Token>>& paths, Token end_token, size_t n_vocab,
                    size_t max_paths) {
  std::vector<llama_token_data> cur(n_vocab);
  std::vector<double> us;
  for (size_t p = 0; p < paths.size() && p < max_paths; ++p) {
    llama_sampler_reset(smpl);
    for (size_t i = 0; i <= paths[p].size(); ++i) {
      for (size_t t = 0; t < n_vocab; ++t) {
        cur[t] = {static_cast<Token>(t), static_cast<float>(t % 97) * 0.01f, 0.0f};
      }
      llama_token_data_array cp{cur.data(), cur.size(), -1, false};
      const auto t0 = Clock::now();
      llama_sampler_apply(smpl, &cp);
      us.push_back(us_since(t0));
      const Token next = i < paths[p].size() ? paths[p][i] : end_token;
      if (!c.accept_token(next)) break;
    }
  }
  return summarize(std::move(us));
}

struct GenStats {
  std::vector<Token> tokens;
  int forward = 0;
  double seconds = 0;
};

// Greedy generation with `smpl` (a constraint sampler with a greedy selector). skip: forced
// tokens are accepted without a forward pass and decoded together with the next one.
GenStats generate(lacuna::Context& ctx, llama_sampler* smpl, const std::vector<Token>& prompt,
                  bool skip) {
  GenStats st;
  lacuna::Constraint* c = lacuna::sampler_constraint(smpl);
  llama_sampler_reset(smpl);
  ctx.clear_memory();
  lacuna::Batch batch(static_cast<int32_t>(ctx.n_batch()));
  std::vector<Token> pending = prompt;
  std::vector<Token> forced;
  lacuna::Pos pos = 0;
  bool first = true;
  const auto t0 = Clock::now();
  Clock::time_point t_first;
  while (!c->is_terminated() && st.tokens.size() < 256) {
    if (skip) {
      forced.clear();
      c->forced_tokens(forced);
      for (Token t : forced) {
        llama_sampler_accept(smpl, t);
        st.tokens.push_back(t);
        pending.push_back(t);
      }
      if (c->is_terminated()) break;
    }
    batch.clear();
    for (size_t i = 0; i < pending.size(); ++i)
      batch.add(pending[i], pos++, 0, i + 1 == pending.size());
    ctx.decode(batch);
    if (first) {
      t_first = Clock::now();
      first = false;
    } else {
      ++st.forward;
    }
    const Token t = llama_sampler_sample(smpl, ctx.get(), -1);
    st.tokens.push_back(t);
    pending.assign(1, t);
  }
  (void)t_first;
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();  // prompt included
  return st;
}

}  // namespace

LACUNA_COMMAND(cmd_bench_trie, "bench-trie",
               "token trie vs equivalent grammar: build, cache, mask time, forward passes") {
  std::string model_path;
  std::string vocab_path = std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-llama-bpe.gguf";
  std::vector<size_t> sizes = {30, 300, 3000};
  size_t reps = 20;
  size_t max_paths = 300;
  int32_t threads = 2;
  bool json_out = false;
  bool no_grammar = false;
  CLI::App app{"Benchmark the token trie against the equivalent grammar.", "lacuna bench trie"};
  app.add_option("-m,--model", model_path, "GGUF model: also measure decoding");
  app.add_option("--vocab", vocab_path,
                 "vocab-only GGUF when no model is given (default llama-bpe)");
  app.add_option("--sizes", sizes, "leaf-set sizes (default 30 300 3000)")->delimiter(',');
  app.add_option("--reps", reps, "repetitions for build timings (default 20)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--paths", max_paths, "names walked for mask timings (default 300)");
  app.add_option("--threads", threads, "CPU threads for decoding (default 2)");
  app.add_flag("--json", json_out, "print one JSON object");
  app.add_flag("--no-grammar", no_grammar, "skip the grammar side");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;

  const bool with_model = !model_path.empty();
  lacuna::ModelParams mp;
  mp.vocab_only = !with_model;
  const lacuna::Model model = lacuna::Model::load(with_model ? model_path : vocab_path, mp);
  const lacuna::Vocab vocab = model.vocab();
  const auto n_vocab = static_cast<size_t>(vocab.n_vocab());
  const Token eos = vocab.eos();
  std::vector<Token> end_tokens;
  for (Token t : {vocab.eos(), vocab.eot()}) {
    if (t != LLAMA_TOKEN_NULL &&
        std::find(end_tokens.begin(), end_tokens.end(), t) == end_tokens.end()) {
      end_tokens.push_back(t);
    }
  }

  nlohmann::json out;
  out["bench"] = "trie";
  out["model"] = with_model ? model_path : vocab_path;
  out["n_vocab"] = n_vocab;

  std::shared_ptr<const lacuna::TokenIndex> index;
  if (!no_grammar) {
    const auto t0 = Clock::now();
    index = lacuna::TokenIndex::build(vocab.get());
    out["token_index_build_ms"] = us_since(t0) / 1000.0;
  }

  std::unique_ptr<lacuna::Context> ctx;
  if (with_model) {
    lacuna::ContextParams cp;
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = threads;
    ctx = std::make_unique<lacuna::Context>(lacuna::Context::create(model, cp));
  }
  const std::vector<std::string> prompts = {"Choose the next action:", "The assistant calls",
                                            "Tool:", "Next step ->"};

  for (size_t n : sizes) {
    nlohmann::json r;
    r["leaves"] = n;
    const auto names = make_names(n);
    std::vector<std::vector<Token>> paths;
    size_t total_tokens = 0;
    for (const auto& name : names) {
      paths.push_back(lacuna::tokenize(vocab, name, false, false));
      total_tokens += paths.back().size();
    }
    r["tokens_per_leaf"] = static_cast<double>(total_tokens) / static_cast<double>(n);
    const std::string payload = make_payload(names, paths);
    r["payload_bytes"] = payload.size();

    // ---- trie: cold build (parse + build), cache hit, memory
    std::vector<double> cold;
    std::shared_ptr<const lacuna::TrieSet> set;
    for (size_t i = 0; i < reps; ++i) {
      const auto t0 = Clock::now();
      set = lacuna::build_trie_set(payload, n_vocab);
      cold.push_back(us_since(t0));
    }
    lacuna::TrieCache cache;
    cache.get(payload, n_vocab);
    std::vector<double> hit;
    for (size_t i = 0; i < reps * 10; ++i) {
      const auto t0 = Clock::now();
      auto s = cache.get(payload, n_vocab);
      hit.push_back(us_since(t0));
    }
    nlohmann::json trie;
    trie["build_cold_us"] = to_json(summarize(cold));
    trie["cache_hit_us"] = to_json(summarize(hit));
    trie["cache_parses"] = cache.stats().parses;
    trie["memory_bytes"] = set->memory_bytes();
    trie["nodes"] = set->tries[0]->n_nodes();
    trie["max_depth"] = set->tries[0]->max_depth();
    lacuna::TrieOptions topt;
    topt.end_tokens = end_tokens;
    auto trie_c = std::make_unique<lacuna::TokenTrieConstraint>(set, topt);
    trie["mask_us_per_step"] = to_json(mask_timing(*trie_c, paths, eos, max_paths));
    {
      lacuna::Constraint* raw = trie_c.get();
      llama_sampler* smpl = lacuna::make_constraint_sampler(raw->fork());
      trie["apply_full_vocab_us_per_step"] = to_json(
          apply_timing(smpl, *lacuna::sampler_constraint(smpl), paths, eos, n_vocab, max_paths));
      llama_sampler_free(smpl);
    }
    // Forced-token skipping potential over all names: branching steps vs tokens.
    size_t branch_steps = 0, steps = 0;
    for (const auto& p : paths) {
      trie_c->reset();
      for (size_t i = 0; i <= p.size(); ++i) {
        if (trie_c->allowed_tokens().size > 1) ++branch_steps;
        ++steps;
        if (!trie_c->accept_token(i < p.size() ? p[i] : eos)) break;
      }
    }
    trie["steps_per_leaf"] = static_cast<double>(steps) / static_cast<double>(n);
    trie["branching_steps_per_leaf"] = static_cast<double>(branch_steps) / static_cast<double>(n);
    trie["skip_ratio_all_leaves"] =
        1.0 - static_cast<double>(branch_steps) / static_cast<double>(steps);

    // ---- grammar: the same names as an alternation
    nlohmann::json gram;
    std::shared_ptr<const lacuna::CompiledGrammar> compiled;
    if (!no_grammar) {
      try {
        const std::string gbnf = make_gbnf(names);
        std::vector<double> gcold;
        for (size_t i = 0; i < std::min<size_t>(reps, 3); ++i) {
          const auto t0 = Clock::now();
          compiled = lacuna::CompiledGrammar::compile(lacuna::parse_gbnf(gbnf), index);
          gcold.push_back(us_since(t0));
        }
        gram["build_cold_us"] = to_json(summarize(gcold));
        gram["memory_bytes"] = compiled->memory_bytes();
        lacuna::GrammarMatcher gm(compiled);
        gram["mask_us_per_step"] = to_json(mask_timing(gm, paths, eos, max_paths));
      } catch (const std::exception& e) {
        gram["error"] = e.what();
        compiled.reset();
      }
    }

    // ---- decoding with a model
    if (with_model) {
      const auto make = [&](bool grammar) -> llama_sampler* {
        lacuna::ConstraintSamplerParams sp;
        sp.selector = lacuna::Selector::kGreedy;
        if (grammar)
          return lacuna::make_constraint_sampler(std::make_unique<lacuna::GrammarMatcher>(compiled),
                                                 sp);
        return lacuna::make_constraint_sampler(trie_c->fork(), sp);
      };
      size_t fwd_skip = 0, fwd_plain = 0, toks = 0, agree = 0, compared = 0, branching = 0;
      size_t g_fwd = 0, g_toks = 0, g_same_text = 0;
      double sec_skip = 0, sec_plain = 0, g_sec = 0;
      trie_c->reset();
      llama_sampler* ts = make(false);
      // Warm-up (graph allocation on the first decodes) outside the measurements.
      generate(*ctx, ts, lacuna::tokenize(vocab, prompts[0], true, false), false);
      for (const auto& prompt : prompts) {
        const auto ptoks = lacuna::tokenize(vocab, prompt, true, false);
        const GenStats a = generate(*ctx, ts, ptoks, true);
        const GenStats b = generate(*ctx, ts, ptoks, false);
        fwd_skip += static_cast<size_t>(a.forward) + 1;
        auto walk = trie_c->fork();
        for (Token t : a.tokens) {
          if (static_cast<lacuna::TokenTrieConstraint&>(*walk).allowed_tokens().size > 1)
            ++branching;
          walk->accept_token(t);
        }
        fwd_plain += static_cast<size_t>(b.forward) + 1;
        toks += a.tokens.size();
        sec_skip += a.seconds;
        sec_plain += b.seconds;
        for (size_t i = 0; i < std::max(a.tokens.size(), b.tokens.size()); ++i) {
          ++compared;
          if (i < a.tokens.size() && i < b.tokens.size() && a.tokens[i] == b.tokens[i]) ++agree;
        }
        if (compiled) {
          llama_sampler* gs = make(true);
          const GenStats g = generate(*ctx, gs, ptoks, true);
          g_fwd += static_cast<size_t>(g.forward) + 1;
          g_toks += g.tokens.size();
          g_sec += g.seconds;
          std::vector<Token> gb(g.tokens.begin(), g.tokens.end() - (g.tokens.empty() ? 0 : 1));
          std::vector<Token> ab(a.tokens.begin(), a.tokens.end() - (a.tokens.empty() ? 0 : 1));
          if (lacuna::detokenize(vocab, gb) == lacuna::detokenize(vocab, ab)) ++g_same_text;
          llama_sampler_free(gs);
        }
      }
      llama_sampler_free(ts);
      nlohmann::json d;
      d["prompts"] = prompts.size();
      d["tokens"] = toks;
      d["forward_passes_skip"] = fwd_skip;
      d["forward_passes_plain"] = fwd_plain;
      d["branching_steps_on_chosen_paths"] = branching;
      d["skip_ratio"] = 1.0 - static_cast<double>(fwd_skip) / static_cast<double>(toks);
      d["decode_tok_per_s_skip"] = static_cast<double>(toks) / std::max(sec_skip, 1e-9);
      d["decode_tok_per_s_plain"] = static_cast<double>(toks) / std::max(sec_plain, 1e-9);
      d["token_agreement_skip_vs_plain"] =
          compared ? static_cast<double>(agree) / static_cast<double>(compared) : 1.0;
      trie["decode"] = d;
      if (compiled) {
        nlohmann::json gd;
        gd["tokens"] = g_toks;
        gd["forward_passes_skip"] = g_fwd;
        gd["decode_tok_per_s_skip"] = static_cast<double>(g_toks) / std::max(g_sec, 1e-9);
        gd["same_text_as_trie"] =
            static_cast<double>(g_same_text) / static_cast<double>(prompts.size());
        gram["decode"] = gd;
      }
    }
    r["trie"] = trie;
    if (!no_grammar) r["grammar"] = gram;
    out["results"].push_back(r);
    if (!json_out) {
      std::printf(
          "leaves %5zu  trie: build %8.1f us  hit %6.2f us  mem %8zu B  mask %.3f us/step (p99 "
          "%.3f)  apply %.1f us/step\n",
          n, trie["build_cold_us"]["p50"].get<double>(), trie["cache_hit_us"]["p50"].get<double>(),
          set->memory_bytes(), trie["mask_us_per_step"]["mean"].get<double>(),
          trie["mask_us_per_step"]["p99"].get<double>(),
          trie["apply_full_vocab_us_per_step"]["mean"].get<double>());
      if (gram.contains("mask_us_per_step")) {
        std::printf(
            "              grammar: build %8.1f us  mem %8zu B  mask %.3f us/step (p99 %.3f)\n",
            gram["build_cold_us"]["p50"].get<double>(), gram["memory_bytes"].get<size_t>(),
            gram["mask_us_per_step"]["mean"].get<double>(),
            gram["mask_us_per_step"]["p99"].get<double>());
      } else if (gram.contains("error")) {
        std::printf("              grammar: error: %s\n", gram["error"].get<std::string>().c_str());
      }
      if (trie.contains("decode"))
        std::printf("              decode: %s\n", trie["decode"].dump().c_str());
      if (gram.contains("decode"))
        std::printf("              grammar decode: %s\n", gram["decode"].dump().c_str());
    }
  }
  if (json_out) std::cout << out.dump(2) << "\n";
  return 0;
}
