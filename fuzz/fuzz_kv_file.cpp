// fuzz_kv_file.cpp — libFuzzer target: the persistent KV cache file parser fed arbitrary bytes
// must reject or accept without crashing; an accepted file must re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "lacuna/kv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an aligned buffer, as the store does (std::vector storage).
  std::vector<uint8_t> buf(data, data + size);
  lacuna::kv::CacheFileView view;
  std::string reason;
  // The best-effort payload reader must survive raw bytes too.
  lacuna::kv::KvShape raw;
  lacuna::kv::payload_kv_info(buf, 2, raw);
  if (!lacuna::kv::parse_cache_file(buf, view, reason)) {
    if (reason.empty()) std::abort();  // every rejection says why
    return 0;
  }
  lacuna::kv::KvShape shape = view.shape;
  lacuna::kv::payload_kv_info(view.payload, shape.n_layer, shape);
  const auto again = lacuna::kv::encode_cache_file(view.fingerprint, view.block_size, view.shape,
                                                   view.tokens, view.payload);
  if (again != buf) std::abort();
  return 0;
}
