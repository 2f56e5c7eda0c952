// cmd_bench_serve.cpp — `lacuna bench serve`: a load generator for any OpenAI-compatible
// server (lacuna serve, llama.cpp's llama-server). Streams every request and reports, per
// concurrency: completion tokens/s, time to first token, per-token and request latency (p50,
// p99), refusals (503 with Retry-After) and failures, and the share of structured outputs
// that are valid. It can start `lacuna serve` and llama-server itself, one after the other
// with the same model and settings, and print the ratios. Workloads: bench/data/serve/*.json.
#include <httplib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "cli_args.h"
#include "command.h"
#include "lacuna/chat.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Sample {
  bool ok = false;
  int status = 0;
  bool retry_after = false;  // a 503 that says when to retry
  double latency_ms = 0;     // request sent to the end of the response
  double ttft_ms = 0;        // request sent to the first content, reasoning or tool-call delta
  double per_token_ms = 0;   // (last delta - first delta) / (completion tokens - 1)
  size_t completion_tokens = 0;
  bool structured = false;  // the request asked for a schema or a tool call
  bool valid = false;
  std::string finish_reason;
  std::string error;  // why there was no answer: httplib's error, or the status
  json message;       // the assembled assistant message
};

// One streamed chat request; the SSE chunks assembled into a message.
Sample send_chat(httplib::Client& cli, const std::string& api_key, json body) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Sample s;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers.emplace("Content-Type", "application/json");
  if (!api_key.empty()) req.headers.emplace("Authorization", "Bearer " + api_key);
  req.body = body.dump();
  std::string buffer;
  std::string content;
  std::vector<json> calls;
  Clock::time_point first{};
  Clock::time_point last{};
  bool got_first = false;
  size_t deltas = 0;
  size_t usage_tokens = 0;
  const Clock::time_point t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t pos;
    while ((pos = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, pos);
      buffer.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") continue;
      const json chunk = json::parse(payload, nullptr, false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        usage_tokens = chunk["usage"].value("completion_tokens", size_t{0});
      }
      if (!chunk.contains("choices") || !chunk["choices"].is_array()) continue;
      for (const json& ch : chunk["choices"]) {
        if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
          s.finish_reason = ch["finish_reason"].get<std::string>();
        }
        if (!ch.contains("delta") || !ch["delta"].is_object()) continue;
        const json& d = ch["delta"];
        bool news = false;
        if (d.contains("content") && d["content"].is_string() &&
            !d["content"].get<std::string>().empty()) {
          content += d["content"].get<std::string>();
          news = true;
        }
        if (d.contains("reasoning_content") && d["reasoning_content"].is_string() &&
            !d["reasoning_content"].get<std::string>().empty()) {
          news = true;
        }
        if (d.contains("tool_calls") && d["tool_calls"].is_array()) {
          for (const json& tc : d["tool_calls"]) {
            const size_t i = tc.value("index", size_t{0});
            if (calls.size() <= i) calls.resize(i + 1, json{{"name", ""}, {"arguments", ""}});
            if (tc.contains("function")) {
              const json& f = tc["function"];
              if (f.contains("name") && f["name"].is_string()) {
                calls[i]["name"] =
                    calls[i]["name"].get<std::string>() + f["name"].get<std::string>();
              }
              if (f.contains("arguments") && f["arguments"].is_string()) {
                calls[i]["arguments"] =
                    calls[i]["arguments"].get<std::string>() + f["arguments"].get<std::string>();
              }
            }
            news = true;
          }
        }
        if (news) {
          const Clock::time_point now = Clock::now();
          if (!got_first) {
            got_first = true;
            first = now;
          }
          last = now;
          ++deltas;
        }
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  const Clock::time_point end = Clock::now();
  s.latency_ms = std::chrono::duration<double, std::milli>(end - t0).count();
  s.status = sent ? res.status : 0;
  s.retry_after = sent && res.status == 503 && res.has_header("Retry-After");
  // Answered: a 200 whose stream finished (an empty answer has no delta; its TTFT is its end).
  s.ok = sent && res.status == 200 && (got_first || !s.finish_reason.empty());
  if (!s.ok) {
    s.error = !sent ? httplib::to_string(err)
                    : "status " + std::to_string(res.status) +
                          (res.status == 200 ? " (the stream did not finish)" : "");
    return s;
  }
  if (!got_first) first = last = end;
  s.ttft_ms = std::chrono::duration<double, std::milli>(first - t0).count();
  s.completion_tokens = usage_tokens > 0 ? usage_tokens : deltas;
  if (s.completion_tokens > 1) {
    s.per_token_ms = std::chrono::duration<double, std::milli>(last - first).count() /
                     static_cast<double>(s.completion_tokens - 1);
  }
  s.message = {{"role", "assistant"}, {"content", content}};
  if (!calls.empty()) {
    json tc = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
      tc.push_back(
          {{"id", "call_" + std::to_string(i)}, {"type", "function"}, {"function", calls[i]}});
    }
    s.message["tool_calls"] = tc;
  }
  return s;
}

