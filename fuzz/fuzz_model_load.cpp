// fuzz_model_load.cpp — libFuzzer target for model loading: any bytes given as a model file
// must load or raise lacuna::ModelError, never crash, abort or hang.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lacuna/log.h"
#include "lacuna/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/lacuna-fuzz-model-" + std::to_string(::getpid()) + ".gguf";
  static const bool quiet = [] {
    lacuna::set_log_level(lacuna::LogLevel::none);
    return true;
  }();
  (void)quiet;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!ok) return 0;
  for (bool vocab_only : {true, false}) {
    lacuna::ModelParams params;
    params.vocab_only = vocab_only;
    params.use_mmap = false;
    try {
      const lacuna::Model model = lacuna::Model::load(path, params);
      // A model that loads must tokenize without crashing.
      const lacuna::Vocab vocab = model.vocab();
      const auto tokens = lacuna::tokenize(vocab, "Hello, world! 123", false, false);
      (void)lacuna::detokenize(vocab, tokens);
    } catch (const lacuna::ModelError&) {
    } catch (const std::invalid_argument&) {  // tokenize: BOS/EOS asked for but undefined
    }
  }
  return 0;
}
