// cmd_chat.cpp — `lacuna chat`: a conversation with the model's chat template, tool calls
// valid by construction (docs/chat.md). With --messages it answers once and prints the
// parsed assistant message; without, it is an interactive chat on stdin whose turns reuse the
// KV of the previous ones (one runtime Branch: each turn sets the whole conversation's tokens
// and only the new ones are decoded).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "chat_args.h"
#include "cli_args.h"
#include "command.h"
#include "lacuna/chat.h"
#include "lacuna/generator.h"
#include "lacuna/model.h"
#include "lacuna/runtime.h"

namespace {

struct Options {
  int32_t n_predict = 512;
  float temp = 0.0f;
  uint32_t seed = 0;
  int32_t threads = 0;
  uint32_t n_ctx = 4096;
  bool json = false;
};

// One assistant answer: the turn's tokens on the branch (the prefix it holds is kept), the
// turn's constraint, the generation (streamed when `stream`), and the parsed message.
lacuna::chat::Message answer(lacuna::runtime::Context& rt,
                             std::optional<lacuna::runtime::Branch>& branch,
                             lacuna::chat::Conversation& conv, const Options& o, bool stream) {
  const lacuna::chat::Conversation::Turn turn = conv.next_turn();
  if (!branch) {
    lacuna::runtime::BranchParams bp;
    bp.temp = o.temp;
    bp.seed = o.seed;
    bp.max_tokens = static_cast<size_t>(o.n_predict);
    bp.stop_strings = turn.prompt.stops;
    branch = rt.create_branch(bp);
  }
  branch->set_constraint(lacuna::chat::make_constraint(rt.model().vocab_ptr(), turn.prompt));
  const auto t0 = std::chrono::steady_clock::now();
  branch->set_tokens(turn.tokens);
  const double prefill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  branch->generate([&](const lacuna::Step& step) {
    if (stream && !step.text.empty()) {
      std::fwrite(step.text.data(), 1, step.text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  const lacuna::Generator& g = branch->generator();
  const lacuna::GenerationStats& st = g.stats();
  std::fprintf(stderr,
               "%sprompt %zu tokens (%zu reused from the previous turn), generated %zu tokens, "
               "%zu forward passes, prefill %.1f ms, stop: %s\n",
               stream ? "\n" : "", turn.tokens.size(), turn.reused, g.tokens().size(),
               st.forward_passes, prefill_s * 1000.0, lacuna::stop_reason_name(st.stop));
  return conv.add_output(g.text(), g.tokens());
}

void print_message(const lacuna::chat::Message& m, bool json) {
  if (json) {
    std::cout << lacuna::chat::message_to_json(m, 2) << "\n";
    return;
  }
  if (!m.reasoning_content.empty()) std::cout << "[reasoning] " << m.reasoning_content << "\n";
  if (!m.content.empty()) std::cout << m.content << "\n";
  for (const auto& c : m.tool_calls)
    std::cout << "[tool call] " << c.name << " " << c.arguments << "\n";
}

}  // namespace

LACUNA_COMMAND(cmd_chat, "chat",
               "chat with the model's template; tool calls valid by construction") {
  lacuna::cli::ChatArgs args;
  Options o;
  CLI::App app{
      "A conversation with the model's chat template. With --messages: answer once and "
      "print the assistant message (--json: OpenAI's shape). Without: an interactive "
      "chat on stdin, one line a turn, the KV of earlier turns reused.",
      "lacuna chat"};
  args.add_to(app, /*messages_required=*/false);
  app.add_option("--system", args.system, "a system message first (interactive mode)");
  app.add_option("-n,--n-predict", o.n_predict,
                 "tokens to generate at most per answer (default 512)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--temp", o.temp, "sampling temperature; 0 = greedy (default)")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--seed", o.seed, "sampling seed for --temp > 0 (default 0)");
  app.add_option("--threads", o.threads, "CPU threads (default: all)")->check(CLI::Range(1, 1024));
  app.add_option("--ctx", o.n_ctx, "context size in tokens (default 4096)")
      ->check(CLI::Range(64u, 1u << 24));
  app.add_flag("--json", o.json, "print the answer as OpenAI's assistant message JSON");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;

  const lacuna::Model model = lacuna::Model::load(args.model_path);
  std::optional<lacuna::chat::Template> tmpl;
  lacuna::chat::Request base;
  try {
    tmpl.emplace(lacuna::chat::Template::for_model(model.get(), args.chat_template));
    base = args.request();
    // Bad messages, tools or tool_choice are the caller's error, found before any decoding.
    if (!base.messages.empty()) (void)tmpl->apply(base);
  } catch (const std::exception& e) {
    std::cerr << "lacuna chat: " << e.what() << "\n";
    return 2;
  }
  lacuna::runtime::ContextParams rp;
  try {
    rp.kv = lacuna::kv::KvConfig::from_env();
    rp.decode = lacuna::decode_options_from_env();
  } catch (const std::exception& e) {
    std::cerr << "lacuna chat: " << e.what() << "\n";
    return 2;
  }
  rp.n_ctx = o.n_ctx;
  rp.n_threads = o.threads;
  rp.n_branches = 1;
  rp.n_cache_holders = 1;
  rp.model_path = args.model_path;
  lacuna::runtime::Context rt(model, rp);
  std::optional<lacuna::runtime::Branch> branch;

  std::vector<lacuna::chat::Message> given = std::move(base.messages);
  base.messages.clear();
  lacuna::chat::Conversation conv(*tmpl, model.vocab_ptr(), base);
  if (!args.messages_file.empty()) {
    for (auto& m : given) conv.add(std::move(m));
    try {
      print_message(answer(rt, branch, conv, o, /*stream=*/false), o.json);
    } catch (const lacuna::chat::ChatError& e) {
      std::cerr << "lacuna chat: " << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  if (!args.system.empty()) {
    lacuna::chat::Message sys;
    sys.role = "system";
    sys.content = args.system;
    conv.add(std::move(sys));
  }
  std::cerr << "lacuna chat: one line a turn; an empty line or end of input ends the chat\n";
  std::string line;
  while (std::cerr << "> " && std::getline(std::cin, line) && !line.empty()) {
    lacuna::chat::Message user;
    user.role = "user";
    user.content = line;
    conv.add(std::move(user));
    try {
      const lacuna::chat::Message m = answer(rt, branch, conv, o, /*stream=*/!o.json);
      if (o.json || !m.tool_calls.empty()) print_message(m, o.json);
    } catch (const lacuna::chat::ChatError& e) {
      std::cerr << "lacuna chat: " << e.what() << "\n";
    }
  }
  return 0;
}