// A light validity check: the value's type and required properties (recursively for
// objects), enums and consts. Enough to tell broken JSON or a missing field from a valid one.
bool conforms(const json& v, const json& schema) {
  if (!schema.is_object()) return true;
  if (schema.contains("const") && v != schema["const"]) return false;
  if (schema.contains("enum") && schema["enum"].is_array() &&
      std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end()) {
    return false;
  }
  const std::string type = schema.value("type", "");
  if (type == "object" && !v.is_object()) return false;
  if (type == "array" && !v.is_array()) return false;
  if (type == "string" && !v.is_string()) return false;
  if (type == "integer" && !v.is_number_integer()) return false;
  if (type == "number" && !v.is_number()) return false;
  if (type == "boolean" && !v.is_boolean()) return false;
  if (v.is_object()) {
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const json& k : schema["required"]) {
        if (!k.is_string() || !v.contains(k.get<std::string>())) return false;
      }
    }
    if (schema.contains("properties") && schema["properties"].is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (schema["properties"].contains(it.key()) &&
            !conforms(it.value(), schema["properties"][it.key()])) {
          return false;
        }
      }
    }
  }
  if (v.is_array() && schema.contains("items")) {
    for (const json& x : v) {
      if (!conforms(x, schema["items"])) return false;
    }
  }
  return true;
}

