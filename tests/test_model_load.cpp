// test_model_load.cpp — the tiny models load with the expected shapes; every kind of bad
// model file (missing, empty, random, wrong magic, truncated anywhere, unknown architecture,
// inconsistent metadata) raises a clear ModelError instead of crashing the process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gguf.h"
#include "lacuna/log.h"
#include "lacuna/model.h"
#include "test_models.h"

namespace fs = std::filesystem;

namespace {

using lacuna::ModelError;
using lacuna::ModelErrorKind;

struct PresetCase {
  const char* preset;
  const char* arch;
  int32_t n_vocab;
  enum llama_vocab_type vocab_type;
};

class TinyModelLoad : public ::testing::TestWithParam<PresetCase> {};

TEST_P(TinyModelLoad, LoadsWithTheExpectedShape) {
  const PresetCase& c = GetParam();
  const std::string path = lacuna::testing::ensure_test_model(c.preset);
  const lacuna::Model model = lacuna::Model::load(path);
  EXPECT_FALSE(model.vocab_only());
  EXPECT_EQ(model.path(), path);
  EXPECT_EQ(model.architecture(), c.arch);
  EXPECT_EQ(model.meta("general.name"), std::string("lacuna ") + c.preset);
  EXPECT_EQ(model.meta("no.such.key"), "");
  EXPECT_EQ(model.n_embd(), 64);
  EXPECT_EQ(model.n_layer(), 2);
  EXPECT_EQ(model.n_head(), 4);
  EXPECT_GT(model.n_params(), 0u);
  EXPECT_FALSE(model.description().empty());
  const lacuna::Vocab vocab = model.vocab();
  EXPECT_EQ(vocab.n_vocab(), c.n_vocab);
  EXPECT_EQ(vocab.type(), c.vocab_type);

  const lacuna::GgufInfo info = lacuna::inspect_gguf(path);
  EXPECT_EQ(info.architecture, c.arch);
  EXPECT_EQ(info.version, 3u);
  EXPECT_GT(info.n_tensors, 10);
  EXPECT_EQ(info.file_size, fs::file_size(path));
  EXPECT_LT(info.data_offset, info.file_size);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, TinyModelLoad,
    ::testing::Values(PresetCase{"tiny-llama3", "llama", 128256, LLAMA_VOCAB_TYPE_BPE},
                      PresetCase{"tiny-spm", "llama", 32000, LLAMA_VOCAB_TYPE_SPM},
                      PresetCase{"tiny-qwen2", "qwen2", 151936, LLAMA_VOCAB_TYPE_BPE}),
    [](const auto& info) {
      std::string n = info.param.preset;
      for (char& ch : n) {
        if (ch == '-') ch = '_';
      }
      return n;
    });

// ---- bad inputs ----------------------------------------------------------------------

class BadModelFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("lacuna-test-model-load-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    good_path_ = new std::string(lacuna::testing::ensure_test_model("tiny-spm"));
    std::ifstream in(*good_path_, std::ios::binary);
    good_ = new std::vector<char>(std::istreambuf_iterator<char>(in), {});
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    delete good_path_;
    delete good_;
  }

  static std::string write_file(const std::string& name, const char* data, size_t n) {
    const std::string path = (*dir_ / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(n));
    return path;
  }

  // A prefix of the good model.
  static std::string truncated(size_t n) {
    return write_file("truncated-" + std::to_string(n) + ".gguf", good_->data(), n);
  }

  // The good model with its metadata edited by `edit` (tensor data copied unchanged).
  static std::string rewritten(const std::string& name,
                               const std::function<void(gguf_context*)>& edit) {
    gguf_init_params gp{};
    gp.no_alloc = true;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> g(
        gguf_init_from_file(good_path_->c_str(), gp), &gguf_free);
    EXPECT_NE(g, nullptr);
    const size_t data_offset = gguf_get_data_offset(g.get());
    edit(g.get());
    std::vector<char> bytes(gguf_get_meta_size(g.get()));
    gguf_get_meta_data(g.get(), bytes.data());
    bytes.insert(bytes.end(), good_->begin() + static_cast<std::ptrdiff_t>(data_offset),
                 good_->end());
    return write_file(name, bytes.data(), bytes.size());
  }

