// test_generate_deterministic.cpp — greedy generation on each tiny model is repeatable and
// non-degenerate; make-model is byte-deterministic per seed; Context/Batch/sampler wrappers
// behave (and fail) as documented.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lacuna/make_model.h"
#include "lacuna/model.h"
#include "test_models.h"

namespace fs = std::filesystem;

namespace {

const lacuna::Model& tiny_model(const std::string& preset) {
  static std::map<std::string, lacuna::Model> cache;
  auto it = cache.find(preset);
  if (it == cache.end()) {
    it = cache.emplace(preset, lacuna::Model::load(lacuna::testing::ensure_test_model(preset)))
             .first;
  }
  return it->second;
}

lacuna::ContextParams small_context() {
  lacuna::ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = 128;
  cp.n_ubatch = 128;
  cp.n_threads = 1;  // robust on a loaded 2-core CI machine (no thread barriers)
  return cp;
}

// Prefill `prompt` in one batch, then sample n tokens one forward pass at a time.
std::vector<lacuna::Token> generate(lacuna::Context& ctx, const std::vector<lacuna::Token>& prompt,
                                    int n, const lacuna::SamplingParams& sp = {}) {
  lacuna::SamplerPtr sampler = lacuna::make_sampler(sp);
  lacuna::Batch batch(static_cast<int32_t>(ctx.n_batch()));
  lacuna::Pos pos = 0;
  for (lacuna::Token t : prompt) {
    batch.add(t, pos, 0, pos + 1 == static_cast<lacuna::Pos>(prompt.size()));
    ++pos;
  }
  ctx.decode(batch);
  std::vector<lacuna::Token> out;
  for (int i = 0; i < n; ++i) {
    const lacuna::Token t = llama_sampler_sample(sampler.get(), ctx.get(), -1);
    out.push_back(t);
    batch.clear();
    batch.add(t, pos++, 0, true);
    ctx.decode(batch);
  }
  return out;
}

std::vector<lacuna::Token> prompt_for(const lacuna::Model& model) {
  return lacuna::tokenize(model.vocab(), "The capital of France is", true, false);
}

class TinyModelGenerate : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyModelGenerate, GreedyIsRepeatable) {
  const lacuna::Model& model = tiny_model(GetParam());
  const std::vector<lacuna::Token> prompt = prompt_for(model);
  ASSERT_GE(prompt.size(), 3u);

  lacuna::Context ctx1 = lacuna::Context::create(model, small_context());
  const std::vector<lacuna::Token> a = generate(ctx1, prompt, 24);
  lacuna::Context ctx2 = lacuna::Context::create(model, small_context());
  const std::vector<lacuna::Token> b = generate(ctx2, prompt, 24);
  EXPECT_EQ(a, b);
  // The same context again, after clearing its KV cache.
  ctx1.clear_memory();
  EXPECT_EQ(ctx1.seq_pos_max(0), -1);
  EXPECT_EQ(generate(ctx1, prompt, 24), a);
  EXPECT_EQ(ctx1.seq_pos_max(0), static_cast<lacuna::Pos>(prompt.size() + 24 - 1));

  // Random weights, but not a degenerate model: more than one distinct token comes out.
  const std::set<lacuna::Token> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 1u);
  for (lacuna::Token t : a) EXPECT_TRUE(model.vocab().valid(t));
}

TEST_P(TinyModelGenerate, LogitsAreSpreadAndBatchingAgrees) {
  const lacuna::Model& model = tiny_model(GetParam());
  const std::vector<lacuna::Token> prompt = prompt_for(model);
  const int32_t n_vocab = model.vocab().n_vocab();

  // Whole prompt in one batch.
  lacuna::Context ctx = lacuna::Context::create(model, small_context());
  lacuna::Batch batch(64);
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.add(prompt[i], static_cast<lacuna::Pos>(i), 0, i + 1 == prompt.size());
  }
  ctx.decode(batch);
  const float* lb = ctx.logits(-1);
  std::vector<float> batched(lb, lb + n_vocab);

  double sum = 0, sum2 = 0;
  for (float v : batched) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum2 += static_cast<double>(v) * v;
  }
  const double mean = sum / n_vocab;
  const double stddev = std::sqrt(sum2 / n_vocab - mean * mean);
  EXPECT_GT(stddev, 0.5) << "logits nearly uniform";
  EXPECT_LT(stddev, 20.0) << "logits exploded";

  // Token by token in a fresh context: same logits up to float noise.
  lacuna::Context ctx2 = lacuna::Context::create(model, small_context());
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.clear();
    batch.add(prompt[i], static_cast<lacuna::Pos>(i), 0, true);
    ctx2.decode(batch);
  }
  const float* ls = ctx2.logits(0);
  float max_diff = 0;
  int argmax_b = 0, argmax_s = 0;
  for (int32_t t = 0; t < n_vocab; ++t) {
    max_diff = std::max(max_diff, std::fabs(batched[t] - ls[t]));
    if (batched[t] > batched[argmax_b]) argmax_b = t;
    if (ls[t] > ls[argmax_s]) argmax_s = t;
  }
  EXPECT_LT(max_diff, 1e-2f);
  EXPECT_EQ(argmax_b, argmax_s);
}

