#!/usr/bin/env python3
"""MALLARD_CANARY_NS (src/canary.c): every free costs the work asked for.

Deterministic, never a timing: canary_child's instructions are counted with
callgrind with the canary off, at 100 ns and at 1000 ns, the chain's speed
fixed with MALLARD_CANARY_LOOPS_PER_US so the counts repeat. The extra
instructions per free must be a fixed part (the call) plus a constant number
per chain step asked for (N ns x rate): linear in N, and zero at 0. One more
run without a fixed speed checks that the calibration at init gives a rate
(in the stats file) and that frees then cost more.

usage: canary_check.py LIBMALLARD CANARY_CHILD
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

RATE = 500  # chain steps per microsecond: 50 steps per free at 100 ns
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats_check import check, failures  # noqa: E402


def instructions(lib, child, env, tmp):
    """(instructions of the whole run, frees reported by the child, stats JSON)."""
    out = os.path.join(tmp, "cg.out")
    stats = os.path.join(tmp, "stats.json")
    if os.path.exists(stats):
        os.remove(stats)
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           f"--callgrind-out-file={out}", "env", f"LD_PRELOAD={lib}",
           f"MALLARD_STATS_FILE={stats}"] + [f"{k}={v}" for k, v in env.items()] + [child]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"canary_check: {env}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if not m:
        raise SystemExit(f"canary_check: no instruction count in valgrind's output:\n{proc.stderr}")
    with open(stats) as f:
        counters = json.load(f)
    return int(m.group(1)), int(proc.stdout.split()[-1]), counters


def main():
    lib, child = sys.argv[1:3]
    if shutil.which("valgrind") is None:
        print("canary_check: valgrind not found", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        fixed = {"MALLARD_CANARY_LOOPS_PER_US": str(RATE)}
        off, frees, _ = instructions(lib, child, fixed, tmp)
        zero, _, _ = instructions(lib, child, {"MALLARD_CANARY_NS": "0", **fixed}, tmp)
        n100, _, s100 = instructions(lib, child, {"MALLARD_CANARY_NS": "100", **fixed}, tmp)
        n1000, _, s1000 = instructions(lib, child, {"MALLARD_CANARY_NS": "1000", **fixed}, tmp)
        per0 = (zero - off) / frees
        per100 = (n100 - off) / frees
        per1000 = (n1000 - off) / frees
        steps100, steps1000 = 100 * RATE // 1000, 1000 * RATE // 1000
        # linear: per free = fixed part (taking the canary path) + k per chain step
        k = (per1000 - per100) / (steps1000 - steps100)
        fixed_part = per100 - k * steps100
        print(f"{frees} frees; instructions: off {off}, 0 ns {zero} ({per0:+.2f}/free), "
              f"100 ns {n100} ({per100:+.1f}/free), 1000 ns {n1000} ({per1000:+.1f}/free); "
              f"{k:.2f} instructions per chain step, {fixed_part:.1f} per canary call")
        # 0 ns differs from unset only by parsing one more variable at init
        check(abs(per0) < 0.5, f"MALLARD_CANARY_NS=0 costs {per0:.2f} instructions per free")
        check(2.0 <= k <= 10.0, f"{k:.2f} instructions per chain step: the chain is not what "
                                 "was asked for (or was folded away)")
        check(0.0 <= fixed_part <= 40.0, f"{fixed_part:.1f} instructions per free beyond the "
                                          "chain: the cost does not grow linearly with N")
        check(per1000 / per100 > 8.0, f"1000 ns costs only {per1000 / per100:.2f}x 100 ns")
        fields = (s100.get("canary_ns"), s100.get("canary_loops_per_us"))
        check(fields == (100, RATE), f"stats file: canary fields {fields}")
        check(s1000.get("frees", 0) >= frees, "stats file: frees not counted")
        # calibrated at init (under valgrind the measured rate is low, so the
        # cost per free is small; it must exist and be reported)
        cal, _, scal = instructions(lib, child, {"MALLARD_CANARY_NS": "1000"}, tmp)
        rate = scal.get("canary_loops_per_us", 0)
        print(f"calibrated: {rate} steps/us under callgrind; instructions {cal} "
              f"(+{(cal - off) / frees:.1f}/free, calibration included)")
        check(rate > 0, "calibration gave no rate")
        check(cal - off >= frees * rate,
              f"calibrated canary: +{cal - off} instructions for {frees} frees at {rate} steps/us")
    if failures:
        print(f"canary: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("canary: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
