// test_kv_threads_store.cpp — several writers and readers sharing one cache directory (two
// threads with separate store objects, and two processes via fork) never corrupt it, and a
// store opening a new index waits for another connection's lock on it.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kv_test_util.h"

using lacuna::Token;
using namespace lacuna::kv;

namespace {

constexpr uint32_t kBlock = 8;

std::vector<Token> tokens_for(int writer, int i) {
  // Entries of different writers share their first block, so lookups cross writers.
  std::vector<Token> t = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int k = 0; k < 8 + (i % 5) * 8; ++k) t.push_back(1000 * writer + 10 * i + k);
  return t;
}

std::vector<uint8_t> payload_for(const std::vector<Token>& t) {
  std::vector<uint8_t> p(3000 + t.size() * 50);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(t[i % t.size()] + i);
  return p;
}

// Writes n entries and reads back everything it can find; returns problems seen.
int work(const std::string& dir, int writer, int n) {
  int problems = 0;
  try {
    PersistentStore store(dir, Fingerprint{7, 7}, kBlock);
    for (int i = 0; i < n; ++i) {
      const auto t = tokens_for(writer, i);
      if (store.write(t, KvShape{}, payload_for(t)) == 0) ++problems;
      // Read back one of our own and one of the other writer's entries.
      for (int w : {writer, 1 - writer}) {
        const auto q = tokens_for(w, i / 2);
        const auto e = store.find(q);
        if (e.n_blocks == 0) continue;  // not written yet (other writer), or superseded
        std::vector<uint8_t> buf;
        CacheFileView v;
        std::string reason;
        if (!store.read(e, buf, v, reason)) {
          // Another writer may have removed a superseded file between find and read: a miss.
          if (reason.find("cannot open") == std::string::npos) ++problems;
          continue;
        }
        const std::vector<Token> got(v.tokens.begin(), v.tokens.end());
        if (std::vector<uint8_t>(v.payload.begin(), v.payload.end()) != payload_for(got)) {
          ++problems;
        }
      }
      if (i % 10 == 9) store.cleanup(3600, 1ull << 30);
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "writer " << writer << ": " << e.what();
    ++problems;
  }
  return problems;
}

void expect_consistent(const std::string& dir, int n) {
  PersistentStore store(dir, Fingerprint{7, 7}, kBlock);
  for (int w = 0; w < 2; ++w) {
    for (int i = 0; i < n; ++i) {
      const auto t = tokens_for(w, i);
      const auto e = store.find(t);
      ASSERT_EQ(e.n_blocks, t.size() / kBlock) << w << " " << i;
      std::vector<uint8_t> buf;
      CacheFileView v;
      std::string reason;
      ASSERT_TRUE(store.read(e, buf, v, reason)) << reason;
      EXPECT_EQ(std::vector<Token>(v.tokens.begin(), v.tokens.end()), t);
    }
  }
  // No temporary files are left behind.
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
  }
}

TEST(KvStoreThreads, TwoThreadsShareADirectory) {
  kvtest::TempDir dir;
  constexpr int n = 30;
  std::atomic<int> problems{0};
  std::thread a([&] { problems += work(dir.path.string(), 0, n); });
  std::thread b([&] { problems += work(dir.path.string(), 1, n); });
  a.join();
  b.join();
  EXPECT_EQ(problems.load(), 0);
  expect_consistent(dir.path.string(), n);
}

TEST(KvStoreThreads, TwoProcessesShareADirectory) {
  kvtest::TempDir dir;
  constexpr int n = 30;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int p = work(dir.path.string(), 1, n);
    _exit(p == 0 ? 0 : 1);
  }
  const int p = work(dir.path.string(), 0, n);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child found problems";
  EXPECT_EQ(p, 0);
  expect_consistent(dir.path.string(), n);
}

// A new index whose file another connection holds a write lock on (another process creating
// it): switching it to WAL needs an exclusive lock, and SQLite answers "database is locked"
// at once, without the busy handler, where waiting could deadlock. The store waits until
// the lock is gone instead of failing (two processes opening a new directory at once).
TEST(KvStoreThreads, OpenWaitsForAWriterOnANewIndex) {
  kvtest::TempDir dir;
  std::filesystem::create_directories(dir.path);
  const std::string index = (dir.path / "index.sqlite").string();
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(index.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "CREATE TABLE t(x); BEGIN IMMEDIATE; INSERT INTO t VALUES(1);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(other);
  });
  try {
    PersistentStore store(dir.path.string(), Fingerprint{7, 7}, kBlock);
    const std::vector<Token> t = tokens_for(0, 0);
    EXPECT_EQ(store.find(t).n_blocks, 0u);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  release.join();
}

}  // namespace
