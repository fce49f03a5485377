"""`make bench-verdicts`: calibrations of this machine through the real API and runner.

Starts the API (an embedded PostgreSQL in .mallard/bench-verdicts), one runner agent
pinned to the last CPU (the API, PostgreSQL and the agent itself are kept off that CPU:
only the workloads run there), and posts calibrations (`POST /api/v1/calibrations`) of
mallard at this checkout's HEAD, in two parts:

* `aa`: `--aa` (20) A/A comparisons of the whole quick suite (every workload, threads 1
  and 2, `--aa-trials` (5) trials a side): the false alarms of the quick suite;
* `canary`: larson and rpc at 1 thread, `--canary-aa` (5) A/A comparisons, two probe
  canaries per workload (the canaries are sized from what the probes cost) and
  `--canaries` (10) comparisons per injected size (1, 3, 10%), `--canary-trials` (12)
  trials a side;

then the deterministic rule on real counts: `--pairs` cachegrind runs of larson and rpc (1
thread, their quick-suite `deterministic` params, mallard preloaded) against runs doing
about 0.5% more work, each pair judged by the API's own rule (`mallard_stats.stats`).
Each part's table is written into runner/README.md with the command, machine, date and
load (`aa` between <!-- bench-verdicts-aa:begin/end -->, `canary` and the instruction check
between <!-- bench-verdicts:begin/end -->).

Resumable and splittable: `--part aa` or `--part canary` runs one part; the database and
the calibration ids stay in .mallard/bench-verdicts (`parts.json`), so a run that is
stopped (Ctrl-C, a lost lock) continues where it stopped when started again at the same
commit (the runner's lease is 120 s here, so a job that died with the runner is handed out
again within two minutes); `--fresh` starts over. `--quick`: 10 A/A and 5 canary
comparisons per size. Run it under `flock /tmp/mallard-bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
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
from mallard_api.harness import ApiProcess  # noqa: E402
from mallard_runner import export  # noqa: E402
from mallard_runner.commands import CACHEGRIND_CACHES  # noqa: E402
from mallard_runner.measures import parse_cachegrind  # noqa: E402
from mallard_runner.settings import RunnerSettings  # noqa: E402
from mallard_runner.testbed import cpu_model  # noqa: E402
from mallard_stats import stats  # noqa: E402

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
    lines = ["| workload | pairs | runs a side | base instructions (median) | change | spread "
             "| REGRESSED |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    runs = RunnerSettings.model_fields["deterministic_runs"].default  # as a runner does
    for workload, (knob, factor) in WORK.items():
        w = suite["workloads"][workload]
        params = {**w["params"], **w["deterministic"]["params"], "threads": 1}
        more = {**params, knob: math.ceil(int(params[knob]) * factor)}
        base: list[float] = []
        head: list[float] = []
        verdicts = []
        for i in range(pairs):  # a pair: `runs` cachegrind runs a side, as a cell gets them
            b = [cachegrind(workload, params, cpu, state / f"cg-{workload}-{i}-{r}-a.out")
                 for r in range(runs)]
            h = [cachegrind(workload, more, cpu, state / f"cg-{workload}-{i}-{r}-b.out")
                 for r in range(runs)]
            base += b
            head += h
            cell = stats.compare_samples(b, h, higher_is_better=False, deterministic=True)
            verdicts.append(stats.decide(cell))
        bm = statistics.median(base)
        spread = max(abs(v / bm - 1) for v in base) * 100
        change = (statistics.median(head) / bm - 1) * 100
        lines.append(f"| {workload} | {pairs} | {runs} | {bm:,.0f} | {change:+.3f}% | "
                     f"±{spread:.3f}% | "
                     f"{verdicts.count('regressed')} of {pairs} |")
    return lines


AA_MARKERS = ("<!-- bench-verdicts-aa:begin -->", "<!-- bench-verdicts-aa:end -->")
LEGEND = ("CV: median robust CV of the A/A trials; false alarms: A/A comparisons whose cell "
          "was REGRESSED or IMPROVED; canary: comparisons whose cell was REGRESSED, of those "
          "run (the median measured change in brackets: the canary's size is nominal); SAME "
          "band: the series' calibrated band (n/a: a deterministic measure). `ops_per_sec` "
          "is judged only where the runner's CPUs are isolated (docs/statistics.md): on this "
          "VM it has no rows and `ops_per_cpu_sec` carries the throughput verdicts.")


def parts_body(part: str, args: argparse.Namespace, commit: str) -> dict[str, object]:
    """The calibration request of one part (module doc)."""
    base: dict[str, object] = {"project": "mallard", "commit": commit,
                               "arch": platform.machine(), "suite": "quick"}
    if part == "aa":  # the whole quick suite (a calibration's default is larson, rpc at 1)
        suite = yaml.safe_load((ROOT / "runner" / "suites" / "quick.yaml").read_text())
        return {**base, "workloads": list(suite["workloads"]), "threads": suite["threads"],
                "trials": args.aa_trials, "aa_comparisons": args.aa,
                "canary_comparisons": 0, "sizes_pct": []}
    return {**base, "workloads": args.workloads.split(","), "threads": [1],
            "trials": args.canary_trials, "aa_comparisons": args.canary_aa,
            "canary_comparisons": args.canaries,
            "sizes_pct": [float(s) for s in args.sizes.split(",")]}


def follow(client: httpx.Client, cid: int, runner: subprocess.Popen[bytes], state: Path,
           started: float) -> dict[str, object]:
    while True:
        if runner.poll() is not None:
            raise SystemExit(f"bench-verdicts: the runner exited; see {state}/runner.log")
        d = client.get(f"/api/v1/calibrations/{cid}").raise_for_status().json()
        done = sum(c["state"] in ("done", "failed") for c in d["comparisons"])
        demo.console.print(f"calibration {cid}: {d['state']}, {done}/"
                           f"{len(d['comparisons'])} comparisons settled "
                           f"({time.monotonic() - started:.0f} s)", end="\r")
        if d["state"] in ("done", "failed"):
            print()
            return dict(d)
        time.sleep(5)


def block_head(started_at: datetime, minutes: float, cpu: str, load: tuple[float, ...],
               command: str) -> list[str]:
    return [
        f"Measured {started_at:%Y-%m-%d %H:%M} UTC on {platform.machine()}, {cpu_model()}, "
        f"{os.cpu_count()} CPUs (runner pinned to CPU {cpu}; API, PostgreSQL and the runner "
        f"agent kept off it), kernel {platform.release()}; 1-minute load average "
        f"{load[0]:.1f} before and {os.getloadavg()[0]:.1f} after; the machine was shared "
        f"with other engineers' builds and tests. {minutes:.0f} minutes.", "",
        f"Command: `{command}` (`python runner/bench/verdicts.py "
        f"{shlex.join(sys.argv[1:])}`).", ""]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "aa", "canary"), default="all")
    p.add_argument("--quick", action="store_true", help="10 A/A, 5 canaries per size")
    p.add_argument("--aa", type=int, help="A/A comparisons of the quick suite (20; --quick 10)")
    p.add_argument("--aa-trials", type=int, default=5, help="trials a side in an A/A")
    p.add_argument("--canary-aa", type=int, default=5, help="A/A comparisons that size canaries")
    p.add_argument("--canaries", type=int, help="comparisons per size (default 10; --quick 5)")
    p.add_argument("--canary-trials", type=int, default=12, help="trials a side, canary part")
    p.add_argument("--sizes", default="1,3,10", help="injected sizes in percent")
    p.add_argument("--follow-ups", type=int, default=0,
                   help="follow-up rounds a calibration comparison may ask for, as any "
                        "comparison does (MALLARD_CALIBRATION_FOLLOW_UPS; 0: none)")
    p.add_argument("--workloads", default="larson,rpc", help="the canary part's workloads")
    p.add_argument("--port", type=int, default=8331)
    p.add_argument("--pairs", type=int, default=10, help="cachegrind pairs per workload")
    p.add_argument("--fresh", action="store_true", help="forget an unfinished run")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    args = p.parse_args()
    if args.aa is None:
        args.aa = 10 if args.quick else 20
    if args.canaries is None:
        args.canaries = 5 if args.quick else 10
    return args


def main() -> int:
    args = parse_args()
    parts = ["canary", "aa"] if args.part == "all" else [args.part]
    # SIGTERM (a stopped flock, a timeout) stops the runner and the API like Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    state = ROOT / ".mallard" / "bench-verdicts"
    commit = demo.run(["git", "rev-parse", "HEAD"], dict(os.environ))
    saved_file = state / "parts.json"
    saved = json.loads(saved_file.read_text()) if saved_file.exists() else {}
    if args.fresh or saved.get("commit") != commit:
        shutil.rmtree(state, ignore_errors=True)  # another commit's run: start over
        saved = {"commit": commit}
    state.mkdir(parents=True, exist_ok=True)
    demo.STATE = state  # logs and the database go here, not into the demo's folder
    cpu = demo.pinned_cpu()
    server = ApiProcess({}, log=state / "api.log", port=args.port, cwd=ROOT)
    server.env = api_env(state, server.url, args.follow_ups)
    load = os.getloadavg()
    started, started_at = time.monotonic(), datetime.now(UTC)
    done = run_parts(server, cpu, parts, args, commit, saved, saved_file, started)
    for d in done.values():
        if d["state"] != "done":
            raise SystemExit(f"bench-verdicts: calibration {d['id']} {d['state']}: {d['note']}")
    det = instruction_check(args.pairs, cpu, state) if "canary" in done else []
    minutes = (time.monotonic() - started) / 60
    for part, d in done.items():
        command = ("flock /tmp/mallard-bench.lock make bench-verdicts"
                   + (f" ARGS='{shlex.join(sys.argv[1:])}'" if sys.argv[1:] else ""))
        head = block_head(started_at, minutes, cpu, load, command)
        block = "\n".join(part_lines(part, d, args, commit, head, det))
        print(block)
        if not args.no_write:
            export.write_block(README, MARKERS if part == "canary" else AA_MARKERS, block,
                               "Measurement noise")
            print(f"wrote {README.relative_to(ROOT)}")
    return 0


def api_env(state: Path, api: str, follow_ups: int) -> dict[str, str]:
    """The API's environment: its database in `state`, the runner's CLI on PATH, this
    checkout the one repository allowed, the follow-ups a calibration comparison may ask."""
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env.update({"MALLARD_DATA_DIR": str(state / "pgdata"),
                "PATH": f"{demo.VENV_BIN}:{env['PATH']}",
                "MALLARD_RUNNER_REPO_ALLOW": f"file://{ROOT}",
                "MALLARD_RUNNER_LEASE_SECONDS": "120",
                "MALLARD_CALIBRATION_FOLLOW_UPS": str(follow_ups),
                "MALLARD_REPO_URL_ALLOW": f"file://{ROOT}", "MALLARD_PUBLIC_URL": api})
    return env


def run_parts(server: ApiProcess, cpu: str, parts: list[str], args: argparse.Namespace,
              commit: str, saved: dict[str, int | str], saved_file: Path,
              started: float) -> dict[str, dict[str, object]]:
    """Starts the API and a runner agent, posts each part's calibration (unless one is saved
    from a stopped run) and follows it to its end; stops both whatever happens."""
    api, env, state = server.url, server.env, saved_file.parent  # .mallard/bench-verdicts
    runner_proc = None
    done: dict[str, dict[str, object]] = {}
    try:
        with demo.keep_off(cpu):  # the API and PostgreSQL stay off the runner's CPU
            server.start(timeout=240)
        node = f"bench-{platform.node() or 'node'}"
        runner_token = server.token("runner", node)
        user_token = server.token("user")
        client = httpx.Client(base_url=api, timeout=30,
                              headers={"Authorization": f"Bearer {user_token}"})
        demo.register_mallard(api, server.token("admin"), str(ROOT))
        runner_proc = demo.start("runner", [str(demo.VENV_BIN / "mallard-runner"), "agent",
                                            "--api", api, "--token-file",
                                            str(demo.token_file(state / "runner.token",
                                                                runner_token)), "--cpus",
                                            cpu, "--name", node, "--spool",
                                            str(state / "spool")], env)
        for part in parts:
            if part not in saved:
                cal = client.post("/api/v1/calibrations", json=parts_body(part, args, commit))
                if cal.status_code != 201:
                    raise SystemExit(f"bench-verdicts: POST /calibrations: {cal.status_code} "
                                     f"{cal.text}")
                saved[part] = cal.json()["id"]
                saved_file.write_text(json.dumps(saved))
            demo.console.print(f"part {part}: calibration {saved[part]}")
            done[part] = follow(client, int(saved[part]), runner_proc, state, started)
    finally:
        demo.stop(runner_proc, "runner agent")
        server.stop(30)
    return done


def follow_ups(args: argparse.Namespace) -> str:
    return ("no follow-ups" if not args.follow_ups else
            f"up to {args.follow_ups} follow-up rounds a comparison")


def part_lines(part: str, d: dict[str, object], args: argparse.Namespace, commit: str,
               head: list[str], det: list[str]) -> list[str]:
    """One part's README block: the head, what was measured, its table and the legend; the
    canary part adds the instruction check."""
    body = parts_body(part, args, commit)
    what = (f"calibration {d['id']} of mallard@{commit[:7]}: {body['aa_comparisons']} A/A "
            f"comparisons of the quick suite (every workload, threads 1 and 2), "
            f"{body['trials']} trials a side, {follow_ups(args)}." if part == "aa" else
            f"calibration {d['id']} of mallard@{commit[:7]}: {body['aa_comparisons']} A/A "
            f"and {body['canary_comparisons']} canary comparisons per size, "
            f"{body['trials']} trials a side, {follow_ups(args)}, {args.workloads} at 1 "
            f"thread, quick-suite "
            f"params. Canary ns per free: {d['canary_ns']}; {d['note']}.")
    lines = [*head, what, "", str(d["table"]), "", LEGEND]
    if part == "canary":
        lines += ["", f"**A change adding 0.5% instructions**: {args.pairs} pairs of "
                  "cachegrind runs per workload (a pair: the runner's `deterministic_runs` "
                  "a side), mallard preloaded, the quick suite's "
                  "`deterministic` params against the same with about 0.5% more "
                  "instructions (larson 0.4% more `ops`, rpc 0.5% more `requests`), each "
                  "pair judged by the API's deterministic rule:", "", *det]
    return lines


if __name__ == "__main__":
    sys.exit(main())
