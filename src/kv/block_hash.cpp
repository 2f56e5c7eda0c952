// block_hash.cpp — chained XXH3 hashes of fixed-size token blocks, and prefix helpers.
#include <xxhash.h>

#include <stdexcept>

#include "lacuna/kv.h"

namespace lacuna::kv {

BlockHash root_hash(uint32_t block_size, uint64_t seed) {
  const uint64_t words[2] = {0x6c6163756e612d6bull /* "lacuna-k" */, block_size};
  return XXH3_64bits_withSeed(words, sizeof(words), seed);
}

BlockHash chain_block(BlockHash parent, std::span<const Token> block) {
  // Tokens are hashed as the host's int32 bytes; every supported host is little-endian.
  return XXH3_64bits_withSeed(block.data(), block.size_bytes(), parent);
}

std::vector<BlockHash> block_hashes(std::span<const Token> tokens, uint32_t block_size,
                                    BlockHash root) {
  if (block_size == 0) throw std::invalid_argument("block_hashes: block size must be > 0");
  std::vector<BlockHash> out;
  const size_t n = tokens.size() / block_size;
  out.reserve(n);
  BlockHash h = root;
  for (size_t i = 0; i < n; ++i) {
    h = chain_block(h, tokens.subspan(i * block_size, block_size));
    out.push_back(h);
  }
  return out;
}

size_t common_prefix(std::span<const Token> a, std::span<const Token> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace lacuna::kv
