// cmd_bench_chat.cpp — `lacuna bench chat`: tool-call requests formatted with the model's chat
// template, answered through lacuna's constraint and, in the same run, through llama.cpp's own
// grammar path (the grammar its chat library builds with its JSON-Schema converter, in
// llama.cpp's sampler chain and plain decode loop). Per tool file: prompt tokens, time to first
// token, ms per token, tool-call validity (checked by an independent validator of the schema),
// and lacuna's constraint overhead per token. It prints figures and asserts nothing.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_args.h"
#include "command.h"
#include "decode/constraint_factory.h"
#include "lacuna/chat.h"
#include "lacuna/generator.h"
#include "lacuna/model.h"

namespace {

namespace chat = lacuna::chat;
using lacuna::Token;
using nlohmann::json;

// An independent check of a value against the JSON Schema keywords the tool files use (type,
// enum, const, properties, required, additionalProperties false, items, min/maxItems,
// minimum/maximum, min/maxLength in code points, pattern, format date/email/uri). Empty: valid.
std::string check(const json& v, const json& s, const std::string& at) {
  if (!s.is_object()) return {};
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) {
    return at + ": not one of the enum";
  }
  if (s.contains("const") && v != s["const"]) return at + ": not the const";
  if (s.contains("type")) {
    const auto is = [&](const std::string& t) {
      return (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
             (t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) ||
             (t == "null" && v.is_null()) || (t == "integer" && v.is_number_integer()) ||
             (t == "number" && v.is_number());
    };
    bool ok = false;
    if (s["type"].is_array()) {
      for (const auto& t : s["type"]) ok = ok || is(t.get<std::string>());
    } else {
      ok = is(s["type"].get<std::string>());
    }
    if (!ok) return at + ": wrong type";
  }
  if (v.is_object()) {
    for (const auto& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
    }
    const json props = s.value("properties", json::object());
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (std::string e = check(x, props[k], at + "/" + k); !e.empty()) return e;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        return at + ": undeclared property " + k;
      }
    }
  }
  if (v.is_array()) {
    if (v.size() < s.value("minItems", size_t{0}) || v.size() > s.value("maxItems", SIZE_MAX)) {
      return at + ": item count";
    }
    for (size_t i = 0; i < v.size() && s.contains("items"); ++i) {
      if (std::string e = check(v[i], s["items"], at + "/" + std::to_string(i)); !e.empty()) {
        return e;
      }
    }
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    if (s.contains("minimum") && d < s["minimum"].get<double>()) return at + ": below minimum";
    if (s.contains("maximum") && d > s["maximum"].get<double>()) return at + ": above maximum";
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    size_t cps = 0;
    for (unsigned char c : str) cps += (c & 0xC0) != 0x80;
    if (cps < s.value("minLength", size_t{0}) || cps > s.value("maxLength", SIZE_MAX)) {
      return at + ": length";
    }
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
      return at + ": pattern";
    }
    const std::string format = s.value("format", "");
    static const std::regex date(R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)");
    static const std::regex email(R"(^[^@\s]+@[^@\s]+$)");
    static const std::regex uri(R"(^[A-Za-z][A-Za-z0-9+.-]*:\S*$)");
    if ((format == "date" && !std::regex_match(str, date)) ||
        (format == "email" && !std::regex_match(str, email)) ||
        (format == "uri" && !std::regex_match(str, uri))) {
      return at + ": format " + format;
    }
  }
  return {};
}

// Empty when the answer is at least one call of a declared tool whose arguments validate.
std::string validate(const chat::Prompt& p, const std::string& out, const json& tools) {
  chat::Message m;
  try {
    m = chat::parse(p, out);
  } catch (const chat::ChatError& e) {
    return e.what();
  }
  if (m.tool_calls.empty()) return "no tool call";
  for (const chat::ToolCall& c : m.tool_calls) {
    const json* schema = nullptr;
    for (const auto& t : tools) {
      if (t["function"]["name"] == c.name) schema = &t["function"]["parameters"];
    }
    if (schema == nullptr) return "undeclared tool " + c.name;
    const json args = json::parse(c.arguments, nullptr, false);
    if (args.is_discarded()) return "arguments are not JSON";
    if (std::string e = check(args, *schema, c.name); !e.empty()) return e;
  }
  return {};
}

