// kv.h — KV reuse: chained block hashes, the in-memory prefix cache, the persistent on-disk
// cache, the token-list edit diff and the Session that makes reuse automatic.
//
// Exactness tiers (see docs/kv_cache.md):
//   tier 1, on by default: reuse of the sequence's own prefix, of prefixes cached in memory
//     (PrefixCache) and of prefixes stored on disk (PersistentStore). Reused KV was computed
//     for exactly the same tokens at exactly the same positions, so greedy outputs equal the
//     outputs without reuse.
//   tier 2, off by default (KvConfig::edit_reuse): spans that survive an edit in the middle of
//     the context are kept and shifted to their new positions. Their KV was computed under the
//     old context, so outputs may differ; `lacuna bench kv` reports the divergence.
//
// Threads: a PrefixCache and the Sessions using it belong to one llama_context and must be
// used from one thread at a time, like the context. A PersistentStore object may be shared by
// threads (it locks); several processes may share one directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "llama.h"

namespace lacuna {

using Token = int32_t;  // as in constraint.h / model.h

namespace kv {

using SeqId = int32_t;
using Pos = int32_t;

// Raised on misuse (bad arguments, a context that cannot do what was asked) and on failures
// of the on-disk store that cannot be turned into a plain miss.
class KvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------
// Block hashing

using BlockHash = uint64_t;

// The hash of the empty prefix for a given block size and seed (e.g. a model fingerprint).
BlockHash root_hash(uint32_t block_size, uint64_t seed = 0);

// Hash of one block chained with its parent: XXH3-64 of the block's tokens (little-endian
// int32) seeded with the parent hash. Equal chained hashes mean (up to collisions, which
// callers rule out by comparing tokens) equal whole prefixes.
BlockHash chain_block(BlockHash parent, std::span<const Token> block);

// Chained hashes of every full block of `tokens` (tokens.size() / block_size of them).
// Throws std::invalid_argument for block_size == 0.
std::vector<BlockHash> block_hashes(std::span<const Token> tokens, uint32_t block_size,
                                    BlockHash root);

// Length of the common prefix of two token lists.
size_t common_prefix(std::span<const Token> a, std::span<const Token> b);

// ---------------------------------------------------------------------------------------
// Configuration and statistics

struct KvConfig {
  bool prefix_cache = true;                   // LACUNA_PREFIX_CACHE=0|1
  uint32_t block_size = 64;                   // LACUNA_KV_BLOCK (tokens per block, 1..65536)
  size_t max_cached_tokens = 0;               // LACUNA_PREFIX_CACHE_TOKENS; 0 = half the context
  std::string persist_dir;                    // LACUNA_PERSIST_DIR; empty = no disk cache
  uint64_t persist_max_bytes = 4ull << 30;    // LACUNA_PERSIST_MAX_BYTES
  int64_t persist_max_age_s = 7 * 24 * 3600;  // LACUNA_PERSIST_MAX_AGE (seconds)
  bool edit_reuse = false;                    // LACUNA_EDIT_REUSE=0|1 (tier 2, approximate)
  uint32_t edit_min_span = 16;                // kept spans shorter than this are recomputed

  // `base` with the LACUNA_* variables above applied. Throws KvError for a malformed value
  // (naming the variable).
  static KvConfig from_env(KvConfig base);
  static KvConfig from_env() { return from_env(KvConfig{}); }
  // Throws KvError when a field is out of range.
  void validate() const;
};

struct KvStats {
  uint64_t prefills = 0;
  uint64_t blocks_hit = 0;            // full prompt blocks whose KV was reused
  uint64_t blocks_missed = 0;         // full prompt blocks that were computed
  uint64_t tokens_reused = 0;         // all sources together
  uint64_t tokens_reused_own = 0;     // the sequence's own previous KV
  uint64_t tokens_reused_memory = 0;  // copied from the in-memory prefix cache
  uint64_t tokens_reused_disk = 0;    // restored from the persistent cache
  uint64_t tokens_reused_edit = 0;    // tier 2: kept across an edit, shifted
  uint64_t tokens_recomputed = 0;     // decoded during prefill
  uint64_t bytes_saved = 0;           // KV bytes not recomputed (tokens_reused x bytes/token)
  uint64_t bytes_loaded = 0;          // read from disk cache files
  uint64_t bytes_written = 0;         // written to disk cache files
  uint64_t disk_rejected = 0;         // cache files refused (corrupt, foreign, ...)

