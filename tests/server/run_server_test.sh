#!/usr/bin/env bash
# run_server_test.sh — installs the openai package from tests/server's lockfile (npm ci,
# cached in ~/.cache/lacuna/npm) into a work directory and runs server_test.mjs, which
# starts `lacuna serve` on 127.0.0.1 (a free port) and drives it with OpenAI's client.
# Exit 77 (ctest: skipped) when node/npm are missing or the build is sanitized (the server
# then runs 5-20x slower than the test's time bounds assume).
# Usage: run_server_test.sh SRC_DIR WORK_DIR LACUNA MODEL [SANITIZERS]
set -euo pipefail
. "$(dirname "$0")/../node_common.sh"
src="$1" work="$2" lacuna="$3" model="$4" sanitize="${5:-}"
if [ -n "$sanitize" ]; then
  echo "SKIP: lacuna is built with -fsanitize=$sanitize; the server test's time bounds assume a plain build"
  exit 77
fi
require_node
mkdir -p "$work"
cp "$src/package.json" "$src/package-lock.json" "$src/server_test.mjs" "$work/"
cd "$work"
npm_ci_once openai
exec node server_test.mjs "$lacuna" "$model"