struct Side {
  size_t requests = 0, valid = 0, cut = 0, tokens = 0;
  double ttft_ms = 0, decode_ms = 0, mask_ms = 0, prompt_tokens = 0;
  std::string first_error;
  // cut: the answer used the whole token budget (counted apart; not a valid call).
  void add(size_t n_tokens, double ttft, double decode, double mask, bool was_cut,
           const std::string& err) {
    ++requests;
    cut += was_cut ? 1 : 0;
    tokens += n_tokens;
    ttft_ms += ttft;
    decode_ms += decode;
    mask_ms += mask;
    if (err.empty()) {
      ++valid;
    } else if (first_error.empty()) {
      first_error = err;
    }
  }
  double ms_per_token() const { return tokens ? decode_ms / static_cast<double>(tokens) : 0; }
  json to_json() const {
    return {{"requests", requests},
            {"valid", valid},
            {"validity", requests ? static_cast<double>(valid) / static_cast<double>(requests) : 0},
            {"cut_at_budget", cut},
            {"tokens", tokens},
            {"ttft_ms_mean", requests ? ttft_ms / static_cast<double>(requests) : 0},
            {"ms_per_token", ms_per_token()},
            {"mask_ms_per_token", tokens ? mask_ms / static_cast<double>(tokens) : 0},
            {"first_error", first_error}};
  }
};

// llama.cpp's chat sampler: its grammar (lazy with its triggers, or fed the generation
// prompt's tokens first, as its common_sampler does for a chat grammar), then greedy.
llama_sampler* llama_chain(const lacuna::Vocab& lv, const chat::Prompt& p) {
  const llama_vocab* vocab = lv.get();
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler* g = nullptr;
  if (p.llama_grammar_lazy) {
    std::vector<const char*> pats;
    for (const std::string& s : p.llama_trigger_patterns) pats.push_back(s.c_str());
    std::vector<llama_token> toks(p.llama_trigger_tokens.begin(), p.llama_trigger_tokens.end());
    g = llama_sampler_init_grammar_lazy_patterns(
        vocab, p.llama_grammar.c_str(), "root", pats.data(), pats.size(), toks.data(), toks.size());
  } else {
    g = llama_sampler_init_grammar(vocab, p.llama_grammar.c_str(), "root");
  }
  if (g == nullptr) {
    llama_sampler_free(chain);
    throw std::runtime_error("llama.cpp refused its own chat grammar");
  }
  if (!p.llama_grammar_lazy && !p.generation_prompt.empty()) {
    const std::vector<Token> toks = lacuna::tokenize(lv, p.generation_prompt, false, true);
    for (size_t i = 0; i < toks.size(); ++i) {
      const std::string piece = lacuna::token_to_piece(lv, toks[i], true);
      if (i == 0 && !piece.empty() && std::isspace(static_cast<unsigned char>(piece[0])) &&
          !std::isspace(static_cast<unsigned char>(p.generation_prompt[0]))) {
        continue;  // a space some tokenizers put before a first special token
      }
      llama_sampler_accept(g, toks[i]);
    }
  }
  llama_sampler_chain_add(chain, g);
  llama_sampler_chain_add(chain, llama_sampler_init_greedy());
  return chain;
}

}  // namespace

