#!/usr/bin/env bash
# Extracts the arm64 builds of the peer allocators (Debian's libjemalloc2, libmimalloc2.0,
# libtcmalloc-minimal4) into build/peers-aarch64/ for an emulated arm64 runner, without
# installing them: installing `libc6:arm64` (their dependency) beside the cross sysroot's
# libc (libc6-arm64-cross, another build) makes `qemu-aarch64 -L /usr/aarch64-linux-gnu`
# load the wrong libc, and every threaded guest program hangs in pthread_create.
# Needs root for `dpkg --add-architecture arm64` and `apt-get update` (once).
# Called by `make peers-arm64`; exits 0 with a message when the packages cannot be had.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${BUILD:-build}/peers-aarch64
pkgs=(libjemalloc2:arm64 libmimalloc2.0:arm64 libtcmalloc-minimal4:arm64)
if [ -e "$out/libjemalloc.so.2" ] && [ -e "$out/libmimalloc.so.2" ] \
   && [ -e "$out/libtcmalloc_minimal.so.4" ]; then
  echo "peers-arm64: $out is ready"; exit 0
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  if [ "$(id -u)" != 0 ]; then
    echo "peers-arm64: not root; run: dpkg --add-architecture arm64 && apt-get update" >&2
    echo "peers-arm64: the arm64 runner runs glibc only until then"; exit 0
  fi
  dpkg --add-architecture arm64 && apt-get update -qq
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download -q "${pkgs[@]}" >/dev/null 2>&1); then
  echo "peers-arm64: apt-get download ${pkgs[*]} failed; the arm64 runner runs glibc only"
  exit 0
fi
mkdir -p "$out"
for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/x"; done
cp -a "$tmp"/x/usr/lib/aarch64-linux-gnu/*.so* "$out/"
ls "$out" | sed 's/^/peers-arm64: /'
