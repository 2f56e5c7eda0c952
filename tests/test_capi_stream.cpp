// test_capi_stream.cpp — the C ABI's models, contexts and generation streams (lacuna.h),
// driven from C++: lifecycle, output equal to lacuna::Generator's, token trie, JSON schema,
// grammar swaps, slot save/restore, stats, and bad input (threads: test_capi_threads.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi_test_support.h"
#include "lacuna/generator.h"
#include "lacuna/lacuna.h"
#include "lacuna/model.h"

namespace {

const std::vector<std::string> kNames = {"search_web", "send_email", "read_file"};
constexpr const char* kPrompt = "The assistant decides what to do next:";

struct Output {
  std::vector<llama_token> tokens;
  std::string text;
  int32_t stop = -1;
  size_t steps = 0;
};

class CapiStreamTest : public lacuna::testing::CapiModelTest {
 protected:
  void SetUp() override { ctx_ = make_context(); }
  void TearDown() override {
    lacuna_stream_close(stream_);
    lacuna_context_free(ctx_);
  }

  static lacuna_stream_params params(int32_t max_tokens) {
    lacuna_stream_params p = lacuna_stream_default_params();
    p.max_tokens = max_tokens;
    return p;
  }

  void open(const lacuna_stream_params& p) {
    ASSERT_EQ(lacuna_stream_open(ctx_, &p, &stream_), LACUNA_OK) << lacuna_last_error();
  }

  static std::vector<llama_token> tokenize(const std::string& text, bool add_special) {
    std::vector<llama_token> out(text.size() + 8);
    size_t n = 0;
    EXPECT_EQ(lacuna_tokenize(model_, text.data(), text.size(), add_special ? 1 : 0, 0, out.data(),
                              out.size(), &n),
              LACUNA_OK)
        << lacuna_last_error();
    out.resize(n);
    return out;
  }

  static std::string trie_payload(const std::vector<std::string>& names) {
    nlohmann::json leaves = nlohmann::json::array();
    for (const auto& n : names) leaves.push_back({{"name", n}, {"tokens", tokenize(n, false)}});
    nlohmann::json j = {{"modelId", "tiny-llama3"},
                        {"descriptors", {{{"path", "action"}, {"leaves", leaves}}}}};
    return j.dump();
  }

  // Pulls steps until done (or `limit` steps).
  static Output drain(lacuna_stream* s, size_t limit = 1000) {
    Output out;
    lacuna_step step;
    for (size_t i = 0; i < limit; ++i) {
      EXPECT_EQ(lacuna_stream_next(s, &step), LACUNA_OK) << lacuna_last_error();
      out.tokens.insert(out.tokens.end(), step.tokens, step.tokens + step.n_tokens);
      out.text.append(step.text, step.text_len);
      ++out.steps;
      if (step.done) {
        out.stop = step.stop_reason;
        break;
      }
    }
    return out;
  }

  Output generate(const std::string& prompt) {
    EXPECT_EQ(lacuna_stream_prefill_text(stream_, prompt.data(), prompt.size(), 1, 0), LACUNA_OK)
        << lacuna_last_error();
    return drain(stream_);
  }

  // The stream still generates after a failed call: a free generation gives tokens.
  void expect_usable() {
    ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK) << lacuna_last_error();
    const Output o = generate(kPrompt);
    EXPECT_FALSE(o.tokens.empty());
    EXPECT_NE(o.stop, LACUNA_STOP_NONE);
  }

  static void expect_error(lacuna_status got, lacuna_status want) {
    EXPECT_EQ(got, want) << lacuna_status_name(got) << ": " << lacuna_last_error();
    EXPECT_STRNE(lacuna_last_error(), "");
  }

  lacuna_context* ctx_ = nullptr;
  lacuna_stream* stream_ = nullptr;
};

