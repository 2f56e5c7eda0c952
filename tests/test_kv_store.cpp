// test_kv_store.cpp — the persistent KV cache: file format checks, rejection of truncated,
// corrupted, foreign and wrong-model files (never loaded, outputs unchanged), index lookups,
// redundant-entry removal and cleanup by age and size.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>

#include "kv_test_util.h"

using lacuna::Token;
using namespace lacuna::kv;

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_all(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
std::vector<std::filesystem::path> cache_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".lkv") out.push_back(e.path());
  }
  return out;
}

TEST(KvFile, RoundTripAndEveryCorruptionIsRejected) {
  const Fingerprint fp{0x1234, 0x5678};
  KvShape shape;
  shape.n_layer = 2;
  shape.n_embd = 64;
  const std::vector<Token> tokens = {1, 2, 3, 4, 5};
  const std::vector<uint8_t> payload = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  const auto bytes = encode_cache_file(fp, 4, shape, tokens, payload);
  CacheFileView v;
  std::string reason;
  ASSERT_TRUE(parse_cache_file(bytes, v, reason)) << reason;
  EXPECT_EQ(v.fingerprint, fp);
  EXPECT_EQ(v.block_size, 4u);
  EXPECT_EQ(std::vector<Token>(v.tokens.begin(), v.tokens.end()), tokens);
  EXPECT_EQ(std::vector<uint8_t>(v.payload.begin(), v.payload.end()), payload);
  EXPECT_EQ(v.shape, shape);

  // Every truncation is rejected.
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_FALSE(parse_cache_file(t, v, reason)) << n;
    EXPECT_FALSE(reason.empty());
  }
  // Every single-byte flip is rejected (header, tokens or payload checksum).
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto c = bytes;
    c[i] ^= 0x40;
    EXPECT_FALSE(parse_cache_file(c, v, reason)) << i;
  }
  auto c = bytes;
  c[bytes.size() - 1] ^= 1;
  EXPECT_FALSE(parse_cache_file(c, v, reason));
  EXPECT_NE(reason.find("payload checksum"), std::string::npos) << reason;
  // Trailing bytes.
  c = bytes;
  c.push_back(0);
  EXPECT_FALSE(parse_cache_file(c, v, reason));
  EXPECT_NE(reason.find("trailing"), std::string::npos) << reason;
  // Flags or reserved header bytes set, under a valid header checksum (a newer format):
  // rejected, not read as if they were zero.
  for (size_t i : {68, 71, 96, 107, 119}) {
    c = bytes;
    c[i] = 0x5a;
    const uint64_t h = XXH3_64bits(c.data(), 120);
    std::memcpy(c.data() + 120, &h, sizeof h);
    EXPECT_FALSE(parse_cache_file(c, v, reason)) << i;
    EXPECT_NE(reason.find(i < 96 ? "flags" : "reserved"), std::string::npos) << reason;
  }
  // A foreign file.
  std::vector<uint8_t> junk(4096);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 131 + 7);
  EXPECT_FALSE(parse_cache_file(junk, v, reason));
  EXPECT_NE(reason.find("magic"), std::string::npos) << reason;
  EXPECT_THROW(encode_cache_file(fp, 4, shape, {}, payload), KvError);
}

TEST(KvStore, FindsDeepestEntryAndDropsRedundantPrefixes) {
  kvtest::TempDir dir;
  PersistentStore store(dir.path.string(), Fingerprint{1, 2}, 4);
  KvShape shape;
  const std::vector<uint8_t> payload(100, 7);
  std::vector<Token> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};                       // 2 blocks
  std::vector<Token> b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};       // extends a: 3 blocks
  std::vector<Token> c = {1, 2, 3, 4, 50, 60, 70, 80};                      // shares 1 block
  EXPECT_EQ(store.write(std::vector<Token>{1, 2, 3}, shape, payload), 0u);  // < 1 block
  EXPECT_GT(store.write(a, shape, payload), 0u);
  EXPECT_GT(store.write(c, shape, payload), 0u);
  EXPECT_EQ(store.write(c, shape, payload), 0u) << "already stored";
  EXPECT_EQ(store.n_entries(), 2u);
  auto e = store.find(std::vector<Token>{1, 2, 3, 4, 5, 6, 7, 8, 99, 99, 99, 99});
  EXPECT_EQ(e.n_blocks, 2u);
  EXPECT_EQ(e.n_tokens, a.size());
  e = store.find(std::vector<Token>{1, 2, 3, 4, 50, 60, 70, 80, 1});
  EXPECT_EQ(e.n_blocks, 2u);
  EXPECT_EQ(e.n_tokens, c.size());
  EXPECT_EQ(store.find(std::vector<Token>{9, 9, 9, 9, 9}).n_blocks, 0u);
  // b makes a redundant (a is a strict prefix of b).
  EXPECT_GT(store.write(b, shape, payload), 0u);
  EXPECT_EQ(store.n_entries(), 2u);
  EXPECT_EQ(cache_files(dir.path).size(), 2u);
  e = store.find(b);
  EXPECT_EQ(e.n_blocks, 3u);
  std::vector<uint8_t> buf;
  CacheFileView v;
  std::string reason;
  ASSERT_TRUE(store.read(e, buf, v, reason)) << reason;
  EXPECT_EQ(std::vector<Token>(v.tokens.begin(), v.tokens.end()), b);
  // Another model's store in the same directory sees none of it.
  PersistentStore other(dir.path.string(), Fingerprint{3, 4}, 4);
  EXPECT_EQ(other.find(b).n_blocks, 0u);
  // A different block size neither.
  PersistentStore other_b(dir.path.string(), Fingerprint{1, 2}, 2);
  EXPECT_EQ(other_b.find(b).n_blocks, 0u);
}

