# node_common.sh — sourced by the Node test runners (tests/node, tests/server, bindings/node).
# require_node: exit 77 (ctest: skipped) when node or npm is missing.
# npm_ci_once PACKAGE: in the current directory, install the lockfile's packages (npm ci,
# cached in ~/.cache/lacuna/npm, offline when the cache has them) unless node_modules/PACKAGE
# is there from the same lockfile.
require_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "SKIP: node or npm is not installed"
    exit 77
  fi
}

npm_ci_once() {
  if [ ! -d "node_modules/$1" ] || ! cmp -s package-lock.json node_modules/.package-lock.json.src 2>/dev/null; then
    npm ci --cache "${LACUNA_NPM_CACHE:-$HOME/.cache/lacuna/npm}" --prefer-offline --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.package-lock.json.src
  fi
}