  // Loads `path` and returns the ModelError it must raise (failing the test otherwise).
  static ModelError expect_error(const std::string& path, lacuna::ModelParams params = {}) {
    try {
      lacuna::Model::load(path, params);
    } catch (const ModelError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << "message should name the file: " << what;
      return e;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected ModelError, got " << e.what();
      return ModelError(ModelErrorKind::load_failed, "wrong exception");
    }
    ADD_FAILURE() << path << " loaded, but it should not";
    return ModelError(ModelErrorKind::load_failed, "no exception");
  }

  // Offset where the tensor infos start: the header plus the key-value section.
  static size_t tensor_info_start() {
    gguf_init_params gp{};
    gp.no_alloc = true;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> g(
        gguf_init_from_file(good_path_->c_str(), gp), &gguf_free);
    std::unique_ptr<gguf_context, decltype(&gguf_free)> kv_only(gguf_init_empty(), &gguf_free);
    gguf_set_kv(kv_only.get(), g.get());
    // Meta size without tensors = header + KVs, padded to the alignment (< 32 bytes more).
    return gguf_get_meta_size(kv_only.get());
  }

  static size_t data_offset() { return lacuna::inspect_gguf(*good_path_).data_offset; }

  static fs::path* dir_;
  static std::string* good_path_;
  static std::vector<char>* good_;
};

fs::path* BadModelFiles::dir_ = nullptr;
std::string* BadModelFiles::good_path_ = nullptr;
std::vector<char>* BadModelFiles::good_ = nullptr;

TEST_F(BadModelFiles, MissingFile) {
  const std::string path = (*dir_ / "does-not-exist.gguf").string();
  const ModelError e = expect_error(path);
  EXPECT_EQ(e.kind(), ModelErrorKind::not_found);
  EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  EXPECT_EQ(expect_error("").kind(), ModelErrorKind::not_found);
}

TEST_F(BadModelFiles, DirectoryIsUnreadable) {
  const ModelError e = expect_error(dir_->string());
  EXPECT_EQ(e.kind(), ModelErrorKind::unreadable);
  EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
}

TEST_F(BadModelFiles, EmptyFile) {
  const ModelError e = expect_error(write_file("empty.gguf", "", 0));
  EXPECT_EQ(e.kind(), ModelErrorKind::empty);
  EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
}

TEST_F(BadModelFiles, RandomBytes) {
  std::vector<char> bytes(4096);
  uint64_t x = 12345;
  for (char& b : bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<char>(x >> 56);
  }
  bytes[0] = 'Z';
  const ModelError e = expect_error(write_file("random.gguf", bytes.data(), bytes.size()));
  EXPECT_EQ(e.kind(), ModelErrorKind::not_gguf);
  EXPECT_NE(std::string(e.what()).find("not a GGUF file"), std::string::npos) << e.what();

  // The right magic followed by garbage is malformed (or reads as truncated).
  std::memcpy(bytes.data(), "GGUF", 4);
  const ModelError e2 = expect_error(write_file("magic-random.gguf", bytes.data(), bytes.size()));
  EXPECT_TRUE(e2.kind() == ModelErrorKind::malformed || e2.kind() == ModelErrorKind::truncated)
      << lacuna::model_error_kind_name(e2.kind()) << ": " << e2.what();
}

TEST_F(BadModelFiles, WrongMagic) {
  std::vector<char> bytes(good_->begin(), good_->begin() + 65536);
  bytes[3] = 'X';
  const ModelError e = expect_error(write_file("wrong-magic.gguf", bytes.data(), bytes.size()));
  EXPECT_EQ(e.kind(), ModelErrorKind::not_gguf);
  EXPECT_NE(std::string(e.what()).find("47 47 55 58"), std::string::npos) << e.what();
  // Plain text is not a GGUF either.
  const std::string text = "this is a text file\n";
  EXPECT_EQ(expect_error(write_file("text.gguf", text.data(), text.size())).kind(),
            ModelErrorKind::not_gguf);
}

TEST_F(BadModelFiles, TruncatedInsideTheHeader) {
  for (size_t n : {size_t{2}, size_t{4}, size_t{7}, size_t{16}, size_t{23}}) {
    const ModelError e = expect_error(truncated(n));
    EXPECT_EQ(e.kind(), ModelErrorKind::truncated) << n << ": " << e.what();
  }
}