  KvStats& operator+=(const KvStats& o);
  std::string to_json() const;
};

// What the context's memory allows (recurrent and hybrid models cannot drop or shift parts
// of a sequence; a non-unified KV cache cannot share cells between sequences).
struct MemoryTraits {
  bool can_shift = false;           // llama_memory_can_shift
  bool partial_removal = false;     // a suffix of a sequence can be removed (not recurrent/hybrid)
  bool shared_cells = false;        // seq_cp between sequences is cheap and partial (unified KV)
  uint64_t kv_bytes_per_token = 0;  // K+V bytes of one token over all layers (f16 estimate)
};
MemoryTraits memory_traits(llama_context* ctx, bool kv_unified);

// ---------------------------------------------------------------------------------------
// In-memory prefix cache

// Full blocks of prompts whose KV lives in "holder" sequences of one llama_context. A new
// prompt finds its longest cached prefix (verified token by token) and copies it into its
// own sequence with llama_memory_seq_cp: in a unified KV cache that only marks the cells as
// shared. Unreferenced leaves are evicted, least recently used first, when the cached token
// count passes the budget or when holders run out.
class PrefixCache {
 public:
  // holder_seqs: sequence ids reserved for the cache (never used by a Session). The context
  // needs a unified KV cache (llama_context_params::kv_unified = true) whenever it has more
  // than one sequence, which it does since holders are sequences of their own. Throws
  // KvError on an empty or duplicated holder list, ids out of range, a non-unified cache,
  // and memory that cannot drop suffixes (recurrent/hybrid models). max_cached_tokens: the
  // budget (0 = half the context).
  PrefixCache(llama_context* ctx, std::vector<SeqId> holder_seqs, uint32_t block_size,
              size_t max_cached_tokens);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Match {
    size_t n_tokens = 0;  // a multiple of block_size
    int32_t node = -1;    // deepest matching node (-1: none)
    SeqId holder = -1;    // a sequence holding positions [0, n_tokens)
  };

  // Longest cached prefix of `tokens` no longer than max_tokens. Marks the path as used.
  Match lookup(std::span<const Token> tokens, size_t max_tokens);
  // Copies positions [from, m.n_tokens) of the match into `dst`, which must already hold the
  // same tokens at [0, from) and nothing beyond.
  void copy_to(const Match& m, SeqId dst, Pos from);
  // Records the full blocks of `tokens`, whose KV sequence `src` holds at [0, tokens.size()).
  // Returns the node of the last full block (-1 when none could be cached).
  int32_t insert(std::span<const Token> tokens, SeqId src);

  // A pinned node (and so its whole path) is never evicted.
  void pin(int32_t node);
  void unpin(int32_t node);

  // Evicts unpinned leaves until at most `target_tokens` are cached. Returns tokens freed.
  size_t evict_to(size_t target_tokens);
  void clear();  // drops everything unpinned

  // Drops the nodes of `tokens`' cached path from block `from_block` on, with everything
  // below them, so that no holder shares those cells any more (needed before shifting a
  // sequence's positions: a shift moves shared cells for every sequence). Returns false,
  // changing nothing, when one of those nodes is pinned.
  bool forget_from(std::span<const Token> tokens, size_t from_block);

  uint32_t block_size() const { return block_size_; }
  size_t cached_tokens() const { return n_nodes_ * block_size_; }
  size_t n_nodes() const { return n_nodes_; }
  size_t max_cached_tokens() const { return max_tokens_; }
  bool owns_seq(SeqId s) const;
  // Bytes of memory the index itself uses (nodes, tokens, hash map).
  size_t index_bytes() const;

 private:
  struct Node {
    BlockHash hash = 0;
    int32_t parent = -1;
    uint32_t depth = 0;  // block number: covers [depth*B, (depth+1)*B)
    SeqId holder = -1;
    uint32_t n_children = 0;
    uint32_t refs = 0;
    uint64_t last_use = 0;
    bool live = false;
    std::vector<Token> tokens;
  };
  struct Holder {
    SeqId seq = -1;
    int32_t tip = -1;  // -1: free
  };

  int32_t find_child(int32_t parent, BlockHash h, std::span<const Token> block) const;
  int32_t new_node();
  bool evict_one();
  void evict_node(int32_t victim);
  Holder* holder_of(SeqId s);
  Holder* free_holder();