TEST_F(CapiStreamTest, GreedyOutputEqualsGenerator) {
  open(params(24));
  const Output o = generate(kPrompt);
  EXPECT_EQ(o.stop, LACUNA_STOP_MAX_TOKENS);
  ASSERT_EQ(o.tokens.size(), 24u);

  // The same prompt through lacuna::Generator on a context with the same parameters.
  const lacuna::Model model = lacuna::Model::load(*path_);
  lacuna::ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 1;
  lacuna::Context ctx = lacuna::Context::create(model, cp);
  lacuna::GeneratorConfig gc;
  gc.max_tokens = 24;
  lacuna::Generator gen(ctx.get(), gc);
  gen.prefill(tokenize(kPrompt, true));
  gen.generate();
  EXPECT_EQ(o.tokens, gen.tokens());
  EXPECT_EQ(o.text, gen.text());

  // Stats agree with what the steps returned.
  lacuna_stats st;
  ASSERT_EQ(lacuna_stream_stats(stream_, &st), LACUNA_OK);
  EXPECT_EQ(st.tokens_emitted, o.tokens.size());
  EXPECT_EQ(st.prompt_tokens, tokenize(kPrompt, true).size());
  EXPECT_EQ(st.forward_passes, gen.stats().forward_passes);
  EXPECT_EQ(st.stop_reason, LACUNA_STOP_MAX_TOKENS);
  EXPECT_GE(st.total_ms, st.decode_ms);
  const llama_token* all = nullptr;
  size_t n_all = 0;
  ASSERT_EQ(lacuna_stream_tokens(stream_, &all, &n_all), LACUNA_OK);
  EXPECT_EQ(std::vector<llama_token>(all, all + n_all), o.tokens);
  const char* text = nullptr;
  size_t len = 0;
  ASSERT_EQ(lacuna_stream_text(stream_, &text, &len), LACUNA_OK);
  EXPECT_EQ(std::string(text, len), o.text);

  // After done, next keeps saying done with nothing.
  lacuna_step step;
  ASSERT_EQ(lacuna_stream_next(stream_, &step), LACUNA_OK);
  EXPECT_EQ(step.done, 1);
  EXPECT_EQ(step.n_tokens, 0u);
  EXPECT_EQ(step.stop_reason, LACUNA_STOP_MAX_TOKENS);

  // A second generation after reset repeats the first one exactly.
  ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
  EXPECT_EQ(generate(kPrompt).tokens, o.tokens);

  // Prefill with token ids is the same as prefill from text.
  ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
  const auto ids = tokenize(kPrompt, true);
  ASSERT_EQ(lacuna_stream_prefill(stream_, ids.data(), ids.size()), LACUNA_OK);
  EXPECT_EQ(drain(stream_).tokens, o.tokens);
}

TEST_F(CapiStreamTest, TokenTrieOutputIsExactlyOneName) {
  const std::string payload = trie_payload(kNames);
  lacuna_stream_params p = params(64);
  p.token_trie = payload.data();
  p.token_trie_len = payload.size();
  open(p);
  for (const char* prompt : {kPrompt, "Next tool:", "Pick one"}) {
    ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
    const Output o = generate(prompt);
    EXPECT_EQ(std::count(kNames.begin(), kNames.end(), o.text), 1) << o.text;
    EXPECT_EQ(o.stop, LACUNA_STOP_CONSTRAINT_COMPLETED);
    const char* leaf = nullptr;
    ASSERT_EQ(lacuna_stream_chosen_leaf(stream_, &leaf), LACUNA_OK);
    ASSERT_NE(leaf, nullptr);
    EXPECT_EQ(o.text, leaf);
    lacuna_stats st;
    ASSERT_EQ(lacuna_stream_stats(stream_, &st), LACUNA_OK);
    EXPECT_EQ(st.tokens_emitted, o.tokens.size());
    // Single-child trie nodes are emitted without their own forward pass.
    EXPECT_LT(st.forward_passes, st.tokens_emitted);
  }
  // Sample mode with a temperature still only gives names.
  lacuna_stream_close(stream_);
  stream_ = nullptr;
  p.temperature = 1.5f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.token_trie_mode = LACUNA_TRIE_MODE_SAMPLE;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    p.seed = seed;
    open(p);
    const Output o = generate(kPrompt);
    EXPECT_EQ(std::count(kNames.begin(), kNames.end(), o.text), 1) << o.text;
    lacuna_stream_close(stream_);
    stream_ = nullptr;
  }
}

TEST_F(CapiStreamTest, JsonSchemaOutputParsesWithRequiredKeys) {
  const std::string schema = R"({"type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6},
                   "count": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["name", "count"], "additionalProperties": false})";
  lacuna_stream_params p = params(200);
  p.json_schema = schema.c_str();
  p.schema_compact = 1;
  open(p);
  const Output o = generate("Answer in JSON:");
  EXPECT_EQ(o.stop, LACUNA_STOP_CONSTRAINT_COMPLETED) << o.text;
  const auto doc = nlohmann::json::parse(o.text, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << o.text;
  ASSERT_TRUE(doc.is_object());
  EXPECT_TRUE(doc.contains("name") && doc["name"].is_string()) << o.text;
  EXPECT_TRUE(doc.contains("count") && doc["count"].is_number_integer()) << o.text;

  // The same through set_json_schema on a free stream.
  lacuna_stream_close(stream_);
  stream_ = nullptr;
  open(params(200));
  ASSERT_EQ(lacuna_stream_set_json_schema(stream_, schema.data(), schema.size(), 1), LACUNA_OK)
      << lacuna_last_error();
  EXPECT_EQ(generate("Answer in JSON:").text, o.text);
}

