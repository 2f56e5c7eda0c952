// test_backend_sampling.cpp — exactness of backend sampling (the constraint's bitmask applied
// inside llama.cpp's graph, CPU backend of ggml): on the three tiny vocabularies, with a
// grammar, a JSON Schema, a token trie and a lazy grammar, the greedy tokens equal the CPU
// path's (the llama_sampler adapter in a llama.cpp loop, and the Generator with skipping and
// drafts); with temperature and a seed the backend path is deterministic and its output
// distribution matches the CPU path's (chi-square).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chi_square.h"
#include "decode/constraint_factory.h"
#include "generator_fixtures.h"
#include "kv_test_util.h"
#include "lacuna/generator.h"
#include "lacuna/runtime.h"
#include "lacuna/sampler.h"
#include "lacuna/token_trie.h"
#include "llama/backend_mask.h"

namespace lacuna {
namespace {

using testing::ContextHandle;
using testing::ModelHandle;
using testing::SamplerHandle;

const char* const kModels[] = {"tiny-llama3", "tiny-spm", "tiny-qwen2"};

ContextHandle make_ctx(llama_model* model, uint32_t outputs_per_seq) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 128;
  cp.n_ubatch = 128;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.no_perf = true;
  cp.n_outputs_max_per_seq = outputs_per_seq;
  return ContextHandle(llama_init_from_model(model, cp));
}

const std::vector<std::string> kChoices = {
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
    "{\"name\": \"search\", \"arguments\": {\"query\": \"cheap flights\"}}", "yes", "no"};

const char* const kSchema =
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]})";

struct Case {
  std::string name;
  std::function<std::unique_ptr<Constraint>(const llama_vocab*)> make;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"grammar", [](const llama_vocab* v) {
                 return decode::make_grammar_constraint(v, testing::string_set_gbnf(kChoices));
               }});
  c.push_back({"schema", [](const llama_vocab* v) {
                 return decode::make_schema_constraint(v, kSchema, false);
               }});
  c.push_back({"trie", [](const llama_vocab* v) -> std::unique_ptr<Constraint> {
                 nlohmann::json leaves = nlohmann::json::array();
                 for (const char* n : {"REPLY_ALL", "SEARCH_WEB", "SEND_EMAIL", "SEARCH_MAIL"}) {
                   const auto toks = testing::tokenize(v, n, false);
                   leaves.push_back({{"name", n}, {"tokens", toks}});
                 }
                 nlohmann::json j = {{"modelId", "tiny"},
                                     {"descriptors", {{{"path", "action"}, {"leaves", leaves}}}}};
                 const auto n_vocab = static_cast<size_t>(llama_vocab_n_tokens(v));
                 TrieOptions opt;
                 opt.piece = vocab_piece_fn(v);
                 return std::make_unique<TokenTrieConstraint>(build_trie_set(j.dump(), n_vocab),
                                                              opt, "action");
               }});
  // Unconstrained until the model writes the trigger (a common piece, so that it fires).
  c.push_back({"lazy", [](const llama_vocab* v) {
                 return decode::make_grammar_constraint(v, testing::string_set_gbnf(kChoices),
                                                        {"e"});
               }});
  return c;
}

const char* const kPrompts[] = {"Call a tool for the user:", "Q: is it raining?\nA:"};

// ---- the llama_sampler adapter in llama.cpp's own loop -------------------------------------

// Greedy (or seeded) tokens of llama.cpp's loop over `chain` (one decode per token), with the
// chain attached to the context as its backend sampler when `backend`.
std::vector<Token> adapter_loop(llama_context* ctx, llama_sampler* chain, bool backend,
                                const std::vector<Token>& prompt, Constraint* c) {
  llama_memory_clear(llama_get_memory(ctx), true);
  if (backend) {
    EXPECT_TRUE(llama_set_sampler(ctx, 0, chain));
  }
  std::vector<Token> out;
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  std::vector<Token> next = prompt;
  for (int i = 0; i < 40; ++i) {
    llama_batch b = llama_batch_get_one(next.data(), static_cast<int32_t>(next.size()));
    if (llama_decode(ctx, b) != 0) {
      ADD_FAILURE() << "decode failed";
      break;
    }
    const Token t = llama_sampler_sample(chain, ctx, -1);
    out.push_back(t);
    if (llama_vocab_is_eog(vocab, t) || c->is_terminated()) break;
    next.assign(1, t);
  }
  if (backend) llama_set_sampler(ctx, 0, nullptr);
  return out;
}

