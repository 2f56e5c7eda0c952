#!/usr/bin/env bash
# check_exports.sh — fails unless liblacuna.so's dynamic symbol table defines only lacuna_*
# symbols, plus the linker's own _init and _fini (named here explicitly).
set -euo pipefail
lib="$1"
if ! command -v nm >/dev/null; then
  echo "nm not found (binutils)"; exit 1
fi
symbols=$(nm -D --defined-only "$lib" | awk '{print $NF}')
count=$(printf '%s\n' "$symbols" | grep -c '^lacuna_' || true)
bad=$(printf '%s\n' "$symbols" | grep -v -E '^(lacuna_.*|_init|_fini)$' || true)
if [ -n "$bad" ]; then
  echo "FAIL: liblacuna.so exports symbols outside the C ABI:"
  printf '%s\n' "$bad" | head -50
  exit 1
fi
for required in lacuna_abi_version lacuna_stream_open lacuna_stream_next lacuna_model_load; do
  if ! printf '%s\n' "$symbols" | grep -qx "$required"; then
    echo "FAIL: $required is not exported"; exit 1
  fi
done
if nm -D --undefined-only "$lib" | grep -E ' (llama|ggml|gguf)_' >/dev/null; then
  echo "FAIL: liblacuna.so needs llama.cpp/ggml symbols from elsewhere (they must be linked in)"
  exit 1
fi
echo "OK: $count lacuna_* symbols exported, nothing else"
