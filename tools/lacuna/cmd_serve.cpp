// cmd_serve.cpp — `lacuna serve`: the OpenAI-compatible server (docs/server.md). Prints the
// URL and the model's facts, serves until SIGINT or SIGTERM, then shuts down in order.
#include <pthread.h>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli_args.h"
#include "command.h"
#include "lacuna/server.h"

LACUNA_COMMAND(cmd_serve, "serve", "OpenAI-compatible HTTP server (continuous batching)") {
  lacuna::server::ServerOptions o;
  CLI::App app{
      "An OpenAI-compatible server: /v1/chat/completions (tools, response_format, stream), "
      "/v1/completions, /v1/models, /tokenize, /detokenize, /apply-template, /health, "
      "/metrics, /slots. One decode loop batches every request (docs/server.md).",
      "lacuna serve"};
  app.add_option("-m,--model", o.model_path, "GGUF model file")->required();
  app.add_option("--host", o.host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", o.port, "port (default 8080; 0: a free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--parallel", o.parallel, "requests decoding at once (default 4)")
      ->check(CLI::Range(1, 256));
  app.add_option("--queue", o.queue, "requests waiting for a slot; more get 503 (default 64)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--ctx", o.n_ctx, "KV cells shared by all slots (default 8192)")
      ->check(CLI::Range(64u, 1u << 24));
  app.add_option("--batch", o.n_batch, "tokens per llama_decode and prefill chunk (default 512)")
      ->check(CLI::Range(8u, 1u << 16));
  app.add_option("--threads", o.n_threads, "CPU threads (default: all)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--api-key", o.api_key, "require Authorization: Bearer KEY");
  app.add_option("--persist-dir", o.persist_dir, "persistent KV store directory");
  app.add_option("--chat-template", o.chat_template,
                 "a template name of llama.cpp's models/templates/ or a Jinja file");
  app.add_option("--max-body", o.max_body, "request body limit in bytes (default 4 MiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  app.add_option("--max-tokens", o.default_max_tokens,
                 "tokens generated when a request sets no limit (default 2048)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--http-threads", o.http_threads,
                 "HTTP worker threads (default parallel + queue + 8)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--timeout", o.timeout_s, "socket read/write timeout in seconds (default 600)")
      ->check(CLI::Range(1, 86400));
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;

  // Every thread made from here on inherits the blocked signals; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  lacuna::server::Server server(o);
  server.start();
  std::fprintf(stdout, "lacuna serve: listening on http://%s:%d\n%s", o.host.c_str(), server.port(),
               server.facts().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "lacuna serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.stop();
  std::fprintf(stderr, "lacuna serve: stopped\n");
  return 0;
}