TEST(KvStore, CleanupByAgeAndSize) {
  kvtest::TempDir dir;
  PersistentStore store(dir.path.string(), Fingerprint{1, 2}, 2);
  const std::vector<uint8_t> payload(1000, 1);
  for (Token i = 0; i < 5; ++i) store.write(std::vector<Token>{i, i, i, i}, KvShape{}, payload);
  EXPECT_EQ(store.n_entries(), 5u);
  const uint64_t each = store.total_bytes() / 5;
  EXPECT_GT(each, 1000u);
  // Size: keep at most 3 entries' worth.
  EXPECT_EQ(store.cleanup(3600, 3 * each), 2u);
  EXPECT_EQ(store.n_entries(), 3u);
  EXPECT_EQ(cache_files(dir.path).size(), 3u);
  EXPECT_LE(store.total_bytes(), 3 * each);
  // Age: everything is older than -1 seconds from now.
  EXPECT_EQ(store.cleanup(-1, UINT64_MAX), 3u);
  EXPECT_EQ(store.n_entries(), 0u);
  EXPECT_TRUE(cache_files(dir.path).empty());
}

TEST(KvStore, BadDirectoryIsAClearError) {
  kvtest::TempDir dir;
  const auto file = dir.path / "plain-file";
  write_all(file, {1, 2, 3});
  EXPECT_THROW(PersistentStore(file.string(), Fingerprint{}, 4), KvError);
  EXPECT_THROW(PersistentStore("", Fingerprint{}, 4), KvError);
  EXPECT_THROW(PersistentStore::model_fingerprint(dir.path.string(), "/nonexistent/model.gguf"),
               KvError);
}

// Model-level: damaged files are rejected, never loaded, and the output stays exact.
class KvStoreDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = std::make_unique<lacuna::Model>(kvtest::load("tiny-spm"));
    path_ = kvtest::model_path("tiny-spm");
    fp_ = PersistentStore::model_fingerprint(dir_.path.string(), path_);
    cfg_.block_size = 16;
    prompt_ = kvtest::random_tokens(120, 11, llama_vocab_n_tokens(model_->vocab_ptr()));
    auto ctx = kvtest::make_ctx(*model_, 512, 1);
    PersistentStore store(dir_.path.string(), fp_, cfg_.block_size);
    Session s(ctx.get(), 0, cfg_, nullptr, &store);
    s.prefill(prompt_);
    ASSERT_GT(s.persist(), 0u);
    const auto files = cache_files(dir_.path);
    ASSERT_EQ(files.size(), 1u);
    file_ = files[0];
  }

  // Runs a fresh session over the (damaged) store; expects a cold prefill and exact output.
  void expect_rejected() {
    auto ctx = kvtest::make_ctx(*model_, 512, 2);
    PersistentStore store(dir_.path.string(), fp_, cfg_.block_size);
    Session s(ctx.get(), 0, cfg_, nullptr, &store);
    PrefillResult r;
    const auto warm = kvtest::greedy_session(ctx.get(), s, prompt_, 6, &r);
    EXPECT_EQ(r.source, ReuseSource::none);
    EXPECT_EQ(r.n_reused, 0u);
    EXPECT_EQ(s.stats().disk_rejected, 1u);
    EXPECT_EQ(warm, kvtest::greedy_plain(ctx.get(), 1, prompt_, 6));
    EXPECT_FALSE(std::filesystem::exists(file_)) << "a rejected file is removed";
    EXPECT_EQ(store.n_entries(), 0u);
  }

  kvtest::TempDir dir_;
  std::unique_ptr<lacuna::Model> model_;
  std::string path_;
  Fingerprint fp_;
  KvConfig cfg_;
  std::vector<Token> prompt_;
  std::filesystem::path file_;
};

