#!/usr/bin/env bash
# Installs the Debian packages Mallard needs, once, and says what it is doing.
# Without root (and without sudo) it prints the apt-get line to run instead.
# A required package that does not install fails this script (exit 1); the optional ones
# (named below: the tests that need them skip without them) only warn.
set -euo pipefail

# One list, by part; add a package where its part needs it.
REQUIRED=(
  # build: allocator, workloads
  build-essential cmake ninja-build git pkg-config
  # runner: timing engine, instruction counts, pinning, GNU time (a program's peak RSS)
  hyperfine valgrind util-linux time
  # other allocators' builds (jemalloc's autogen.sh) and Google Benchmark program workloads
  autoconf automake libbenchmark-dev
  # peers measured beside mallard (LD_PRELOAD)
  libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4
  # macro workloads: redis-server under the allocator, redis-benchmark as its client;
  # Debian's python3 runs the macro workload scripts and is the `python` workload
  redis-server redis-tools python3
  # sanitizers beyond gcc's (LeakSanitizer runtime)
  clang-14 libclang-rt-14-dev
  # dashboards: real Prometheus, promtool, Alertmanager, amtool
  prometheus prometheus-alertmanager
  # the page tests: headless Chromium (driven by Playwright from the venv; never downloaded)
  chromium
  # the series images' PNG (CairoSVG rasterises the SVG on libcairo)
  libcairo2
)
OPTIONAL=(
  # arm64: cross compiler and user-mode emulation (the arm64 tests skip without them)
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
  # a PostgreSQL client for people (the server comes from the embedded wheel)
  postgresql-client
)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
missing_of() { local p; for p in "$@"; do installed "$p" || echo "$p"; done; }

mapfile -t missing < <(missing_of "${REQUIRED[@]}")
mapfile -t optional < <(missing_of "${OPTIONAL[@]}")
if [ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
  echo "deps: all $(( ${#REQUIRED[@]} + ${#OPTIONAL[@]} )) system packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo; else
    echo "deps: not root; run: sudo apt-get install -y ${missing[*]} ${optional[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp /tmp/mallard-deps.XXXXXX)
trap 'rm -f "$log"' EXIT

# apt-get install PACKAGES..., its progress shown; its own exit status
apt_install() {
  local rc=0
  $SUDO apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1 || rc=$?
  grep -E '^(Setting up|Unpacking)' "$log" | sed 's/^/deps: /' || true  # none: nothing new
  return $rc
}

$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${#missing[@]} system packages: ${missing[*]}"
  if ! apt_install "${missing[@]}"; then
    tail -n 20 "$log" | sed 's/^/deps: /' >&2
    echo "deps: FAILED: apt-get could not install ${missing[*]}" >&2
    exit 1
  fi
  mapfile -t still < <(missing_of "${REQUIRED[@]}")
  if [ ${#still[@]} -gt 0 ]; then
    echo "deps: FAILED: still not installed: ${still[*]}" >&2
    exit 1
  fi
fi
skipped=()
for p in "${optional[@]}"; do
  echo "deps: installing optional $p"
  apt_install "$p" || skipped+=("$p")
done
if [ ${#skipped[@]} -gt 0 ]; then
  echo "deps: optional packages not installed (what needs them is skipped): ${skipped[*]}" >&2
fi
echo "deps: done"
