"""The transfer-cache micro tier: mallard's `mutex`, `ring` and `naive` on the
`transfer` workload, into allocator/README.md ("Transfer cache under contention").

Two tables, both through the runner's executor (one timing loop: mallard_runner),
interleaved, medians of the trials:

- `--scaling`: the `transfer` suite's params at threads 1..64 (runner/suites/transfer.yaml):
  ops/s per variant, ratio to mutex, and the transfer hit ratios.
- `--grid`: threads x batch (blocks per tray) x size (which sets the cache's
  capacity in batches): remove/insert hit ratios and the share of misses that met
  a claim in flight, to find where naive's hit ratio falls below mutex's.

Run under `flock /tmp/mallard-bench.lock` on a shared machine. The tables go
between <!-- bench-transfer-scaling:begin/end --> and
<!-- bench-transfer-grid:begin/end --> markers (`--no-write` prints only).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from collections import defaultdict
from datetime import UTC, datetime

from allocators import README, console
from mallard_runner import export
from mallard_runner.runs import RunRequest, execute, prepare
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import Scalar, Suite, SuiteWorkload, load_suite
from mallard_runner.testbed import cpu_model, parse_cpus
from mallard_runner.tools import BuildError
from mallard_runner.variants import parse_selectors
from mallard_wire.results import ResultsIn, TrialIn

VARIANTS = ["mutex", "ring", "naive"]
SCALING = ("<!-- bench-transfer-scaling:begin -->", "<!-- bench-transfer-scaling:end -->")
GRID = ("<!-- bench-transfer-grid:begin -->", "<!-- bench-transfer-grid:end -->")


def run(suite: Suite, cpus: list[int], trials: int, commit: str, tag: str) -> ResultsIn:
    settings = RunnerSettings()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    req = RunRequest(suite=suite,
                     selectors=parse_selectors(",".join(f"mallard:transfer={v}" for v in VARIANTS)),
                     cpus=cpus, raw_dir=settings.raw() / f"bench-transfer-{tag}-{stamp}",
                     source=str(REPO_ROOT), ref=commit, trials=trials)
    prep = prepare(settings, req, on_trial=lambda t, c: console.print(
        f"{c.target.display} {c.case}: {t.measures.get('ops_per_sec', 0):,.0f} ops/s", end="\r"))
    console.print(f"{tag}: {prep.total} trials")
    return execute(prep)


def variant(t: TrialIn) -> str:
    return (t.allocator.variant or "transfer=mutex").split("=", 1)[1]


def case_key(t: TrialIn) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((k, v) for k, v in t.workload.params.items() if k not in ("seed", "ops")))


def medians(results: ResultsIn) -> dict[tuple, dict[str, dict[str, float]]]:
    """case -> variant -> measure medians, counters summed into per-trial shares first."""
    per: dict[tuple, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for t in results.trials:
        if t.warmup or not t.ok:
            continue
        vals = per[case_key(t)][variant(t)]
        vals["ops_per_sec"].append(t.measures.get("ops_per_sec", float("nan")))
        c = t.counters or {}
        for side in ("insert", "remove"):
            hits, misses = c.get(f"transfer_{side}_hits", 0), c.get(f"transfer_{side}_misses", 0)
            infl = c.get(f"transfer_{side}_inflight_misses", 0)
            if hits + misses:
                vals[f"{side}_hit"].append(hits / (hits + misses))
                vals[f"{side}_inflight"].append(infl / (hits + misses))
        vals["waits"].append(c.get("transfer_waits", 0) + c.get("transfer_commit_waits", 0))
        vals["sleeps"].append(c.get("transfer_yields", 0) + c.get("transfer_sleeps", 0))
    return {k: {v: {m: statistics.median(xs) for m, xs in ms.items() if xs}
                for v, ms in vs.items()} for k, vs in per.items()}


def header(results: ResultsIn, cpus: list[int], trials: int, load: tuple[float, float],
           command: str) -> str:
    tb = results.testbed
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Measured {date} with `{command}` on {platform.machine()}, {cpu_model()}, "
            f"{os.cpu_count()} cores (workloads pinned to CPUs {','.join(map(str, cpus))}), "
            f"kernel {tb.kernel}, {tb.compiler}, {tb.libc}; mallard variants interleaved, "
            f"median of {trials} trials after a warm-up. 1-minute load average {load[0]:.1f} "
            f"before and {load[1]:.1f} after: the machine is shared with other people's "
            f"builds and tests, so single cells move by tens of percent between runs.")


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None or x != x else format(x, spec)


def per_variant(m: dict[str, dict[str, float]], measure: str) -> str:
    """'mutex / ring / naive' medians of one measure."""
    return " / ".join(fmt(m.get(v, {}).get(measure)) for v in VARIANTS)


def scaling_table(results: ResultsIn, cpus: list[int], trials: int,
                  load: tuple[float, float], command: str) -> str:
    med = medians(results)
    out = [header(results, cpus, trials, load, command), "",
           "| threads | mutex ops/s | ring ops/s | naive ops/s | naive / mutex | ring / mutex | "
           "remove hit mutex / ring / naive | naive in-flight misses (share of removes) | "
           "ring waits (median) |", "|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for key in sorted(med, key=lambda k: dict(k)["threads"]):
        m = med[key]
        ops = {v: m.get(v, {}).get("ops_per_sec") for v in VARIANTS}
        base = ops["mutex"]
        ratio = {v: (x / base) if (x := ops[v]) and base else None for v in VARIANTS}
        hits = per_variant(m, "remove_hit")
        cells = " | ".join(fmt(ops[v], ",.0f") for v in VARIANTS)
        out.append(f"| {dict(key)['threads']} | {cells} | {fmt(ratio['naive'], '.2f')}x | "
                   f"{fmt(ratio['ring'], '.2f')}x | {hits} | "
                   f"{fmt(m.get('naive', {}).get('remove_inflight'), '.4f')} | "
                   f"{fmt(m.get('ring', {}).get('waits'), '.0f')} |")
    params = dict(next(iter(med)))
    out += ["", "Params: " + " ".join(f"{k}={v}" for k, v in params.items() if k != "threads")
            + f", ops={results.trials[0].workload.params.get('ops')}."]
    return "\n".join(out)


def grid_table(results: ResultsIn, cpus: list[int], trials: int,
               load: tuple[float, float], command: str) -> str:
    med = medians(results)
    out = [header(results, cpus, trials, load, command), "",
           "| threads | batch | size | remove hit mutex / ring / naive | "
           "insert hit mutex / ring / naive | naive in-flight share (remove / insert) | "
           "naive - mutex remove hit | ops/s naive / mutex |",
           "|---:|---:|---:|---|---|---|---:|---:|"]
    for key in sorted(med, key=lambda k: (dict(k)["size"], dict(k)["batch"], dict(k)["threads"])):
        m, p = med[key], dict(key)
        rem, ins = per_variant(m, "remove_hit"), per_variant(m, "insert_hit")
        n = m.get("naive", {})
        mu = m.get("mutex", {})
        diff = (n["remove_hit"] - mu["remove_hit"]) if "remove_hit" in n and "remove_hit" in mu \
            else None
        speed = (n["ops_per_sec"] / mu["ops_per_sec"]) if n.get("ops_per_sec") and \
            mu.get("ops_per_sec") else None
        out.append(f"| {p['threads']} | {p['batch']} | {p['size']} | {rem} | {ins} | "
                   f"{fmt(n.get('remove_inflight'), '.4f')} / "
                   f"{fmt(n.get('insert_inflight'), '.4f')} | {fmt(diff, '+.3f')} | "
                   f"{fmt(speed, '.2f')}x |")
    out += ["", f"ops={results.trials[0].workload.params.get('ops')}, depth="
            f"{results.trials[0].workload.params.get('depth')}; `size` sets the cache's capacity "
            "(1024 objects = 32 batches of 64 B; 16 batches of 1 KiB; 8 batches of 4 KiB)."]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scaling", action="store_true", help="threads 1..64 at the suite's params")
    p.add_argument("--grid", action="store_true", help="threads x batch x size: hit ratios")
    p.add_argument("--cpus", default="0,1", help="CPUs to pin to (default: 0,1)")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--threads", default="2,8,32,64", help="grid: thread counts")
    p.add_argument("--batch", default="32,256", help="grid: blocks per tray")
    p.add_argument("--size", default="64,1024,4096", help="grid: block sizes")
    p.add_argument("--ops", type=int, default=1000000)
    p.add_argument("--commit", default="HEAD", help="mallard commit to build")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    args = p.parse_args()
    if not (args.scaling or args.grid):
        p.error("give --scaling, --grid or both")
    settings = RunnerSettings()
    cpus = parse_cpus(args.cpus)
    command = "python runner/bench/transfer.py " + " ".join(sys.argv[1:])
    blocks: list[tuple[tuple[str, str], str]] = []
    try:
        if args.scaling:
            suite = load_suite("transfer", settings.suites_dir)
            load0 = os.getloadavg()[0]
            res = run(suite, cpus, args.trials, args.commit, "scaling")
            blocks.append((SCALING, scaling_table(res, cpus, args.trials,
                                                  (load0, os.getloadavg()[0]), command)))
        if args.grid:
            def ints(text: str) -> list[Scalar]:
                return [int(x) for x in text.split(",")]

            suite = Suite(name="transfer-grid", trials=args.trials, warmup=1,
                          threads=[int(x) for x in args.threads.split(",")], allocators=[],
                          baseline=None, workloads={"transfer": SuiteWorkload(params={
                              "ops": args.ops, "batch": ints(args.batch), "size": ints(args.size),
                              "depth": 4, "seed": 42})})
            load0 = os.getloadavg()[0]
            res = run(suite, cpus, args.trials, args.commit, "grid")
            blocks.append((GRID, grid_table(res, cpus, args.trials,
                                            (load0, os.getloadavg()[0]), command)))
    except BuildError as e:
        console.print(f"[red]mallard does not build at {args.commit}:[/] {e}")
        return 1
    for markers, block in blocks:
        print(block + "\n")
        if not args.no_write:
            export.write_block(README, markers, block, "Performance")
    if not args.no_write:
        console.print(f"wrote {README.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