TEST_F(CapiStreamTest, GrammarSetAndClearBetweenGenerations) {
  open(params(16));
  const Output free_run = generate(kPrompt);
  ASSERT_FALSE(free_run.tokens.empty());

  const std::string gbnf = "root ::= \"yes\" | \"no\" | \"maybe later\"\n";
  ASSERT_EQ(lacuna_stream_set_grammar(stream_, gbnf.data(), gbnf.size()), LACUNA_OK)
      << lacuna_last_error();
  // A set_* call ends the generation under way.
  lacuna_step step;
  expect_error(lacuna_stream_next(stream_, &step), LACUNA_ERR_STATE);
  ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
  const Output constrained = generate(kPrompt);
  EXPECT_TRUE(constrained.text == "yes" || constrained.text == "no" ||
              constrained.text == "maybe later")
      << constrained.text;
  EXPECT_EQ(constrained.stop, LACUNA_STOP_CONSTRAINT_COMPLETED);

  // A second generation in the same conversation restarts the grammar.
  const Output again = generate(" and again:");
  EXPECT_TRUE(again.text == "yes" || again.text == "no" || again.text == "maybe later")
      << again.text;

  ASSERT_EQ(lacuna_stream_clear_grammar(stream_), LACUNA_OK);
  expect_error(lacuna_stream_clear_grammar(stream_), LACUNA_ERR_STATE);
  ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
  EXPECT_EQ(generate(kPrompt).tokens, free_run.tokens);
}

