// cmd_template.cpp — `lacuna template`: prints the prompt a conversation formats to with the
// model's chat template (or a named one), as `lacuna chat` would send it.
#include <iostream>

#include "chat_args.h"
#include "cli_args.h"
#include "command.h"
#include "lacuna/chat.h"
#include "lacuna/model.h"

LACUNA_COMMAND(cmd_template, "template", "print the prompt a conversation formats to") {
  lacuna::cli::ChatArgs args;
  bool no_generation_prompt = false;
  bool show_constraint = false;
  CLI::App app{
      "Formats OpenAI-style messages (and tools) with the model's chat template and "
      "prints the prompt text.",
      "lacuna template"};
  args.add_to(app, /*messages_required=*/true);
  app.add_flag("--no-generation-prompt", no_generation_prompt,
               "do not open the assistant's turn at the end");
  app.add_flag("--constraint", show_constraint,
               "print the answer's constraint instead: the chat format, its triggers and "
               "the GBNF lacuna enforces");
  if (const int rc = lacuna::cli::parse_args(app, argc, argv); rc >= 0) return rc;
  lacuna::ModelParams mp;
  mp.vocab_only = true;  // the template and tokenizer are all it needs
  const lacuna::Model model = lacuna::Model::load(args.model_path, mp);
  try {
    const auto tmpl = lacuna::chat::Template::for_model(model.get(), args.chat_template);
    lacuna::chat::Request req = args.request();
    req.add_generation_prompt = !no_generation_prompt;
    const lacuna::chat::Prompt p = tmpl.apply(req);
    if (!show_constraint) {
      std::cout << p.text;
    } else {
      std::cout << "# format: " << p.format << "\n";
      if (!p.constraint_error.empty())
        std::cout << "# not constrained: " << p.constraint_error << "\n";
      for (const std::string& t : p.triggers) std::cout << "# trigger: " << t << "\n";
      std::cout << p.gbnf;
    }
    std::cout.flush();
  } catch (const std::exception& e) {
    std::cerr << "lacuna template: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
