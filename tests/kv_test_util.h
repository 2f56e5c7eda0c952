// kv_test_util.h — helpers shared by the KV reuse tests: tiny models, contexts, greedy loops.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lacuna/kv.h"
#include "lacuna/model.h"

namespace kvtest {

inline std::string model_path(const std::string& name) {
  const char* dir = std::getenv("LACUNA_TEST_MODEL_DIR");
  return std::string(dir ? dir : LACUNA_TEST_MODEL_DIR) + "/" + name + ".gguf";
}

// Loads a test model once per process (Model copies share the llama_model).
inline lacuna::Model load(const std::string& name) {
  static std::map<std::string, lacuna::Model> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, lacuna::Model::load(model_path(name))).first;
  return it->second;
}

// A context with a unified KV cache (needed for cell sharing between sequences).
inline lacuna::Context make_ctx(const lacuna::Model& m, uint32_t n_ctx, uint32_t n_seq,
                                uint32_t n_batch = 256) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_batch;
  cp.n_seq_max = n_seq;
  cp.n_threads = 1;  // tiny models: threads only add synchronization cost
  cp.n_threads_batch = 1;
  cp.kv_unified = true;
  cp.no_perf = true;
  return lacuna::Context::create(m, cp);
}

inline lacuna::Token argmax(const float* logits, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

inline int32_t n_vocab(llama_context* ctx) {
  return llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
}

// Deterministic pseudo-random "text" tokens (avoiding the first 300 ids, often special).
inline std::vector<lacuna::Token> random_tokens(size_t n, uint32_t seed, int32_t n_vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(300, std::min(n_vocab, 30000) - 1);
  std::vector<lacuna::Token> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Greedy continuation with the plain path: clears `seq`, decodes the whole prompt (batches of
// n_batch), then n_gen greedy tokens one at a time.
inline std::vector<lacuna::Token> greedy_plain(llama_context* ctx, lacuna::kv::SeqId seq,
                                               const std::vector<lacuna::Token>& prompt,
                                               int n_gen) {
  llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
  const int32_t nb = static_cast<int32_t>(llama_n_batch(ctx));
  llama_batch b = llama_batch_init(nb, 0, 1);
  size_t done = 0;
  while (done < prompt.size()) {
    const size_t n = std::min<size_t>(nb, prompt.size() - done);
    b.n_tokens = static_cast<int32_t>(n);
    for (size_t i = 0; i < n; ++i) {
      b.token[i] = prompt[done + i];
      b.pos[i] = static_cast<int32_t>(done + i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = seq;
      b.logits[i] = done + i + 1 == prompt.size();
    }
    EXPECT_EQ(llama_decode(ctx, b), 0);
    done += n;
  }
  std::vector<lacuna::Token> out;
  const int32_t nv = n_vocab(ctx);
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < n_gen; ++i) {
    const lacuna::Token t = argmax(llama_get_logits_ith(ctx, -1), nv);
    out.push_back(t);
    if (i + 1 == n_gen) break;
    b.n_tokens = 1;
    b.token[0] = t;
    b.pos[0] = pos++;
    b.n_seq_id[0] = 1;
    b.seq_id[0][0] = seq;
    b.logits[0] = 1;
    EXPECT_EQ(llama_decode(ctx, b), 0);
  }
  llama_batch_free(b);
  llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
  return out;
}

// Greedy continuation through a Session: prefill, then n_gen tokens (the last one sampled
// but not decoded, like greedy_plain).
inline std::vector<lacuna::Token> greedy_session(llama_context* ctx, lacuna::kv::Session& s,
                                                 const std::vector<lacuna::Token>& prompt,
                                                 int n_gen,
                                                 lacuna::kv::PrefillResult* r = nullptr) {
  const lacuna::kv::PrefillResult res = s.prefill(prompt);
  if (r) *r = res;
  std::vector<lacuna::Token> out;
  const int32_t nv = n_vocab(ctx);
  for (int i = 0; i < n_gen; ++i) {
    const lacuna::Token t = argmax(llama_get_logits_ith(ctx, -1), nv);
    out.push_back(t);
    if (i + 1 == n_gen) break;
    s.decode(t);
  }
  return out;
}

// A temporary directory removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("lacuna-kv-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace kvtest