  llama_context* ctx_;
  llama_memory_t mem_;
  uint32_t block_size_;
  size_t max_tokens_;
  BlockHash root_;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  std::unordered_map<BlockHash, int32_t> by_hash_;
  std::vector<Holder> holders_;
  size_t n_nodes_ = 0;
  uint64_t clock_ = 0;
};

// ---------------------------------------------------------------------------------------
// Persistent cache file format and store

// A 128-bit model fingerprint (see docs/kv_cache.md: XXH3-128 of the whole GGUF file).
struct Fingerprint {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Fingerprint&) const = default;
  std::string hex() const;
};

// Computes the fingerprint of a model file (reads it whole). Throws KvError when unreadable.
Fingerprint fingerprint_file(const std::string& path);

// Shapes recorded in a cache file header and checked before a payload is handed to llama.cpp.
struct KvShape {
  uint32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0;
  int32_t type_k = -1, type_v = -1;  // ggml types parsed from the payload (-1: unknown)
  uint32_t n_stream = 0;             // KV streams in the payload (1 for a unified cache)
  bool operator==(const KvShape&) const = default;
};
KvShape model_shape(const llama_model* model);

// A parsed cache file (views into the caller's buffer).
struct CacheFileView {
  Fingerprint fingerprint;
  uint32_t block_size = 0;
  KvShape shape;
  std::span<const Token> tokens;
  std::span<const uint8_t> payload;
};

// Encodes a cache file: header, tokens, payload (llama_state_seq_get_data bytes).
std::vector<uint8_t> encode_cache_file(const Fingerprint& fp, uint32_t block_size,
                                       const KvShape& shape, std::span<const Token> tokens,
                                       std::span<const uint8_t> payload);

// Parses and verifies a cache file: magic, version, header checksum, exact size, token and
// payload checksums. On failure returns false and sets `reason`; never throws on bad bytes.
// The token span aliases `bytes` and may be unaligned only if `bytes` is; callers pass
// buffers from std::vector (suitably aligned).
bool parse_cache_file(std::span<const uint8_t> bytes, CacheFileView& out, std::string& reason);

// Reads the K/V ggml types and stream count from a KV-cache state payload (best effort).
void payload_kv_info(std::span<const uint8_t> payload, uint32_t n_layer, KvShape& shape);

// The on-disk store: cache files in one directory plus a SQLite index (entries, sizes, last
// use, and the block hashes of every entry). Writes go to a temporary file then rename(2);
// the index uses WAL and a busy timeout, so processes may share the directory.
class PersistentStore {
 public:
  // Opens (creating if needed) the directory and its index. Throws KvError with the reason.
  PersistentStore(const std::string& dir, const Fingerprint& model, uint32_t block_size);
  ~PersistentStore();
  PersistentStore(const PersistentStore&) = delete;
  PersistentStore& operator=(const PersistentStore&) = delete;

  struct Entry {
    int64_t id = 0;
    std::string file;  // file name inside the directory
    size_t n_tokens = 0;
    size_t n_blocks = 0;  // full blocks of `tokens` found in this entry
    uint64_t bytes = 0;
  };
  // The entry that holds the most full blocks of `tokens` (0 blocks = none).
  Entry find(std::span<const Token> tokens);

  // Reads and verifies an entry file. On success fills `buffer` and `view` (pointing into
  // buffer) and returns true. A bad file is removed from the index and the directory, its
  // reason logged and stored in `reason`.
  bool read(const Entry& e, std::vector<uint8_t>& buffer, CacheFileView& view, std::string& reason);

  // Writes an entry for `tokens` (at least one full block) with its state payload.
  // Entries whose tokens are a strict prefix of `tokens` are dropped. Returns bytes written:
  // 0 for fewer than one full block, or when an entry for the same tokens exists already.
  uint64_t write(std::span<const Token> tokens, const KvShape& shape,
                 std::span<const uint8_t> payload);

  // Removes entries older than max_age_s (by last use), then least recently used ones until
  // the total size is at most max_bytes; also stale temporary files. Returns files removed.
  size_t cleanup(int64_t max_age_s, uint64_t max_bytes);

  uint64_t total_bytes();
  size_t n_entries();