TEST_P(TinyModelGenerate, SeededSamplingIsRepeatable) {
  const lacuna::Model& model = tiny_model(GetParam());
  const std::vector<lacuna::Token> prompt = prompt_for(model);
  lacuna::SamplingParams sp;
  sp.temp = 1.0f;
  sp.seed = 1234;
  lacuna::Context ctx = lacuna::Context::create(model, small_context());
  const std::vector<lacuna::Token> a = generate(ctx, prompt, 16, sp);
  ctx.clear_memory();
  EXPECT_EQ(generate(ctx, prompt, 16, sp), a);
  ctx.clear_memory();
  sp.seed = 98765;
  EXPECT_NE(generate(ctx, prompt, 16, sp), a);
}

INSTANTIATE_TEST_SUITE_P(Presets, TinyModelGenerate,
                         ::testing::Values("tiny-llama3", "tiny-spm", "tiny-qwen2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

// ---- wrappers: errors instead of crashes --------------------------------------------

TEST(Batch, RejectsMisuse) {
  EXPECT_THROW(lacuna::Batch(0), std::invalid_argument);
  EXPECT_THROW(lacuna::Batch(4, 0), std::invalid_argument);
  lacuna::Batch batch(2, 2);
  EXPECT_TRUE(batch.empty());
  const std::vector<lacuna::SeqId> two = {0, 1};
  const std::vector<lacuna::SeqId> three = {0, 1, 2};
  batch.add(5, 0, two, false);
  EXPECT_THROW(batch.add(6, 1, three, false), std::invalid_argument);
  EXPECT_THROW(batch.add(6, 1, std::span<const lacuna::SeqId>(), false), std::invalid_argument);
  batch.add(6, 1, 1, true);
  EXPECT_EQ(batch.size(), 2);
  EXPECT_THROW(batch.add(7, 2, 0, false), std::length_error);
  EXPECT_EQ(batch.raw().n_seq_id[0], 2);
  EXPECT_EQ(batch.raw().seq_id[0][1], 1);
  EXPECT_EQ(batch.raw().logits[1], 1);
  batch.set_logits(0, true);
  EXPECT_EQ(batch.raw().logits[0], 1);
  EXPECT_THROW(batch.set_logits(2, true), std::out_of_range);
  lacuna::Batch moved(std::move(batch));
  EXPECT_EQ(moved.size(), 2);
  moved.clear();
  EXPECT_TRUE(moved.empty());
}

TEST(Context, DecodeErrorsAreExceptions) {
  const lacuna::Model& model = tiny_model("tiny-spm");
  lacuna::ContextParams cp = small_context();
  cp.n_ctx = 256;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  EXPECT_GE(ctx.n_ctx(), 256u);
  EXPECT_EQ(ctx.n_batch(), 128u);
  EXPECT_EQ(ctx.n_threads(), 1);

  lacuna::Batch batch(128);
  EXPECT_THROW(ctx.decode(batch), lacuna::LlamaError);  // empty
  batch.add(model.vocab().n_vocab() + 10, 0, 0, true);  // token id out of range
  EXPECT_THROW(ctx.decode(batch), lacuna::LlamaError);
  EXPECT_NE(ctx.try_decode(batch), 0);

  // Filling the KV cache past n_ctx fails with a clear error, not a crash.
  const uint32_t n_ctx = ctx.n_ctx();
  bool failed = false;
  for (uint32_t pos = 0; pos < n_ctx + 128 && !failed; pos += 128) {
    batch.clear();
    for (uint32_t i = 0; i < 128; ++i) batch.add(100, static_cast<lacuna::Pos>(pos + i), 0, false);
    try {
      ctx.decode(batch);
    } catch (const lacuna::LlamaError& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find("decode"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(failed);
  EXPECT_THROW(ctx.logits(5000), lacuna::LlamaError);
  EXPECT_THROW(ctx.set_threads(0, 1), std::invalid_argument);
}

TEST(Sampler, RejectsBadParameters) {
  lacuna::SamplingParams sp;
  sp.temp = std::nanf("");
  EXPECT_THROW(lacuna::make_sampler(sp), std::invalid_argument);
  sp.temp = 0.7f;
  sp.top_p = -1.0f;
  EXPECT_THROW(lacuna::make_sampler(sp), std::invalid_argument);
}

// ---- make-model determinism -----------------------------------------------------------

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

class MakeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lacuna-test-make-model-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  lacuna::MakeModelResult make(const std::string& name, uint64_t seed,
                               lacuna::WeightType type = lacuna::WeightType::f32) {
    lacuna::MakeModelOptions opt;
    opt.preset = "tiny-spm";
    opt.out_path = (dir_ / name).string();
    opt.seed = seed;
    opt.type = type;
    return lacuna::make_model(opt);
  }
  fs::path dir_;
};

TEST_F(MakeModel, SameSeedSameBytesOtherSeedOtherBytes) {
  const lacuna::MakeModelResult a = make("a.gguf", 7);
  const lacuna::MakeModelResult b = make("b.gguf", 7);
  const lacuna::MakeModelResult c = make("c.gguf", 8);
  EXPECT_FALSE(a.skipped);
  EXPECT_EQ(a.n_vocab, 32000u);
  EXPECT_GT(a.n_params, 32000u * 64u);
  const std::vector<char> ba = read_bytes(a.path);
  EXPECT_EQ(ba.size(), a.bytes);
  EXPECT_EQ(ba, read_bytes(b.path));
  const std::vector<char> bc = read_bytes(c.path);
  ASSERT_EQ(ba.size(), bc.size());  // same shapes, different weights
  EXPECT_NE(ba, bc);
  // Same metadata: only the tensor data differs.
  const size_t data_offset = lacuna::inspect_gguf(a.path).data_offset;
  EXPECT_TRUE(
      std::equal(ba.begin(), ba.begin() + static_cast<std::ptrdiff_t>(data_offset), bc.begin()));
  EXPECT_NO_THROW(lacuna::Model::load(c.path));
}

TEST_F(MakeModel, SkipExistingKeepsAGoodFileAndReplacesABadOne) {
  const lacuna::MakeModelResult a = make("m.gguf", 7);
  const auto mtime = fs::last_write_time(a.path);
  lacuna::MakeModelOptions opt;
  opt.preset = "tiny-spm";
  opt.out_path = a.path;
  opt.seed = 7;
  opt.skip_existing = true;
  EXPECT_TRUE(lacuna::make_model(opt).skipped);
  EXPECT_EQ(fs::last_write_time(a.path), mtime);
  // Another type is another model: it is written again.
  opt.type = lacuna::WeightType::f16;
  EXPECT_FALSE(lacuna::make_model(opt).skipped);
  // A truncated file is written again.
  fs::resize_file(a.path, 1000);
  const lacuna::MakeModelResult again = lacuna::make_model(opt);
  EXPECT_FALSE(again.skipped);
  EXPECT_NO_THROW(lacuna::Model::load(a.path));
}

TEST_F(MakeModel, QuantizedTypesLoadAndGenerate) {
  for (lacuna::WeightType type :
       {lacuna::WeightType::f16, lacuna::WeightType::q8_0, lacuna::WeightType::q4_0}) {
    const lacuna::MakeModelResult r =
        make(std::string(lacuna::weight_type_name(type)) + ".gguf", 7, type);
    const lacuna::Model model = lacuna::Model::load(r.path);
    lacuna::Context ctx = lacuna::Context::create(model, small_context());
    const std::vector<lacuna::Token> out = generate(ctx, prompt_for(model), 8);
    EXPECT_EQ(out.size(), 8u);
    ctx.clear_memory();
    EXPECT_EQ(generate(ctx, prompt_for(model), 8), out);
  }
}

TEST_F(MakeModel, BadOptionsAreErrors) {
  lacuna::MakeModelOptions opt;
  opt.preset = "no-such-preset";
  opt.out_path = (dir_ / "x.gguf").string();
  EXPECT_THROW(lacuna::make_model(opt), std::invalid_argument);
  opt.preset = "tiny-spm";
  opt.out_path = "";
  EXPECT_THROW(lacuna::make_model(opt), std::invalid_argument);
  opt.out_path = (dir_ / "x.gguf").string();
  opt.vocab_dir = (dir_ / "no-vocab-here").string();
  EXPECT_THROW(lacuna::make_model(opt), std::invalid_argument);
  EXPECT_FALSE(fs::exists(opt.out_path));
  EXPECT_THROW(lacuna::parse_weight_type("q4_k"), std::invalid_argument);
  EXPECT_THROW(lacuna::parse_weight_type(""), std::invalid_argument);
  EXPECT_EQ(lacuna::parse_weight_type("q8_0"), lacuna::WeightType::q8_0);
  EXPECT_EQ(lacuna::parse_weight_type("q4_0"), lacuna::WeightType::q4_0);
}

}  // namespace
