#!/usr/bin/env bash
# run_node_test.sh — installs koffi from tests/node's lockfile (npm ci, cached in
# ~/.cache/lacuna/npm) into a work directory and runs ffi_test.mjs against liblacuna.so.
# Exit 77 (ctest: skipped) when node/npm are missing or when the library is built with
# sanitizers (node would need the sanitizer runtime LD_PRELOADed to load it).
# Usage: run_node_test.sh SRC_DIR WORK_DIR LIBLACUNA MODEL [SANITIZERS]
set -euo pipefail
. "$(dirname "$0")/../node_common.sh"
src="$1" work="$2" lib="$3" model="$4" sanitize="${5:-}"
if [ -n "$sanitize" ]; then
  echo "SKIP: liblacuna.so is built with -fsanitize=$sanitize; node cannot load it without LD_PRELOAD of the sanitizer runtime"
  exit 77
fi
require_node
mkdir -p "$work"
cp "$src/package.json" "$src/package-lock.json" "$src/ffi_test.mjs" "$work/"
cd "$work"
npm_ci_once koffi
exec node ffi_test.mjs "$lib" "$model"
