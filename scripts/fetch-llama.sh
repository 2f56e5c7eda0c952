#!/usr/bin/env bash
# fetch-llama.sh — fetch, verify, build and install the pinned llama.cpp once, into a cache
# directory outside any build tree, and reuse it on every later call.
#
# The pin: llama.cpp 0.5.0 as shipped in the npm package node-llama-cpp@3.22.1, file
# package/llama/gitRelease.bundle (a git bundle of the full source). The tarball's sha512
# must equal the integrity value recorded below (the registry's own value when pinned);
# when the registry answers, its current value must agree too.
#
# Usage: fetch-llama.sh [CACHE_DIR]
#   CACHE_DIR defaults to $LACUNA_LLAMA_CACHE or ~/.cache/lacuna/llama.cpp-0.5.0
# Layout of CACHE_DIR:
#   src/      the cloned source (models/ggml-vocab-*.gguf and grammars/ are used by tests)
#   build/    the CMake build tree of llama + ggml (CPU backend)
#   install/  the installed libraries, headers and CMake package files
#   ok        stamp written last; its presence means the cache is complete
#   ok-common stamp of the additive step that builds llama.cpp's `llama-common` library
#             (chat templates and parsers, common/chat.h) in the same build tree; lacuna's
#             chat module links it from there (cmake/LacunaLlama.cmake)
# Extra CMake arguments for llama.cpp can be given in LACUNA_LLAMA_CMAKE_ARGS.
set -euo pipefail

NPM_PACKAGE="node-llama-cpp"
NPM_VERSION="3.22.1"
NPM_INTEGRITY="sha512-bltIipuWmc123H7tMIgDGKSsSrhmhlQYeVUC48XTjVW7XGJJiJJyCdlTMzQ/LiWoPkGDpcL4FviDpgw7qfTiDw=="
LLAMA_VERSION="0.5.0"

cache="${1:-${LACUNA_LLAMA_CACHE:-$HOME/.cache/lacuna/llama.cpp-$LLAMA_VERSION}}"
extra_args="${LACUNA_LLAMA_CMAKE_ARGS:-}"
# The stamp records what was built, so a change of build arguments rebuilds.
want_stamp="$NPM_PACKAGE@$NPM_VERSION $NPM_INTEGRITY cc=$(command -v cc || true) args=$extra_args"

log() { printf '[lacuna/llama.cpp] %s\n' "$*" >&2; }
die() { printf '[lacuna/llama.cpp] error: %s\n' "$*" >&2; exit 1; }

# The common step's stamp: the main stamp plus the targets it builds.
want_common_stamp="$want_stamp common=llama-common,llama-common-base,cpp-httplib"
stamp_ok() { [ -f "$cache/$1" ] && [ "$(cat "$cache/$1")" = "$2" ]; }

if stamp_ok ok "$want_stamp" && stamp_ok ok-common "$want_common_stamp"; then
  log "using cached build in $cache"
  exit 0
fi

mkdir -p "$cache"
# Two configures at once (parallel builds, two checkouts) must not build twice or
# interleave: take a lock on the cache directory, then look again.
exec 9>"$cache/.lock"
if command -v flock >/dev/null 2>&1; then
  log "waiting for the cache lock" && flock 9
fi
if stamp_ok ok "$want_stamp" && stamp_ok ok-common "$want_common_stamp"; then
  log "using cached build in $cache (built by another process)"
  exit 0
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# The additive step: reconfigure the same build tree with LLAMA_BUILD_COMMON=ON and build only
# the common library and what it links (no HTTPS: LLAMA_OPENSSL stays OFF, no curl). llama and
# ggml are not rebuilt (their flags do not change), and the `ok` stamp is left alone.
build_common() {
  rm -f "$cache/ok-common"
  log "building llama-common (chat templates and parsers) in $cache/build"
  # shellcheck disable=SC2086
  cmake -S "$cache/src" -B "$cache/build" -DLLAMA_BUILD_COMMON=ON -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    $extra_args >>"$cache/build-common.log" 2>&1 ||
    { tail -n 40 "$cache/build-common.log" >&2; die "configure of llama-common failed (log: $cache/build-common.log)"; }
  cmake --build "$cache/build" --parallel "$(nproc 2>/dev/null || echo 2)" \
    --target llama-common llama-common-base cpp-httplib >>"$cache/build-common.log" 2>&1 ||
    { tail -n 40 "$cache/build-common.log" >&2; die "build of llama-common failed (log: $cache/build-common.log)"; }
  printf '%s' "$want_common_stamp" >"$cache/ok-common"
  log "built llama-common in $cache/build/common"
}

if stamp_ok ok "$want_stamp"; then
  : >"$cache/build-common.log"
  build_common
  exit 0
fi
rm -f "$cache/ok" "$cache/ok-common"

for tool in npm git cmake tar openssl base64; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (run scripts/install-deps.sh)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/lacuna-llama.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [ ! -d "$cache/src/.git" ]; then
  log "fetching $NPM_PACKAGE@$NPM_VERSION from the npm registry"
  (cd "$work" && npm pack --silent "$NPM_PACKAGE@$NPM_VERSION" >/dev/null) ||
    die "npm pack $NPM_PACKAGE@$NPM_VERSION failed (no registry? pass -DLACUNA_LLAMA_SOURCE_DIR=<llama.cpp source> instead)"
  tgz="$work/$NPM_PACKAGE-$NPM_VERSION.tgz"
  [ -f "$tgz" ] || die "npm pack did not produce $tgz"

  actual="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  [ "$actual" = "$NPM_INTEGRITY" ] ||
    die "integrity mismatch for $tgz: expected $NPM_INTEGRITY, got $actual"
  registry="$(npm view "$NPM_PACKAGE@$NPM_VERSION" dist.integrity 2>/dev/null || true)"
  if [ -n "$registry" ] && [ "$registry" != "$NPM_INTEGRITY" ]; then
    die "the registry now reports integrity $registry for $NPM_PACKAGE@$NPM_VERSION, not the pinned $NPM_INTEGRITY"
  fi
  log "tarball integrity verified ($NPM_INTEGRITY)"

  tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle ||
    die "the tarball has no package/llama/gitRelease.bundle"
  rm -rf "$cache/src"
  git clone --quiet "$work/package/llama/gitRelease.bundle" "$cache/src" 2>/dev/null ||
    die "git clone of the bundle failed"
  [ -f "$cache/src/include/llama.h" ] || die "the bundle holds no include/llama.h"
fi

grep -q "llama_set_sampler" "$cache/src/include/llama.h" ||
  die "$cache/src is not llama.cpp $LLAMA_VERSION (no llama_set_sampler in llama.h)"

log "building llama + ggml (CPU backend) in $cache/build"
rm -rf "$cache/build" "$cache/install"
# shellcheck disable=SC2086
cmake -S "$cache/src" -B "$cache/build" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$cache/install" \
  -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
  $extra_args >"$cache/build.log" 2>&1 || { tail -n 40 "$cache/build.log" >&2; die "configure failed (log: $cache/build.log)"; }
cmake --build "$cache/build" --parallel "$(nproc 2>/dev/null || echo 2)" >>"$cache/build.log" 2>&1 ||
  { tail -n 40 "$cache/build.log" >&2; die "build failed (log: $cache/build.log)"; }
cmake --install "$cache/build" >>"$cache/build.log" 2>&1 ||
  { tail -n 40 "$cache/build.log" >&2; die "install failed (log: $cache/build.log)"; }

printf '%s' "$want_stamp" >"$cache/ok"
log "installed into $cache/install"

: >"$cache/build-common.log"
build_common
