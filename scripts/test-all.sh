#!/usr/bin/env bash
# Runs every part's tests and the linters (ruff, mypy), even after one fails, so every runner's summary line
# is printed; exits non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=(allocator allocator-arm64 runner api stats wire dashboards k8s docs scripts lint)
passed=0; failed=0; failed_parts=(); times=()
for part in "${parts[@]}"; do
  echo "================ $part ================"
  target="test-$part"; [ "$part" = lint ] && target=lint
  part_start=$(date +%s)
  if make --no-print-directory "$target"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); failed_parts+=("$part")
  fi
  times+=("$part $(( $(date +%s) - part_start ))s")
done
echo "================ summary ================"
[ $failed -eq 0 ] || echo "failed parts: ${failed_parts[*]}"
echo "time by part: ${times[*]}"
echo "parts: $passed passed, $failed failed"
[ $failed -eq 0 ]
