// persistent_store.cpp — the on-disk KV cache: files written atomically (tmp + rename), a
// SQLite index (WAL, busy timeout) of entries, sizes, last use and block hashes; cleanup.
#include <dirent.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "lacuna/kv.h"
#include "lacuna/log.h"

namespace lacuna::kv {
namespace {

constexpr const char* kIndexName = "index.sqlite";
constexpr const char* kSuffix = ".lkv";
constexpr uint64_t kMaxFileBytes = 64ull << 30;

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) {
      throw KvError(std::string("kv index: cannot prepare statement: ") + sqlite3_errmsg(db));
    }
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(st_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // true: a row is available; false: done. Throws on error.
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw KvError(std::string("kv index: ") + sqlite3_errmsg(db_));
  }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  int64_t col_int(int i) { return sqlite3_column_int64(st_, i); }
  std::string col_text(int i) {
    const unsigned char* t = sqlite3_column_text(st_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

// Runs sql; with retry_busy, again while the database is busy (a connection's set-up).
// SQLite returns SQLITE_BUSY at once, without the busy handler, where waiting could
// deadlock: two processes opening a new index both switch it to WAL (a shared lock each,
// then both asking for an exclusive one), and one of them failed with "database is locked".
void exec(sqlite3* db, const char* sql, bool retry_busy = false) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (int wait_ms = 1;; wait_ms = std::min(wait_ms * 2, 50)) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
    if (rc == SQLITE_OK) return;
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    if (!retry_busy || (rc & 0xFF) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline) {
      throw KvError("kv index: " + msg + " (in: " + sql + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
}

sqlite3* open_index(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw KvError("kv store: cannot create directory '" + dir + "': " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) {
    throw KvError("kv store: '" + dir + "' is not a directory");
  }
  const std::string path = dir + "/" + kIndexName;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw KvError("kv store: cannot open index '" + path + "': " + msg);
  }
  try {
    sqlite3_busy_timeout(db, 15000);
    exec(db, "PRAGMA journal_mode=WAL", true);
    exec(db, "PRAGMA synchronous=NORMAL", true);
    exec(db, "PRAGMA foreign_keys=ON", true);
    exec(db,
         "CREATE TABLE IF NOT EXISTS entries(id INTEGER PRIMARY KEY, file TEXT UNIQUE NOT NULL,"
         " model TEXT NOT NULL, block_size INTEGER NOT NULL, n_tokens INTEGER NOT NULL,"
         " tokens_hash INTEGER NOT NULL, bytes INTEGER NOT NULL, created INTEGER NOT NULL,"
         " last_used INTEGER NOT NULL);"
         "CREATE TABLE IF NOT EXISTS blocks(hash INTEGER NOT NULL, entry INTEGER NOT NULL"
         " REFERENCES entries(id) ON DELETE CASCADE, depth INTEGER NOT NULL,"
         " PRIMARY KEY(hash, entry)) WITHOUT ROWID;"
         "CREATE INDEX IF NOT EXISTS blocks_entry ON blocks(entry);"
         "CREATE INDEX IF NOT EXISTS entries_last_used ON entries(last_used);"
         "CREATE TABLE IF NOT EXISTS fingerprints(path TEXT PRIMARY KEY, size INTEGER NOT NULL,"
         " mtime_ns INTEGER NOT NULL, inode INTEGER NOT NULL, lo INTEGER NOT NULL,"
         " hi INTEGER NOT NULL);",
         true);
  } catch (...) {
    sqlite3_close(db);
    throw;
  }
  return db;
}

// Reads a whole file. Returns false with a reason.
bool read_file(const std::string& path, std::vector<uint8_t>& out, std::string& reason,
               bool& missing) {
  missing = false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    missing = errno == ENOENT;
    reason = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    reason = "not a regular file";
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    std::fclose(f);
    reason = "file too large (" + std::to_string(st.st_size) + " bytes)";
    return false;
  }
  out.resize(static_cast<size_t>(st.st_size));
  const size_t got = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), f);
  std::fclose(f);
  if (got != out.size()) {
    reason = "short read (" + std::to_string(got) + " of " + std::to_string(out.size()) + ")";
    return false;
  }
  return true;
}

}  // namespace

struct PersistentStore::Impl {
  sqlite3* db = nullptr;
  std::mutex mu;
  ~Impl() {
    if (db) sqlite3_close(db);
  }
};