TEST_F(CapiStreamTest, SaveAndRestoreSlotGiveTheSameNextTokens) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("lacuna_capi_slot_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string slot = (dir / "slot.bin").string();

  open(params(16));
  const std::string prompt = kPrompt;
  ASSERT_EQ(lacuna_stream_prefill_text(stream_, prompt.data(), prompt.size(), 1, 0), LACUNA_OK);
  ASSERT_EQ(lacuna_stream_save_slot(stream_, slot.c_str()), LACUNA_OK) << lacuna_last_error();
  const Output first = drain(stream_);
  ASSERT_EQ(first.tokens.size(), 16u);

  // Something else in between, then the slot back.
  ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
  generate("Something else entirely");
  ASSERT_EQ(lacuna_stream_restore_slot(stream_, slot.c_str()), LACUNA_OK) << lacuna_last_error();
  EXPECT_EQ(drain(stream_).tokens, first.tokens);

  // Mid-conversation: save after a generation, continue, restore, continue again.
  const std::string more = " Then:";
  ASSERT_EQ(lacuna_stream_save_slot(stream_, slot.c_str()), LACUNA_OK) << lacuna_last_error();
  ASSERT_EQ(lacuna_stream_prefill_text(stream_, more.data(), more.size(), 0, 0), LACUNA_OK);
  const Output cont = drain(stream_);
  ASSERT_FALSE(cont.tokens.empty());
  ASSERT_EQ(lacuna_stream_reset(stream_), LACUNA_OK);
  ASSERT_EQ(lacuna_stream_restore_slot(stream_, slot.c_str()), LACUNA_OK) << lacuna_last_error();
  ASSERT_EQ(lacuna_stream_prefill_text(stream_, more.data(), more.size(), 0, 0), LACUNA_OK);
  EXPECT_EQ(drain(stream_).tokens, cont.tokens);

  // Into another stream on another context.
  lacuna_stream_close(stream_);
  stream_ = nullptr;
  lacuna_context* other = make_context();
  lacuna_stream* s2 = nullptr;
  const lacuna_stream_params p = params(16);
  ASSERT_EQ(lacuna_stream_open(other, &p, &s2), LACUNA_OK);
  ASSERT_EQ(lacuna_stream_prefill_text(s2, prompt.data(), prompt.size(), 1, 0), LACUNA_OK);
  ASSERT_EQ(lacuna_stream_save_slot(s2, slot.c_str()), LACUNA_OK);
  ASSERT_EQ(lacuna_stream_reset(s2), LACUNA_OK);
  ASSERT_EQ(lacuna_stream_restore_slot(s2, slot.c_str()), LACUNA_OK);
  EXPECT_EQ(drain(s2).tokens, first.tokens);

  // Bad slot files: a status, and the stream keeps working.
  expect_error(lacuna_stream_restore_slot(s2, (dir / "missing.bin").string().c_str()),
               LACUNA_ERR_NOT_FOUND);
  const std::string junk = (dir / "junk.bin").string();
  std::ofstream(junk) << "this is not a slot file";
  expect_error(lacuna_stream_restore_slot(s2, junk.c_str()), LACUNA_ERR_PARSE);
  {  // a flipped byte in the KV payload
    std::fstream f(slot, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<long>(f.tellg());
    f.seekp(size - 5);
    f.put('\x5a');
  }
  expect_error(lacuna_stream_restore_slot(s2, slot.c_str()), LACUNA_ERR_PARSE);
  expect_error(lacuna_stream_save_slot(s2, (dir / "no/such/dir/slot.bin").string().c_str()),
               LACUNA_ERR_IO);
  expect_error(lacuna_stream_save_slot(s2, nullptr), LACUNA_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(lacuna_stream_reset(s2), LACUNA_OK);
  expect_error(lacuna_stream_save_slot(s2, slot.c_str()), LACUNA_ERR_STATE);
  ASSERT_EQ(lacuna_stream_prefill_text(s2, prompt.data(), prompt.size(), 1, 0), LACUNA_OK);
  EXPECT_EQ(drain(s2).tokens, first.tokens);
  lacuna_stream_close(s2);
  lacuna_context_free(other);
  std::filesystem::remove_all(dir);
}

TEST_F(CapiStreamTest, BadInputGivesStatusAndMessage) {
  // Models.
  lacuna_model* m = nullptr;
  expect_error(lacuna_model_load(nullptr, nullptr, &m), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_model_load(path_->c_str(), nullptr, nullptr), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_model_load("/no/such/model.gguf", nullptr, &m), LACUNA_ERR_NOT_FOUND);
  const auto not_gguf = std::filesystem::temp_directory_path() /
                        ("lacuna_capi_not_gguf_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(not_gguf) << "plain text, not a GGUF file at all";
  expect_error(lacuna_model_load(not_gguf.c_str(), nullptr, &m), LACUNA_ERR_PARSE);
  std::filesystem::remove(not_gguf);
  EXPECT_EQ(m, nullptr);

  // Contexts.
  lacuna_context* c = nullptr;
  expect_error(lacuna_context_create(nullptr, nullptr, &c), LACUNA_ERR_INVALID_ARGUMENT);
  lacuna_context_params cp = lacuna_context_default_params();
  cp.n_batch = 1;
  expect_error(lacuna_context_create(model_, &cp, &c), LACUNA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);

  // Tokenize.
  size_t n = 0;
  llama_token small[2];
  const std::string text = kPrompt;
  expect_error(lacuna_tokenize(model_, text.data(), text.size(), 1, 0, small, 2, &n),
               LACUNA_ERR_LIMIT);
  EXPECT_GT(n, 2u);
  expect_error(lacuna_tokenize(nullptr, "x", 1, 0, 0, small, 2, &n), LACUNA_ERR_INVALID_ARGUMENT);
  char piece[4];
  size_t plen = 0;
  expect_error(lacuna_token_to_piece(model_, -3, 0, piece, sizeof(piece), &plen),
               LACUNA_ERR_INVALID_ARGUMENT);

  // Stream params.
  lacuna_stream* s = nullptr;
  expect_error(lacuna_stream_open(nullptr, nullptr, &s), LACUNA_ERR_INVALID_ARGUMENT);
  lacuna_stream_params p = params(16);
  p.grammar = "root ::= \"a\"";
  p.json_schema = "{}";
  expect_error(lacuna_stream_open(ctx_, &p, &s), LACUNA_ERR_INVALID_ARGUMENT);
  p = params(16);
  p.grammar = "root ::= \"a";
  expect_error(lacuna_stream_open(ctx_, &p, &s), LACUNA_ERR_PARSE);
  p = params(16);
  p.json_schema = "{\"type\": 12}";
  expect_error(lacuna_stream_open(ctx_, &p, &s), LACUNA_ERR_SCHEMA);
  p = params(16);
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  expect_error(lacuna_stream_open(ctx_, &p, &s), LACUNA_ERR_INVALID_ARGUMENT);
  p = params(-1);
  expect_error(lacuna_stream_open(ctx_, &p, &s), LACUNA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);

  // A stream with a trie; then every failing call leaves it usable with its trie.
  const std::string payload = trie_payload(kNames);
  p = params(32);
  p.token_trie = payload.data();
  p.token_trie_len = payload.size();
  open(p);
  expect_error(lacuna_stream_open(ctx_, &p, &s), LACUNA_ERR_STATE);  // one stream per context

  lacuna_step step;
  expect_error(lacuna_stream_next(stream_, &step), LACUNA_ERR_STATE);  // no prefill yet
  expect_error(lacuna_stream_next(nullptr, &step), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_stream_next(stream_, nullptr), LACUNA_ERR_INVALID_ARGUMENT);
  const llama_token bad_ids[] = {1, -1};
  expect_error(lacuna_stream_prefill(stream_, bad_ids, 2), LACUNA_ERR_INVALID_ARGUMENT);
  const llama_token too_big[] = {lacuna_model_n_vocab(model_)};
  expect_error(lacuna_stream_prefill(stream_, too_big, 1), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_stream_prefill(stream_, nullptr, 3), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_stream_prefill(stream_, bad_ids, 0), LACUNA_ERR_INVALID_ARGUMENT);
  std::vector<llama_token> huge(600, 1);
  expect_error(lacuna_stream_prefill(stream_, huge.data(), huge.size()), LACUNA_ERR_LIMIT);

  const std::string broken_json = R"({"modelId": "x", "descriptors": [{"leaves": [)";
  expect_error(lacuna_stream_set_token_trie(stream_, broken_json.data(), broken_json.size(), 0),
               LACUNA_ERR_PARSE);
  const std::string bad_token =
      R"({"modelId": "x", "descriptors": [{"path": "a", "leaves": [{"name": "n", "tokens": [999999999]}]}]})";
  expect_error(lacuna_stream_set_token_trie(stream_, bad_token.data(), bad_token.size(), 0),
               LACUNA_ERR_SCHEMA);
  const std::string empty_leaves =
      R"({"modelId": "x", "descriptors": [{"path": "a", "leaves": []}]})";
  expect_error(lacuna_stream_set_token_trie(stream_, empty_leaves.data(), empty_leaves.size(), 0),
               LACUNA_ERR_SCHEMA);
  expect_error(lacuna_stream_set_token_trie(stream_, payload.data(), payload.size(), 7),
               LACUNA_ERR_INVALID_ARGUMENT);
  lacuna_token_trie_params tp = lacuna_token_trie_default_params();
  tp.expected_model_id = "another-model";
  expect_error(lacuna_stream_set_token_trie_ext(stream_, payload.data(), payload.size(), &tp),
               LACUNA_ERR_MODEL_MISMATCH);
  const std::string bad_gbnf = "root ::= [a-";
  expect_error(lacuna_stream_set_grammar(stream_, bad_gbnf.data(), bad_gbnf.size()),
               LACUNA_ERR_PARSE);
  expect_error(lacuna_stream_set_grammar(stream_, "root ::= undefined_rule", 23), LACUNA_ERR_PARSE);
  expect_error(lacuna_stream_set_json_schema(stream_, "{not json", 9, 0), LACUNA_ERR_SCHEMA);
  expect_error(lacuna_stream_set_grammar(stream_, nullptr, 5), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_stream_clear_grammar(stream_), LACUNA_ERR_STATE);
  expect_error(lacuna_stream_cancel(nullptr), LACUNA_ERR_INVALID_ARGUMENT);
  expect_error(lacuna_stream_stats(stream_, nullptr), LACUNA_ERR_INVALID_ARGUMENT);

  // The trie is still in force.
  const Output o = generate(kPrompt);
  EXPECT_EQ(std::count(kNames.begin(), kNames.end(), o.text), 1) << o.text;
  EXPECT_STREQ(lacuna_stop_reason_name(o.stop), "constraint_completed");

  // Freeing handles in any order is fine: the stream keeps its context and model alive.
  lacuna_context_free(ctx_);
  ctx_ = nullptr;
  expect_usable();
}

TEST_F(CapiStreamTest, AbiBasics) {
  EXPECT_EQ(lacuna_abi_version(), static_cast<uint32_t>(LACUNA_ABI_VERSION));
  EXPECT_STREQ(lacuna_status_name(LACUNA_ERR_BUSY), "LACUNA_ERR_BUSY");
  EXPECT_STREQ(lacuna_status_name(LACUNA_ERR_IO), "LACUNA_ERR_IO");
  EXPECT_GT(lacuna_model_n_vocab(model_), 100000);
  EXPECT_NE(lacuna_model_vocab(model_), nullptr);
  const auto ids = tokenize("hello", false);
  ASSERT_FALSE(ids.empty());
  char buf[64];
  size_t len = 0;
  ASSERT_EQ(lacuna_token_to_piece(model_, ids[0], 0, buf, sizeof(buf), &len), LACUNA_OK);
  EXPECT_EQ(std::string(buf, len), std::string(buf));
  EXPECT_FALSE(std::string(buf).empty());
}

}  // namespace
