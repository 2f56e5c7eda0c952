// test_kv_edit.cpp — tier-2 edit reuse (off by default): kept spans are shifted into place,
// gaps are filled, the sequence ends up holding exactly the new prompt, it stays usable, and
// it is never applied when cells are shared with other sequences.
#include <gtest/gtest.h>

#include <cmath>

#include "kv_test_util.h"

using lacuna::Token;
using namespace lacuna::kv;

namespace {

class KvEdit : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = std::make_unique<lacuna::Model>(kvtest::load("tiny-spm"));
    ctx_ = std::make_unique<lacuna::Context>(kvtest::make_ctx(*model_, 1024, 4));
    nv_ = kvtest::n_vocab(ctx_->get());
    cfg_.block_size = 16;
    cfg_.edit_reuse = true;
    cfg_.edit_min_span = 8;
    base_ = kvtest::random_tokens(300, 21, nv_);
  }
  Pos pos_max(SeqId s) const { return llama_memory_seq_pos_max(llama_get_memory(ctx_->get()), s); }

  std::unique_ptr<lacuna::Model> model_;
  std::unique_ptr<lacuna::Context> ctx_;
  int32_t nv_ = 0;
  KvConfig cfg_;
  std::vector<Token> base_;
};

TEST_F(KvEdit, OffByDefault) {
  EXPECT_FALSE(KvConfig{}.edit_reuse);
  KvConfig cfg;
  cfg.block_size = 16;
  Session s(ctx_->get(), 0, cfg, nullptr, nullptr, 3);
  s.prefill(base_);
  auto edited = base_;
  edited[100] = edited[100] == 400 ? 401 : 400;
  const auto r = s.prefill(edited);
  EXPECT_FALSE(r.edit_reuse);
  EXPECT_EQ(r.n_reused, 100u);
  EXPECT_EQ(r.n_computed, 200u);
}

TEST_F(KvEdit, ReplacementInTheMiddleKeepsTheRest) {
  Session s(ctx_->get(), 0, cfg_, nullptr, nullptr, 3);
  s.prefill(base_);
  auto edited = base_;
  for (size_t i = 100; i < 105; ++i) edited[i] = 600 + static_cast<Token>(i);
  const auto r = s.prefill(edited);
  EXPECT_TRUE(r.edit_reuse);
  EXPECT_EQ(r.n_reused + r.n_computed, edited.size());
  EXPECT_EQ(r.n_computed, 6u) << "the 5 replaced tokens and the last one";
  EXPECT_EQ(s.stats().tokens_reused_edit, 194u);
  EXPECT_EQ(pos_max(0), static_cast<Pos>(edited.size()) - 1);
  EXPECT_EQ(pos_max(3), -1) << "the scratch sequence is emptied";
  // Next-token distribution close to the recomputed one (tiny random model, small edit).
  const float* warm = llama_get_logits_ith(ctx_->get(), -1);
  std::vector<float> w(warm, warm + nv_);
  const auto cold_top = kvtest::greedy_plain(ctx_->get(), 1, edited, 1);
  EXPECT_EQ(kvtest::argmax(w.data(), nv_), cold_top[0]);
  // The session keeps working: an append-only turn reuses everything it holds.
  auto next = edited;
  next.push_back(777);
  next.push_back(778);
  const auto r2 = s.prefill(next);
  EXPECT_EQ(r2.n_reused, edited.size());
  EXPECT_EQ(pos_max(0), static_cast<Pos>(next.size()) - 1);
}

TEST_F(KvEdit, InsertionAndDeletionShiftKeptSpans) {
  Session s(ctx_->get(), 0, cfg_, nullptr, nullptr, 3);
  s.prefill(base_);
  auto edited = base_;
  const auto ins = kvtest::random_tokens(20, 22, nv_);
  edited.insert(edited.begin() + 80, ins.begin(), ins.end());  // later tokens move right
  edited.erase(edited.begin() + 200, edited.begin() + 230);    // and then left
  const auto r = s.prefill(edited);
  EXPECT_TRUE(r.edit_reuse);
  EXPECT_EQ(r.n_reused + r.n_computed, edited.size());
  EXPECT_EQ(r.n_computed, 21u);
  EXPECT_EQ(pos_max(0), static_cast<Pos>(edited.size()) - 1);
  // Decoding goes on at the right position.
  s.decode(5);
  EXPECT_EQ(pos_max(0), static_cast<Pos>(edited.size()));
}

TEST_F(KvEdit, WithoutScratchOnlyDeletionsAreReused) {
  Session s(ctx_->get(), 0, cfg_);  // no scratch sequence
  s.prefill(base_);
  auto del = base_;
  del.erase(del.begin() + 50, del.begin() + 60);
  auto r = s.prefill(del);
  EXPECT_TRUE(r.edit_reuse);
  EXPECT_EQ(r.n_computed, 1u);
  EXPECT_EQ(pos_max(0), static_cast<Pos>(del.size()) - 1);
  auto ins = del;
  ins.insert(ins.begin() + 50, 5, 999);  // an insertion cannot be filled without scratch
  r = s.prefill(ins);
  EXPECT_FALSE(r.edit_reuse);
  EXPECT_EQ(r.n_reused, 50u);
}

TEST_F(KvEdit, NotAppliedOverCellsAnotherSequenceUses) {
  PrefixCache cache(ctx_->get(), {2}, 16, 512);
  Session s(ctx_->get(), 0, cfg_, &cache, nullptr, 3);
  s.prefill(base_);
  Session other(ctx_->get(), 1, cfg_, &cache);
  other.prefill(base_);  // shares s's cells through the cache, pinned
  auto edited = base_;
  edited[100] = edited[100] == 400 ? 401 : 400;
  auto r = s.prefill(edited);
  EXPECT_FALSE(r.edit_reuse) << "shifting shared cells would move them for `other` too";
  EXPECT_EQ(r.n_reused, 100u);
  // `other` still produces exactly the plain output.
  const auto plain = kvtest::greedy_plain(ctx_->get(), 3, base_, 1);
  other.prefill(base_);
  EXPECT_EQ(kvtest::argmax(llama_get_logits_ith(ctx_->get(), -1), nv_), plain[0]);
  // Once nobody else uses them, the cache's copy is dropped and edit reuse applies.
  other.reset();
  s.prefill(base_);
  edited[150] = edited[150] == 400 ? 401 : 400;
  r = s.prefill(edited);
  EXPECT_TRUE(r.edit_reuse);
}

}  // namespace
