#!/usr/bin/env bash
# Installs the Debian packages Mallard needs, once, and says what it is doing.
# Without root (and without sudo) it prints the apt-get line to run instead.
set -euo pipefail

# One list, by part; add a package where its part needs it.
PKGS=(
  # build: allocator, workloads
  build-essential cmake ninja-build git pkg-config
  # runner: timing engine, instruction counts, pinning
  hyperfine valgrind util-linux
  # peers measured beside mallard (LD_PRELOAD)
  libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4
  # macro workloads: redis-server under the allocator, redis-benchmark as its client;
  # Debian's python3 runs the macro workload scripts and is the `python` workload
  redis-server redis-tools python3
  # arm64: cross compiler and user-mode emulation
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
  # sanitizers beyond gcc's (LeakSanitizer runtime)
  clang-14 libclang-rt-14-dev
  # dashboards: real Prometheus, promtool, Alertmanager, amtool
  prometheus prometheus-alertmanager
  # a PostgreSQL client for people (the server comes from the embedded wheel)
  postgresql-client
  # the page tests: headless Chromium (driven by Playwright from the venv; never downloaded)
  chromium
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} system packages present"
  exit 0
fi
echo "deps: installing ${#missing[@]} system packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo; else
    echo "deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" | grep -E '^(Setting up|Unpacking)' | sed 's/^/deps: /' || true
echo "deps: done"
