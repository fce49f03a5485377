"""`make bench-runner`: how noisy are the runner's measurements on this machine?

1. Deterministic counters: every workload of the quick suite at its small
   (`deterministic`) params, at 1 and 2 threads, every allocator of the suite, R (3)
   cachegrind runs each: the largest deviation from the median of `instructions`,
   `d1_misses` and `llc_misses`. A workload x threads whose primary counts
   (`instructions`, `llc_misses`) stay within +-0.1% (or +-10 counts: small counts
   wobble by a few) for every allocator can take the deterministic rule; the suite
   lists only thread counts that qualify in every run. `d1_misses` is a diagnostic:
   its spread is shown, it decides nothing.
2. CV: the coefficient of variation of ops/s of every quick-suite workload at 1 and
   2 threads, glibc and mallard, over N (20) pinned trials per condition, with the
   executor's noise control off and on, interleaved in blocks (off, on, off, on...)
   so that the machine's drift hits both alike. The same trials give each
   workload's start-up share: the hyperfine wall time against the workload's own
   measured phase.
3. A/A: the same allocator on both sides of K (10) interleaved comparisons of M vs M
   (5 vs 5) larson and rpc trials (noise control on). A naive rule "the ratio of
   medians is off by more than 2%" and a Mann-Whitney U test at 0.05 each say
   "different" some of the time; since both sides are the same, every such call is
   a false alarm.

Everything runs through the runner's executor (hyperfine, taskset, cachegrind, one
result type). The figures are written into runner/README.md between the markers
<!-- bench-runner:begin --> and <!-- bench-runner:end -->; raw trials stay under
.mallard/runner/raw/noise-*. Run it under `flock /tmp/mallard-bench.lock` on a
shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mallard_runner import export
from mallard_runner.cells import Cell
from mallard_runner.measures import last_json_line
from mallard_runner.runs import Prepared, RunRequest, execute, prepare
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import Suite, load_suite
from mallard_runner.testbed import collect, cpu_model, parse_cpus
from mallard_runner.tools import BuildError
from mallard_runner.variants import AllocatorSelector, parse_selector, parse_selectors
from mallard_wire.results import TrialIn
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from scipy.stats import mannwhitneyu  # type: ignore[import-untyped]

README = REPO_ROOT / "runner" / "README.md"
BEGIN, END = "<!-- bench-runner:begin -->", "<!-- bench-runner:end -->"
DETERMINISTIC = ("instructions", "d1_misses", "llc_misses")
RULED = ("instructions", "llc_misses")  # primary: they take the rule (d1_misses is a diagnostic)
TOLERANCE = 0.001  # +-0.1% of the median: the repeatability the deterministic rule assumes
WOBBLE = 10  # ... or +-10 counts: half the API's absolute floor (deterministic_min_count 20)
console = Console(stderr=True)


def allocator_at_head() -> bool:
    return subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e",
                           "HEAD:allocator/CMakeLists.txt"], capture_output=True).returncode == 0


def _prepare(settings: RunnerSettings, suite: Suite, selectors: list[AllocatorSelector],
             cpus: list[int], raw: Path, progress: Progress, what: str, *,
             trials: int = 1, warmup: int = 0, workloads: list[str] | None = None,
             threads: list[int] | None = None, seed: int = 1,
             seconds: dict[str, float] | None = None) -> tuple[Prepared, Any]:
    req = RunRequest(suite=suite, selectors=selectors, cpus=cpus, raw_dir=raw,
                     source=str(REPO_ROOT), ref="HEAD", trials=trials, warmup=warmup,
                     workloads=workloads, threads=threads, seed=seed)
    task = progress.add_task(what, total=None)

    def tick(t: TrialIn, cell: Cell) -> None:
        progress.advance(task)
        if seconds is not None and not t.warmup and t.ok:  # the workload's own clock
            out = raw / cell.slug / f"trial-{t.seq}" / "stdout"
            line = last_json_line(out.read_text()) if out.exists() else None
            if line and isinstance(line.get("seconds"), int | float):
                seconds[t.uid] = float(line["seconds"])

    prep = prepare(settings, req, on_trial=tick)
    return prep, task


def timed_only(prep: Prepared) -> Prepared:
    """The run without its cachegrind runs (part 1 measures those)."""
    return dataclasses.replace(prep, cells=[dataclasses.replace(c, deterministic_params=None)
                                            for c in prep.cells])


def ops(results: list[TrialIn], label: str, workload: str, threads: int) -> list[float]:
    return [t.measures["ops_per_sec"] for t in results
            if t.ok and not t.warmup and t.label == label and t.workload.name == workload
            and t.workload.params["threads"] == threads and "ops_per_sec" in t.measures]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


# -- 1. deterministic counters -------------------------------------------------------------
def repeatability(settings: RunnerSettings, suite: Suite, cpus: list[int], raw: Path,
                  progress: Progress, runs: int) -> list[dict[str, Any]]:
    """Per workload x threads: the largest deviation from the median of each count over
    `runs` cachegrind runs, for every allocator of the suite (the worst one named)."""
    sels = [dataclasses.replace(s, label=s.name + (f":{s.variant}" if s.variant else ""))
            for s in parse_selectors(",".join(suite.allocators))]  # none is a `peer`
    prep, task = _prepare(settings, suite, sels, cpus, raw, progress, "cachegrind repeats")
    cells = []
    for cell in prep.cells:
        det = suite.workloads[cell.workload].deterministic
        if det is not None:  # every thread count, listed or not: the table shows why
            cells.append(dataclasses.replace(
                cell, deterministic_params={**cell.params, **det.params}))
    progress.update(task, total=len(cells) * runs)
    devs: dict[tuple[str, int], dict[str, tuple[float, float, str]]] = defaultdict(dict)
    for cell in cells:
        counts = []
        for _ in range(runs):
            t = prep.executor.run_deterministic(cell)
            progress.advance(task)
            if t is None or not t.ok:
                raise RuntimeError(f"cachegrind failed for {cell.key}: "
                                   f"{t.stderr_tail if t else 'valgrind missing'}")
            counts.append(t.measures)
        key = (cell.workload, int(cell.params["threads"]))
        for m in DETERMINISTIC:
            values = [c[m] for c in counts]
            med = statistics.median(values)
            dev = max(abs(v / med - 1) for v in values) if med else 0.0
            spread = max(abs(v - med) for v in values)
            if dev >= devs[key].get(m, (-1.0, 0.0, ""))[0]:
                devs[key][m] = (dev, spread, cell.target.display)
    rows = []
    for (w, threads), d in sorted(devs.items()):
        rows.append({"workload": w, "threads": threads,
                     **{m: d[m][0] for m in DETERMINISTIC},
                     **{f"{m}_counts": d[m][1] for m in DETERMINISTIC},
                     "worst": max(d.values())[2],
                     "repeats": all(d[m][0] <= TOLERANCE or d[m][1] <= WOBBLE
                                    for m in RULED)})
    return rows


# -- 2. CV with noise control off and on, interleaved ---------------------------------------
def cv_runs(settings: RunnerSettings, suite: Suite, selectors: list[AllocatorSelector],
            cpus: list[int], raw: Path, progress: Progress, trials: int, blocks: int
            ) -> tuple[dict[str, list[TrialIn]], dict[str, float]]:
    per_block = max(2, trials // blocks)
    trials_of: dict[str, list[TrialIn]] = {"off": [], "on": []}
    seconds: dict[str, float] = {}
    for b in range(blocks):
        for mode in ("off", "on"):
            s = settings.model_copy(update={"noise_control": mode == "on"})
            prep, task = _prepare(s, suite, selectors, cpus, raw / f"cv-{mode}-{b}", progress,
                                  f"CV noise control {mode}, block {b + 1}/{blocks}",
                                  trials=per_block, warmup=1, threads=[1, 2], seed=b,
                                  seconds=seconds)
            prep = timed_only(prep)
            progress.update(task, total=prep.total)
            trials_of[mode] += execute(prep).trials
    return trials_of, seconds


# -- 3. A/A --------------------------------------------------------------------------------
def aa_runs(settings: RunnerSettings, suite: Suite, allocators: list[str], cpus: list[int],
            raw: Path, progress: Progress, k: int, m: int, threads: list[int]
            ) -> list[tuple[str, str, int, int, int, int, float]]:
    rows = []
    for a in allocators:
        pairs: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for i in range(k):
            sels = [replace(parse_selector(a), label="A"), replace(parse_selector(a), label="B")]
            prep, task = _prepare(settings, suite, sels, cpus, raw / f"aa-{a}-{i}", progress,
                                  f"A/A {a} {i + 1}/{k}", trials=m, warmup=1,
                                  workloads=["larson", "rpc"], threads=threads, seed=100 + i)
            prep = timed_only(prep)
            progress.update(task, total=prep.total)
            r = execute(prep)
            for w in ("larson", "rpc"):
                for t in threads:
                    xa, xb = ops(r.trials, "A", w, t), ops(r.trials, "B", w, t)
                    if len(xa) >= 2 and len(xb) >= 2:
                        ratio = statistics.median(xb) / statistics.median(xa)
                        pval = float(mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
                        pairs.setdefault((w, t), []).append((ratio, pval))
        for (w, t), vals in pairs.items():
            wolf = sum(1 for ratio, _ in vals if abs(ratio - 1) > 0.02)
            mw = sum(1 for _, pv in vals if pv < 0.05)
            worst = max(abs(ratio - 1) for ratio, _ in vals)
            rows.append((a, w, t, len(vals), wolf, mw, worst))
    return rows


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def report(args: argparse.Namespace, cpus: list[int], load: tuple[float, ...],
           load_after: tuple[float, ...], det: list[dict[str, Any]],
           cv_trials: dict[str, list[TrialIn]], seconds: dict[str, float], allocators: list[str],
           aa: list[tuple[str, str, int, int, int, int, float]], notes: list[str],
           testbed: dict[str, Any]) -> str:
    lines = _header_lines(args, cpus, load, load_after, testbed)
    lines += _deterministic_lines(args, det)
    lines += _cv_lines(args, cv_trials, seconds, allocators)
    lines += _aa_lines(args, aa)
    for note in notes:
        lines += ["", f"Note: {note}."]
    return "\n".join(lines)


def _header_lines(args: argparse.Namespace, cpus: list[int], load: tuple[float, ...],
                  load_after: tuple[float, ...], testbed: dict[str, Any]) -> list[str]:
    """When and where it was measured, the testbed, and the command."""
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (f"{platform.machine()}, {cpu_model()}, {os.cpu_count()} CPUs (pinned to "
               f"{','.join(map(str, cpus))}), kernel {platform.release()}")
    return [
        f"Measured {date} on {machine}; 1-minute load average {load[0]:.1f} before the run "
        f"and {load_after[0]:.1f} at its end. The VM is shared with other people's builds and "
        f"tests (the run itself keeps about one CPU busy): read the timing figures as an upper "
        f"bound on the noise of a quiet, dedicated node. Testbed: governor "
        f"{testbed.get('governor')}, turbo {testbed.get('turbo')}, SMT "
        f"{'on' if testbed.get('smt') else 'off'}, isolated {testbed.get('isolated')}.", "",
        f"Command: `flock /tmp/mallard-bench.lock make bench-runner` (`python "
        f"runner/bench/noise.py --trials {args.trials} --blocks {args.blocks} --aa {args.aa} "
        f"--aa-trials {args.aa_trials} --repeats {args.repeats}`), quick-suite params.", ""]


def _deterministic_lines(args: argparse.Namespace, det: list[dict[str, Any]]) -> list[str]:
    """The cachegrind counters' largest deviation per workload, and the rule's verdict."""
    lines = [
        f"**Deterministic counters: {args.repeats} cachegrind runs per allocator** (every "
        f"allocator of the quick suite, its `deterministic` params); the largest deviation "
        f"from the median, over all allocators, in percent and (counts); the rule needs "
        f"`instructions` and `llc_misses`, the primary ones, within ±0.1% or ±{WOBBLE} "
        f"counts:", "",
        "| workload | threads | instructions | D1 misses | LLC misses | worst allocator | "
        "deterministic rule |", "|---|---:|---:|---:|---:|---|---|"]
    for r in det:
        cols = " | ".join(f"±{100 * r[m]:.3f}% ({r[m + '_counts']:,.0f})" for m in DETERMINISTIC)
        lines.append(f"| {r['workload']} | {r['threads']} | {cols} | {r['worst']} | "
                     f"{'yes' if r['repeats'] else 'no'} |")
    return lines


def _cv_lines(args: argparse.Namespace, cv_trials: dict[str, list[TrialIn]],
              seconds: dict[str, float], allocators: list[str]) -> list[str]:
    """CV of ops/s with noise control off and on, and the start-up share, per cell."""
    lines = ["", f"**CV of ops/s, noise control off and on**: {args.trials} pinned trials "
             f"per cell and condition, in {args.blocks} interleaved blocks (off, on, off, "
             f"on, ...), each after 1 warm-up; start-up share = 1 - (the workload's own "
             f"measured seconds) / (hyperfine's wall seconds), noise control on:", "",
             "| workload | threads | allocator | median ops/s (on) | CV off | CV on | "
             "wall ms | measured ms | start-up share |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    on, off = cv_trials["on"], cv_trials["off"]
    workloads = sorted({t.workload.name for t in on})
    for w in workloads:
        for t in (1, 2):
            for a in allocators:
                v_on, v_off = ops(on, a, w, t), ops(off, a, w, t)
                if len(v_on) < 2 or len(v_off) < 2:
                    continue
                walls = [x.measures["wall_seconds"] for x in on if x.ok and not x.warmup
                         and x.label == a and x.workload.name == w
                         and x.workload.params["threads"] == t and x.uid in seconds]
                secs = [seconds[x.uid] for x in on if x.ok and not x.warmup and x.label == a
                        and x.workload.name == w and x.workload.params["threads"] == t
                        and x.uid in seconds]
                wall, sec = statistics.median(walls), statistics.median(secs)
                lines.append(f"| {w} | {t} | {a} | {statistics.median(v_on):,.0f} | "
                             f"{_pct(cv(v_off))} | {_pct(cv(v_on))} | {1000 * wall:.0f} | "
                             f"{1000 * sec:.0f} | {_pct(1 - sec / wall)} |")
    return lines


def _aa_lines(args: argparse.Namespace,
              aa: list[tuple[str, str, int, int, int, int, float]]) -> list[str]:
    """The A/A false alarms of the naive threshold and of Mann-Whitney."""
    lines = ["", f"**A/A: the same allocator on both sides, {args.aa} comparisons of "
             f"{args.aa_trials} vs {args.aa_trials} interleaved trials** (noise control on)", "",
             "| allocator | workload | threads | comparisons | naive >2% on the ratio of "
             "medians | Mann-Whitney p<0.05 | largest ratio error |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for a, w, t, n, wolf, mw, worst in aa:
        lines.append(f"| {a} | {w} | {t} | {n} | {wolf} of {n} | {mw} of {n} | "
                     f"{100 * worst:.1f}% |")
    lines += ["", f"Both sides are the same allocator, so every call is a false alarm. A "
              f"Mann-Whitney test at 0.05 should cry wolf in about 5% of comparisons "
              f"({0.05 * args.aa:.1f} of {args.aa}) when trials are independent; the naive "
              f"threshold has no such guarantee: its rate is set by the noise (the CV above)."]
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpus", default=None, help="CPUs to pin to (default: the last one)")
    p.add_argument("--trials", type=int, default=20, help="trials per cell and condition")
    p.add_argument("--blocks", type=int, default=4, help="interleaved off/on blocks")
    p.add_argument("--aa", type=int, default=10, help="A/A comparisons")
    p.add_argument("--aa-trials", type=int, default=5, help="trials per side of an A/A")
    p.add_argument("--repeats", type=int, default=3, help="cachegrind runs per allocator")
    p.add_argument("--skip", default="", help="comma list of parts to skip: det,cv,aa")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    settings = RunnerSettings()
    cpus = parse_cpus(args.cpus or str(sorted(os.sched_getaffinity(0))[-1]))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = settings.raw() / f"noise-{stamp}"
    suite = load_suite("quick", settings.suites_dir)
    allocators = ["glibc"]
    notes: list[str] = []
    if allocator_at_head():
        allocators.append("mallard")
    else:
        notes.append("mallard skipped: allocator/ is not committed at HEAD")
        suite = suite.model_copy(update={"allocators": [a for a in suite.allocators
                                                        if not a.startswith("mallard")]})
    load = os.getloadavg()
    det: list[dict[str, Any]] = []
    cv_trials: dict[str, list[TrialIn]] = {"on": [], "off": []}
    seconds: dict[str, float] = {}
    aa: list[tuple[str, str, int, int, int, int, float]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        try:
            if "det" not in skip:
                det = repeatability(settings, suite, cpus, raw / "det", progress, args.repeats)
            sels = [replace(parse_selector(a), label=a) for a in allocators]
            if "cv" not in skip:
                cv_trials, seconds = cv_runs(settings, suite, sels, cpus, raw, progress,
                                             args.trials, args.blocks)
            if "aa" not in skip:
                aa = aa_runs(settings, suite, allocators, cpus, raw, progress, args.aa,
                             args.aa_trials, [1, 2])
        except BuildError as e:
            console.print(f"[red]mallard does not build at HEAD[/]: {e.args[0]}")
            return 1
    load_after = os.getloadavg()
    testbed = collect(cpus).model_dump()
    block = report(args, cpus, load, load_after, det, cv_trials, seconds, allocators, aa,
                   notes, testbed)
    print(block)
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "summary.json").write_text(json.dumps({
        "det": det, "aa": aa, "seconds": seconds, "notes": notes, "testbed": testbed,
        "cv": {m: [t.model_dump() for t in ts] for m, ts in cv_trials.items()}}, indent=1))
    if not args.no_write:
        export.write_block(README, (BEGIN, END), block, "Measurement noise")
        console.print(f"wrote {README.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
