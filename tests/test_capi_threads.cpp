// test_capi_threads.cpp — the C ABI across threads: cancel from another thread, overlapping
// calls on one stream refused with LACUNA_ERR_BUSY, and streams on two contexts of one model
// running in parallel; CI runs this under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_support.h"
#include "lacuna/lacuna.h"

namespace {

constexpr const char* kPrompt = "The assistant decides what to do next:";

class CapiThreadsTest : public lacuna::testing::CapiModelTest {
 protected:
  static lacuna_stream* open(lacuna_context* ctx, int32_t max_tokens) {
    lacuna_stream_params p = lacuna_stream_default_params();
    p.max_tokens = max_tokens;
    lacuna_stream* s = nullptr;
    EXPECT_EQ(lacuna_stream_open(ctx, &p, &s), LACUNA_OK) << lacuna_last_error();
    return s;
  }

  // Prefills kPrompt and pulls until done; returns the tokens.
  static std::vector<llama_token> run(lacuna_stream* s) {
    const std::string prompt = kPrompt;
    EXPECT_EQ(lacuna_stream_reset(s), LACUNA_OK);
    EXPECT_EQ(lacuna_stream_prefill_text(s, prompt.data(), prompt.size(), 1, 0), LACUNA_OK)
        << lacuna_last_error();
    std::vector<llama_token> out;
    lacuna_step step;
    do {
      if (lacuna_stream_next(s, &step) != LACUNA_OK) {
        ADD_FAILURE() << lacuna_last_error();
        break;
      }
      out.insert(out.end(), step.tokens, step.tokens + step.n_tokens);
    } while (!step.done);
    return out;
  }
};

TEST_F(CapiThreadsTest, CancelFromAnotherThreadStopsTheStream) {
  lacuna_context* ctx = make_context();
  lacuna_stream* s = open(ctx, 0);  // no token budget: only cancel (or a full context) stops it
  const std::string prompt = kPrompt;
  ASSERT_EQ(lacuna_stream_prefill_text(s, prompt.data(), prompt.size(), 1, 0), LACUNA_OK);
  std::atomic<size_t> produced{0};
  std::thread canceller([&] {
    while (produced.load() < 5) std::this_thread::yield();
    EXPECT_EQ(lacuna_stream_cancel(s), LACUNA_OK);
  });
  lacuna_step step;
  size_t n = 0;
  int32_t stop = LACUNA_STOP_NONE;
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(lacuna_stream_next(s, &step), LACUNA_OK) << lacuna_last_error();
    n += step.n_tokens;
    produced.store(n);
    if (step.done) {
      stop = step.stop_reason;
      break;
    }
  }
  canceller.join();
  EXPECT_EQ(stop, LACUNA_STOP_CANCELLED);
  EXPECT_GE(n, 5u);
  EXPECT_LT(n, 400u);
  lacuna_stats st;
  ASSERT_EQ(lacuna_stream_stats(s, &st), LACUNA_OK);
  EXPECT_EQ(st.stop_reason, LACUNA_STOP_CANCELLED);
  EXPECT_EQ(st.tokens_emitted, n);
  // Done stays done; the next prefill clears the cancel.
  ASSERT_EQ(lacuna_stream_next(s, &step), LACUNA_OK);
  EXPECT_EQ(step.done, 1);
  EXPECT_EQ(step.stop_reason, LACUNA_STOP_CANCELLED);
  lacuna_stream_close(s);
  s = open(ctx, 8);
  EXPECT_EQ(run(s).size(), 8u);
  lacuna_stream_close(s);
  lacuna_context_free(ctx);
}

TEST_F(CapiThreadsTest, OverlappingCallsOnOneStreamGetBusy) {
  lacuna_context* ctx = make_context();
  lacuna_stream* s = open(ctx, 24);
  std::atomic<bool> stop{false};
  std::atomic<size_t> ok{0}, busy{0}, other{0};
  std::thread poller([&] {
    lacuna_stats st;
    while (!stop.load()) {
      const lacuna_status status = lacuna_stream_stats(s, &st);
      if (status == LACUNA_OK) {
        ++ok;
      } else if (status == LACUNA_ERR_BUSY &&
                 std::string(lacuna_last_error()).find("in use") != std::string::npos) {
        ++busy;
      } else {
        ++other;
      }
    }
  });
  // The owner thread may itself see BUSY while the poller is inside a call: it retries.
  for (int round = 0; round < 3; ++round) {
    const std::string prompt = kPrompt;
    lacuna_status st;
    while ((st = lacuna_stream_reset(s)) == LACUNA_ERR_BUSY) std::this_thread::yield();
    ASSERT_EQ(st, LACUNA_OK);
    while ((st = lacuna_stream_prefill_text(s, prompt.data(), prompt.size(), 1, 0)) ==
           LACUNA_ERR_BUSY) {
      std::this_thread::yield();
    }
    ASSERT_EQ(st, LACUNA_OK) << lacuna_last_error();
    lacuna_step step{};
    do {
      st = lacuna_stream_next(s, &step);
      ASSERT_TRUE(st == LACUNA_OK || st == LACUNA_ERR_BUSY) << lacuna_status_name(st);
    } while (st == LACUNA_ERR_BUSY || !step.done);
  }
  stop.store(true);
  poller.join();
  EXPECT_EQ(other.load(), 0u);
  EXPECT_GT(ok.load() + busy.load(), 0u);
  lacuna_stream_close(s);
  lacuna_context_free(ctx);
}

TEST_F(CapiThreadsTest, StreamsOnTwoContextsRunInParallel) {
  lacuna_context* c0 = make_context();
  lacuna_stream* s0 = open(c0, 16);
  const std::vector<llama_token> sequential = run(s0);
  ASSERT_EQ(sequential.size(), 16u);
  lacuna_context* c1 = make_context();
  lacuna_stream* s1 = open(c1, 16);
  std::vector<llama_token> out0, out1;
  std::thread t0([&] { out0 = run(s0); });
  std::thread t1([&] { out1 = run(s1); });
  t0.join();
  t1.join();
  EXPECT_EQ(out0, sequential);
  EXPECT_EQ(out1, sequential);
  lacuna_stream_close(s0);
  lacuna_stream_close(s1);
  lacuna_context_free(c0);
  lacuna_context_free(c1);
}

}  // namespace
