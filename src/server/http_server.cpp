// http_server.cpp — lacuna::server::Server: the HTTP routes (cpp-httplib's worker threads
// parse, template, tokenize, compile constraints and format) in front of the Scheduler
// thread that owns the runtime::Context (docs/server.md).
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "capi/capi_common.h"
#include "decode/constraint_factory.h"
#include "lacuna/chat.h"
#include "lacuna/kv.h"
#include "lacuna/model.h"
#include "lacuna/runtime.h"
#include "lacuna/server.h"
#include "server/api_request.h"
#include "server/api_response.h"
#include "server/metrics.h"
#include "server/peer_socket.h"
#include "server/scheduler.h"

namespace lacuna::server {

using json = nlohmann::json;

namespace {

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_body(e), "application/json");
}

std::string sse(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

}  // namespace

struct Server::Impl {
  ServerOptions opt;
  Model model;
  std::optional<chat::Template> tmpl;
  // Template::apply is not safe on several threads at once: llama.cpp's template code formats
  // the time with localtime (glibc's tzset state; TSan saw the race). One at a time.
  std::mutex template_mu;
  std::unique_ptr<runtime::Context> ctx;
  Metrics metrics;
  std::unique_ptr<Scheduler> scheduler;
  httplib::Server http;
  std::thread listener;
  int port = 0;
  std::string model_id;
  int64_t created = unix_now();
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stopped{false};
  std::mutex stop_mu;
  // /v1/embeddings: a second context (embeddings = true, mean pooling) made on first use;
  // one request at a time uses it (one thread at a time per runtime::Context).
  std::mutex embed_mu;
  std::unique_ptr<runtime::Context> embed_ctx;

  explicit Impl(ServerOptions o) : opt(std::move(o)), model(Model::load(opt.model_path)) {
    if (opt.parallel == 0 || opt.parallel > 256) {
      throw std::invalid_argument("--parallel must be between 1 and 256");
    }
    model_id = std::filesystem::path(opt.model_path).filename().string();
    try {
      tmpl.emplace(chat::Template::for_model(model.get(), opt.chat_template));
    } catch (const chat::ChatError& e) {
      // A model without a template still serves /v1/completions; chat gets a clear 400.
      if (!opt.chat_template.empty()) throw;
      std::fprintf(stderr, "lacuna serve: no chat template (%s); /v1/chat/completions is off\n",
                   e.what());
    }
    runtime::ContextParams rp;
    rp.kv = kv::KvConfig::from_env();
    if (!opt.persist_dir.empty()) rp.kv.persist_dir = opt.persist_dir;
    rp.decode = decode_options_from_env();
    rp.n_ctx = opt.n_ctx;
    rp.n_batch = opt.n_batch;
    rp.n_ubatch = opt.n_batch;
    rp.n_branches = static_cast<uint32_t>(opt.parallel);
    rp.n_threads = opt.n_threads;
    rp.n_threads_batch = opt.n_threads;
    rp.model_path = opt.model_path;
    ctx = std::make_unique<runtime::Context>(model, rp);
    SchedulerOptions so;
    so.parallel = opt.parallel;
    so.queue = opt.queue;
    so.prefill_chunk = opt.n_batch;
    scheduler = std::make_unique<Scheduler>(*ctx, so, metrics);
    routes();
  }

  ~Impl() { stop(); }