TEST_F(BadModelFiles, TruncatedInsideTheMetadata) {
  const size_t info_start = tensor_info_start();
  const size_t data_start = data_offset();
  ASSERT_LT(info_start + 64, data_start);
  // Inside the key-value section (the tokenizer arrays), then inside the tensor infos.
  for (size_t n : {size_t{24}, size_t{30}, size_t{100}, info_start / 2, info_start - 40,
                   info_start + 40, data_start - 40}) {
    const ModelError e = expect_error(truncated(n));
    EXPECT_TRUE(e.kind() == ModelErrorKind::truncated || e.kind() == ModelErrorKind::malformed)
        << n << ": " << lacuna::model_error_kind_name(e.kind()) << ": " << e.what();
  }
}

TEST_F(BadModelFiles, TruncatedInsideTheTensorData) {
  const size_t data_start = data_offset();
  for (size_t n : {data_start, data_start + 1, data_start + (good_->size() - data_start) / 2,
                   good_->size() - 1}) {
    const ModelError e = expect_error(truncated(n));
    EXPECT_EQ(e.kind(), ModelErrorKind::truncated) << n << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("beyond the end of the file"), std::string::npos)
        << e.what();
  }
}

TEST_F(BadModelFiles, BadHeaderFields) {
  // Unsupported version.
  std::vector<char> bytes(good_->begin(), good_->begin() + 4096);
  const uint32_t version = 99;
  std::memcpy(bytes.data() + 4, &version, 4);
  EXPECT_EQ(expect_error(write_file("version.gguf", bytes.data(), bytes.size())).kind(),
            ModelErrorKind::malformed);
  // An absurd tensor count.
  bytes.assign(good_->begin(), good_->begin() + 4096);
  const int64_t huge = INT64_MAX / 2;
  std::memcpy(bytes.data() + 8, &huge, 8);
  EXPECT_EQ(expect_error(write_file("n-tensors.gguf", bytes.data(), bytes.size())).kind(),
            ModelErrorKind::malformed);
}

TEST_F(BadModelFiles, UnknownArchitecture) {
  const std::string path = rewritten("arch.gguf", [](gguf_context* g) {
    gguf_set_val_str(g, "general.architecture", "nosucharch");
  });
  const ModelError e = expect_error(path);
  EXPECT_EQ(e.kind(), ModelErrorKind::unsupported_architecture) << e.what();
  EXPECT_NE(std::string(e.what()).find("nosucharch"), std::string::npos) << e.what();
}

TEST_F(BadModelFiles, MissingOrMistypedArchitectureKey) {
  const std::string no_arch = rewritten(
      "no-arch.gguf", [](gguf_context* g) { gguf_remove_key(g, "general.architecture"); });
  EXPECT_EQ(expect_error(no_arch).kind(), ModelErrorKind::unsupported_architecture);

  const std::string typed = rewritten(
      "arch-u32.gguf", [](gguf_context* g) { gguf_set_val_u32(g, "general.architecture", 7); });
  const ModelError e = expect_error(typed);
  EXPECT_EQ(e.kind(), ModelErrorKind::malformed);
  EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos) << e.what();
}

TEST_F(BadModelFiles, MetadataThatDisagreesWithTheTensors) {
  // Tensors are 64 wide; claiming 32 makes llama.cpp reject the shapes.
  const std::string shape = rewritten(
      "shape.gguf", [](gguf_context* g) { gguf_set_val_u32(g, "llama.embedding_length", 32); });
  const ModelError e = expect_error(shape);
  EXPECT_EQ(e.kind(), ModelErrorKind::load_failed);
  EXPECT_NE(std::string(e.what()).find("llama.cpp:"), std::string::npos) << e.what();

  // A required hyperparameter is missing.
  const std::string no_layers =
      rewritten("no-layers.gguf", [](gguf_context* g) { gguf_remove_key(g, "llama.block_count"); });
  EXPECT_EQ(expect_error(no_layers).kind(), ModelErrorKind::load_failed);
}