PersistentStore::PersistentStore(const std::string& dir, const Fingerprint& model,
                                 uint32_t block_size)
    : impl_(std::make_unique<Impl>()), dir_(dir), fp_(model), block_size_(block_size) {
  if (dir.empty()) throw KvError("kv store: empty directory name");
  if (block_size == 0) throw KvError("kv store: block size must be > 0");
  impl_->db = open_index(dir);
  root_ = root_hash(block_size_, fp_.lo ^ (fp_.hi * 0x9e3779b97f4a7c15ull));
}

PersistentStore::~PersistentStore() = default;

Fingerprint fingerprint_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw KvError("fingerprint: cannot open '" + path + "': " + std::strerror(errno));
  }
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  std::vector<uint8_t> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH3_128bits_update(st, buf.data(), n);
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  if (err) throw KvError("fingerprint: read error on '" + path + "'");
  return Fingerprint{h.low64, h.high64};
}

Fingerprint PersistentStore::model_fingerprint(const std::string& dir,
                                               const std::string& model_path) {
  struct stat st {};
  if (stat(model_path.c_str(), &st) != 0) {
    throw KvError("fingerprint: cannot stat '" + model_path + "': " + std::strerror(errno));
  }
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(model_path, ec).string();
  if (ec || key.empty()) key = model_path;
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  sqlite3* db = open_index(dir);
  struct Closer {
    sqlite3* db;
    ~Closer() { sqlite3_close(db); }
  } closer{db};
  {
    Stmt q(db,
           "SELECT lo, hi FROM fingerprints WHERE path=? AND size=? AND mtime_ns=? AND inode=?");
    q.bind(1, key).bind(2, static_cast<int64_t>(st.st_size)).bind(3, mtime_ns);
    q.bind(4, static_cast<int64_t>(st.st_ino));
    if (q.step()) {
      return Fingerprint{static_cast<uint64_t>(q.col_int(0)), static_cast<uint64_t>(q.col_int(1))};
    }
  }
  const Fingerprint fp = fingerprint_file(model_path);
  Stmt ins(db,
           "INSERT OR REPLACE INTO fingerprints(path, size, mtime_ns, inode, lo, hi)"
           " VALUES(?,?,?,?,?,?)");
  ins.bind(1, key).bind(2, static_cast<int64_t>(st.st_size)).bind(3, mtime_ns);
  ins.bind(4, static_cast<int64_t>(st.st_ino)).bind(5, static_cast<int64_t>(fp.lo));
  ins.bind(6, static_cast<int64_t>(fp.hi));
  ins.step();
  return fp;
}