  void stop() {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopped.exchange(true)) return;
    // Jobs end first (their handlers then return), then the listener and the workers.
    scheduler->stop();
    http.stop();
    if (listener.joinable()) listener.join();
  }

  // ---- requests to jobs ----------------------------------------------------------------

  struct Prepared {
    std::shared_ptr<Job> job;
    std::optional<chat::Prompt> prompt;  // chat: for parsing the output
  };

  std::unique_ptr<Constraint> extension_constraint(const GenRequest& g) {
    if (!g.has_extension_constraint()) return nullptr;
    if (!g.token_trie.empty()) {
      try {
        lacuna_token_trie_params tp = lacuna_token_trie_default_params();
        tp.mode = LACUNA_TRIE_MODE_SAMPLE;  // the request's sampler picks among the allowed
        tp.descriptor_path = g.token_trie_path.empty() ? nullptr : g.token_trie_path.c_str();
        return decode::make_lazy(
            model.vocab_ptr(),
            capi::make_trie(model.vocab_ptr(), g.token_trie.data(), g.token_trie.size(), tp),
            g.lazy_triggers);
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("invalid token_trie: ") + e.what(), "token_trie");
      }
    }
    const char* param = !g.grammar.empty() ? "grammar" : (!g.regex.empty() ? "regex" : "choices");
    try {
      std::string gbnf;
      if (!g.grammar.empty()) {
        gbnf = g.grammar;
      } else if (!g.regex.empty()) {
        decode::ConstraintSpec spec;
        spec.regex = g.regex;
        gbnf = decode::spec_to_gbnf(spec);
      } else {
        gbnf = decode::choices_to_gbnf(g.choices);
      }
      return decode::make_grammar_constraint(model.vocab_ptr(), gbnf, g.lazy_triggers);
    } catch (const std::exception& e) {
      throw ApiError(400, std::string("invalid ") + param + ": " + e.what(), param);
    }
  }

  Prepared prepare(GenRequest& g) {
    Prepared p;
    auto job = std::make_shared<Job>();
    const Vocab vocab = model.vocab();
    std::unique_ptr<Constraint> constraint = extension_constraint(g);
    std::vector<std::string> stops = g.stop;
    if (g.kind == GenRequest::Kind::chat) {
      if (!tmpl)
        throw ApiError(400, "the model has no chat template; use /v1/completions", "messages");
      chat::Prompt prompt;
      try {
        {
          std::lock_guard<std::mutex> lock(template_mu);
          prompt = tmpl->apply(g.chat);
        }
        if (!constraint) constraint = chat::make_constraint(model.vocab_ptr(), prompt);
      } catch (const chat::ChatError& e) {
        throw ApiError(400, e.what(), e.pointer.empty() ? "" : e.pointer.substr(1));
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("invalid request: ") + e.what(),
                       g.chat.response_schema.empty() ? "tools" : "response_format");
      }
      job->prompt = chat::tokenize_prompt(model.vocab_ptr(), prompt.text);
      stops.insert(stops.end(), prompt.stops.begin(), prompt.stops.end());
      p.prompt = std::move(prompt);
    } else {
      job->prompt = tokenize(vocab, g.prompt, /*add_special=*/true, /*parse_special=*/true);
    }
    const size_t n_ctx = ctx->n_ctx();
    if (job->prompt.empty()) throw ApiError(400, "the prompt has no tokens", "prompt");
    if (job->prompt.size() + 1 > n_ctx) {
      throw ApiError(400,
                     "the prompt has " + std::to_string(job->prompt.size()) +
                         " tokens; the context holds " + std::to_string(n_ctx),
                     g.kind == GenRequest::Kind::chat ? "messages" : "prompt",
                     "invalid_request_error", "context_length_exceeded");
    }
    runtime::BranchParams& bp = job->params;
    bp.temp = g.temperature;
    bp.top_p = g.top_p;
    bp.top_k = g.top_k;
    bp.min_p = g.min_p;
    bp.seed = g.seed ? *g.seed : static_cast<uint32_t>(std::random_device{}());
    const int64_t want = g.max_tokens > 0 ? g.max_tokens : opt.default_max_tokens;
    bp.max_tokens = static_cast<size_t>(
        std::min<int64_t>(want, static_cast<int64_t>(n_ctx - job->prompt.size())));
    bp.stop_strings = std::move(stops);
    bp.logprobs = g.logprobs;
    job->keep = g.cache_prompt;
    job->constraint = std::move(constraint);
    p.job = std::move(job);
    return p;
  }

  void submit(const std::shared_ptr<Job>& job) {
    switch (scheduler->submit(job)) {
      case Scheduler::Submit::ok:
        return;
      case Scheduler::Submit::queue_full:
        throw ApiError(503, "the server is busy: the queue is full; retry later", "", "server_busy",
                       "queue_full");
      case Scheduler::Submit::stopping:
        throw ApiError(503, "the server is shutting down", "", "server_busy", "shutting_down");
    }
  }

  // ---- generation endpoints ------------------------------------------------------------

  // The jobs of a request's n choices: the prepared one, then copies with the next seeds
  // and their own forks of the constraint. All are queued, or none (503).
  std::vector<std::shared_ptr<Job>> choice_jobs(const std::shared_ptr<Job>& first, int n) {
    std::vector<std::shared_ptr<Job>> jobs = {first};
    for (int i = 1; i < n; ++i) {
      auto job = std::make_shared<Job>();
      job->prompt = first->prompt;
      job->params = first->params;
      job->params.seed = first->params.seed + static_cast<uint32_t>(i);
      job->keep = first->keep;
      if (first->constraint) job->constraint = first->constraint->fork();
      job->arrival = first->arrival;
      jobs.push_back(std::move(job));
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      try {
        submit(jobs[i]);
      } catch (const ApiError&) {
        for (size_t k = 0; k < i; ++k) jobs[k]->cancel();
        throw;
      }
    }
    return jobs;
  }

  static void cancel_all(const std::vector<std::shared_ptr<Job>>& jobs) {
    for (const auto& j : jobs) j->cancel();
  }

  static ApiError job_error(const Job::Update& u) {
    return ApiError(u.error_status, u.error, "",
                    u.error_status == 503 ? "server_busy" : "server_error");
  }

  void generate(const httplib::Request& req, httplib::Response& res, GenRequest::Kind kind) {
    GenRequest g = kind == GenRequest::Kind::chat ? parse_chat_request(req.body)
                                                  : parse_completion_request(req.body);
    auto prepared = std::make_shared<Prepared>(prepare(g));
    prepared->job->arrival = std::chrono::steady_clock::now();
    const std::vector<std::shared_ptr<Job>> jobs = choice_jobs(prepared->job, g.n);
    const bool chat = kind == GenRequest::Kind::chat;
    const bool has_tools = !g.chat.tools.empty();
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created_at = unix_now();
    const std::string object = chat ? "chat.completion" : "text_completion";

    if (!g.stream) {
      // Nothing is written until the end, so a client that goes away is seen on its socket:
      // end of file there cancels the jobs (seen by the scheduler at its next step).
      const int fd =
          find_peer_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
      std::vector<Job::Update> updates(jobs.size());
      for (size_t i = 0; i < jobs.size(); ++i) {
        while (!updates[i].ended) {
          jobs[i]->wait(updates[i], std::chrono::milliseconds(100));
          if (!updates[i].ended && !jobs[i]->cancelled() && peer_closed(fd)) cancel_all(jobs);
        }
        if (updates[i].failed) {
          cancel_all(jobs);
          throw job_error(updates[i]);
        }
      }
      json choices = json::array();
      std::vector<JobResult> results;
      for (size_t i = 0; i < jobs.size(); ++i) {
        const Job::Update& u = updates[i];
        json choice = {{"index", i}, {"logprobs", nullptr}};
        if (g.logprobs >= 0) {
          size_t offset = 0;
          choice["logprobs"] = chat ? chat_logprobs_json(model.vocab(), u.logprobs)
                                    : completion_logprobs_json(model.vocab(), u.logprobs, offset);
        }
        if (chat) {
          const chat::Message m = final_message(*prepared->prompt, has_tools, u.text);
          choice["message"] = message_json(m);
          choice["finish_reason"] = finish_reason(u.result.stop, !m.tool_calls.empty());
        } else {
          choice["text"] = u.text;
          choice["finish_reason"] = finish_reason(u.result.stop, false);
        }
        choices.push_back(std::move(choice));
        results.push_back(u.result);
      }
      json body = {{"id", id},
                   {"object", object},
                   {"created", created_at},
                   {"model", model_id},
                   {"system_fingerprint", "lacuna"},
                   {"choices", std::move(choices)},
                   {"usage", usage_json(results)},
                   {"timings", timings_json(results[0])}};
      send_json(res, 200, body);
      return;
    }

    // Streaming: SSE chunks from this worker thread while the scheduler generates; each
    // choice's deltas carry its index, its finish chunk comes when it ends, [DONE] after all.
    struct Choice {
      std::shared_ptr<Job> job;
      std::shared_ptr<ChatStream> stream;  // chat
      Job::Update state;
      size_t sent = 0;       // completions: bytes of the text sent
      size_t lp_sent = 0;    // log-probability records sent
      size_t lp_offset = 0;  // completions: text_offset of the next record
      bool finished = false;
    };
    auto choices = std::make_shared<std::vector<Choice>>();
    for (const auto& job : jobs) {
      Choice& c = choices->emplace_back();
      c.job = job;
      if (chat) c.stream = std::make_shared<ChatStream>(*prepared->prompt, has_tools);
    }
    const bool include_usage = g.include_usage;
    const std::string model_name = model_id;
    auto opened = std::make_shared<bool>(false);
    auto chunk = [=](size_t index, const json& delta_or_text, const json& finish,
                     const json& logprobs = nullptr) {
      json choice = {{"index", index}, {"finish_reason", finish}, {"logprobs", logprobs}};
      if (chat) {
        choice["delta"] = delta_or_text;
      } else {
        choice["text"] = delta_or_text;
      }
      return json{{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_at},
                  {"model", model_name},
                  {"system_fingerprint", "lacuna"},
                  {"choices", json::array({choice})}};
    };
    // A choice's log-probabilities not sent yet (null when none, or none were asked for).
    const int want_logprobs = g.logprobs;
    const Vocab vocab = model.vocab();
    auto unsent_logprobs = [=](Choice& c) -> json {
      if (want_logprobs < 0 || c.lp_sent >= c.state.logprobs.size()) return nullptr;
      const auto lp = std::span<const TokenLogprob>(c.state.logprobs).subspan(c.lp_sent);
      c.lp_sent = c.state.logprobs.size();
      return chat ? chat_logprobs_json(vocab, lp)
                  : completion_logprobs_json(vocab, lp, c.lp_offset);
    };
    // One wait per call for a single choice; with several, short waits in turn.
    const auto wait_for = std::chrono::milliseconds(jobs.size() == 1 ? 200 : 10);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink& sink) -> bool {
          auto write = [&](const std::string& s) {
            if (!sink.write(s.data(), s.size())) {
              cancel_all(jobs);
              return false;
            }
            return true;
          };
          if (!*opened) {
            *opened = true;
            for (size_t i = 0; chat && i < choices->size(); ++i) {
              if (!write(sse(chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr)))) {
                return false;
              }
            }
          }
          bool all_finished = true;
          for (size_t i = 0; i < choices->size(); ++i) {
            Choice& c = (*choices)[i];
            if (c.finished) continue;
            const size_t before = c.state.text.size();
            c.job->wait(c.state, wait_for);
            if (c.job->cancelled()) return false;
            if (!c.state.ended) {
              all_finished = false;
              if (c.state.text.size() == before) continue;
              if (chat) {
                for (const json& d : c.stream->feed(c.state.text, false)) {
                  if (!write(sse(chunk(i, d, nullptr, unsent_logprobs(c))))) return false;
                }
              } else if (const size_t end = utf8_complete_prefix(c.state.text); end > c.sent) {
                if (!write(sse(chunk(i, c.state.text.substr(c.sent, end - c.sent), nullptr,
                                     unsent_logprobs(c))))) {
                  return false;
                }
                c.sent = end;
              }
              continue;
            }
            if (c.state.failed) {
              cancel_all(jobs);
              if (!write("data: " + error_body(job_error(c.state)) + "\n\n")) return false;
              if (!write("data: [DONE]\n\n")) return false;
              sink.done();
              return true;
            }
            c.finished = true;
            if (chat) {
              for (const json& d : c.stream->feed(c.state.text, true)) {
                if (!write(sse(chunk(i, d, nullptr, unsent_logprobs(c))))) return false;
              }
              const bool has_calls = !c.stream->message().tool_calls.empty();
              if (!write(sse(chunk(i, json::object(), finish_reason(c.state.result.stop, has_calls),
                                   unsent_logprobs(c))))) {
                return false;
              }
            } else {
              if (c.state.text.size() > c.sent &&
                  !write(sse(chunk(i, c.state.text.substr(c.sent), nullptr, unsent_logprobs(c))))) {
                return false;
              }
              if (!write(sse(chunk(i, "", finish_reason(c.state.result.stop, false),
                                   unsent_logprobs(c))))) {
                return false;
              }
            }
          }
          if (!all_finished) return true;
          if (include_usage) {
            std::vector<JobResult> results;
            for (const Choice& c : *choices) results.push_back(c.state.result);
            json u = {{"id", id},
                      {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created_at},
                      {"model", model_name},
                      {"choices", json::array()},
                      {"usage", usage_json(results)},
                      {"timings", timings_json(results[0])}};
            if (!write(sse(u))) return false;
          }
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        },
        [jobs](bool success) {
          if (!success) cancel_all(jobs);
        });
  }

  // ---- other endpoints -----------------------------------------------------------------

  static json parse_object(const std::string& body) {
    json j;
    try {
      j = json::parse(body);
    } catch (const json::exception& e) {
      throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
    return j;
  }

  void tokenize_route(const httplib::Request& req, httplib::Response& res) {
    const json j = parse_object(req.body);
    if (!j.contains("content") || !j["content"].is_string()) {
      throw ApiError(400, "\"content\" must be a string", "content");
    }
    auto flag = [&](const char* key, bool def) {
      if (!j.contains(key)) return def;
      if (!j[key].is_boolean())
        throw ApiError(400, std::string("\"") + key + "\" must be a boolean", key);
      return j[key].get<bool>();
    };
    const bool add_special = flag("add_special", false);
    const bool parse_special = flag("parse_special", true);
    const bool with_pieces = flag("with_pieces", false);
    const Vocab vocab = model.vocab();
    const std::vector<Token> toks =
        tokenize(vocab, j["content"].get<std::string>(), add_special, parse_special);
    json arr = json::array();
    for (Token t : toks) {
      if (with_pieces) {
        arr.push_back({{"id", t}, {"piece", token_to_piece(vocab, t, true)}});
      } else {
        arr.push_back(t);
      }
    }
    send_json(res, 200, {{"tokens", arr}});
  }

  void detokenize_route(const httplib::Request& req, httplib::Response& res) {
    const json j = parse_object(req.body);
    if (!j.contains("tokens") || !j["tokens"].is_array()) {
      throw ApiError(400, "\"tokens\" must be an array of token ids", "tokens");
    }
    const Vocab vocab = model.vocab();
    std::vector<Token> toks;
    for (size_t i = 0; i < j["tokens"].size(); ++i) {
      const json& t = j["tokens"][i];
      if (!t.is_number_integer() || !vocab.valid(static_cast<Token>(t.get<int64_t>())) ||
          t.get<int64_t>() != static_cast<Token>(t.get<int64_t>())) {
        throw ApiError(400, "a token id outside the vocabulary", "tokens/" + std::to_string(i));
      }
      toks.push_back(static_cast<Token>(t.get<int64_t>()));
    }
    send_json(res, 200, {{"content", detokenize(vocab, toks, false, true)}});
  }

  void apply_template_route(const httplib::Request& req, httplib::Response& res) {
    GenRequest g = parse_chat_request(req.body);
    if (!tmpl) throw ApiError(400, "the model has no chat template", "messages");
    try {
      chat::Prompt p;
      {
        std::lock_guard<std::mutex> lock(template_mu);
        p = tmpl->apply(g.chat);
      }
      send_json(res, 200, {{"prompt", p.text}, {"format", p.format}});
    } catch (const chat::ChatError& e) {
      throw ApiError(400, e.what(), e.pointer.empty() ? "" : e.pointer.substr(1));
    }
  }

  void embeddings_route(const httplib::Request& req, httplib::Response& res) {
    const json j = parse_object(req.body);
    std::vector<std::string> inputs;
    const auto it = j.find("input");
    if (it == j.end()) throw ApiError(400, "\"input\" is required", "input");
    if (it->is_string()) {
      inputs.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty() && it->size() <= 256) {
      for (size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string()) {
          throw ApiError(400, "\"input\" must hold strings", "input/" + std::to_string(i));
        }
        inputs.push_back((*it)[i].get<std::string>());
      }
    } else {
      throw ApiError(400, "\"input\" must be a string or an array of 1 to 256 strings", "input");
    }
    if (j.contains("encoding_format") && j["encoding_format"] != "float") {
      throw ApiError(400, "only encoding_format \"float\" is supported", "encoding_format");
    }
    const Vocab vocab = model.vocab();
    std::vector<std::vector<Token>> tokens;
    for (size_t i = 0; i < inputs.size(); ++i) {
      tokens.push_back(tokenize(vocab, inputs[i], /*add_special=*/true, /*parse_special=*/false));
      if (tokens.back().empty()) {
        throw ApiError(400, "an input without tokens", "input/" + std::to_string(i));
      }
      if (tokens.back().size() > embed_n_ctx()) {
        throw ApiError(400,
                       "an input of " + std::to_string(tokens.back().size()) +
                           " tokens; embeddings take at most " + std::to_string(embed_n_ctx()),
                       "input/" + std::to_string(i), "invalid_request_error",
                       "context_length_exceeded");
      }
    }
    json data = json::array();
    size_t total = 0;
    {
      std::lock_guard<std::mutex> lock(embed_mu);
      if (!embed_ctx) {
        runtime::ContextParams rp;
        rp.embeddings = true;
        rp.n_ctx = embed_n_ctx();
        rp.n_batch = embed_n_ctx();
        rp.n_ubatch = embed_n_ctx();
        rp.n_branches = 1;
        rp.n_cache_holders = 0;
        rp.kv.prefix_cache = false;
        rp.n_threads = opt.n_threads;
        rp.n_threads_batch = opt.n_threads;
        rp.model_path = opt.model_path;
        embed_ctx = std::make_unique<runtime::Context>(model, rp);
      }
      for (size_t i = 0; i < tokens.size(); ++i) {
        data.push_back(
            {{"object", "embedding"}, {"index", i}, {"embedding", embed_ctx->encode(tokens[i])}});
        total += tokens[i].size();
      }
    }
    send_json(res, 200,
              {{"object", "list"},
               {"data", data},
               {"model", model_id},
               {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
  }

  uint32_t embed_n_ctx() const { return std::min<uint32_t>(opt.n_ctx, 2048); }

  json model_json() const {
    return {{"id", model_id},
            {"object", "model"},
            {"created", created},
            {"owned_by", "lacuna"},
            {"meta",
             {{"architecture", model.architecture()},
              {"n_params", model.n_params()},
              {"size", model.size_bytes()},
              {"n_ctx_train", model.n_ctx_train()},
              {"n_ctx", ctx->n_ctx()},
              {"n_vocab", model.vocab().n_vocab()},
              {"parallel", opt.parallel}}}};
  }

  json slots_json() const {
    json arr = json::array();
    for (const SlotInfo& s : scheduler->slots()) {
      arr.push_back({{"id", s.id},
                     {"is_processing", s.busy},
                     {"request", s.job},
                     {"prompt_tokens", s.prompt_tokens},
                     {"prefilled", s.prefilled},
                     {"generated", s.generated}});
    }
    return arr;
  }

  // Every handler's ApiError becomes its status and body; anything else is the server's
  // fault (500), counted and reported without taking the process down.
  httplib::Server::Handler wrap(
      std::function<void(const httplib::Request&, httplib::Response&)> f) {
    return [f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(error_body(std::string("internal error: ") + e.what(), "server_error"),
                        "application/json");
      }
    };
  }

  void routes() {
    using Kind = GenRequest::Kind;
    http.Post("/v1/chat/completions",
              wrap([this](const auto& q, auto& r) { generate(q, r, Kind::chat); }));
    http.Post("/chat/completions",
              wrap([this](const auto& q, auto& r) { generate(q, r, Kind::chat); }));
    http.Post("/v1/completions",
              wrap([this](const auto& q, auto& r) { generate(q, r, Kind::completion); }));
    http.Post("/completions",
              wrap([this](const auto& q, auto& r) { generate(q, r, Kind::completion); }));
    http.Post("/tokenize", wrap([this](const auto& q, auto& r) { tokenize_route(q, r); }));
    http.Post("/detokenize", wrap([this](const auto& q, auto& r) { detokenize_route(q, r); }));
    http.Post("/apply-template",
              wrap([this](const auto& q, auto& r) { apply_template_route(q, r); }));
    http.Post("/v1/embeddings", wrap([this](const auto& q, auto& r) { embeddings_route(q, r); }));
    http.Post("/embeddings", wrap([this](const auto& q, auto& r) { embeddings_route(q, r); }));

    http.Get("/v1/models", wrap([this](const auto&, auto& r) {
               send_json(r, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
             }));
    http.Get("/health", wrap([](const auto&, auto& r) { send_json(r, 200, {{"status", "ok"}}); }));
    http.Get("/slots", wrap([this](const auto&, auto& r) { send_json(r, 200, slots_json()); }));
    http.Get("/metrics", wrap([this](const auto&, auto& r) {
               r.set_content(metrics.prometheus(), "text/plain; version=0.0.4");
             }));

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      // Every body here is JSON. A client that does not say so (curl -d, urllib) sends
      // application/x-www-form-urlencoded, which cpp-httplib would parse as a form and
      // refuse past 8 KiB (413): read it as JSON. (req is the server's own non-const
      // object, handed over as const.)
      if (req.get_header_value("Content-Type") == "application/x-www-form-urlencoded") {
        auto& headers = const_cast<httplib::Request&>(req).headers;
        headers.erase("Content-Type");
        headers.emplace("Content-Type", "application/json");
      }
      if (opt.api_key.empty() || req.path == "/health")
        return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      if (auth != "Bearer " + opt.api_key) {
        send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)", "",
                                 "authentication_error", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Responses httplib makes itself (404, 413, 400 for a bad request line) get the shape too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message = "error " + std::to_string(res.status);
      std::string type = "invalid_request_error";
      if (res.status == 404) {
        message = "no route " + req.method + " " + req.path;
        type = "not_found_error";
      } else if (res.status == 413) {
        message = "the request body is too large";
      } else if (res.status == 405) {
        message = "method " + req.method + " not allowed on " + req.path;
      }
      res.set_content(error_body(message, type), "application/json");
    });
    http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      metrics.count_response(res.status);
    });
    http.set_payload_max_length(opt.max_body);
    http.set_read_timeout(opt.timeout_s, 0);
    http.set_write_timeout(opt.timeout_s, 0);
    const int threads =
        opt.http_threads > 0
            ? opt.http_threads
            : static_cast<int>(std::min<size_t>(opt.parallel + opt.queue + 8, 1024));
    http.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
  }

  void start() {
    if (opt.port == 0) {
      port = http.bind_to_any_port(opt.host);
      if (port <= 0) throw std::runtime_error("cannot bind to " + opt.host);
    } else {
      if (!http.bind_to_port(opt.host, opt.port)) {
        throw std::runtime_error("cannot bind to " + opt.host + ":" + std::to_string(opt.port));
      }
      port = opt.port;
    }
    // Room for many clients connecting at once (cpp-httplib's own backlog is 5).
    if (widen_listen_backlog(port, SOMAXCONN) == 0) {
      std::fprintf(stderr, "lacuna serve: could not raise the listen backlog (kept at 5)\n");
    }
    scheduler->start();
    listener = std::thread([this] { http.listen_after_bind(); });
  }

  std::string facts() const {
    std::string s;
    s += "model: " + opt.model_path + "\n";
    s += "  " + model.description() + ", architecture " + model.architecture() + ", " +
         std::to_string(model.n_params()) + " parameters, " +
         std::to_string(model.size_bytes() >> 20) + " MiB, trained context " +
         std::to_string(model.n_ctx_train()) + "\n";
    s += "  context " + std::to_string(ctx->n_ctx()) + " cells, " + std::to_string(opt.parallel) +
         " slots, queue " + std::to_string(opt.queue) + ", batch " + std::to_string(opt.n_batch) +
         "\n";
    s += std::string("  chat template: ") + (tmpl ? "yes" : "none") +
         (ctx->persistent_store() ? ", persistent KV store: " + opt.persist_dir : "") + "\n";
    return s;
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Server::~Server() = default;
void Server::start() {
  impl_->start();
}
int Server::port() const {
  return impl_->port;
}
std::string Server::facts() const {
  return impl_->facts();
}
void Server::stop() {
  impl_->stop();
}

}  // namespace lacuna::server
