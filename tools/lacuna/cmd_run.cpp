// cmd_run.cpp — `lacuna run`: plain text generation that streams tokens to stdout and ends
// with one stats line on stderr.
//
// Defaults: greedy decoding (--temp 0) so that a run is deterministic; the prompt is
// tokenized with the model's BOS (when it asks for one) and with special-token text parsed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "command.h"
#include "lacuna/kv.h"
#include "lacuna/model.h"

namespace {

struct RunStats {
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  int32_t n_forward = 0;   // llama_decode calls
  double prefill_s = 0.0;  // prompt forward passes
  double decode_s = 0.0;   // from the end of prefill to the last generated token
  size_t n_reused = 0;     // prompt tokens whose KV came from the disk cache (kv::Session)
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The plain decode loop: prefill the prompt in n_batch chunks, then sample one token,
// run one forward pass, repeat; stops at an end-of-generation token or after n_predict.
// (The Generator in src/decode/ takes over this job; this loop is the baseline.)
RunStats generate_plain(lacuna::Context& ctx, llama_sampler* sampler,
                        std::span<const lacuna::Token> prompt, int32_t n_predict,
                        const std::function<void(lacuna::Token)>& on_token,
                        lacuna::kv::Session* session = nullptr) {
  RunStats st;
  st.n_prompt = static_cast<int32_t>(prompt.size());
  const lacuna::Vocab vocab = ctx.vocab();
  const int32_t n_batch = static_cast<int32_t>(ctx.n_batch());
  lacuna::Batch batch(n_batch);

  // Warm-up pass (not counted): the first llama_decode also builds and allocates the
  // compute graph, which would otherwise be billed to prefill.
  batch.add(prompt[0], 0, 0, true);
  ctx.decode(batch);
  ctx.clear_memory();

  auto t0 = std::chrono::steady_clock::now();
  lacuna::Pos pos = 0;
  if (session != nullptr) {  // KV reuse: the session restores what it can, decodes the rest
    const lacuna::kv::PrefillResult r = session->prefill(prompt);
    st.n_reused = r.n_reused;
    st.n_forward += r.n_computed > 0 ? 1 : 0;
    pos = st.n_prompt;
  }
  while (pos < st.n_prompt) {
    batch.clear();
    const int32_t end = std::min(st.n_prompt, pos + n_batch);
    for (; pos < end; ++pos) batch.add(prompt[pos], pos, 0, pos == st.n_prompt - 1);
    ctx.decode(batch);
    ++st.n_forward;
  }
  st.prefill_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  while (st.n_generated < n_predict) {
    const lacuna::Token token = llama_sampler_sample(sampler, ctx.get(), -1);
    if (vocab.is_eog(token)) break;
    on_token(token);
    ++st.n_generated;
    if (st.n_generated == n_predict) break;
    if (session != nullptr) {
      session->decode(token);
      ++pos;
    } else {
      batch.clear();
      batch.add(token, pos++, 0, true);
      ctx.decode(batch);
    }
    ++st.n_forward;
  }
  st.decode_s = seconds_since(t0);
  return st;
}

}  // namespace

LACUNA_COMMAND(cmd_run, "run", "generate text from a prompt (streams to stdout)") {
  std::string model_path;
  std::string prompt;
  int32_t n_predict = 64;
  float temp = 0.0f;
  uint32_t seed = 0;
  int32_t threads = 0;
  uint32_t n_ctx = 4096;
  std::string persist_dir;
  bool no_kv_reuse = false;
  uint32_t kv_block = 0;
  CLI::App app{
      "Generate text from a prompt; the text streams to stdout, one stats line "
      "goes to stderr at the end. Greedy by default (--temp 0).",
      "lacuna run"};
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("-p,--prompt", prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate at most (default 64)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--temp", temp, "sampling temperature; 0 = greedy (default)")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--seed", seed, "sampling seed for --temp > 0 (default 0)");
  app.add_option("--threads", threads, "CPU threads (default: all)")->check(CLI::Range(1, 1024));
  app.add_option("--ctx", n_ctx, "context size in tokens (default 4096)")
      ->check(CLI::Range(16u, 1u << 24));
  app.add_option("--persist-dir", persist_dir,
                 "persistent KV cache directory: a later run whose prompt starts the same way "
                 "starts warm (default: $LACUNA_PERSIST_DIR)");
  app.add_flag("--no-kv-reuse,--no-prefix-cache", no_kv_reuse,
               "plain prefill: ignore --persist-dir and LACUNA_PERSIST_DIR");
  app.add_option("--kv-block", kv_block, "KV cache block size in tokens (default 64)")
      ->check(CLI::Range(1u, 65536u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "lacuna run: " << e.what() << "\n\n" << app.help();
    return 2;
  }

  const lacuna::Model model = lacuna::Model::load(model_path);
  lacuna::ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_threads = threads;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  const lacuna::Vocab vocab = model.vocab();

  const std::vector<lacuna::Token> tokens =
      lacuna::tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) {
    std::cerr << "lacuna run: the prompt gives no tokens\n";
    return 2;
  }
  if (tokens.size() + static_cast<size_t>(n_predict) > ctx.n_ctx()) {
    std::cerr << "lacuna run: the prompt (" << tokens.size() << " tokens) plus -n " << n_predict
              << " does not fit the context of " << ctx.n_ctx() << " tokens (use --ctx)\n";
    return 2;
  }

  lacuna::SamplingParams sp;
  sp.temp = temp;
  sp.seed = seed;
  const lacuna::SamplerPtr sampler = lacuna::make_sampler(sp);

  // KV reuse across runs (src/kv): only with a persistent cache directory.
  lacuna::kv::KvConfig kv_config = lacuna::kv::KvConfig::from_env();
  if (!persist_dir.empty()) kv_config.persist_dir = persist_dir;
  if (kv_block != 0) kv_config.block_size = kv_block;
  std::unique_ptr<lacuna::kv::PersistentStore> kv_store;
  std::unique_ptr<lacuna::kv::Session> kv_session;
  if (!no_kv_reuse && !kv_config.persist_dir.empty()) {
    kv_store = std::make_unique<lacuna::kv::PersistentStore>(
        kv_config.persist_dir,
        lacuna::kv::PersistentStore::model_fingerprint(kv_config.persist_dir, model_path),
        kv_config.block_size);
    kv_session =
        std::make_unique<lacuna::kv::Session>(ctx.get(), 0, kv_config, nullptr, kv_store.get());
  }

  std::string piece;
  piece.reserve(256);
  const RunStats st = generate_plain(
      ctx, sampler.get(), tokens, n_predict,
      [&](lacuna::Token t) {
        piece.clear();
        lacuna::append_token_piece(vocab, t, piece);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      },
      kv_session.get());
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const double prefill_tps = st.prefill_s > 0 ? st.n_prompt / st.prefill_s : 0.0;
  const double decode_tps = st.decode_s > 0 ? st.n_generated / st.decode_s : 0.0;
  std::fprintf(stderr,
               "prompt %d tokens, generated %d tokens, %d forward passes, "
               "prefill %.1f tokens/s, decode %.1f tokens/s\n",
               st.n_prompt, st.n_generated, st.n_forward, prefill_tps, decode_tps);
  if (kv_session) {
    const uint64_t written = kv_session->persist();
    kv_store->cleanup(kv_config.persist_max_age_s, kv_config.persist_max_bytes);
    std::fprintf(stderr,
                 "kv: %zu prompt tokens reused from the disk cache, %llu bytes read, "
                 "%llu bytes written\n",
                 st.n_reused, static_cast<unsigned long long>(kv_session->stats().bytes_loaded),
                 static_cast<unsigned long long>(written));
  }
  return 0;
}