TEST(BackendSampling, AdapterGreedyTokensEqualTheCpuPath) {
  for (const char* model_name : kModels) {
    SCOPED_TRACE(model_name);
    ModelHandle model = testing::load_model(model_name);
    ASSERT_NE(model, nullptr);
    const llama_vocab* vocab = llama_model_get_vocab(model.get());
    ContextHandle cpu = make_ctx(model.get(), 1);
    ContextHandle gpu = make_ctx(model.get(), 1);
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(gpu, nullptr);
    for (const Case& k : cases()) {
      for (const char* p : kPrompts) {
        SCOPED_TRACE(k.name + std::string(" / ") + p);
        const auto prompt = testing::tokenize(vocab, p, true);
        auto make_chain = [&](Selector sel) {
          llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
          ConstraintSamplerParams sp;
          sp.selector = sel;
          llama_sampler_chain_add(chain, make_constraint_sampler(k.make(vocab), sp));
          if (sel == Selector::kNone) llama_sampler_chain_add(chain, llama_sampler_init_greedy());
          return SamplerHandle(chain);
        };
        // Mask, then llama.cpp's greedy; and the adapter's own greedy selector (an argmax in
        // the graph).
        for (Selector sel : {Selector::kNone, Selector::kGreedy}) {
          SamplerHandle a = make_chain(sel);
          SamplerHandle b = make_chain(sel);
          const auto before = backend::upload_counters();
          const auto want =
              adapter_loop(cpu.get(), a.get(), false, prompt, sampler_constraint(a.get()));
          const auto got =
              adapter_loop(gpu.get(), b.get(), true, prompt, sampler_constraint(b.get()));
          const auto after = backend::upload_counters();
          EXPECT_EQ(got, want);
          EXPECT_GE(after.uploads - before.uploads, got.size()) << "the mask ran on the CPU";
          // A lazy trigger inside a token the grammar refuses is a refused accept on both paths.
          EXPECT_EQ(constraint_sampler_status(b.get()).refused_accepts,
                    constraint_sampler_status(a.get()).refused_accepts);
        }
      }
    }
  }
}

// The adapter before llama.cpp's top-k, temperature and dist, all in the graph: the same seed
// gives the same tokens, and every token is one the constraint allows (no refused accept).
TEST(BackendSampling, AdapterWithTemperatureIsDeterministicAndConstrained) {
  ModelHandle model = testing::load_model("tiny-spm");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = make_ctx(model.get(), 1);
  const auto prompt = testing::tokenize(vocab, kPrompts[0], true);
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    for (uint32_t seed : {11u, 12u}) {
      std::vector<Token> runs[2];
      for (auto& out : runs) {
        SamplerHandle chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
        llama_sampler_chain_add(chain.get(), make_constraint_sampler(k.make(vocab)));
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(40));
        llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(0.9f));
        llama_sampler_chain_add(chain.get(), llama_sampler_init_dist(seed));
        out = adapter_loop(ctx.get(), chain.get(), true, prompt, sampler_constraint(chain.get()));
        const auto st = constraint_sampler_status(chain.get());
        if (k.name != "lazy") {
          EXPECT_EQ(st.refused_accepts, 0u);
        }
        EXPECT_EQ(st.empty_masks, 0u);
      }
      EXPECT_FALSE(runs[0].empty());
      EXPECT_EQ(runs[0], runs[1]) << "seed " << seed;
    }
  }
}

