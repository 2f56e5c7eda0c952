// child_process.h — a command run as a child process with its output in a log file, and
// stopped with SIGTERM (then SIGKILL): the servers `lacuna bench serve` starts itself.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace lacuna::cli {

class ChildProcess {
 public:
  // Starts argv[0] with argv; stdout and stderr go to `log_path` (truncated). Throws
  // std::runtime_error when it cannot start.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // False once the child has exited (its status is then kept).
  bool running();
  // SIGTERM, then SIGKILL after `grace`; returns the exit status (-signal when killed).
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(30));
  // The last `max_bytes` of the log (for an error message).
  std::string log_tail(size_t max_bytes = 2000) const;

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
int free_port();

// The 1-minute load average (/proc/loadavg); negative when unknown.
double load_average();

}  // namespace lacuna::cli
