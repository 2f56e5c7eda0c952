// server.h — `lacuna serve`: an OpenAI-compatible HTTP server over one runtime::Context
// (continuous batching over BranchStore, tool calls and structured output valid by
// construction, prefix reuse across requests). Design and API: docs/server.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lacuna::server {

struct ServerOptions {
  std::string model_path;
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: a free port (see Server::port())
  size_t parallel = 4;                // branches decoding at once
  size_t queue = 64;                  // requests waiting for a branch; more get 503
  uint32_t n_ctx = 8192;              // KV cells shared by every branch
  uint32_t n_batch = 512;             // tokens per llama_decode; also the prefill chunk
  int32_t n_threads = 0;              // 0: every hardware thread
  std::string api_key;                // non-empty: "Authorization: Bearer KEY" required
  std::string persist_dir;            // the persistent KV store (empty: memory only)
  std::string chat_template;          // a name of llama.cpp's models/templates/ or a file
  size_t max_body = 4u << 20;         // request bytes; more get 413
  int64_t default_max_tokens = 2048;  // when a request gives none
  int http_threads = 0;               // 0: parallel + queue + 8
  int timeout_s = 600;                // socket read / write timeout
};

class Server {
 public:
  // Loads the model and its chat template, creates the context. Throws ModelError,
  // chat::ChatError, std::invalid_argument (bad options), std::runtime_error.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (throws std::runtime_error when it cannot) and serves on background threads.
  void start();
  // The bound port (after start()).
  int port() const;
  // One line a fact: model file, architecture, parameters, context, slots.
  std::string facts() const;
  // Stops accepting, ends queued and running requests with an error (streams get an error
  // chunk), joins every thread, closes the context. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lacuna::server