// Two outputs per sequence: the adapter cannot know the second row's mask, so its backend
// form refuses and the chain samples on the CPU, with the same tokens.
TEST(BackendSampling, AdapterRefusesSeveralOutputsPerSequence) {
  ModelHandle model = testing::load_model("tiny-llama3");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle cpu = make_ctx(model.get(), 1);
  ContextHandle multi = make_ctx(model.get(), 4);
  const auto prompt = testing::tokenize(vocab, kPrompts[0], true);
  const Case k = cases()[0];
  auto chain = [&] {
    llama_sampler* ch = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(ch, make_constraint_sampler(k.make(vocab)));
    llama_sampler_chain_add(ch, llama_sampler_init_greedy());
    return SamplerHandle(ch);
  };
  SamplerHandle a = chain();
  SamplerHandle b = chain();
  const auto before = backend::upload_counters();
  const auto want = adapter_loop(cpu.get(), a.get(), false, prompt, sampler_constraint(a.get()));
  const auto got = adapter_loop(multi.get(), b.get(), true, prompt, sampler_constraint(b.get()));
  EXPECT_EQ(backend::upload_counters().uploads, before.uploads);
  EXPECT_EQ(got, want);
}

// ---- the Generator ----------------------------------------------------------------------

struct GenRun {
  std::vector<Token> tokens;
  GenerationStats stats;
  bool backend = false;
};

GenRun run_generator(llama_context* ctx, const Case& k, const std::vector<Token>& prompt,
                     bool backend, float temp, uint32_t seed, bool drafts,
                     const std::function<void(DecodeOptions&)>& tweak = {}) {
  llama_memory_clear(llama_get_memory(ctx), true);
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  GeneratorConfig cfg;
  cfg.max_tokens = 48;
  cfg.temp = temp;
  cfg.seed = seed;
  cfg.decode.skip_forced = true;
  cfg.decode.verify_strings = drafts;
  cfg.decode.draft_policy = DraftPolicy::always;
  cfg.decode.backend_sampling = backend;
  if (tweak) tweak(cfg.decode);
  Generator gen(ctx, cfg, k.make(vocab));
  gen.prefill(prompt);
  gen.generate();
  return {gen.tokens(), gen.stats(), gen.backend_sampling()};
}

TEST(BackendSampling, GeneratorGreedyTokensEqualTheCpuPath) {
  size_t drafted = 0;
  for (const char* model_name : kModels) {
    SCOPED_TRACE(model_name);
    ModelHandle model = testing::load_model(model_name);
    ASSERT_NE(model, nullptr);
    const llama_vocab* vocab = llama_model_get_vocab(model.get());
    // 17 outputs per sequence: drafts of up to 16 tokens are verified in the graph.
    ContextHandle ctx = make_ctx(model.get(), 17);
    ASSERT_NE(ctx, nullptr);
    for (const Case& k : cases()) {
      for (const char* p : kPrompts) {
        SCOPED_TRACE(k.name + std::string(" / ") + p);
        const auto prompt = testing::tokenize(vocab, p, true);
        for (bool drafts : {false, true}) {
          const GenRun want = run_generator(ctx.get(), k, prompt, false, 0.0f, 0, drafts);
          const GenRun got = run_generator(ctx.get(), k, prompt, true, 0.0f, 0, drafts);
          EXPECT_TRUE(got.backend);
          EXPECT_FALSE(want.backend);
          EXPECT_EQ(got.tokens, want.tokens) << "drafts " << drafts;
          EXPECT_EQ(got.stats.stop, want.stats.stop);
          EXPECT_EQ(got.stats.tokens_skipped, want.stats.tokens_skipped);
          drafted += got.stats.draft_proposed;
          EXPECT_EQ(got.stats.draft_proposed, want.stats.draft_proposed);
        }
      }
    }
  }
  // (tiny-spm's tokenizer gives no canonical draft for these strings, on either path.)
  EXPECT_GT(drafted, 0u) << "no draft was verified in the graph";
}

