"""`make bench-runner`: how noisy are the runner's measurements on this machine?

1. CV: the coefficient of variation of larson and rpc ops/s over N (20) pinned,
   interleaved trials, for glibc and mallard (built from this checkout's HEAD
   when allocator/ is committed there).
2. A/A: the same allocator on both sides of K (10) interleaved comparisons of
   M vs M (5 vs 5) trials. A naive rule "the ratio of medians is off by more
   than 2%" and a Mann-Whitney U test at 0.05 each say "different" some of the
   time; since both sides are the same, every such call is a false alarm.

Everything runs through the runner's executor (hyperfine, taskset, one result
type). The figures are written into runner/README.md between the markers
<!-- bench-runner:begin --> and <!-- bench-runner:end -->; raw trials stay
under .mallard/runner/raw/noise-*.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from mallard_runner.build import BuildError
from mallard_runner.executor import Cell
from mallard_runner.models import ResultsIn, Trial
from mallard_runner.runs import RunRequest, execute, prepare
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import load_suite
from mallard_runner.testbed import cpu_model, parse_cpus
from mallard_runner.variants import AllocatorSelector
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from scipy.stats import mannwhitneyu  # type: ignore[import-untyped]

README = REPO_ROOT / "runner" / "README.md"
BEGIN, END = "<!-- bench-runner:begin -->", "<!-- bench-runner:end -->"
console = Console(stderr=True)


def allocator_at_head() -> bool:
    return subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e",
                           "HEAD:allocator/CMakeLists.txt"], capture_output=True).returncode == 0


def run(settings: RunnerSettings, progress: Progress, what: str, selectors: list[AllocatorSelector],
        cpus: list[int], trials: int, warmup: int, threads: list[int], seed: int,
        raw: Path) -> ResultsIn:
    suite = load_suite("bench-allocator", settings.suites_dir)
    req = RunRequest(suite=suite, selectors=selectors, cpus=cpus, raw_dir=raw,
                     source=str(REPO_ROOT), ref="HEAD", trials=trials, warmup=warmup,
                     workloads=["larson", "rpc"], threads=threads, seed=seed)
    task = progress.add_task(what, total=None)

    def tick(t: Trial, cell: Cell) -> None:
        progress.advance(task)

    prep = prepare(settings, req, on_trial=tick)
    progress.update(task, total=prep.total)
    return execute(prep)


def ops(results: ResultsIn, label: str, workload: str, threads: int) -> list[float]:
    return [t.measures["ops_per_sec"] for t in results.trials
            if t.ok and not t.warmup and t.label == label and t.workload.name == workload
            and t.workload.params["threads"] == threads]


def write_block(block: str, readme: Path = README) -> None:
    """Replace what is between the markers (or add a section with them at the end)."""
    text = readme.read_text() if readme.exists() else "# Mallard runner\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + f"\n\n## Measurement noise\n\n{BEGIN}\n{block}\n{END}\n"
    readme.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpus", default=None, help="CPUs to pin to (default: the last one)")
    p.add_argument("--trials", type=int, default=20, help="trials for the CV")
    p.add_argument("--aa", type=int, default=10, help="A/A comparisons")
    p.add_argument("--aa-trials", type=int, default=5, help="trials per side of an A/A")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    args = p.parse_args()

    settings = RunnerSettings()
    cpus = parse_cpus(args.cpus or str(sorted(os.sched_getaffinity(0))[-1]))
    threads = [int(t) for t in args.threads.split(",")]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = settings.raw() / f"noise-{stamp}"
    allocators = ["glibc"]
    notes: list[str] = []
    if allocator_at_head():
        allocators.append("mallard")
    else:
        notes.append("mallard skipped: allocator/ is not committed at HEAD")
    load = os.getloadavg()
    cv_rows: list[tuple[str, str, int, int, float, float]] = []
    aa_rows: list[tuple[str, str, int, int, int, int, float]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        # 1. CV over N interleaved trials
        sels = [AllocatorSelector(a, label=a) for a in allocators]
        try:
            res = run(settings, progress, f"CV: {args.trials} trials", sels, cpus, args.trials,
                      1, threads, 1, raw / "cv")
        except BuildError as e:
            console.print(f"[yellow]mallard does not build at HEAD; glibc only[/]: {e.args[0]}")
            notes.append(f"mallard skipped: build failed at HEAD ({e.args[0]})")
            allocators = ["glibc"]
            sels = [AllocatorSelector("glibc", label="glibc")]
            res = run(settings, progress, f"CV: {args.trials} trials", sels, cpus, args.trials,
                      1, threads, 1, raw / "cv")
        for a in allocators:
            for w in ("larson", "rpc"):
                for t in threads:
                    v = ops(res, a, w, t)
                    if len(v) >= 2:
                        cv = statistics.stdev(v) / statistics.fmean(v)
                        cv_rows.append((a, w, t, len(v), statistics.median(v), cv))
        # 2. A/A: the same allocator on both sides
        for a in allocators:
            pairs: dict[tuple[str, int], list[tuple[float, float]]] = {}
            for k in range(args.aa):
                sels = [AllocatorSelector(a, label="A"), AllocatorSelector(a, label="B")]
                r = run(settings, progress, f"A/A {a} {k + 1}/{args.aa}", sels, cpus,
                        args.aa_trials, 1, threads, 100 + k, raw / f"aa-{a}-{k}")
                for w in ("larson", "rpc"):
                    for t in threads:
                        xa, xb = ops(r, "A", w, t), ops(r, "B", w, t)
                        if len(xa) >= 2 and len(xb) >= 2:
                            ratio = statistics.median(xb) / statistics.median(xa)
                            pval = float(mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
                            pairs.setdefault((w, t), []).append((ratio, pval))
            for (w, t), vals in pairs.items():
                wolf = sum(1 for ratio, _ in vals if abs(ratio - 1) > 0.02)
                mw = sum(1 for _, pv in vals if pv < 0.05)
                worst = max(abs(ratio - 1) for ratio, _ in vals)
                aa_rows.append((a, w, t, len(vals), wolf, mw, worst))
    load_after = os.getloadavg()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (f"{platform.machine()}, {cpu_model()}, {os.cpu_count()} CPUs (pinned to "
               f"{','.join(map(str, cpus))}), kernel {platform.release()}")
    lines = [f"Measured {date} on {machine}; 1-minute load average {load[0]:.1f} before "
             f"the run and {load_after[0]:.1f} at its end (the run itself keeps about one CPU "
             f"busy; the VM is shared with other people's builds and tests, so read these "
             f"figures as an upper bound on the noise of a quiet, dedicated node).", "",
             f"Command: `make bench-runner` (`python runner/bench/noise.py --trials {args.trials} "
             f"--aa {args.aa} --aa-trials {args.aa_trials}`), bench-allocator params.", "",
             f"**CV of ops/s over {args.trials} interleaved, pinned trials** (after 1 warm-up)",
             "", "| allocator | workload | threads | n | median ops/s | CV |",
             "|---|---|---:|---:|---:|---:|"]
    for a, w, t, n, med, cv in cv_rows:
        lines.append(f"| {a} | {w} | {t} | {n} | {med:,.0f} | {100 * cv:.1f}% |")
    lines += ["", f"**A/A: the same allocator on both sides, {args.aa} comparisons of "
              f"{args.aa_trials} vs {args.aa_trials} interleaved trials**", "",
              "| allocator | workload | threads | comparisons | naive >2% on the ratio of "
              "medians | Mann-Whitney p<0.05 | largest ratio error |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for a, w, t, n, wolf, mw, worst in aa_rows:
        lines.append(f"| {a} | {w} | {t} | {n} | {wolf} of {n} | {mw} of {n} | "
                     f"{100 * worst:.1f}% |")
    lines += ["", f"Both sides are the same allocator, so every call is a false alarm. A "
              f"Mann-Whitney test at 0.05 should cry wolf in about 5% of comparisons "
              f"({0.05 * args.aa:.1f} of {args.aa}) when trials are independent; the naive "
              f"threshold has no such guarantee: its rate is set by the noise (the CV above). "
              f"This is why a verdict needs the test, enough trials and a confidence interval, "
              f"not a percentage."]
    for note in notes:
        lines += ["", f"Note: {note}."]
    block = "\n".join(lines)
    print(block)
    (raw / "summary.json").write_text(json.dumps({"cv": cv_rows, "aa": aa_rows, "date": date,
                                                  "machine": machine, "notes": notes}, indent=1))
    if not args.no_write:
        write_block(block)
        console.print(f"wrote {README.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
