// cache_file.cpp — the persistent KV cache file format: encoding, and a verifying parser that
// rejects truncated, corrupted or foreign bytes with a reason (fed random bytes by a fuzzer).
#include <xxhash.h>

#include <cstring>
#include <string>

#include "lacuna/kv.h"

namespace lacuna::kv {
namespace {

// Layout (little-endian), all offsets from the start of the file:
//   0  magic "LACUNAKV"       8   version u32         12  header size u32 (= 128)
//   16 fingerprint lo u64     24  fingerprint hi u64
//   32 block size u32         36  n_tokens u32
//   40 n_layer u32            44  n_embd u32          48  n_head u32      52 n_head_kv u32
//   56 type_k i32             60  type_v i32          64  n_stream u32    68 flags u32 (0)
//   72 payload size u64       80  tokens xxh3-64      88  payload xxh3-64
//   96 reserved (24 zero bytes)                       120 header xxh3-64 of bytes [0, 120)
//   128 tokens (n_tokens x i32), then the payload (llama_state_seq_get_data bytes).
constexpr char kMagic[8] = {'L', 'A', 'C', 'U', 'N', 'A', 'K', 'V'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 128;
constexpr uint32_t kMaxTokens = 1u << 24;

template <typename T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}
template <typename T>
T get(std::span<const uint8_t> b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

}  // namespace

std::string Fingerprint::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[static_cast<size_t>(i)] = digits[(hi >> (60 - 4 * i)) & 15];
    s[static_cast<size_t>(16 + i)] = digits[(lo >> (60 - 4 * i)) & 15];
  }
  return s;
}

std::vector<uint8_t> encode_cache_file(const Fingerprint& fp, uint32_t block_size,
                                       const KvShape& shape, std::span<const Token> tokens,
                                       std::span<const uint8_t> payload) {
  if (tokens.empty() || tokens.size() > kMaxTokens) {
    throw KvError("encode_cache_file: token count " + std::to_string(tokens.size()) +
                  " is not in 1.." + std::to_string(kMaxTokens));
  }
  std::vector<uint8_t> b(kHeaderSize + tokens.size_bytes() + payload.size(), 0);
  std::memcpy(b.data(), kMagic, 8);
  put<uint32_t>(b, 8, kVersion);
  put<uint32_t>(b, 12, static_cast<uint32_t>(kHeaderSize));
  put<uint64_t>(b, 16, fp.lo);
  put<uint64_t>(b, 24, fp.hi);
  put<uint32_t>(b, 32, block_size);
  put<uint32_t>(b, 36, static_cast<uint32_t>(tokens.size()));
  put<uint32_t>(b, 40, shape.n_layer);
  put<uint32_t>(b, 44, shape.n_embd);
  put<uint32_t>(b, 48, shape.n_head);
  put<uint32_t>(b, 52, shape.n_head_kv);
  put<int32_t>(b, 56, shape.type_k);
  put<int32_t>(b, 60, shape.type_v);
  put<uint32_t>(b, 64, shape.n_stream);
  put<uint32_t>(b, 68, 0);
  put<uint64_t>(b, 72, payload.size());
  put<uint64_t>(b, 80, XXH3_64bits(tokens.data(), tokens.size_bytes()));
  put<uint64_t>(b, 88, XXH3_64bits(payload.data(), payload.size()));
  put<uint64_t>(b, 120, XXH3_64bits(b.data(), 120));
  std::memcpy(b.data() + kHeaderSize, tokens.data(), tokens.size_bytes());
  if (!payload.empty()) {
    std::memcpy(b.data() + kHeaderSize + tokens.size_bytes(), payload.data(), payload.size());
  }
  return b;
}

