#!/usr/bin/env bash
# Builds the Python wheelhouse the api and runner images install from, on the host,
# because pip over TLS may not work inside an image build (see README-docker.md).
#
#   build/wheelhouse/deps/api.txt, runner.txt   pinned requirements (uv export, from uv.lock)
#   build/wheelhouse/deps/<arch>/*.whl           every third-party wheel, for that arch
#   build/wheelhouse/local/*.whl                 mallard-api, mallard-runner, the wire
#                                                models both use, mallard-wire, and the API's
#                                                statistics, mallard-stats (pure Python)
# The images copy deps/ in one layer (cached until uv.lock changes) and local/ in a later one.
#
# <arch> is Docker's name (amd64, arm64). The host's own arch is built with `pip wheel`
# (sdists become wheels); another arch (--arch arm64) reuses the pure-Python wheels and
# downloads manylinux binary wheels for cp311 (Debian bookworm's python3).
# Usage: scripts/wheelhouse.sh [--arch amd64|arm64]...   (default: the host's arch)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"
log() { echo "wheelhouse: $*" >&2; }

host_arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case "$host_arch" in x86_64) host_arch=amd64 ;; aarch64) host_arch=arm64 ;; esac
arches=()
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arches+=("$2"); shift 2 ;;
    *) echo "usage: $0 [--arch amd64|arm64]..." >&2; exit 2 ;;
  esac
done
[ ${#arches[@]} -gt 0 ] || arches=("$host_arch")

WH=build/wheelhouse
PIP=(python3 -m pip --disable-pip-version-check -q)
mkdir -p "$WH/local" "$WH/deps/$host_arch"

# Pinned requirements, exactly what uv.lock says; the workspace packages come as wheels.
export_reqs() {  # package -> requirements on stdout, without the workspace members
  uv export --package "$1" --no-dev --no-hashes --no-emit-workspace --frozen --no-header \
    | grep -v '^ *#' | sed '/^\s*$/d'
}
export_reqs mallard-api >"$WH/deps/api.txt"
export_reqs mallard-runner >"$WH/deps/runner.txt"
cat "$WH/deps/api.txt" "$WH/deps/runner.txt" | sort -u >"$WH/deps/all.txt"
log "$(wc -l <"$WH/deps/api.txt") api and $(wc -l <"$WH/deps/runner.txt") runner requirements (uv.lock)"

# The local packages: rebuilt each time (cheap); the images install them last.
# Each step tries without the network first (uv's cache, the wheels already here), so a
# warm wheelhouse rebuilds offline and quickly.
rm -f "$WH"/local/*.whl
for pkg in mallard-api mallard-runner mallard-stats mallard-wire; do
  uv build --quiet --offline --package "$pkg" --wheel --out-dir "$WH/local" >/dev/null 2>&1 \
    || uv build --quiet --package "$pkg" --wheel --out-dir "$WH/local"
done
ls "$WH"/local/mallard_api-*.whl "$WH"/local/mallard_runner-*.whl \
   "$WH"/local/mallard_stats-*.whl "$WH"/local/mallard_wire-*.whl >/dev/null

# Host arch: pip wheel (uses wheels already there, builds sdists). Idempotent and quick when warm.
if [ -s "$WH/deps/all.txt" ]; then
  "${PIP[@]}" wheel --no-deps --no-index --find-links "$WH/deps/$host_arch" \
      -w "$WH/deps/$host_arch" -r "$WH/deps/all.txt" >/dev/null 2>&1 \
    || "${PIP[@]}" wheel --no-deps --find-links "$WH/deps/$host_arch" -w "$WH/deps/$host_arch" \
      -r "$WH/deps/all.txt"
fi
log "$host_arch: $(ls "$WH/deps/$host_arch" | wc -l) wheels"

# Another arch: pure-Python wheels are copied, the rest downloaded as manylinux binaries.
for arch in "${arches[@]}"; do
  [ "$arch" != "$host_arch" ] || continue
  case "$arch" in
    arm64) m=aarch64 ;; amd64) m=x86_64 ;;
    *) echo "wheelhouse: unknown arch $arch" >&2; exit 2 ;;
  esac
  mkdir -p "$WH/deps/$arch"
  cp -n "$WH/deps/$host_arch"/*-none-any.whl "$WH/deps/$arch/" 2>/dev/null || true
  binary=()
  while read -r req; do
    name=$(echo "$req" | sed -E 's/[ ;=<>!~].*//' | tr 'A-Z-' 'a-z_')
    ls "$WH/deps/$arch/" | tr 'A-Z-' 'a-z_' | grep -q "^${name}-" || binary+=("$req")
  done <"$WH/deps/all.txt"
  if [ ${#binary[@]} -gt 0 ]; then
    printf '%s\n' "${binary[@]}" >"$WH/deps/$arch.binary.txt"
    "${PIP[@]}" download --no-deps --only-binary=:all: -d "$WH/deps/$arch" \
      --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none \
      --platform "manylinux_2_28_$m" --platform "manylinux_2_17_$m" --platform "manylinux2014_$m" \
      -r "$WH/deps/$arch.binary.txt"
  fi
  log "$arch: $(ls "$WH/deps/$arch" | wc -l) wheels"
done
