#!/usr/bin/env bash
# test_dependency_cache.sh — a second configure reuses the cached llama.cpp: the fetch step
# reports the cache, rebuilds nothing (the installed library keeps its mtime) and is quick.
# Args: SOURCE_DIR CACHE_DIR
set -euo pipefail
src="$1"
cache="$2"
if [ ! -f "$cache/ok" ]; then
  echo "SKIP: llama.cpp was not provided by the cache (source or system provider)"
  exit 0
fi
lib="$(find "$cache/install" -name 'libllama.*' | head -n 1)"
[ -n "$lib" ] || { echo "FAIL: no libllama in $cache/install"; exit 1; }
before="$(stat -c %Y "$lib")"
start="$(date +%s)"
out="$(bash "$src/scripts/fetch-llama.sh" "$cache" 2>&1)"
end="$(date +%s)"
after="$(stat -c %Y "$lib")"
echo "$out"
grep -q "using cached build" <<<"$out" || { echo "FAIL: the fetch step did not use the cache"; exit 1; }
[ "$before" = "$after" ] || { echo "FAIL: $lib was rebuilt"; exit 1; }
[ $((end - start)) -le 5 ] || { echo "FAIL: the cached step took $((end - start)) s"; exit 1; }

# A whole second configure of a fresh build tree must not rebuild llama.cpp either.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake -S "$src" -B "$tmp" -G Ninja -DLACUNA_BUILD_TESTS=OFF -DLACUNA_BUILD_TOOLS=OFF \
  -DLACUNA_LLAMA_CACHE="$cache" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
grep -q "using cached build" "$tmp/configure.log" || { cat "$tmp/configure.log"; echo "FAIL: configure did not use the cache"; exit 1; }
[ "$(stat -c %Y "$lib")" = "$before" ] || { echo "FAIL: configure rebuilt $lib"; exit 1; }
echo "PASS: cached llama.cpp reused"