bool parse_cache_file(std::span<const uint8_t> bytes, CacheFileView& out, std::string& reason) {
  if (bytes.size() < kHeaderSize) {
    reason = "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
             std::to_string(kHeaderSize) + "-byte header";
    return false;
  }
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) {
    reason = "not a lacuna KV cache file (bad magic)";
    return false;
  }
  const auto version = get<uint32_t>(bytes, 8);
  if (version != kVersion) {
    reason = "unsupported format version " + std::to_string(version) + " (this build reads " +
             std::to_string(kVersion) + ")";
    return false;
  }
  if (get<uint32_t>(bytes, 12) != kHeaderSize) {
    reason = "bad header size " + std::to_string(get<uint32_t>(bytes, 12));
    return false;
  }
  if (get<uint64_t>(bytes, 120) != XXH3_64bits(bytes.data(), 120)) {
    reason = "header checksum mismatch (corrupted header)";
    return false;
  }
  // Flags and reserved bytes are zero in this version: a file that sets them was written
  // by a format this build does not know, so it is not read as if they meant nothing.
  if (get<uint32_t>(bytes, 68) != 0) {
    reason = "unknown header flags " + std::to_string(get<uint32_t>(bytes, 68));
    return false;
  }
  for (size_t i = 96; i < 120; ++i) {
    if (bytes[i] != 0) {
      reason = "reserved header byte " + std::to_string(i) + " is not zero";
      return false;
    }
  }
  const auto n_tokens = get<uint32_t>(bytes, 36);
  const auto payload_size = get<uint64_t>(bytes, 72);
  if (n_tokens == 0 || n_tokens > kMaxTokens) {
    reason = "bad token count " + std::to_string(n_tokens);
    return false;
  }
  const uint64_t expected = kHeaderSize + uint64_t{n_tokens} * sizeof(Token);
  if (payload_size > bytes.size() || expected + payload_size != bytes.size()) {
    reason = (expected + payload_size > bytes.size() || payload_size > bytes.size())
                 ? "truncated: " + std::to_string(bytes.size()) + " bytes, header announces " +
                       std::to_string(expected + payload_size)
                 : "trailing bytes: " + std::to_string(bytes.size()) + " bytes, header announces " +
                       std::to_string(expected + payload_size);
    return false;
  }
  const auto token_bytes = bytes.subspan(kHeaderSize, n_tokens * sizeof(Token));
  const auto payload = bytes.subspan(static_cast<size_t>(expected));
  if (get<uint64_t>(bytes, 80) != XXH3_64bits(token_bytes.data(), token_bytes.size())) {
    reason = "token checksum mismatch (corrupted tokens)";
    return false;
  }
  if (get<uint64_t>(bytes, 88) != XXH3_64bits(payload.data(), payload.size())) {
    reason = "payload checksum mismatch (corrupted KV data)";
    return false;
  }
  if (reinterpret_cast<uintptr_t>(token_bytes.data()) % alignof(Token) != 0) {
    reason = "misaligned buffer";
    return false;
  }
  out.fingerprint.lo = get<uint64_t>(bytes, 16);
  out.fingerprint.hi = get<uint64_t>(bytes, 24);
  out.block_size = get<uint32_t>(bytes, 32);
  out.shape.n_layer = get<uint32_t>(bytes, 40);
  out.shape.n_embd = get<uint32_t>(bytes, 44);
  out.shape.n_head = get<uint32_t>(bytes, 48);
  out.shape.n_head_kv = get<uint32_t>(bytes, 52);
  out.shape.type_k = get<int32_t>(bytes, 56);
  out.shape.type_v = get<int32_t>(bytes, 60);
  out.shape.n_stream = get<uint32_t>(bytes, 64);
  out.tokens = std::span<const Token>(reinterpret_cast<const Token*>(token_bytes.data()), n_tokens);
  out.payload = payload;
  return true;
}

void payload_kv_info(std::span<const uint8_t> p, uint32_t n_layer, KvShape& shape) {
  // llama.cpp 0.5.0 KV-cache sequence state: u32 magic, i32 seq id, u32 n_stream, then per
  // stream u32 cell_count and, when non-zero, per cell (i32 pos, u32 n_seq_id, i32 seq id),
  // then u32 v_trans, u32 n_layer, then per layer i32 k_type, u64 row size, rows... The
  // first value type follows the K rows. Anything unexpected leaves the types unknown.
  shape.type_k = shape.type_v = -1;
  shape.n_stream = 0;
  if (p.size() < 12) return;
  const auto n_stream = get<uint32_t>(p, 8);
  if (n_stream == 0 || n_stream > 4096) return;
  shape.n_stream = n_stream;
  size_t off = 12;
  for (uint32_t s = 0; s < n_stream; ++s) {
    if (off + 4 > p.size()) return;
    const auto cells = get<uint32_t>(p, off);
    off += 4;
    if (cells == 0) continue;
    const uint64_t meta = uint64_t{cells} * 12;
    if (off + meta + 8 > p.size()) return;
    off += static_cast<size_t>(meta);
    const auto v_trans = get<uint32_t>(p, off);
    const auto layers = get<uint32_t>(p, off + 4);
    off += 8;
    if (v_trans > 1 || layers != n_layer || layers == 0) return;
    for (uint32_t l = 0; l < layers; ++l) {
      if (off + 12 > p.size()) return;
      const auto type = get<int32_t>(p, off);
      const auto row = get<uint64_t>(p, off + 4);
      off += 12;
      if (l == 0) shape.type_k = type;
      if (row == 0 || row > p.size() || uint64_t{cells} * row > p.size() - off) return;
      off += static_cast<size_t>(uint64_t{cells} * row);
    }
    if (off + 4 > p.size()) return;
    shape.type_v = get<int32_t>(p, off);
    return;
  }
}

}  // namespace lacuna::kv
