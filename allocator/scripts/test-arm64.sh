#!/usr/bin/env bash
# Cross-builds Mallard and its tests for arm64 (gcc-aarch64-linux-gnu) into
# build/allocator-arm64 and runs ctest with every test executed under
# qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR; the preload reaches the guest
# through QEMU_SET_ENV): first with 4 KiB pages, then with 64 KiB pages
# (QEMU_PAGESIZE=65536, the same as qemu-aarch64 -p 65536) when qemu allows
# it. Prints ctest's summary lines; exits non-zero when anything failed.
# Called by `make test-allocator-arm64` (and so by `make test`).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
out="$BUILD/allocator-arm64"
sysroot=/usr/aarch64-linux-gnu

missing=()
for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-aarch64 cmake; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ -d "$sysroot" ] || missing+=("$sysroot (libc6-dev-arm64-cross)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "arm64: missing ${missing[*]}; run make deps" >&2
  exit 1
fi

toolchain=allocator/cmake/aarch64-linux-gnu.cmake

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
qemu=$(command -v qemu-aarch64)

echo "arm64: building into $out with $toolchain"
cmake -S allocator -B "$out" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/$toolchain" \
  "-DCMAKE_CROSSCOMPILING_EMULATOR=$qemu;-L;$sysroot" >"$out.configure.log" 2>&1 \
  || { cat "$out.configure.log"; echo "arm64: configure failed" >&2; exit 1; }
cmake --build "$out" >"$out.build.log" 2>&1 \
  || { tail -40 "$out.build.log"; echo "arm64: build failed" >&2; exit 1; }
if command -v readelf >/dev/null; then
  readelf -h "$out/libmallard.so" | grep -q AArch64 \
    || { echo "arm64: $out/libmallard.so is not an aarch64 library" >&2; exit 1; }
fi

echo "arm64: skipped under qemu: the TSan stress tests and the real-program tests" \
     "(not registered in a cross build)"

status=0
out4k=$(mktemp)
echo "================ arm64: 4 KiB pages ================"
ctest --test-dir "$out" --output-on-failure --timeout 300 >"$out4k" 2>&1 || status=1
grep -vE '^Internal ctest changing' "$out4k"
rm -f "$out4k"

# 64 KiB pages: only if this qemu can emulate them
probe="$out/pagesize-probe"
printf '#include <stdio.h>\n#include <unistd.h>\nint main(void){printf("%%ld\\n", sysconf(_SC_PAGESIZE));return 0;}\n' \
  >"$probe.c"
aarch64-linux-gnu-gcc -O1 -o "$probe" "$probe.c"
if [ "$(QEMU_PAGESIZE=65536 "$qemu" -L "$sysroot" "$probe" 2>/dev/null)" = 65536 ]; then
  out64k=$(mktemp)
  echo "================ arm64: 64 KiB pages (qemu-aarch64 -p 65536) ================"
  QEMU_PAGESIZE=65536 ctest --test-dir "$out" --output-on-failure --timeout 300 >"$out64k" 2>&1 \
    || status=1
  grep -vE '^Internal ctest changing' "$out64k"
  rm -f "$out64k"
else
  echo "arm64: skipped 64 KiB pages: this qemu-aarch64 does not emulate them"
fi

[ $status -eq 0 ] && echo "arm64: all passed" || echo "arm64: FAILED" >&2
exit $status
