// test_matcher_threads.cpp — one CompiledGrammar (and TokenIndex) shared by several threads,
// each with its own matcher and forks; masks must equal the single-threaded ones. Run under
// ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/token_index.h"
#include "llama.h"

using namespace lacuna;

namespace {

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The llama-bpe vocabulary, vocab only (null when missing).
llama_model* load_bpe_vocab() {
  llama_backend_init();
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  std::string path = std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-llama-bpe.gguf";
  return llama_model_load_from_file(path.c_str(), mp);
}

std::vector<llama_token> tokenize_text(const llama_vocab* vocab, const std::string& text) {
  std::vector<llama_token> toks(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), toks.data(),
                             static_cast<int32_t>(toks.size()), false, false);
  toks.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return toks;
}

// The masks before each token of the walk, single-threaded (empty if the walk is refused).
std::vector<std::vector<uint32_t>> reference_masks(std::shared_ptr<const CompiledGrammar> cg,
                                                   const std::vector<llama_token>& toks) {
  const size_t words = bitmask_words(cg->n_vocab());
  std::vector<std::vector<uint32_t>> ref;
  GrammarMatcher m(std::move(cg));
  for (Token t : toks) {
    std::vector<uint32_t> w(words);
    m.fill_next_token_bitmask(w.data());
    ref.push_back(w);
    if (!m.accept_token(t)) return {};
  }
  if (!m.is_completed()) return {};
  return ref;
}

}  // namespace

TEST(MatcherThreads, SharedCompiledGrammarManyMatchers) {
  llama_model* model = load_bpe_vocab();
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  auto index = TokenIndex::build(vocab);
  auto cg = CompiledGrammar::compile(
      parse_gbnf(read_file(std::string(LACUNA_LLAMA_SRC_DIR) + "/grammars/json.gbnf")), index);

  const std::vector<llama_token> toks = tokenize_text(
      vocab,
      R"({"name": "Zoë", "n": [1, -2.5, 3e+7], "ok": true, "s": "a\"b\\c\u00e9", "o": {"k": null}})");
  ASSERT_FALSE(toks.empty());
  const size_t words = bitmask_words(index->n_vocab());
  const std::vector<std::vector<uint32_t>> ref = reference_masks(cg, toks);
  ASSERT_EQ(ref.size(), toks.size());

  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      GrammarMatcher m(cg);
      std::vector<uint32_t> w(words);
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < toks.size(); ++i) {
          m.fill_next_token_bitmask(w.data());
          if (w != ref[i]) ++mismatches[th];
          // Forks move between steps too, and a forked copy must agree.
          if ((i + static_cast<size_t>(th)) % 7 == 0) {
            auto f = m.fork();
            std::vector<uint32_t> w2(words);
            f->fill_next_token_bitmask(w2.data());
            if (w2 != ref[i]) ++mismatches[th];
          }
          if (!m.accept_token(toks[i])) ++mismatches[th];
        }
        if (!m.is_completed()) ++mismatches[th];
        m.reset();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int th = 0; th < kThreads; ++th) EXPECT_EQ(mismatches[th], 0) << "thread " << th;
  llama_model_free(model);
}

// Masks computed on first use: several threads reach the same uncomputed contexts at once;
// each mask is computed once, published safely, and equals the one computed at compile time.
TEST(MatcherThreads, LazyMasksComputedConcurrently) {
  llama_model* model = load_bpe_vocab();
  ASSERT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  auto index = TokenIndex::build(vocab);
  const Grammar g = parse_gbnf(R"(root ::= "{" ws "\"k\":" ws str ("," ws str)* ws "}"
str ::= "\"" [^"\\]{0,12} "\""
ws ::= [ \t\n]{0,4})");
  CompileOptions eager;
  eager.eager_ms = -1;
  CompileOptions lazy;
  lazy.eager_ms = 0;
  auto cg_eager = CompiledGrammar::compile(g, index, eager);
  auto cg_lazy = CompiledGrammar::compile(g, index, lazy);
  EXPECT_EQ(cg_eager->n_contexts_computed(), cg_eager->n_contexts());
  EXPECT_EQ(cg_lazy->n_contexts_computed(), 0u);

  const std::vector<llama_token> toks = tokenize_text(vocab, R"({ "k": "hello wor", "abc",  "x"})");
  ASSERT_FALSE(toks.empty());
  const size_t words = bitmask_words(index->n_vocab());
  const std::vector<std::vector<uint32_t>> ref = reference_masks(cg_eager, toks);
  ASSERT_EQ(ref.size(), toks.size());
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      GrammarMatcher m(cg_lazy);
      std::vector<uint32_t> w(words);
      for (size_t i = 0; i < toks.size(); ++i) {
        m.fill_next_token_bitmask(w.data());
        if (w != ref[i]) ++mismatches[th];
        if (!m.accept_token(toks[i])) ++mismatches[th];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int th = 0; th < kThreads; ++th) EXPECT_EQ(mismatches[th], 0) << "thread " << th;
  EXPECT_GT(cg_lazy->n_contexts_computed(), 0u);
  EXPECT_LE(cg_lazy->n_contexts_computed(), cg_lazy->n_contexts());
  llama_model_free(model);
}
