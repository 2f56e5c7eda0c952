#!/usr/bin/env bash
# run_tests.sh — runs the Node package's tests (node --test) against liblacuna.so: copies the
# package into a work directory, installs koffi from the lockfile (npm ci, cached in
# ~/.cache/lacuna/npm, offline when the cache has it) and runs test/*.test.mjs with LACUNA_LIB
# and LACUNA_TEST_MODEL set. Exit 77 (ctest: skipped) when node/npm are missing or too old, or
# when the library is built with sanitizers (node would need the sanitizer runtime
# LD_PRELOADed to load it).
# Usage: run_tests.sh SRC_DIR WORK_DIR LIBLACUNA MODEL [SANITIZERS]
set -euo pipefail
. "$(dirname "$0")/../../tests/node_common.sh"
if [ $# -lt 4 ]; then
  echo "usage: $0 SRC_DIR WORK_DIR LIBLACUNA MODEL [SANITIZERS]" >&2
  exit 2
fi
src="$1" work="$2" lib="$3" model="$4" sanitize="${5:-}"
if [ -n "$sanitize" ]; then
  echo "SKIP: liblacuna.so is built with -fsanitize=$sanitize; node cannot load it without LD_PRELOAD of the sanitizer runtime"
  exit 77
fi
require_node
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
  echo "SKIP: node $(node --version) has no usable test runner (node --test needs 18 or later)"
  exit 77
fi
mkdir -p "$work"
rm -rf "$work/test"
cp "$src/package.json" "$src/package-lock.json" "$src/index.js" "$src/index.d.ts" "$work/"
cp -r "$src/test" "$work/test"
cd "$work"
npm_ci_once koffi
export LACUNA_LIB="$lib" LACUNA_TEST_MODEL="$model"
exec node --test --test-reporter=spec test/*.test.mjs
