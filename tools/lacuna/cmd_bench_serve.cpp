// cmd_bench_serve.cpp — `lacuna bench serve`: a load generator for any OpenAI-compatible
// server (lacuna serve, llama.cpp's llama-server). Streams every request and reports, per
// concurrency: completion tokens/s, time to first token and per-token latency (p50, p99),
// and the share of structured outputs that are valid. Workloads: bench/data/serve/*.json.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "command.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Sample {
  bool ok = false;
  int status = 0;
  double ttft_ms = 0;       // request sent to the first content, reasoning or tool-call delta
  double per_token_ms = 0;  // (last delta - first delta) / (completion tokens - 1)
  size_t completion_tokens = 0;
  bool structured = false;  // the request asked for a schema or a tool call
  bool valid = false;
  json message;  // the assembled assistant message
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
  s.status = sent ? res.status : 0;
  s.ok = sent && res.status == 200 && got_first;
  if (!s.ok) return s;
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

}  // namespace

LACUNA_COMMAND(cmd_bench_serve, "bench-serve",
               "load-test an OpenAI-compatible server (throughput, TTFT, per-token latency)") {
  std::string url;
  std::string workload_path;
  std::string levels_text = "1,4,16";
  std::string api_key;
  int requests = 32;
  bool as_json = false;
  CLI::App app{
      "Sends a workload's chat requests (streamed) to an OpenAI-compatible server at each "
      "concurrency and prints completion tokens/s, TTFT and per-token latency p50/p99, and "
      "the share of valid structured outputs. Asserts nothing.",
      "lacuna bench serve"};
  app.add_option("--url", url, "server, e.g. http://127.0.0.1:8080")->required();
  app.add_option("--workload", workload_path, "bench/data/serve/*.json")->required();
  app.add_option("--concurrency", levels_text, "comma-separated client counts (default 1,4,16)");
  app.add_option("--requests", requests, "requests per concurrency level (default 32)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--api-key", api_key, "Bearer key");
  app.add_flag("--json", as_json, "print JSON");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;

  std::ifstream in(workload_path);
  if (!in) {
    std::cerr << "lacuna bench serve: cannot read " << workload_path << "\n";
    return 2;
  }
  const json workload = json::parse(in, nullptr, false);
  if (workload.is_discarded() || !workload.is_object()) {
    std::cerr << "lacuna bench serve: " << workload_path << " is not a JSON object\n";
    return 2;
  }
  const std::vector<int> levels = parse_levels(levels_text);
  const int max_tokens = workload.value("max_tokens", 128);
  const double temperature = workload.value("temperature", 0.0);
  const bool agent = workload.contains("agent");

  json report = {
      {"url", url}, {"workload", workload.value("name", workload_path)}, {"levels", json::array()}};
  if (!as_json) {
    std::printf("workload %s, %d requests per level, max_tokens %d\n",
                workload.value("name", workload_path).c_str(), requests, max_tokens);
    std::printf("%5s %5s %6s %8s %8s %10s %10s %10s %10s %9s\n", "conc", "ok", "errors", "tokens",
                "tok/s", "ttft p50", "ttft p99", "tpot p50", "tpot p99", "valid");
  }
  for (const int conc : levels) {
    std::atomic<int> next{0};
    std::mutex mu;
    std::vector<Sample> samples;
    const Clock::time_point t0 = Clock::now();
    auto worker = [&](int w) {
      httplib::Client cli(url);
      cli.set_read_timeout(600, 0);
      cli.set_write_timeout(600, 0);
      auto body_for = [&](json body) {
        body["max_tokens"] = max_tokens;
        body["temperature"] = temperature;
        body["seed"] = w;
        return body;
      };
      if (agent) {
        // Each client runs conversations that resend their growing history.
        const json& a = workload["agent"];
        while (next.load() < requests) {
          json messages = json::array({{{"role", "system"}, {"content", a["system"]}}});
          for (const json& turn : a["turns"]) {
            if (next.fetch_add(1) >= requests) return;
            messages.push_back({{"role", "user"}, {"content", turn}});
            const json body = body_for({{"messages", messages}});
            Sample s = send_chat(cli, api_key, body);
            if (s.ok) {
              json reply = s.message;
              messages.push_back(reply);
            }
            std::lock_guard<std::mutex> lock(mu);
            samples.push_back(std::move(s));
          }
        }
        return;
      }
      const json& reqs = workload["requests"];
      for (int i = next.fetch_add(1); i < requests; i = next.fetch_add(1)) {
        const json body = body_for(reqs[static_cast<size_t>(i) % reqs.size()]);
        Sample s = send_chat(cli, api_key, body);
        if (s.ok) validate(s, body);
        std::lock_guard<std::mutex> lock(mu);
        samples.push_back(std::move(s));
      }
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < conc; ++w) threads.emplace_back(worker, w);
    for (auto& t : threads) t.join();
    const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    size_t ok = 0, tokens = 0, structured = 0, valid = 0;
    std::vector<double> ttft, tpot;
    for (const Sample& s : samples) {
      if (!s.ok) continue;
      ++ok;
      tokens += s.completion_tokens;
      ttft.push_back(s.ttft_ms);
      if (s.completion_tokens > 1) tpot.push_back(s.per_token_ms);
      if (s.structured) {
        ++structured;
        valid += s.valid ? 1 : 0;
      }
    }
    const double tps = static_cast<double>(tokens) / wall_s;
    json level = {{"concurrency", conc},
                  {"requests", samples.size()},
                  {"ok", ok},
                  {"errors", samples.size() - ok},
                  {"completion_tokens", tokens},
                  {"wall_s", wall_s},
                  {"tokens_per_s", tps},
                  {"ttft_ms_p50", percentile(ttft, 0.5)},
                  {"ttft_ms_p99", percentile(ttft, 0.99)},
                  {"tpot_ms_p50", percentile(tpot, 0.5)},
                  {"tpot_ms_p99", percentile(tpot, 0.99)},
                  {"structured", structured},
                  {"valid", valid}};
    report["levels"].push_back(level);
    if (!as_json) {
      const std::string v =
          structured ? std::to_string(valid) + "/" + std::to_string(structured) : std::string("-");
      std::printf("%5d %5zu %6zu %8zu %8.1f %8.1fms %8.1fms %8.1fms %8.1fms %9s\n", conc, ok,
                  samples.size() - ok, tokens, tps, percentile(ttft, 0.5), percentile(ttft, 0.99),
                  percentile(tpot, 0.5), percentile(tpot, 0.99), v.c_str());
      std::fflush(stdout);
    }
  }
  if (as_json) std::cout << report.dump(2) << "\n";
  return 0;
}
