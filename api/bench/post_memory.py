"""Peak RSS of a real API process for one results post of each shape (api/README.md,
"Limits"): each shape in a fresh `mallard-api serve` (one worker, analysis off) on an
embedded PostgreSQL of its own, after one small post; the figure is the process's
VmHWM before and after the post. Shapes fill the body cap (or the values cap) with what
costs the most memory: many trials, many keys, tiny values, long strings.

    .venv/bin/python api/bench/post_memory.py [shape ...]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from mallard_api.harness import ApiProcess

CAP = (32 << 20) - 4096  # under MALLARD_MAX_RESULTS_BODY_BYTES
MEASURES = ["ops_per_sec", "wall_seconds", "user_seconds", "sys_seconds", "max_rss_bytes",
            "final_rss_bytes", "peak_rss_bytes", "instructions", "ns_per_op", "cpu_seconds",
            "ops_per_cpu_sec", "d1_misses", "llc_misses", "hw_instructions", "hw_cycles",
            "hw_llc_misses"]
Body = dict[str, Any]


def trial(i: int = 0, **fields: Any) -> Body:
    return {"uid": str(uuid.uuid4()),
            "allocator": {"name": "mallard", "commit": "a" * 40, "build_flags": "-O2 -g",
                          "compiler": "gcc 12.2.0", "library_sha256": "0" * 64},
            "workload": {"name": f"w{i % 10}", "params": {"threads": 1 + i % 8, "seed": 42}},
            "started_at": "2026-11-21T12:00:00Z", "stderr_tail": "",
            "measures": {m: 1.0 + i for m in MEASURES}, **fields}


def results(trials: list[Body], **fields: Any) -> Body:
    return {"testbed": {"arch": "x86_64", "cpu_model": "Test CPU"}, "trials": trials,
            **fields}


def filled(make: Callable[[int], Body], hi: int) -> Body:
    """`make(n)` for the largest n (up to `hi`) whose JSON fits the cap."""
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(json.dumps(make(mid))) <= CAP:
            lo = mid
        else:
            hi = mid - 1
    return make(lo)


def many_trials(tail: int) -> Body:
    return results([trial(i, stderr_tail="x" * tail, counters={f"c{j}": j for j in range(60)})
                    for i in range(10_000)])


def one(**fields: Any) -> Body:
    return results([trial(**fields)])


SHAPES: dict[str, Callable[[], Body]] = {
    "trials": lambda: filled(many_trials, 2000),
    "new_measures": lambda: results([trial(i, measures={f"n{i}_{j}": 1.0 for j in range(24)})
                                     for i in range(10_000)]),
    "tiny_values": lambda: filled(lambda n: one(workload={"name": "w", "params": {
        "a": [1] * n}}), 20_000_000),
    "params_keys": lambda: filled(lambda n: one(workload={"name": "w", "params": {
        f"k{i}": 1 for i in range(n)}}), 5_000_000),
    "counters_max": lambda: results([trial(i, counters={f"c{k}": k for k in range(255)})
                                     for i in range(6500)]),
    "long_strings": lambda: filled(lambda n: results([trial(i, stderr_tail="x" * 999_000)
                                                      for i in range(n)]), 40),
}


def peak_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no VmHWM")


def measure(name: str, base: Path) -> str:
    body = json.dumps(SHAPES[name]()).encode()
    env = {**os.environ, "MALLARD_DATA_DIR": str(base / name),
           "MALLARD_ANALYSIS_POLL_SECONDS": "0"}
    env.pop("DATABASE_URL", None)
    with ApiProcess(env, log=base / f"{name}.log") as api:
        auth = {"Authorization": f"Bearer {api.token('admin')}"}
        with httpx.Client(base_url=f"{api.url}/api/v1", headers=auth, timeout=600) as http:
            http.post("/results", json=results([trial()])).raise_for_status()
            before = peak_mib(api.proc.pid) if api.proc else 0
            start = time.monotonic()
            r = http.post("/results", content=body,
                          headers={"Content-Type": "application/json"})
            took = time.monotonic() - start
            after = peak_mib(api.proc.pid) if api.proc else 0
    return (f"{name}: {len(body) / 2**20:.1f} MiB, {r.status_code} in {took:.1f} s; "
            f"peak RSS {before} -> {after} MiB")


def main(names: list[str]) -> None:
    base = Path(tempfile.mkdtemp(prefix="mallard-post-memory-"))
    try:
        for name in names or list(SHAPES):
            print(measure(name, base), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