// Metadata that llama.cpp 0.5.0 would assert on (abort) is caught before it gets there.
TEST_F(BadModelFiles, MetadataLlamaWouldAbortOn) {
  const std::vector<std::pair<std::string, std::function<void(gguf_context*)>>> edits = {
      {"zero-layers", [](gguf_context* g) { gguf_set_val_u32(g, "llama.block_count", 0); }},
      {"many-layers", [](gguf_context* g) { gguf_set_val_u32(g, "llama.block_count", 4096); }},
      {"experts", [](gguf_context* g) { gguf_set_val_u32(g, "llama.expert_used_count", 2); }},
      {"rope-type",
       [](gguf_context* g) { gguf_set_val_str(g, "llama.rope.scaling.type", "sideways"); }},
      {"kv-heads",
       [](gguf_context* g) { gguf_set_val_u32(g, "llama.attention.head_count_kv", 0); }},
      {"duplicate-token",
       [](gguf_context* g) {
         const int64_t id = gguf_find_key(g, "tokenizer.ggml.tokens");
         std::vector<std::string> toks(gguf_get_arr_n(g, id));
         for (size_t i = 0; i < toks.size(); ++i) toks[i] = gguf_get_arr_str(g, id, i);
         toks[1000] = toks[999];
         std::vector<const char*> ptrs;
         for (const std::string& t : toks) ptrs.push_back(t.c_str());
         gguf_set_arr_str(g, "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
       }},
  };
  for (const auto& [name, edit] : edits) {
    const ModelError e = expect_error(rewritten(name + ".gguf", edit));
    EXPECT_EQ(e.kind(), ModelErrorKind::malformed) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("bad metadata"), std::string::npos) << e.what();
  }
}

TEST_F(BadModelFiles, VocabOnlyFileNeedsVocabOnlyParam) {
  const std::string path = lacuna::testing::vocab_path("llama-spm");
  const ModelError e = expect_error(path);
  EXPECT_EQ(e.kind(), ModelErrorKind::vocab_only);
  EXPECT_NE(std::string(e.what()).find("vocab_only"), std::string::npos) << e.what();
  lacuna::ModelParams params;
  params.vocab_only = true;
  const lacuna::Model model = lacuna::Model::load(path, params);
  EXPECT_TRUE(model.vocab_only());
  EXPECT_EQ(model.vocab().n_vocab(), 32000);
}

TEST_F(BadModelFiles, InspectReportsTheSameErrors) {
  EXPECT_THROW(lacuna::inspect_gguf((*dir_ / "nope.gguf").string()), ModelError);
  EXPECT_THROW(lacuna::inspect_gguf(truncated(good_->size() - 7)), ModelError);
  const lacuna::GgufInfo info = lacuna::inspect_gguf(*good_path_);
  EXPECT_EQ(info.name, "lacuna tiny-spm");
}

}  // namespace

namespace {

TEST(Log, LevelsParseAndLlamaErrorsAreCaptured) {
  EXPECT_EQ(lacuna::parse_log_level("debug"), lacuna::LogLevel::debug);
  EXPECT_EQ(lacuna::parse_log_level("warning"), lacuna::LogLevel::warn);
  EXPECT_EQ(lacuna::parse_log_level("off"), lacuna::LogLevel::none);
  EXPECT_THROW(lacuna::parse_log_level("loud"), std::invalid_argument);
  const lacuna::LogLevel before = lacuna::log_level();
  lacuna::set_log_level(lacuna::LogLevel::none);
  EXPECT_EQ(lacuna::log_level(), lacuna::LogLevel::none);

  // A GGUF that ggml's parser rejects leaves its complaint in last_llama_error().
  const std::string path =
      (fs::temp_directory_path() / ("lacuna-log-" + std::to_string(::getpid()) + ".gguf")).string();
  {
    std::ofstream out(path, std::ios::binary);
    const char header[24] = {'G', 'G', 'U', 'F', 99, 0, 0, 0};
    out.write(header, sizeof(header));
  }
  lacuna::clear_last_llama_error();
  EXPECT_THROW(lacuna::inspect_gguf(path), ModelError);
  EXPECT_NE(lacuna::last_llama_error().find("version"), std::string::npos)
      << lacuna::last_llama_error();
  lacuna::clear_last_llama_error();
  EXPECT_EQ(lacuna::last_llama_error(), "");
  fs::remove(path);
  lacuna::set_log_level(before);
}

}  // namespace
