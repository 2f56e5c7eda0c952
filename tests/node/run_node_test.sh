#!/usr/bin/env bash
# run_node_test.sh — installs koffi from tests/node's lockfile (npm ci, cached in
# ~/.cache/lacuna/npm) into a work directory and runs ffi_test.mjs against liblacuna.so.
# Exit 77 (ctest: skipped) when node/npm are missing or when the library is built with
# sanitizers (node would need the sanitizer runtime LD_PRELOADed to load it).
# Usage: run_node_test.sh SRC_DIR WORK_DIR LIBLACUNA MODEL [SANITIZERS]
set -euo pipefail
src="$1" work="$2" lib="$3" model="$4" sanitize="${5:-}"
if [ -n "$sanitize" ]; then
  echo "SKIP: liblacuna.so is built with -fsanitize=$sanitize; node cannot load it without LD_PRELOAD of the sanitizer runtime"
  exit 77
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node or npm is not installed"
  exit 77
fi
mkdir -p "$work"
cp "$src/package.json" "$src/package-lock.json" "$src/ffi_test.mjs" "$work/"
cd "$work"
if [ ! -d node_modules/koffi ] || ! cmp -s package-lock.json node_modules/.package-lock.json.src 2>/dev/null; then
  npm ci --cache "${LACUNA_NPM_CACHE:-$HOME/.cache/lacuna/npm}" --prefer-offline --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.package-lock.json.src
fi
exec node ffi_test.mjs "$lib" "$model"