LACUNA_COMMAND(cmd_bench_chat, "bench-chat",
               "tool-call requests: lacuna's constraint vs llama.cpp's chat grammar") {
  std::string model_path, tools_dir = "bench/data/chat_tools", chat_template, json_out;
  int threads = 2, requests = 2, max_tokens = 256;
  std::string tool_choice = "required";
  CLI::App app{
      "Answers tool-call requests (OpenAI tools files) with the model's chat template, through "
      "lacuna's constraint and llama.cpp's own chat grammar in the same run.",
      "lacuna bench chat"};
  app.add_option("-m,--model", model_path, "GGUF model file with a chat template")->required();
  app.add_option("--tools", tools_dir, "directory of OpenAI tools arrays (*.json)");
  app.add_option("--chat-template", chat_template, "template name or file (default: the model's)");
  app.add_option("--tool-choice", tool_choice, "required (default), auto or a tool name");
  app.add_option("--requests", requests, "requests per tools file (default 2)")
      ->check(CLI::Range(1, 1000));
  app.add_option("-n,--max-tokens", max_tokens, "tokens per answer at most (default 256)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--threads", threads, "CPU threads (default 2)")->check(CLI::Range(1, 1024));
  app.add_option("--json", json_out, "also write the figures as JSON to this file");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;

  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(tools_dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no *.json tools files in " + tools_dir);

  const lacuna::Model model = lacuna::Model::load(model_path);
  lacuna::ContextParams cp;
  cp.n_ctx = 4096;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  const chat::Template tmpl = chat::Template::for_model(model.get(), chat_template);
  const lacuna::Vocab vocab = model.vocab();
  const char* asks[] = {"Please use one of your tools to help me with this.",
                        "Do it now with a tool call; pick sensible arguments.",
                        "Which tool fits? Call it."};

  std::printf("%-14s %6s | %-26s | %-26s\n", "tools", "prompt", "lacuna: valid ttft ms/tok",
              "llama.cpp: valid ttft ms/tok");
  Side total_l, total_r;
  json per_file = json::array();
  for (const auto& file : files) {
    const std::string text = lacuna::decode::read_text_file(file.string());
    const json tools = json::parse(text);
    Side lac, ref;
    double prompt_tokens = 0;
    for (int i = 0; i < requests; ++i) {
      chat::Request r;
      r.messages = chat::messages_from_json(
          json::array({{{"role", "system"}, {"content", "You are a helpful agent with tools."}},
                       {{"role", "user"}, {"content", asks[i % 3]}}})
              .dump());
      r.tools = chat::tools_from_json(text);
      r.tool_choice = chat::ToolChoice::parse(tool_choice);
      r.enable_thinking = false;
      r.now_unix = 1721001600;
      const chat::Prompt p = tmpl.apply(r);
      const std::vector<Token> prompt = chat::tokenize_prompt(model.vocab_ptr(), p.text);
      prompt_tokens = static_cast<double>(prompt.size());

      // lacuna: the generator with the chat constraint (greedy).
      llama_memory_clear(llama_get_memory(ctx.get()), true);
      lacuna::GeneratorConfig cfg;
      cfg.max_tokens = static_cast<size_t>(max_tokens);
      cfg.stop_strings = p.stops;
      lacuna::Generator gen(ctx.get(), cfg, chat::make_constraint(model.vocab_ptr(), p));
      gen.prefill(prompt);
      const auto t0 = std::chrono::steady_clock::now();
      gen.next();
      const double first =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      gen.generate();
      const lacuna::GenerationStats& s = gen.stats();
      const bool lac_cut = s.stop == lacuna::StopReason::max_tokens;
      lac.add(s.tokens_emitted, s.prefill_ms + first, s.decode_ms + s.mask_ms + s.sample_ms,
              s.mask_ms, lac_cut,
              lac_cut ? "cut at the token budget" : validate(p, std::string(gen.text()), tools));

      // llama.cpp: its chat library's grammar in its sampler chain, its plain loop.
      llama_sampler* chain = llama_chain(vocab, p);
      const lacuna::ReferenceResult rr =
          lacuna::reference_generate(ctx.get(), chain, prompt, static_cast<size_t>(max_tokens));
      llama_sampler_free(chain);
      std::string out = lacuna::detokenize(vocab, rr.tokens);
      for (const std::string& stop : p.stops) {
        if (const size_t at = out.find(stop); at != std::string::npos) out.resize(at);
      }
      const double per_tok =
          rr.tokens.empty() ? 0 : rr.stats.decode_ms / static_cast<double>(rr.tokens.size());
      const bool ref_cut = rr.tokens.size() >= static_cast<size_t>(max_tokens);
      ref.add(rr.tokens.size(), rr.stats.prefill_ms + per_tok, rr.stats.decode_ms, 0, ref_cut,
              ref_cut ? "cut at the token budget" : validate(p, out, tools));
    }
    const auto row = [&](const Side& x) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%zu/%zu%s %8.1f %7.2f", x.valid, x.requests,
                    x.cut ? "*" : "", x.ttft_ms / static_cast<double>(x.requests),
                    x.ms_per_token());
      return std::string(buf);
    };
    std::printf("%-14s %6.0f | %-26s | %-26s\n", file.stem().string().c_str(), prompt_tokens,
                row(lac).c_str(), row(ref).c_str());
    if (!ref.first_error.empty()) std::printf("    llama.cpp: %s\n", ref.first_error.c_str());
    if (!lac.first_error.empty()) std::printf("    lacuna: %s\n", lac.first_error.c_str());
    per_file.push_back({{"tools", file.stem().string()},
                        {"prompt_tokens", prompt_tokens},
                        {"lacuna", lac.to_json()},
                        {"llama_cpp", ref.to_json()}});
    for (Side* t : {&total_l, &total_r}) {
      const Side& x = t == &total_l ? lac : ref;
      t->requests += x.requests;
      t->valid += x.valid;
      t->cut += x.cut;
      t->tokens += x.tokens;
      t->ttft_ms += x.ttft_ms;
      t->decode_ms += x.decode_ms;
      t->mask_ms += x.mask_ms;
    }
  }
  const double overhead = total_l.decode_ms > 0 ? total_l.mask_ms / total_l.decode_ms : 0;
  std::printf(
      "total: lacuna valid %zu/%zu (%zu cut at the budget), %.2f ms/token, constraint %.2f%% "
      "of decode | llama.cpp valid %zu/%zu (%zu cut), %.2f ms/token | llama.cpp/lacuna ms per "
      "token %.2fx\n",
      total_l.valid, total_l.requests, total_l.cut, total_l.ms_per_token(), 100.0 * overhead,
      total_r.valid, total_r.requests, total_r.cut, total_r.ms_per_token(),
      total_l.ms_per_token() > 0 ? total_r.ms_per_token() / total_l.ms_per_token() : 0.0);
  if (!json_out.empty()) {
    const json all = {{"model", model_path},
                      {"format", tmpl.apply(chat::Request{}).format},
                      {"files", per_file},
                      {"lacuna", total_l.to_json()},
                      {"llama_cpp", total_r.to_json()},
                      {"lacuna_constraint_share_of_decode", overhead}};
    std::ofstream(json_out) << all.dump(2) << "\n";
  }
  return 0;
}
