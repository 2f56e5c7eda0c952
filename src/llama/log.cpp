// log.cpp — lacuna's quiet-by-default logger and the callback that routes llama.cpp/ggml logs.
#include "lacuna/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "llama.h"

namespace lacuna {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("LACUNA_LOG");
  if (env == nullptr || *env == '\0') return LogLevel::error;
  try {
    return parse_log_level(env);
  } catch (const std::invalid_argument&) {
    std::fprintf(stderr,
                 "lacuna: warn: ignoring LACUNA_LOG='%s' (use debug, info, warn, error or none)\n",
                 env);
    return LogLevel::error;
  }
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

// Per-thread state of the llama.cpp log route: the line being assembled (llama.cpp may send
// a line in pieces), its level, the last error line, and whether errors are being captured.
struct ThreadLogState {
  std::string line;
  LogLevel line_level = LogLevel::info;
  std::string last_error;
  bool capturing = false;
};

ThreadLogState& thread_state() {
  thread_local ThreadLogState state;
  return state;
}

LogLevel from_ggml(ggml_log_level level, LogLevel previous) {
  switch (level) {
    case GGML_LOG_LEVEL_DEBUG:
      return LogLevel::debug;
    case GGML_LOG_LEVEL_INFO:
    case GGML_LOG_LEVEL_NONE:
      return LogLevel::info;
    case GGML_LOG_LEVEL_WARN:
      return LogLevel::warn;
    case GGML_LOG_LEVEL_ERROR:
      return LogLevel::error;
    case GGML_LOG_LEVEL_CONT:
      return previous;
  }
  return LogLevel::info;
}

void finish_line(ThreadLogState& st) {
  std::string& line = st.line;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (st.line_level == LogLevel::error && !line.empty() && st.last_error.size() < 2000) {
    if (!st.last_error.empty()) st.last_error += "; ";
    st.last_error += line;
  }
  const LogLevel threshold = log_level();
  bool print = st.line_level >= threshold && threshold != LogLevel::none;
  // Captured errors are reported by the caller; print them only when asked for more.
  if (st.capturing && st.line_level == LogLevel::error && threshold == LogLevel::error) {
    print = false;
  }
  if (print && !line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  line.clear();
}

void llama_log_callback(ggml_log_level level, const char* text, void* /*user_data*/) {
  if (text == nullptr) return;
  ThreadLogState& st = thread_state();
  const LogLevel lv = from_ggml(level, st.line_level);
  if (level != GGML_LOG_LEVEL_CONT && !st.line.empty()) finish_line(st);
  st.line_level = lv;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == '\n') {
      finish_line(st);
    } else {
      st.line.push_back(*p);
    }
  }
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  if (text == "debug") return LogLevel::debug;
  if (text == "info") return LogLevel::info;
  if (text == "warn" || text == "warning") return LogLevel::warn;
  if (text == "error") return LogLevel::error;
  if (text == "none" || text == "off" || text == "quiet") return LogLevel::none;
  throw std::invalid_argument("unknown log level '" + text +
                              "' (use debug, info, warn, error or none)");
}

LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load());
}

void set_log_level(LogLevel level) {
  level_storage().store(static_cast<int>(level));
}

void log_message(LogLevel level, const std::string& message) {
  if (level == LogLevel::none || level < log_level()) return;
  static const char* const names[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "lacuna: %s: %s\n", names[static_cast<int>(level)], message.c_str());
}

void init_llama() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(llama_log_callback, nullptr);
    llama_backend_init();
  });
}

std::string last_llama_error() {
  return thread_state().last_error;
}

void clear_last_llama_error() {
  thread_state().last_error.clear();
}

ScopedLlamaErrorCapture::ScopedLlamaErrorCapture() : previous_(thread_state().capturing) {
  thread_state().capturing = true;
}

ScopedLlamaErrorCapture::~ScopedLlamaErrorCapture() {
  thread_state().capturing = previous_;
}

}  // namespace lacuna