  // The fingerprint of a model file, computed once and remembered in `dir`'s index under the
  // file's path, size, modification time and inode. Throws KvError.
  static Fingerprint model_fingerprint(const std::string& dir, const std::string& model_path);
  const std::string& dir() const { return dir_; }
  const Fingerprint& fingerprint() const { return fp_; }
  uint32_t block_size() const { return block_size_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dir_;
  Fingerprint fp_;
  uint32_t block_size_;
  BlockHash root_;
};

// ---------------------------------------------------------------------------------------
// Edit diff (tier 2)

enum class SpanKind { keep, insert, erase, replace };
const char* span_kind_name(SpanKind k);

// One span of an edit script: old[old_begin, old_begin+old_len) becomes
// new[new_begin, new_begin+new_len). keep: equal tokens (lengths equal); insert: old_len 0;
// erase: new_len 0; replace: both non-zero.
struct EditSpan {
  SpanKind kind;
  size_t old_begin, old_len, new_begin, new_len;
  bool operator==(const EditSpan&) const = default;
};

// Diffs two token lists into an ordered edit script covering both lists completely.
// Append-only and truncation are answered without searching; otherwise the common prefix and
// suffix are taken, then blocks of `block_size` tokens of the old middle are matched in the
// new middle (in order) and each match is extended token by token.
std::vector<EditSpan> diff_tokens(std::span<const Token> old_tokens,
                                  std::span<const Token> new_tokens, uint32_t block_size);

// ---------------------------------------------------------------------------------------
// Session: automatic reuse for one sequence

enum class ReuseSource { none, own, memory, disk };
const char* reuse_source_name(ReuseSource s);

struct PrefillResult {
  size_t n_prompt = 0;
  size_t n_reused = 0;            // tokens whose KV was not recomputed
  size_t n_reused_positions = 0;  // restore(): positions [0, this) hold the prompt's KV
  size_t n_computed = 0;          // tokens decoded
  ReuseSource source = ReuseSource::none;
  bool edit_reuse = false;  // tier 2 was applied
};

// Keeps sequence `seq` of a context in step with a token list. prefill(prompt) makes the
// sequence hold exactly the prompt's KV, reusing what it can (its own previous tokens, the
// prefix cache, the disk store; with edit reuse, kept spans), decodes the rest and leaves
// the logits of the last prompt token at llama_get_logits_ith(ctx, -1).
class Session {
 public:
  // cache and store are optional (null: not used) and must outlive the session. scratch_seq
  // (tier 2 only, optional) is a sequence id the session may use as a temporary.
  Session(llama_context* ctx, SeqId seq, const KvConfig& config, PrefixCache* cache = nullptr,
          PersistentStore* store = nullptr, SeqId scratch_seq = -1);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Throws std::invalid_argument for an empty prompt or tokens out of the vocabulary, and
  // KvError when the prompt does not fit the context or llama_decode fails (the sequence is
  // then empty). The sequence is emptied when the session is created.
  PrefillResult prefill(std::span<const Token> prompt);

  // prefill() in two halves, for a caller that decodes the rest itself (the runtime's
  // Branch, in a batch shared with other sequences): restore() makes the sequence hold the
  // prompt's KV at positions [0, n_reused_positions) (at most prompt.size() - 1) from what
  // can be reused; the caller decodes the rest; record() then books the prompt as the
  // sequence's tokens and offers its blocks to the prefix cache. Same errors as prefill().
  PrefillResult restore(std::span<const Token> prompt);
  void record(std::span<const Token> prompt, const PrefillResult& restored);
  // The caller changed the sequence itself: it now holds exactly `tokens`. Throws KvError
  // when the sequence's positions disagree.
  void assume(std::span<const Token> tokens);

  // Decodes one token after the current ones (its logits at llama_get_logits_ith(ctx, -1)).
  void decode(Token token);
  // Records tokens the caller decoded into this sequence itself, after the current ones.
  void append_external(std::span<const Token> tokens);

  // Writes the current tokens' KV to the persistent store (no-op without a store or with
  // fewer than one full block). Returns bytes written.
  uint64_t persist();

  // Empties the sequence.
  void reset();

  const std::vector<Token>& tokens() const { return tokens_; }
  SeqId seq() const { return seq_; }
  const KvStats& stats() const { return stats_; }
  const MemoryTraits& traits() const { return traits_; }

 private:
  void decode_range(std::span<const Token> tokens, Pos start, SeqId seq, bool last_logits);
  size_t try_disk(std::span<const Token> prompt, size_t limit, size_t best_other);
  size_t apply_edit_reuse(std::span<const Token> prompt, size_t limit);
  void set_pin(int32_t node);

  llama_context* ctx_;
  llama_memory_t mem_;
  SeqId seq_;
  SeqId scratch_;
  KvConfig config_;
  PrefixCache* cache_;
  PersistentStore* store_;
  MemoryTraits traits_;
  std::vector<Token> tokens_;
  KvStats stats_;
  llama_batch batch_{};
  int32_t batch_cap_ = 0;
  int32_t pinned_ = -1;
  size_t persisted_tokens_ = 0;
  std::vector<uint8_t> io_buffer_;
};

}  // namespace kv
}  // namespace lacuna
