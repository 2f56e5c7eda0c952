// cmd_make_model.cpp — `lacuna make-model`: writes a random-weight GGUF test/benchmark model.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "command.h"
#include "lacuna/make_model.h"

LACUNA_COMMAND(cmd_make_model, "make-model",
               "write a random-weight GGUF around a real tokenizer (test/bench models)") {
  lacuna::MakeModelOptions opt;
  std::string type;
  bool list = false;
  CLI::App app{
      "Write a deterministic random-weight GGUF model around a tokenizer taken from "
      "llama.cpp's models/ggml-vocab-*.gguf.",
      "lacuna make-model"};
  app.add_option("--preset", opt.preset, "model shape (see --list)");
  app.add_option("--out", opt.out_path, "output .gguf path");
  app.add_option("--seed", opt.seed, "weight seed (default fixed)");
  app.add_option("--type", type, "weight type: f32, f16, q8_0 or q4_0 (default: the preset's)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}));
  app.add_option(
      "--vocab-dir", opt.vocab_dir,
      "directory holding ggml-vocab-*.gguf (default: " + lacuna::default_vocab_dir() + ")");
  app.add_option("--chat-template", opt.chat_template,
                 "chat template: NAME of llama.cpp's models/templates/ (without .jinja), a "
                 "Jinja FILE, or none (default: the preset's)");
  app.add_flag("--skip-existing", opt.skip_existing,
               "do nothing when the output exists and loads as this preset");
  app.add_flag("--list", list, "list the presets and exit");
  try {
    app.parse(argc, argv);
    if (!list && (opt.preset.empty() || opt.out_path.empty())) {
      throw CLI::ValidationError("--preset and --out are required (or --list)");
    }
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "lacuna make-model: " << e.what() << "\n\n" << app.help();
    return 2;
  }

  if (list) {
    for (const lacuna::ModelPreset& p : lacuna::model_presets()) {
      std::printf("%-12s %-5s %-9s %4u x %2u layers, ff %4u, heads %2u/%u, %s  %s\n",
                  p.name.c_str(), p.arch.c_str(), p.vocab.c_str(), p.n_embd, p.n_layer, p.n_ff,
                  p.n_head, p.n_head_kv, lacuna::weight_type_name(p.default_type),
                  p.description.c_str());
    }
    return 0;
  }
  try {
    lacuna::find_model_preset(opt.preset);
    if (!type.empty()) opt.type = lacuna::parse_weight_type(type);
  } catch (const std::invalid_argument& e) {
    std::cerr << "lacuna make-model: " << e.what() << "\n\n" << app.help();
    return 2;
  }

  const lacuna::MakeModelResult r = lacuna::make_model(opt);
  std::printf("%s %s: %s, %llu params, %u tokens, %.1f MiB, %.2f s\n", r.skipped ? "kept" : "wrote",
              r.path.c_str(), opt.preset.c_str(), static_cast<unsigned long long>(r.n_params),
              r.n_vocab, static_cast<double>(r.bytes) / (1024.0 * 1024.0), r.seconds);
  return 0;
}