void validate(Sample& s, const json& body) {
  if (body.contains("tools") && body.value("tool_choice", json("auto")) != json("auto")) {
    s.structured = true;
    if (!s.message.contains("tool_calls")) return;
    for (const json& c : s.message["tool_calls"]) {
      const std::string name = c["function"]["name"].get<std::string>();
      const json args = json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
      const json* params = nullptr;
      for (const json& t : body["tools"]) {
        if (t["function"]["name"] == name) params = &t["function"]["parameters"];
      }
      if (params == nullptr || args.is_discarded() || !args.is_object() ||
          !conforms(args, *params)) {
        return;
      }
    }
    s.valid = true;
  } else if (body.contains("response_format") &&
             body["response_format"].value("type", "") == "json_schema") {
    s.structured = true;
    const json v = json::parse(s.message["content"].get<std::string>(), nullptr, false);
    s.valid = !v.is_discarded() && conforms(v, body["response_format"]["json_schema"]["schema"]);
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::vector<int> parse_levels(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int n = std::stoi(item);
    if (n < 1 || n > 1024) throw std::invalid_argument("--concurrency levels must be 1..1024");
    out.push_back(n);
  }
  return out;
}

struct Workload {
  json doc;
  int requests = 32;
  std::string api_key;
  int max_tokens = 128;
  double temperature = 0;
  bool agent = false;
};

// Every request of one concurrency level: `conc` client threads take requests until
// `requests` are sent (agent workloads: conversations that resend their growing history).
std::vector<Sample> run_clients(const std::string& url, const Workload& w, int conc) {
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<Sample> samples;
  auto worker = [&](int k) {
    httplib::Client cli(url);
    cli.set_read_timeout(600, 0);
    cli.set_write_timeout(600, 0);
    auto body_for = [&](json body) {
      body["max_tokens"] = w.max_tokens;
      body["temperature"] = w.temperature;
      body["seed"] = k;
      return body;
    };
    if (w.agent) {
      const json& a = w.doc["agent"];
      while (next.load() < w.requests) {
        json messages = json::array({{{"role", "system"}, {"content", a["system"]}}});
        for (const json& turn : a["turns"]) {
          if (next.fetch_add(1) >= w.requests) return;
          messages.push_back({{"role", "user"}, {"content", turn}});
          Sample s = send_chat(cli, w.api_key, body_for({{"messages", messages}}));
          if (s.ok) messages.push_back(s.message);
          std::lock_guard<std::mutex> lock(mu);
          samples.push_back(std::move(s));
        }
      }
      return;
    }
    const json& reqs = w.doc["requests"];
    for (int i = next.fetch_add(1); i < w.requests; i = next.fetch_add(1)) {
      const json body = body_for(reqs[static_cast<size_t>(i) % reqs.size()]);
      Sample s = send_chat(cli, w.api_key, body);
      if (s.ok) validate(s, body);
      std::lock_guard<std::mutex> lock(mu);
      samples.push_back(std::move(s));
    }
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < conc; ++k) threads.emplace_back(worker, k);
  for (auto& t : threads) t.join();
  return samples;
}

// One concurrency level against one server: its figures, with the load average at its end.
json run_level(const std::string& url, const Workload& w, int conc) {
  const Clock::time_point t0 = Clock::now();
  const std::vector<Sample> samples = run_clients(url, w, conc);
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  size_t ok = 0, busy = 0, tokens = 0, structured = 0, valid = 0, cut = 0;
  std::vector<double> ttft, tpot, latency;
  std::map<int, size_t> failed;              // status (0: no response) -> count
  std::map<std::string, size_t> why_failed;  // httplib's error or the status -> count
  for (const Sample& s : samples) {
    if (!s.ok) {
      if (s.retry_after) {
        ++busy;
      } else {
        ++failed[s.status];
        ++why_failed[s.error];
      }
      continue;
    }
    ++ok;
    tokens += s.completion_tokens;
    ttft.push_back(s.ttft_ms);
    latency.push_back(s.latency_ms);
    if (s.completion_tokens > 1) tpot.push_back(s.per_token_ms);
    if (s.structured) {
      ++structured;
      valid += s.valid ? 1 : 0;
      // Not valid because max_tokens ended it: the budget, not the constraint.
      cut += !s.valid && s.finish_reason == "length" ? 1 : 0;
    }
  }
  json failures = json::object();
  size_t n_failed = 0;
  for (const auto& [status, n] : failed) {
    failures[std::to_string(status)] = n;
    n_failed += n;
  }
  return {{"concurrency", conc},
          {"requests", samples.size()},
          {"ok", ok},
          {"busy_503", busy},
          {"failed", n_failed},
          {"failed_by_status", failures},
          {"failed_by_reason", why_failed},
          {"completion_tokens", tokens},
          {"wall_s", wall_s},
          {"tokens_per_s", static_cast<double>(tokens) / wall_s},
          {"ttft_ms_p50", percentile(ttft, 0.5)},
          {"ttft_ms_p99", percentile(ttft, 0.99)},
          {"tpot_ms_p50", percentile(tpot, 0.5)},
          {"tpot_ms_p99", percentile(tpot, 0.99)},
          {"latency_ms_p50", percentile(latency, 0.5)},
          {"latency_ms_p99", percentile(latency, 0.99)},
          {"structured", structured},
          {"valid", valid},
          {"cut_by_length", cut},
          {"load_average", lacuna::cli::load_average()}};
}

std::string valid_text(const json& level) {
  const size_t structured = level["structured"].get<size_t>();
  const size_t cut = level["cut_by_length"].get<size_t>();
  if (structured == 0) return "-";
  return std::to_string(level["valid"].get<size_t>()) + "/" + std::to_string(structured) +
         (cut > 0 ? "+" + std::to_string(cut) + "cut" : "");
}

void print_header() {
  std::printf("%5s %5s %5s %5s %7s %7s %9s %9s %8s %8s %9s %9s %11s %5s\n", "conc", "ok", "503",
              "fail", "tokens", "tok/s", "ttft p50", "ttft p99", "tpot p50", "tpot p99", "lat p50",
              "lat p99", "valid", "load");
}

void print_row(const json& l) {
  std::printf(
      "%5d %5zu %5zu %5zu %7zu %7.1f %7.0fms %7.0fms %6.0fms %6.0fms %7.0fms %7.0fms %11s %5.1f\n",
      l["concurrency"].get<int>(), l["ok"].get<size_t>(), l["busy_503"].get<size_t>(),
      l["failed"].get<size_t>(), l["completion_tokens"].get<size_t>(),
      l["tokens_per_s"].get<double>(), l["ttft_ms_p50"].get<double>(),
      l["ttft_ms_p99"].get<double>(), l["tpot_ms_p50"].get<double>(),
      l["tpot_ms_p99"].get<double>(), l["latency_ms_p50"].get<double>(),
      l["latency_ms_p99"].get<double>(), valid_text(l).c_str(), l["load_average"].get<double>());
  std::fflush(stdout);
}

// Waits until the server's GET /health answers 200 (llama-server answers 503 while it
// loads). Throws when the child exits first or `timeout` passes.
void wait_healthy(const std::string& url, lacuna::cli::ChildProcess& child,
                  std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  httplib::Client cli(url);
  cli.set_connection_timeout(1, 0);
  cli.set_read_timeout(5, 0);
  while (Clock::now() < deadline) {
    if (!child.running()) {
      throw std::runtime_error("the server exited while starting:\n" + child.log_tail());
    }
    if (auto res = cli.Get("/health"); res && res->status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw std::runtime_error("the server did not become healthy in time:\n" + child.log_tail());
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the lacuna executable (/proc/self/exe)");
  return p.string();
}

}  // namespace

LACUNA_COMMAND(cmd_bench_serve, "bench-serve",
               "load-test an OpenAI-compatible server (throughput, TTFT, per-token latency)") {
  std::string url;
  std::string model;
  std::string peer_server;
  std::string peer_url;
  std::string peer_args;
  std::string chat_template;
  std::string workload_path;
  std::string levels_text = "1,4,16";
  std::string log_dir = std::filesystem::temp_directory_path().string();
  int parallel = 4;
  int queue = 64;
  int ctx = 16384;
  int threads = 2;
  int batch = 512;
  bool as_json = false;
  bool check = false;
  Workload w;
  CLI::App app{
      "Sends a workload's chat requests (streamed) to an OpenAI-compatible server at each "
      "concurrency and prints completion tokens/s, TTFT, per-token and request latency "
      "p50/p99, 503 refusals and failures, and the share of valid structured outputs. With "
      "-m it starts `lacuna serve` itself, and with --peer-server llama.cpp's llama-server "
      "(same model, slots, context, threads, batch and template), one after the other, and "
      "prints the ratios. Asserts nothing unless --check.",
      "lacuna bench serve"};
  app.add_option("--url", url, "a running server, e.g. http://127.0.0.1:8080");
  app.add_option("-m,--model", model,
                 "GGUF model: start `lacuna serve` (unless --url) and the peer");
  app.add_option("--peer-server", peer_server, "llama-server binary to start and compare with");
  app.add_option("--peer-url", peer_url, "a running server to compare with");
  app.add_option("--peer-args", peer_args, "extra llama-server arguments (space-separated)");
  app.add_option(
      "--chat-template", chat_template,
      "template name or Jinja file for both servers (llama-server: --chat-template-file)");
  app.add_option("--parallel", parallel, "slots of the servers started here (default 4)")
      ->check(CLI::Range(1, 256));
  app.add_option("--queue", queue, "lacuna serve's queue (default 64)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--ctx", ctx, "KV cells shared by the slots (default 16384)")
      ->check(CLI::Range(64, 1 << 24));
  app.add_option("--threads", threads, "CPU threads of the servers (default 2)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--batch", batch, "n_batch = n_ubatch (default 512)")
      ->check(CLI::Range(8, 1 << 16));
  app.add_option("--log-dir", log_dir, "where the started servers' logs go (default: temp dir)");
  app.add_option("--workload", workload_path, "bench/data/serve/*.json")->required();
  app.add_option("--concurrency", levels_text, "comma-separated client counts (default 1,4,16)");
  app.add_option("--requests", w.requests, "requests per concurrency level (default 32)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--api-key", w.api_key, "Bearer key");
  app.add_flag("--json", as_json, "print JSON");
  app.add_flag("--check", check,
               "exit 1 on any failure (a 503 with Retry-After is not one) or a structured output "
               "that is invalid other than by running out of max_tokens");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  if (url.empty() && model.empty()) {
    std::cerr << "lacuna bench serve: give --url (a running server) or -m (start one)\n";
    return 2;
  }
  if (!peer_server.empty() && model.empty()) {
    std::cerr << "lacuna bench serve: --peer-server needs -m MODEL\n";
    return 2;
  }

  std::ifstream in(workload_path);
  if (!in) {
    std::cerr << "lacuna bench serve: cannot read " << workload_path << "\n";
    return 2;
  }
  w.doc = json::parse(in, nullptr, false);
  if (w.doc.is_discarded() || !w.doc.is_object()) {
    std::cerr << "lacuna bench serve: " << workload_path << " is not a JSON object\n";
    return 2;
  }
  const std::vector<int> levels = parse_levels(levels_text);
  w.max_tokens = w.doc.value("max_tokens", 128);
  w.temperature = w.doc.value("temperature", 0.0);
  w.agent = w.doc.contains("agent");
  const std::string name = w.doc.value("name", workload_path);

  // Both servers are ggml with OpenMP, whose threads spin while they wait unless told not to;
  // on a busy machine spinning threads starve each other (a 27x slower single client
  // measured here). The servers started here wait passively unless the caller says otherwise.
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  const std::string omp = std::getenv("OMP_WAIT_POLICY");
  json report = {{"workload", name}, {"omp_wait_policy", omp}, {"runs", json::array()}};
  if (!as_json) {
    std::printf("workload %s, %d requests per level, max_tokens %d, OMP_WAIT_POLICY=%s\n",
                name.c_str(), w.requests, w.max_tokens, omp.c_str());
  }
  auto bench = [&](const std::string& server, const std::string& at) {
    json run = {{"server", server}, {"url", at}, {"levels", json::array()}};
    if (!as_json) {
      std::printf("== %s (%s)\n", server.c_str(), at.c_str());
      print_header();
    }
    for (const int conc : levels) {
      run["levels"].push_back(run_level(at, w, conc));
      if (!as_json) print_row(run["levels"].back());
    }
    report["runs"].push_back(std::move(run));
  };
  // A server started here: a free port on 127.0.0.1, healthy before the clients start,
  // stopped (SIGTERM) before the next one starts so the two never share the CPU.
  auto started = [&](const std::string& server, std::vector<std::string> argv, int port) {
    const std::string at = "http://127.0.0.1:" + std::to_string(port);
    const std::string log = (std::filesystem::path(log_dir) /
                             ("lacuna-bench-" + server + "-" + std::to_string(getpid()) + ".log"))
                                .string();
    lacuna::cli::ChildProcess child(argv, log);
    wait_healthy(at, child, std::chrono::seconds(600));
    bench(server, at);
    const int rc = child.stop();
    if (rc != 0 && !as_json)
      std::printf("(%s exited with %d; log: %s)\n", server.c_str(), rc, log.c_str());
  };
  const std::string n = std::to_string(parallel);
  try {
    if (!url.empty()) {
      bench("server", url);
    } else {
      const int port = lacuna::cli::free_port();
      std::vector<std::string> argv = {self_exe(),   "serve",
                                       "-m",         model,
                                       "--host",     "127.0.0.1",
                                       "--port",     std::to_string(port),
                                       "--parallel", n,
                                       "--queue",    std::to_string(queue),
                                       "--ctx",      std::to_string(ctx),
                                       "--threads",  std::to_string(threads),
                                       "--batch",    std::to_string(batch)};
      if (!chat_template.empty()) argv.insert(argv.end(), {"--chat-template", chat_template});
      if (!w.api_key.empty()) argv.insert(argv.end(), {"--api-key", w.api_key});
      started("lacuna", argv, port);
    }
    if (!peer_url.empty()) {
      bench("peer", peer_url);
    } else if (!peer_server.empty()) {
      const int port = lacuna::cli::free_port();
      std::vector<std::string> argv = {peer_server,
                                       "-m",
                                       model,
                                       "--host",
                                       "127.0.0.1",
                                       "--port",
                                       std::to_string(port),
                                       "--parallel",
                                       n,
                                       "-c",
                                       std::to_string(ctx),
                                       "-kvu",
                                       "-t",
                                       std::to_string(threads),
                                       "-tb",
                                       std::to_string(threads),
                                       "-b",
                                       std::to_string(batch),
                                       "-ub",
                                       std::to_string(batch)};
      if (!chat_template.empty()) {
        // llama-server takes a template file: the same Jinja source lacuna uses for the name.
        const std::string file = (std::filesystem::path(log_dir) /
                                  ("lacuna-bench-template-" + std::to_string(getpid()) + ".jinja"))
                                     .string();
        std::ofstream(file) << lacuna::chat::Template::load_source(chat_template);
        argv.insert(argv.end(), {"--jinja", "--chat-template-file", file});
      }
      if (!w.api_key.empty()) argv.insert(argv.end(), {"--api-key", w.api_key});
      for (std::string& a : split_words(peer_args)) argv.push_back(std::move(a));
      started("llama-server", argv, port);
    }
  } catch (const std::exception& e) {
    std::cerr << "lacuna bench serve: " << e.what() << "\n";
    return 1;
  }

  const json& runs = report["runs"];
  if (runs.size() == 2) {
    // Ratios per level: throughput lacuna / peer, TTFT p50 peer / lacuna (> 1: lacuna faster).
    json cmp = json::array();
    if (!as_json) {
      std::printf("== %s vs %s\n%5s %9s %9s %7s %10s %10s %7s %7s %7s\n",
                  runs[0]["server"].get<std::string>().c_str(),
                  runs[1]["server"].get<std::string>().c_str(), "conc", "tok/s", "peer", "ratio",
                  "ttft p50", "peer", "ratio", "valid", "peer");
    }
    for (size_t i = 0; i < levels.size(); ++i) {
      const json& a = runs[0]["levels"][i];
      const json& b = runs[1]["levels"][i];
      const double tps = b["tokens_per_s"].get<double>() > 0
                             ? a["tokens_per_s"].get<double>() / b["tokens_per_s"].get<double>()
                             : 0.0;
      const double ttft = a["ttft_ms_p50"].get<double>() > 0
                              ? b["ttft_ms_p50"].get<double>() / a["ttft_ms_p50"].get<double>()
                              : 0.0;
      cmp.push_back(
          {{"concurrency", levels[i]}, {"throughput_ratio", tps}, {"ttft_p50_ratio", ttft}});
      if (!as_json) {
        std::printf("%5d %9.1f %9.1f %6.2fx %8.0fms %8.0fms %6.2fx %7s %7s\n", levels[i],
                    a["tokens_per_s"].get<double>(), b["tokens_per_s"].get<double>(), tps,
                    a["ttft_ms_p50"].get<double>(), b["ttft_ms_p50"].get<double>(), ttft,
                    valid_text(a).c_str(), valid_text(b).c_str());
      }
    }
    report["comparison"] = cmp;
  }
  if (as_json) std::cout << report.dump(2) << "\n";
  if (check) {
    for (const json& run : runs) {
      for (const json& l : run["levels"]) {
        if (l["failed"].get<size_t>() > 0 ||
            l["valid"].get<size_t>() + l["cut_by_length"].get<size_t>() !=
                l["structured"].get<size_t>()) {
          for (const auto& [why, n] : l["failed_by_reason"].items()) {
            std::fprintf(stderr, "lacuna bench serve: %zu failed: %s\n", n.get<size_t>(),
                         why.c_str());
          }
          return 1;
        }
      }
    }
  }
  return 0;
}