PersistentStore::Entry PersistentStore::find(std::span<const Token> tokens) {
  Entry best;
  const auto hashes = block_hashes(tokens, block_size_, root_);
  if (hashes.empty()) return best;
  std::lock_guard<std::mutex> lock(impl_->mu);
  Stmt q(impl_->db,
         "SELECT e.id, e.file, e.n_tokens, e.bytes FROM blocks b JOIN entries e ON e.id = b.entry"
         " WHERE b.hash = ? AND b.depth = ? AND e.model = ? AND e.block_size = ?"
         " ORDER BY e.n_tokens DESC LIMIT 1");
  const std::string model = fp_.hex();
  // Every entry that holds block k holds blocks 1..k-1 too, so the deepest hit can be found
  // by binary search over k.
  size_t lo = 0, hi = hashes.size();  // answer in [lo, hi]
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    q.reset();
    q.bind(1, static_cast<int64_t>(hashes[mid - 1])).bind(2, static_cast<int64_t>(mid - 1));
    q.bind(3, model).bind(4, static_cast<int64_t>(block_size_));
    if (q.step()) {
      lo = mid;
      best.id = q.col_int(0);
      best.file = q.col_text(1);
      best.n_tokens = static_cast<size_t>(q.col_int(2));
      best.bytes = static_cast<uint64_t>(q.col_int(3));
      best.n_blocks = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (best.n_blocks != lo) {  // the last probe that hit was not the deepest: fetch it again
    best = Entry{};
    if (lo > 0) {
      q.reset();
      q.bind(1, static_cast<int64_t>(hashes[lo - 1])).bind(2, static_cast<int64_t>(lo - 1));
      q.bind(3, model).bind(4, static_cast<int64_t>(block_size_));
      if (q.step()) {
        best.id = q.col_int(0);
        best.file = q.col_text(1);
        best.n_tokens = static_cast<size_t>(q.col_int(2));
        best.bytes = static_cast<uint64_t>(q.col_int(3));
        best.n_blocks = lo;
      }
    }
  }
  return best;
}

bool PersistentStore::read(const Entry& e, std::vector<uint8_t>& buffer, CacheFileView& view,
                           std::string& reason) {
  if (e.id == 0 || e.file.empty() || e.file.find('/') != std::string::npos) {
    reason = "no such entry";
    return false;
  }
  const std::string path = dir_ + "/" + e.file;
  bool missing = false;
  bool ok = read_file(path, buffer, reason, missing);
  if (ok) ok = parse_cache_file(buffer, view, reason);
  if (ok && !(view.fingerprint == fp_)) {
    reason = "written for another model (fingerprint " + view.fingerprint.hex() + ", expected " +
             fp_.hex() + ")";
    ok = false;
  }
  if (ok && view.block_size != block_size_) {
    reason = "block size " + std::to_string(view.block_size) + " differs from " +
             std::to_string(block_size_);
    ok = false;
  }
  if (ok && view.tokens.size() != e.n_tokens) {
    reason = "holds " + std::to_string(view.tokens.size()) + " tokens, the index says " +
             std::to_string(e.n_tokens);
    ok = false;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!ok) {
    log_message(LogLevel::warn, "kv store: rejected '" + path + "': " + reason);
    Stmt del(impl_->db, "DELETE FROM entries WHERE id = ?");
    del.bind(1, e.id).step();
    if (!missing) std::remove(path.c_str());
    return false;
  }
  Stmt upd(impl_->db, "UPDATE entries SET last_used = ? WHERE id = ?");
  upd.bind(1, now_s()).bind(2, e.id).step();
  return true;
}

uint64_t PersistentStore::write(std::span<const Token> tokens, const KvShape& shape,
                                std::span<const uint8_t> payload) {
  const auto hashes = block_hashes(tokens, block_size_, root_);
  if (hashes.empty()) return 0;
  const uint64_t tokens_hash = XXH3_64bits(tokens.data(), tokens.size_bytes());
  const std::string name = fp_.hex().substr(0, 16) + "-" + hex64(tokens_hash) + "-" +
                           std::to_string(tokens.size()) + kSuffix;
  const std::string path = dir_ + "/" + name;
  {
    // The same tokens of the same model are stored already: only mark them as used.
    const uint64_t size = 128 + tokens.size_bytes() + payload.size();
    struct stat st {};
    std::lock_guard<std::mutex> lock(impl_->mu);
    Stmt q(impl_->db, "SELECT id FROM entries WHERE file = ? AND bytes = ?");
    q.bind(1, name).bind(2, static_cast<int64_t>(size));
    if (q.step() && stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == size) {
      Stmt u(impl_->db, "UPDATE entries SET last_used = ? WHERE id = ?");
      u.bind(1, now_s()).bind(2, q.col_int(0)).step();
      return 0;
    }
  }
  const auto file_bytes = encode_cache_file(fp_, block_size_, shape, tokens, payload);
  // Write to a private temporary name, then rename: readers never see a partial file.
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(counter.fetch_add(1)) + "." + hex64(rd());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw KvError("kv store: cannot create '" + tmp + "': " + std::strerror(errno));
  }
  const size_t put = std::fwrite(file_bytes.data(), 1, file_bytes.size(), f);
  const bool flushed = std::fflush(f) == 0;
  std::fclose(f);
  if (put != file_bytes.size() || !flushed) {
    std::remove(tmp.c_str());
    throw KvError("kv store: short write to '" + tmp + "' (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    throw KvError("kv store: cannot rename '" + tmp + "': " + err);
  }

  std::vector<std::string> dropped;
  std::lock_guard<std::mutex> lock(impl_->mu);
  sqlite3* db = impl_->db;
  exec(db, "BEGIN IMMEDIATE");
  try {
    const int64_t now = now_s();
    const std::string model = fp_.hex();
    int64_t id = 0;
    {
      Stmt q(db, "SELECT id FROM entries WHERE file = ?");
      q.bind(1, name);
      if (q.step()) id = q.col_int(0);
    }
    if (id != 0) {
      Stmt u(db, "UPDATE entries SET bytes = ?, last_used = ? WHERE id = ?");
      u.bind(1, static_cast<int64_t>(file_bytes.size())).bind(2, now).bind(3, id).step();
    } else {
      Stmt ins(db,
               "INSERT INTO entries(file, model, block_size, n_tokens, tokens_hash, bytes, created,"
               " last_used) VALUES(?,?,?,?,?,?,?,?)");
      ins.bind(1, name).bind(2, model).bind(3, static_cast<int64_t>(block_size_));
      ins.bind(4, static_cast<int64_t>(tokens.size())).bind(5, static_cast<int64_t>(tokens_hash));
      ins.bind(6, static_cast<int64_t>(file_bytes.size())).bind(7, now).bind(8, now).step();
      id = sqlite3_last_insert_rowid(db);
      Stmt b(db, "INSERT OR IGNORE INTO blocks(hash, entry, depth) VALUES(?,?,?)");
      for (size_t k = 0; k < hashes.size(); ++k) {
        b.reset();
        b.bind(1, static_cast<int64_t>(hashes[k])).bind(2, id).bind(3, static_cast<int64_t>(k));
        b.step();
      }
      // Entries whose tokens are a strict prefix of these are redundant: this one holds them.
      Stmt c(db,
             "SELECT e.id, e.file, e.n_tokens, e.tokens_hash FROM blocks b JOIN entries e"
             " ON e.id = b.entry WHERE b.hash = ? AND b.depth = 0 AND e.id != ? AND"
             " e.n_tokens < ? AND e.model = ?");
      c.bind(1, static_cast<int64_t>(hashes[0])).bind(2, id);
      c.bind(3, static_cast<int64_t>(tokens.size())).bind(4, model);
      std::vector<int64_t> drop_ids;
      while (c.step()) {
        const auto n = static_cast<size_t>(c.col_int(2));
        if (XXH3_64bits(tokens.data(), n * sizeof(Token)) == static_cast<uint64_t>(c.col_int(3))) {
          drop_ids.push_back(c.col_int(0));
          dropped.push_back(c.col_text(1));
        }
      }
      Stmt d(db, "DELETE FROM entries WHERE id = ?");
      for (int64_t x : drop_ids) {
        d.reset();
        d.bind(1, x).step();
      }
    }
    exec(db, "COMMIT");
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  for (const auto& d : dropped) std::remove((dir_ + "/" + d).c_str());
  return file_bytes.size();
}

size_t PersistentStore::cleanup(int64_t max_age_s, uint64_t max_bytes) {
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    sqlite3* db = impl_->db;
    exec(db, "BEGIN IMMEDIATE");
    try {
      Stmt old(db, "SELECT id, file FROM entries WHERE last_used < ?");
      old.bind(1, now_s() - max_age_s);
      std::vector<int64_t> ids;
      while (old.step()) {
        ids.push_back(old.col_int(0));
        files.push_back(old.col_text(1));
      }
      int64_t total = 0;
      {
        Stmt t(db, "SELECT COALESCE(SUM(bytes), 0) FROM entries WHERE last_used >= ?");
        t.bind(1, now_s() - max_age_s);
        if (t.step()) total = t.col_int(0);
      }
      if (static_cast<uint64_t>(total) > max_bytes) {
        Stmt lru(db,
                 "SELECT id, file, bytes FROM entries WHERE last_used >= ?"
                 " ORDER BY last_used ASC, id ASC");
        lru.bind(1, now_s() - max_age_s);
        while (static_cast<uint64_t>(total) > max_bytes && lru.step()) {
          ids.push_back(lru.col_int(0));
          files.push_back(lru.col_text(1));
          total -= lru.col_int(2);
        }
      }
      Stmt d(db, "DELETE FROM entries WHERE id = ?");
      for (int64_t x : ids) {
        d.reset();
        d.bind(1, x).step();
      }
      exec(db, "COMMIT");
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
  size_t removed = 0;
  for (const auto& f : files) removed += std::remove((dir_ + "/" + f).c_str()) == 0 ? 1 : 0;
  // Temporary files left by crashed writers (older than an hour).
  if (DIR* d = opendir(dir_.c_str())) {
    const int64_t limit = now_s() - 3600;
    while (const dirent* ent = readdir(d)) {
      const std::string n = ent->d_name;
      if (n.find(std::string(kSuffix) + ".tmp.") == std::string::npos) continue;
      struct stat st {};
      const std::string p = dir_ + "/" + n;
      if (stat(p.c_str(), &st) == 0 && st.st_mtime < limit && std::remove(p.c_str()) == 0) {
        ++removed;
      }
    }
    closedir(d);
  }
  return removed;
}

uint64_t PersistentStore::total_bytes() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Stmt t(impl_->db, "SELECT COALESCE(SUM(bytes), 0) FROM entries");
  return t.step() ? static_cast<uint64_t>(t.col_int(0)) : 0;
}

size_t PersistentStore::n_entries() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Stmt t(impl_->db, "SELECT COUNT(*) FROM entries");
  return t.step() ? static_cast<size_t>(t.col_int(0)) : 0;
}

}  // namespace lacuna::kv