// A session reused for a shorter prompt that diverges from what it persisted writes its new
// tokens again (what it had written covers only the shared prefix now).
TEST_F(KvStoreDamage, ReusedSessionPersistsItsNewTokens) {
  auto ctx = kvtest::make_ctx(*model_, 512, 1);
  PersistentStore store(dir_.path.string(), fp_, cfg_.block_size);
  Session s(ctx.get(), 0, cfg_, nullptr, &store);
  s.prefill(prompt_);
  EXPECT_EQ(s.persist(), 0u);  // the same 120 tokens are written already (SetUp)
  std::vector<Token> other(prompt_.begin(), prompt_.begin() + 20);
  const auto more = kvtest::random_tokens(40, 12, llama_vocab_n_tokens(model_->vocab_ptr()));
  other.insert(other.end(), more.begin(), more.end());
  s.prefill(other);  // 60 tokens, 20 shared with the 120 written
  EXPECT_GT(s.persist(), 0u);
  EXPECT_EQ(store.n_entries(), 2u);
}

TEST_F(KvStoreDamage, IntactFileIsLoaded) {
  auto ctx = kvtest::make_ctx(*model_, 512, 1);
  PersistentStore store(dir_.path.string(), fp_, cfg_.block_size);
  Session s(ctx.get(), 0, cfg_, nullptr, &store);
  const auto r = s.prefill(prompt_);
  EXPECT_EQ(r.source, ReuseSource::disk);
  EXPECT_EQ(r.n_reused, prompt_.size() - 1);
  EXPECT_EQ(s.stats().disk_rejected, 0u);
  // The header records the model's shapes and the KV types read from llama.cpp's payload.
  const auto bytes = read_all(file_);
  CacheFileView v;
  std::string reason;
  ASSERT_TRUE(parse_cache_file(bytes, v, reason)) << reason;
  EXPECT_EQ(v.shape.n_layer, static_cast<uint32_t>(model_->n_layer()));
  EXPECT_EQ(v.shape.n_embd, static_cast<uint32_t>(model_->n_embd()));
  EXPECT_EQ(v.shape.type_k, 1) << "GGML_TYPE_F16";
  EXPECT_EQ(v.shape.type_v, 1);
  EXPECT_EQ(v.shape.n_stream, 1u);
  EXPECT_EQ(v.fingerprint, fp_);
}

TEST_F(KvStoreDamage, TruncatedFileIsRejected) {
  auto b = read_all(file_);
  b.resize(b.size() / 2);
  write_all(file_, b);
  expect_rejected();
}

TEST_F(KvStoreDamage, CorruptedPayloadIsRejected) {
  auto b = read_all(file_);
  for (size_t i = b.size() - 64; i < b.size(); i += 3) b[i] ^= 0xff;
  write_all(file_, b);
  expect_rejected();
}

TEST_F(KvStoreDamage, ForeignFileIsRejected) {
  std::vector<uint8_t> junk(5000);
  std::mt19937 rng(5);
  for (auto& x : junk) x = static_cast<uint8_t>(rng());
  write_all(file_, junk);
  expect_rejected();
}

TEST_F(KvStoreDamage, WrongModelFileIsRejected) {
  // A valid cache file written by tiny-spm, offered (under the expected name) to tiny-llama3.
  auto llama3 = kvtest::load("tiny-llama3");
  const Fingerprint fp3 =
      PersistentStore::model_fingerprint(dir_.path.string(), kvtest::model_path("tiny-llama3"));
  ASSERT_FALSE(fp3 == fp_);
  PersistentStore spm_store(dir_.path.string(), fp_, cfg_.block_size);
  const auto entry = spm_store.find(prompt_);
  ASSERT_EQ(entry.n_tokens, prompt_.size());
  PersistentStore store3(dir_.path.string(), fp3, cfg_.block_size);
  EXPECT_EQ(store3.find(prompt_).n_blocks, 0u) << "the index is keyed by model";
  std::vector<uint8_t> buf;
  CacheFileView v;
  std::string reason;
  EXPECT_FALSE(store3.read(entry, buf, v, reason));
  EXPECT_NE(reason.find("another model"), std::string::npos) << reason;
  EXPECT_FALSE(std::filesystem::exists(file_));
}

}  // namespace
