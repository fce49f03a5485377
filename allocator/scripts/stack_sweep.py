#!/usr/bin/env python3
"""Stack-position sweep of a workload under several allocators (allocator/README.md,
"Speed, seventh round: the fast path").

Every allocator runs `fastpath` at one of about four speeds set by where the stack
falls within a 64-byte line; under ASLR each run draws it. Here ASLR is off
(`setarch -R`) and the stack is moved in 16-byte steps by the length of an environment
variable, padded so that every allocator's environment has the same length (the same
pad puts every allocator's stack at the same address). Allocators run interleaved at
each pad. Prints CPU ns per operation: the mean over all pads and the median at each
stack position mod 64. Run it under `flock /tmp/mallard-bench.lock`.

    stack_sweep.py mallard=build/allocator/libmallard.so \\
        tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \\
        --pads 0:1024:16 -- build/workloads/fastpath --ops 5000000 --max 512

A library may be a colon-separated list (preloaded in that order).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("libs", nargs="+", help="name=path[:path...] to preload")
    ap.add_argument("--pads", default="0:1024:16", help="start:stop:step bytes of padding")
    ap.add_argument("--cpus", default="1", help="taskset CPU list")
    ap.add_argument("--json", help="write every reading here")
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        ap.error("give the workload and its arguments after --")
    cut = argv.index("--")
    a = ap.parse_args(argv[:cut])
    cmd = [os.path.abspath(argv[cut + 1])] + argv[cut + 2 :]
    libs = dict(x.split("=", 1) for x in a.libs)
    preload = {n: " ".join(os.path.abspath(q) for q in p.split(":")) for n, p in libs.items()}
    width = max(len(p) for p in preload.values())
    lo, hi, step = (int(x) for x in a.pads.split(":"))
    names = list(libs)
    res: dict[str, dict[int, float]] = {n: {} for n in names}
    for i, pad in enumerate(range(lo, hi, step)):
        for n in names[i % len(names):] + names[:i % len(names)]:
            env = ["PAD=" + "x" * (pad + width - len(preload[n])), "LD_PRELOAD=" + preload[n]]
            run = ["setarch", "x86_64", "-R", "env", "-i", *env, "taskset", "-c", a.cpus, *cmd]
            out = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
            res[n][pad] = out["cpu_seconds"] * 1e9 / out["operations"]
    print(f"{'allocator':12s}  mean   " + "  ".join(f"pad%64={k:<2d}" for k in range(0, 64, 16)))
    for n in names:
        v = res[n]
        per = [
            statistics.median([x for p, x in v.items() if p % 64 == k] or [float("nan")])
            for k in range(0, 64, 16)
        ]
        print(f"{n:12s} {statistics.mean(v.values()):6.2f}  " + "  ".join(f"{x:9.2f}" for x in per))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