// runtime::Context (the path of lacuna run, the C ABI, Node and the server) makes its
// llama_context with room for a draft's rows per sequence when backend sampling is on, so
// drafts are verified in the graph there too, with the CPU path's tokens.
TEST(BackendSampling, RuntimeContextVerifiesDraftsInTheGraph) {
  size_t drafted = 0;
  for (const char* model_name : {"tiny-llama3", "tiny-qwen2"}) {
    SCOPED_TRACE(model_name);
    const lacuna::Model model = kvtest::load(model_name);
    for (const Case& k : cases()) {
      SCOPED_TRACE(k.name);
      const auto prompt = testing::tokenize(model.vocab_ptr(), kPrompts[1], true);
      GenRun runs[2];
      for (bool backend : {false, true}) {
        lacuna::runtime::ContextParams cp;
        cp.n_ctx = 512;
        cp.n_batch = 128;
        cp.n_ubatch = 128;
        cp.n_branches = 2;
        cp.n_threads = 1;
        cp.n_threads_batch = 1;
        cp.kv = lacuna::kv::KvConfig{};
        cp.kv.prefix_cache = false;
        cp.decode = DecodeOptions{};
        cp.decode.skip_forced = true;
        cp.decode.verify_strings = true;
        cp.decode.draft_policy = DraftPolicy::always;
        cp.decode.backend_sampling = backend;
        lacuna::runtime::Context ctx(model, cp);
        lacuna::runtime::BranchParams bp;
        bp.max_tokens = 48;
        lacuna::runtime::Branch b = ctx.create_branch(bp);
        b.set_constraint(k.make(model.vocab_ptr()));
        b.prefill(prompt);
        b.generate();
        runs[backend] = {b.generator().tokens(), b.generator().stats(),
                         b.generator().backend_sampling()};
      }
      EXPECT_FALSE(runs[0].backend);
      EXPECT_TRUE(runs[1].backend);
      EXPECT_EQ(runs[1].tokens, runs[0].tokens);
      EXPECT_EQ(runs[1].stats.draft_proposed, runs[0].stats.draft_proposed);
      EXPECT_EQ(runs[1].stats.forward_passes, runs[0].stats.forward_passes);
      drafted += runs[1].stats.draft_proposed;
    }
  }
  EXPECT_GT(drafted, 0u) << "no draft was verified in the graph of a runtime::Context";
}

TEST(BackendSampling, GeneratorWithTemperatureIsDeterministic) {
  ModelHandle model = testing::load_model("tiny-qwen2");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = make_ctx(model.get(), 17);
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    const auto prompt = testing::tokenize(vocab, kPrompts[1], true);
    for (uint32_t seed : {1u, 7u, 42u}) {
      const GenRun a = run_generator(ctx.get(), k, prompt, true, 0.9f, seed, true);
      const GenRun b = run_generator(ctx.get(), k, prompt, true, 0.9f, seed, true);
      EXPECT_TRUE(a.backend);
      EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
    }
  }
}

// A fork (another sequence, the KV copied) gets its own chain, attached to its sequence, with
// the constraint's state: both continue as on the CPU path.
TEST(BackendSampling, ForkedGeneratorsContinueAsOnTheCpuPath) {
  ModelHandle model = testing::load_model("tiny-llama3");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 128;
  cp.n_ubatch = 128;
  cp.n_seq_max = 2;
  cp.kv_unified = true;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  ContextHandle ctx(llama_init_from_model(model.get(), cp));
  ASSERT_NE(ctx, nullptr);
  const auto prompt = testing::tokenize(vocab, kPrompts[0], true);
  auto run = [&](bool backend) {
    llama_memory_clear(llama_get_memory(ctx.get()), true);
    GeneratorConfig cfg;
    cfg.max_tokens = 40;
    cfg.decode.backend_sampling = backend;
    Generator a(ctx.get(), cfg, cases()[1].make(vocab));
    a.prefill(prompt);
    for (int i = 0; i < 3 && !a.done(); ++i) a.next();
    llama_memory_seq_cp(llama_get_memory(ctx.get()), 0, 1, -1, -1);
    std::unique_ptr<Generator> b = a.fork(1);
    EXPECT_EQ(b->backend_sampling(), backend);
    a.generate();
    b->generate();
    return std::make_pair(a.tokens(), b->tokens());
  };
  const auto want = run(false);
  const auto got = run(true);
  EXPECT_EQ(got.first, want.first);
  EXPECT_EQ(got.second, want.second);
  EXPECT_EQ(got.first, got.second);  // greedy: the fork continues exactly as its parent
}

