// fuzz_trie_payload.cpp — libFuzzer target for the token-trie payload parser and builder:
// any bytes must give a TrieError or a usable trie set, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "lacuna/token_trie.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  lacuna::TriePayloadLimits limits;
  limits.max_payload_bytes = 1u << 16;
  limits.max_leaves = 4096;
  limits.max_leaf_tokens = 256;
  constexpr size_t kVocab = 512;
  try {
    auto set = lacuna::build_trie_set(text, kVocab, limits);
    // Walk every descriptor greedily along its first children, checking mask/accept agree.
    std::vector<uint32_t> words(lacuna::bitmask_words(kVocab));
    std::vector<lacuna::Token> forced;
    for (const auto& trie : set->tries) {
      lacuna::TokenTrieConstraint c(set, lacuna::TrieOptions{{kVocab - 1}, 64, {}}, trie->path());
      for (int step = 0; step < 300 && !c.is_terminated(); ++step) {
        c.fill_next_token_bitmask(words.data());
        const lacuna::AllowedTokens a = c.allowed_tokens();
        if (a.kind != lacuna::AllowedTokens::Kind::kList || a.size == 0) break;
        const lacuna::Token t = a.tokens[static_cast<size_t>(step) % a.size];
        if (!lacuna::bitmask_test(words.data(), t)) __builtin_trap();
        forced.clear();
        c.forced_tokens(forced, 8);
        if (!c.accept_token(t)) __builtin_trap();
      }
      if (!c.rollback(1) && c.span_tokens() > 0) __builtin_trap();
    }
  } catch (const lacuna::TrieError&) {
    // Expected for bad input.
  }
  return 0;
}
