// edit_diff.cpp — diff of two token lists into KEEP / INSERT / ERASE / REPLACE spans: fast
// paths for append and truncation, then common prefix/suffix, block matching and refinement.
#include <xxhash.h>

#include <algorithm>
#include <unordered_map>

#include "lacuna/kv.h"

namespace lacuna::kv {

const char* span_kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::keep:
      return "keep";
    case SpanKind::insert:
      return "insert";
    case SpanKind::erase:
      return "erase";
    case SpanKind::replace:
      return "replace";
  }
  return "?";
}

namespace {

// Appends the span turning old[ob, ob+ol) into new[nb, nb+nl) (nothing when both empty).
void add_change(std::vector<EditSpan>& out, size_t ob, size_t ol, size_t nb, size_t nl) {
  if (ol == 0 && nl == 0) return;
  const SpanKind k = ol == 0 ? SpanKind::insert : nl == 0 ? SpanKind::erase : SpanKind::replace;
  out.push_back(EditSpan{k, ob, ol, nb, nl});
}

void add_keep(std::vector<EditSpan>& out, size_t ob, size_t nb, size_t len) {
  if (len == 0) return;
  if (!out.empty() && out.back().kind == SpanKind::keep &&
      out.back().old_begin + out.back().old_len == ob &&
      out.back().new_begin + out.back().new_len == nb) {
    out.back().old_len += len;
    out.back().new_len += len;
    return;
  }
  out.push_back(EditSpan{SpanKind::keep, ob, len, nb, len});
}

uint64_t hash_window(std::span<const Token> t) {
  return XXH3_64bits(t.data(), t.size_bytes());
}

}  // namespace

std::vector<EditSpan> diff_tokens(std::span<const Token> a, std::span<const Token> b,
                                  uint32_t block_size) {
  std::vector<EditSpan> out;
  const size_t B = std::max<uint32_t>(block_size, 1);
  const size_t pre = common_prefix(a, b);
  // Fast paths: append-only, truncation, identical.
  if (pre == a.size() || pre == b.size()) {
    add_keep(out, 0, 0, pre);
    add_change(out, pre, a.size() - pre, pre, b.size() - pre);
    return out;
  }
  size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre &&
         a[a.size() - 1 - suf] == b[b.size() - 1 - suf]) {
    ++suf;
  }
  add_keep(out, 0, 0, pre);
  // Middle: old[pre, a_end) against new[pre, b_end).
  const size_t a_end = a.size() - suf, b_end = b.size() - suf;
  // Hash the old middle's aligned blocks; find them in the new middle in increasing order.
  std::unordered_multimap<uint64_t, size_t> blocks;
  for (size_t i = pre; i + B <= a_end; i += B) blocks.emplace(hash_window(a.subspan(i, B)), i);
  size_t oi = pre, ni = pre;  // everything before these is emitted
  size_t j = pre;
  while (j + B <= b_end && !blocks.empty()) {
    const uint64_t h = hash_window(b.subspan(j, B));
    size_t found = SIZE_MAX;
    auto [lo, hi] = blocks.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      const size_t i = it->second;
      if (i >= oi && i < found && std::equal(a.begin() + i, a.begin() + i + B, b.begin() + j)) {
        found = i;
      }
    }
    if (found == SIZE_MAX) {
      ++j;
      continue;
    }
    // Refine: extend the match backwards (not past what is emitted) and forwards.
    size_t s_old = found, s_new = j;
    while (s_old > oi && s_new > ni && a[s_old - 1] == b[s_new - 1]) --s_old, --s_new;
    size_t e_old = found + B, e_new = j + B;
    while (e_old < a_end && e_new < b_end && a[e_old] == b[e_new]) ++e_old, ++e_new;
    // A match that jumps over more old tokens than it keeps is probably a moved piece: keeping
    // it would give up the larger part; look further instead.
    if (s_old - oi > e_old - s_old) {
      ++j;
      continue;
    }
    add_change(out, oi, s_old - oi, ni, s_new - ni);
    add_keep(out, s_old, s_new, e_old - s_old);
    oi = e_old;
    ni = e_new;
    j = e_new;
  }
  add_change(out, oi, a_end - oi, ni, b_end - ni);
  add_keep(out, a_end, b_end, suf);
  return out;
}

}  // namespace lacuna::kv