// Logit bias runs in the graph too (a new chain when it changes); surprisal tracking needs the
// logits on the host, so it detaches the chain (with a notice) and samples on the CPU.
TEST(BackendSampling, LogitBiasInTheGraphAndCpuFallback) {
  ModelHandle model = testing::load_model("tiny-qwen2");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = make_ctx(model.get(), 1);
  const auto prompt = testing::tokenize(vocab, kPrompts[1], true);
  const auto biased = testing::tokenize(vocab, " \"", false);
  ASSERT_FALSE(biased.empty());
  auto run = [&](bool backend, bool surprisal) {
    llama_memory_clear(llama_get_memory(ctx.get()), true);
    GeneratorConfig cfg;
    cfg.max_tokens = 40;
    cfg.decode.backend_sampling = backend;
    Generator g(ctx.get(), cfg, cases()[1].make(vocab));
    g.set_logit_bias({{biased[0], 4.0f}, {biased.back(), -2.5f}});
    if (surprisal) g.set_track_surprisal(true);
    const bool on = g.backend_sampling();
    g.prefill(prompt);
    g.generate();
    return std::make_pair(g.tokens(), on);
  };
  const auto want = run(false, false);
  const auto got = run(true, false);
  EXPECT_TRUE(got.second);
  EXPECT_EQ(got.first, want.first);
  const auto fallback = run(true, true);
  EXPECT_FALSE(fallback.second);
  EXPECT_EQ(fallback.first, want.first);
}

// The mask computed on a worker thread during the pass (no skipping: every position's mask is
// needed only after its pass): the same tokens, and the masks did run there.
TEST(BackendSampling, OverlappedMaskGivesTheSameTokens) {
  for (const char* model_name : kModels) {
    SCOPED_TRACE(model_name);
    ModelHandle model = testing::load_model(model_name);
    ASSERT_NE(model, nullptr);
    const llama_vocab* vocab = llama_model_get_vocab(model.get());
    ContextHandle ctx = make_ctx(model.get(), 1);
    for (const Case& k : cases()) {
      SCOPED_TRACE(k.name);
      const auto prompt = testing::tokenize(vocab, kPrompts[0], true);
      for (float temp : {0.0f, 0.8f}) {
        auto plain = [](DecodeOptions& o) { o.skip_forced = false; };
        auto overlap = [](DecodeOptions& o) {
          o.skip_forced = false;
          o.overlap_mask = true;
        };
        const GenRun want = run_generator(ctx.get(), k, prompt, false, temp, 3, false, plain);
        const GenRun got = run_generator(ctx.get(), k, prompt, false, temp, 3, false, overlap);
        EXPECT_EQ(got.tokens, want.tokens) << "temp " << temp;
        EXPECT_GT(got.stats.mask_overlapped_ms, 0.0);
        EXPECT_EQ(want.stats.mask_overlapped_ms, 0.0);
      }
    }
  }
}

using lacuna::testing::chi_square;
using lacuna::testing::chi_square_critical_999;

TEST(BackendSampling, DistributionMatchesTheCpuPath) {
  ModelHandle model = testing::load_model("tiny-spm");
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  ContextHandle ctx = make_ctx(model.get(), 17);
  const auto prompt = testing::tokenize(vocab, "Weather:", true);
  const Case k = cases()[0];  // the grammar: a choice, then forced strings
  auto category = [](const std::vector<Token>& toks) {
    std::string key;
    for (size_t i = 0; i < toks.size() && i < 3; ++i) key += std::to_string(toks[i]) + ",";
    return key;
  };
  std::map<std::string, int> cpu;
  std::map<std::string, int> graph;
  const int n = 300;
  for (int seed = 0; seed < n; ++seed) {
    cpu[category(run_generator(ctx.get(), k, prompt, false, 1.0f, 1000u + seed, true).tokens)]++;
    graph[category(run_generator(ctx.get(), k, prompt, true, 1.0f, 5000u + seed, true).tokens)]++;
  }
  const auto [stat, df] = chi_square(cpu, graph, 10);
  ASSERT_GE(df, 2) << "too few categories for a meaningful test";
  EXPECT_LT(stat, chi_square_critical_999(df)) << "df " << df;
}

}  // namespace
}  // namespace lacuna
