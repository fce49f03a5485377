"""`make bench-verdicts`: a calibration of this machine through the real API and runner.

Starts the API (an embedded PostgreSQL in .mallard/bench-verdicts), one runner agent
pinned to the last CPU, posts `POST /api/v1/calibrations` for mallard at this checkout's
HEAD (A/A comparisons, then 1/3/10% canaries on larson and rpc at 1 thread), follows it
to the end and writes its table (workload x measure: CV, false alarms of the A/A
comparisons, detection of each canary size, the SAME band) with the command, machine and
date into runner/README.md between <!-- bench-verdicts:begin --> and
<!-- bench-verdicts:end -->. Then the deterministic rule on real counts: `--pairs`
cachegrind runs of larson and rpc (1 thread, their quick-suite `deterministic` params,
mallard preloaded) against runs doing about 0.5% more work, each pair judged by the API's
own rule (`mallard_api.analysis.stats`): a change adding 0.5% instructions. `--quick`: 10 A/A and
5 canary comparisons per size (about 10-15 minutes on a quiet 2-core VM); default: 20
and 10. Run it under
`flock /tmp/mallard-bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "runner" / "bench"))
import demo  # noqa: E402  - the demo's process helpers: one way to start the stack
from mallard_api.analysis import stats  # noqa: E402
from mallard_runner.commands import CACHEGRIND_CACHES  # noqa: E402
from mallard_runner.measures import parse_cachegrind  # noqa: E402
from mallard_runner.testbed import cpu_model  # noqa: E402
from noise import write_block  # noqa: E402

README = ROOT / "runner" / "README.md"
MARKERS = ("<!-- bench-verdicts:begin -->", "<!-- bench-verdicts:end -->")


# The parameter that counts a run's operations, and how much more of it adds about 0.5%
# instructions (larson's start-up is a smaller share: 0.4% more operations, +0.50%).
WORK = {"larson": ("ops", 1.004), "rpc": ("requests", 1.005)}


def cachegrind(workload: str, params: dict[str, object], cpu: str, out: Path) -> float:
    """Instructions of one run under cachegrind, pinned, ASLR off, a minimal environment."""
    argv = [str(ROOT / "build" / "workloads" / workload)]
    for k, v in params.items():
        argv += [f"--{k}", str(v)]
    caches = [f"--{k}={v}" for k, v in CACHEGRIND_CACHES.items()]
    lib = ROOT / "build" / "allocator" / "libmallard.so"
    cmd = ["taskset", "-c", cpu, "env", "-i", "PATH=/usr/bin:/bin", "LC_ALL=C",
           f"LD_PRELOAD={lib}", "setarch", platform.machine(), "-R", "valgrind",
           "--tool=cachegrind", "--cache-sim=yes", *caches, f"--cachegrind-out-file={out}",
           *argv]
    subprocess.run(cmd, check=True, capture_output=True)
    counts = parse_cachegrind(out.read_text())
    assert counts is not None, f"no cachegrind summary in {out}"
    return counts["instructions"]


def instruction_check(pairs: int, cpu: str, state: Path) -> list[str]:
    """Lines for the README: base against +0.5% operations, `pairs` times a workload."""
    suite = yaml.safe_load((ROOT / "runner" / "suites" / "quick.yaml").read_text())
    lines = ["| workload | pairs | base instructions (median) | change | spread | REGRESSED |",
             "|---|---:|---:|---:|---:|---:|"]
    for workload, (knob, factor) in WORK.items():
        w = suite["workloads"][workload]
        params = {**w["params"], **w["deterministic"]["params"], "threads": 1}
        more = {**params, knob: math.ceil(int(params[knob]) * factor)}
        base, head, verdicts = [], [], []
        for i in range(pairs):
            b = cachegrind(workload, params, cpu, state / f"cg-{workload}-{i}-a.out")
            h = cachegrind(workload, more, cpu, state / f"cg-{workload}-{i}-b.out")
            base.append(b)
            head.append(h)
            cell = stats.compare_samples([b], [h], higher_is_better=False, deterministic=True)
            verdicts.append(stats.decide(cell))
        bm = statistics.median(base)
        spread = max(abs(v / bm - 1) for v in base) * 100
        change = (statistics.median(head) / bm - 1) * 100
        lines.append(f"| {workload} | {pairs} | {bm:,.0f} | {change:+.3f}% | ±{spread:.3f}% | "
                     f"{verdicts.count('regressed')} of {pairs} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="10 A/A, 5 canaries per size")
    p.add_argument("--aa", type=int, help="A/A comparisons (default 20; --quick 10)")
    p.add_argument("--canaries", type=int, help="comparisons per size (default 10; --quick 5)")
    p.add_argument("--sizes", default="1,3,10", help="injected sizes in percent")
    p.add_argument("--workloads", default="larson,rpc")
    p.add_argument("--trials", type=int, default=5, help="trials per side per comparison")
    p.add_argument("--port", type=int, default=8331)
    p.add_argument("--pairs", type=int, default=10, help="cachegrind pairs per workload")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    args = p.parse_args()
    aa = args.aa if args.aa is not None else (10 if args.quick else 20)
    canaries = args.canaries if args.canaries is not None else (5 if args.quick else 10)

    state = ROOT / ".mallard" / "bench-verdicts"
    state.mkdir(parents=True, exist_ok=True)
    demo.STATE = state  # logs and the database go here, not into the demo's folder
    commit = demo.run(["git", "rev-parse", "HEAD"], dict(os.environ))
    port = demo.free_port(args.port)
    api = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env.update({"MALLARD_DATA_DIR": str(state / "pgdata"),
                "PATH": f"{demo.VENV_BIN}:{env['PATH']}",
                "MALLARD_RUNNER_REPO_ALLOW": f"file://{ROOT}",
                "MALLARD_REPO_URL_ALLOW": f"file://{ROOT}", "MALLARD_PUBLIC_URL": api})
    load = os.getloadavg()
    started = time.monotonic()
    api_proc = runner_proc = None
    try:
        api_proc = demo.start("api", [str(demo.VENV_BIN / "mallard-api"), "serve", "--host",
                                      "127.0.0.1", "--port", str(port)], env)
        demo.wait_healthy(api, api_proc)
        node = f"bench-{platform.node() or 'node'}"
        cli = str(demo.VENV_BIN / "mallard-api")
        runner_token = demo.run([cli, "token", "create", "--role", "runner", "--runner", node],
                                env).splitlines()[-1]
        user_token = demo.run([cli, "token", "create", "--role", "user"], env).splitlines()[-1]
        client = httpx.Client(base_url=api, timeout=30,
                              headers={"Authorization": f"Bearer {user_token}"})
        client.put("/api/v1/projects/mallard", json={
            "repo_url": str(ROOT), "allocator_dir": "allocator", "default_branch": "main",
        }).raise_for_status()
        cpu = demo.pinned_cpu()
        runner_proc = demo.start("runner", [str(demo.VENV_BIN / "mallard-runner"), "agent",
                                            "--api", api, "--token", runner_token, "--cpus",
                                            cpu, "--name", node, "--spool",
                                            str(state / "spool")], env)
        body = {"project": "mallard", "commit": commit, "arch": platform.machine(),
                "workloads": args.workloads.split(","), "threads": [1],
                "trials": args.trials, "aa_comparisons": aa, "canary_comparisons": canaries,
                "sizes_pct": [float(s) for s in args.sizes.split(",")]}
        cal = client.post("/api/v1/calibrations", json=body)
        if cal.status_code != 201:
            raise SystemExit(f"bench-verdicts: POST /calibrations: {cal.status_code} {cal.text}")
        cid = cal.json()["id"]
        while True:
            if runner_proc.poll() is not None:
                raise SystemExit(f"bench-verdicts: the runner exited; see {state}/runner.log")
            cal = client.get(f"/api/v1/calibrations/{cid}").raise_for_status()
            d = cal.json()
            done = sum(c["state"] in ("done", "failed") for c in d["comparisons"])
            demo.console.print(f"calibration {cid}: {d['state']}, {done}/"
                               f"{len(d['comparisons'])} comparisons settled "
                               f"({time.monotonic() - started:.0f} s)", end="\r")
            if d["state"] in ("done", "failed"):
                break
            time.sleep(5)
        print()
    finally:
        demo.stop(runner_proc, "runner agent")
        demo.stop(api_proc, "API and embedded PostgreSQL")
    if d["state"] != "done":
        raise SystemExit(f"bench-verdicts: calibration {cid} {d['state']}: {d['note']}")
    det = instruction_check(args.pairs, cpu, state)
    minutes = (time.monotonic() - started) / 60
    load_after = os.getloadavg()
    command = "flock /tmp/mallard-bench.lock make bench-verdicts" + (
        " ARGS=--quick" if args.quick else "")
    argv = "python runner/bench/verdicts.py " + shlex.join(sys.argv[1:])
    block = "\n".join([
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M UTC} on {platform.machine()}, "
        f"{cpu_model()}, {os.cpu_count()} CPUs (runner pinned to CPU {cpu}), kernel "
        f"{platform.release()}; 1-minute load average {load[0]:.1f} before and "
        f"{load_after[0]:.1f} after; the machine was shared with other engineers' builds "
        f"and tests. {minutes:.0f} minutes.",
        "",
        f"Command: `{command}` (`{argv}`): calibration {cid} of mallard@{commit[:7]}, "
        f"{aa} A/A comparisons and {canaries} canary comparisons per size, "
        f"{args.trials} trials a side, workloads {args.workloads} at 1 thread, quick-suite "
        f"params. Canary ns per free (sized from the A/A ops/s): {d['canary_ns']}.",
        "",
        d["table"],
        "",
        "CV: median robust CV of the A/A trials; false alarms: A/A comparisons whose cell "
        "was REGRESSED or IMPROVED; canary: comparisons whose cell was REGRESSED, of those "
        "run (the median measured change in brackets: the canary's size is nominal); SAME "
        "band: the series' calibrated band (n/a: a deterministic measure).",
        "",
        f"**A change adding 0.5% instructions**: {args.pairs} pairs of cachegrind runs per "
        "workload, mallard preloaded, the quick suite's `deterministic` params against the "
        "same with about 0.5% more instructions (larson 0.4% more `ops`, rpc 0.5% more "
        "`requests`), each pair judged by the API's deterministic rule:",
        "",
        *det,
    ])
    print(block)
    if not args.no_write:
        write_block(block, README, markers=MARKERS)
        print(f"wrote {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
