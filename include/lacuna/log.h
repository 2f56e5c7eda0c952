// log.h — lacuna's logger, and the route that sends llama.cpp's and ggml's log lines through it.
//
// Quiet by default: only errors are printed (to stderr). The environment variable
// LACUNA_LOG=debug|info|warn|error|none sets the initial level; set_log_level() changes it.
// The last error line llama.cpp logged on the calling thread is kept, so that a failed call
// can say why (ModelError messages include it).
#pragma once

#include <string>

namespace lacuna {

enum class LogLevel : int { debug = 0, info = 1, warn = 2, error = 3, none = 4 };

// The current level: messages below it are dropped. First call reads LACUNA_LOG.
LogLevel log_level();
void set_log_level(LogLevel level);

// Parses "debug", "info", "warn"/"warning", "error", "none"/"off"/"quiet". Throws
// std::invalid_argument for anything else.
LogLevel parse_log_level(const std::string& text);

// Writes "lacuna: <level>: <message>\n" to stderr when level >= log_level().
void log_message(LogLevel level, const std::string& message);

// Installs lacuna's callback as llama.cpp's (and ggml's) logger and initializes the llama
// backend. Idempotent and thread-safe; every wrapper that calls into llama.cpp calls it.
void init_llama();

// The error lines llama.cpp or ggml logged on this thread since the last
// clear_last_llama_error(), joined by "; " (about 2000 bytes at most), or "" if none.
std::string last_llama_error();
void clear_last_llama_error();

// While an instance lives on a thread, llama.cpp error lines on that thread are captured
// (see last_llama_error) but not printed unless the level is below `error`: the caller
// reports them itself, e.g. inside an exception message.
class ScopedLlamaErrorCapture {
 public:
  ScopedLlamaErrorCapture();
  ~ScopedLlamaErrorCapture();
  ScopedLlamaErrorCapture(const ScopedLlamaErrorCapture&) = delete;
  ScopedLlamaErrorCapture& operator=(const ScopedLlamaErrorCapture&) = delete;

 private:
  bool previous_;
};

}  // namespace lacuna
