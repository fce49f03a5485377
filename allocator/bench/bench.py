"""`make bench-allocator`: mallard vs the peers on every workload, into allocator/README.md.

Runs, through the runner's executor (one timing loop, one result type:
mallard_runner), every workload of the `full` suite with its params, plus the
`transfer` workload (runner/suites/transfer.yaml) and `redis`
(runner/suites/macro.yaml: Debian's redis-server under the allocator, io-threads
= threads; REDIS_REQUESTS per test here), at 1 and 2 threads:
mallard built from this checkout's HEAD in its default configuration and
each transfer variant (`ring`, `naive`), beside glibc, jemalloc, mimalloc and
tcmalloc; pinned, interleaved, the median of >= 7 trials after a warm-up.
Writes a summary (per case: mallard's default against the fastest peer, and
its peak RSS against jemalloc's) and the full table of ops/s and peak RSS
(medians) between <!-- bench-allocator:begin --> and <!-- bench-allocator:end -->
under "## Performance" in allocator/README.md. Raw trials: .mallard/runner/raw/.
`--workloads` and `--threads` narrow it for a quick look (then use --no-write).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from mallard_runner import export
from mallard_runner.cells import Cell
from mallard_runner.runs import RunRequest, execute, prepare
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import Suite, load_suite
from mallard_runner.summary import CellSummary, summarize
from mallard_runner.testbed import cpu_model, parse_cpus
from mallard_runner.tools import BuildError
from mallard_runner.variants import PEER_NAMES, parse_selectors
from mallard_wire.results import ResultsIn, TrialIn
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

README = REPO_ROOT / "allocator" / "README.md"
BEGIN, END = "<!-- bench-allocator:begin -->", "<!-- bench-allocator:end -->"
console = Console(stderr=True)


ALLOCATORS = ["mallard", "mallard:transfer=ring", "mallard:transfer=naive",
              "glibc", "jemalloc", "mimalloc", "tcmalloc"]
# redis-benchmark times each test in whole milliseconds: macro's 24,000 requests
# take ~22 ms a test at ~1.07 M requests/s, so one step of its clock was 4.5% (the
# redis 1T cell read 0.99x tcmalloc for 90 against 89 ms); 200,000 take ~0.19 s,
# a step 0.5%. Costs ~1.6 s more a trial (allocator/README.md, "Speed, sixth round").
REDIS_REQUESTS = 200_000


def bench_suite(suites_dir: Path, trials: int) -> Suite:
    """The full suite's workloads and params, plus transfer, at threads 1 and 2."""
    full = load_suite("full", suites_dir)
    transfer = load_suite("transfer", suites_dir)
    macro = load_suite("macro", suites_dir)
    workloads = dict(full.workloads) | dict(transfer.workloads)
    # redis: a real server; without redis-server its trials fail, saying so
    if "redis" in macro.workloads:
        redis = macro.workloads["redis"]
        workloads["redis"] = redis.model_copy(update={
            "threads": [1, 2], "params": redis.params | {"requests": REDIS_REQUESTS}})
    for name, wl in workloads.items():
        threads = [t for t in (wl.threads or [1, 2]) if t in (1, 2)]
        workloads[name] = wl.model_copy(update={"threads": threads, "instructions": None})
    return Suite(name="bench-allocator", description="full + transfer, threads 1 and 2",
                 trials=trials, warmup=1, seed=full.seed, threads=[1, 2],
                 allocators=ALLOCATORS, baseline="glibc", workloads=workloads)


def short_case(c: CellSummary) -> str:
    return " ".join(f"{k}={v}" for k, v in c.params.items() if k not in ("threads", "seed"))


def variant_spread(mallards: list[CellSummary]) -> float | None:
    """Largest over smallest median ops/s of mallard's configurations (None below two)."""
    meds = [m for m in (c.median("ops_per_sec") for c in mallards) if m]
    return max(meds) / min(meds) if len(meds) >= 2 else None


def gap(med: float | None, fast: float | None, spread: float | None) -> str:
    """'-' when mallard is at least the fastest peer; else the shortfall, and whether the
    spread of mallard's own configurations covers it."""
    if not med or not fast or med >= fast:
        return "-"
    short = fast / med
    verdict = "noise" if spread is not None and spread >= short else "beyond the spread"
    return f"{short - 1:.0%} ({verdict})"


def table(results: ResultsIn, trials: int, cpus: list[int], load: tuple[float, float],
          missing: dict[str, str]) -> str:
    rows = summarize(results.trials, baseline="glibc")
    by_case: dict[str, list[CellSummary]] = {}
    for s in rows:
        by_case.setdefault(s.case, []).append(s)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    tb = results.testbed
    out = [f"Measured {date} by `make bench-allocator` on {platform.machine()}, {cpu_model()}, "
           f"{os.cpu_count()} cores (workloads pinned to CPU {tb.cpus}), kernel {tb.kernel}, "
           f"{tb.compiler}, {tb.libc}. Each cell: the median of {trials} interleaved trials "
           f"after a warm-up; ops/s is the workload's own count over its own clock. 1-minute "
           f"load average {load[0]:.1f} before the run and {load[1]:.1f} at its end (the run "
           f"itself keeps about one CPU busy); the VM is shared with other people's builds "
           f"and tests, and repeated runs of this table have differed by tens of percent on "
           f"larson: treat it as indicative, and compare with the A/A figures in "
           f"runner/README.md before believing a difference.", "",
           "Summary: mallard's default configuration against the fastest peer (ops/s) and "
           "against jemalloc (peak RSS). `spread`: the largest over the smallest median of "
           "mallard's own three configurations (default, ring, naive), the noise floor where "
           "they run the same code (one thread: no other thread meets the transfer cache); "
           "`gap`: how far mallard's default is below the fastest peer, `noise` when the "
           "spread is at least as large.", "",
           "| workload | params | threads | mallard ops/s | fastest peer | mallard / fastest | "
           "spread | gap | RSS mallard / jemalloc |", "|---|---|---:|---:|---|---:|---:|---|---:|"]
    summary: list[str] = []
    full = ["", "| workload | params | threads | allocator | ops/s (median) | vs glibc | "
            "vs fastest peer | peak RSS (median) | ok / n |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for cells in by_case.values():
        peers = [c for c in cells if c.name in PEER_NAMES and c.median("ops_per_sec")]
        fastest = max(peers, key=lambda c: c.median("ops_per_sec") or 0.0, default=None)
        fast = fastest.median("ops_per_sec") if fastest else None
        order = sorted(cells, key=lambda c: (c.name != "mallard", c.allocator))
        mallard = next((c for c in cells if c.name == "mallard" and not c.variant), None)
        je = next((c for c in cells if c.name == "jemalloc"), None)
        if mallard is not None and fastest is not None:
            med = mallard.median("ops_per_sec")
            rss = mallard.median("max_rss_bytes")
            je_rss = je.median("max_rss_bytes") if je else None
            spread = variant_spread([c for c in cells if c.name == "mallard"])
            summary.append(
                f"| {mallard.workload} | {short_case(mallard)} | {mallard.params.get('threads')} | "
                f"{'-' if med is None else f'{med:,.0f}'} | {fastest.name} | "
                f"{'-' if not med or not fast else f'{med / fast:.2f}x'} | "
                f"{'-' if spread is None else f'{spread:.2f}x'} | {gap(med, fast, spread)} | "
                f"{'-' if not rss or not je_rss else f'{rss / je_rss:.2f}x'} |")
        for c in order:
            med = c.median("ops_per_sec")
            rss = c.median("max_rss_bytes")
            vs_fast = f"{med / fast:.2f}x" if med and fast else "-"
            if fastest is not None and c is fastest:
                vs_fast += " (fastest)"
            full.append(
                f"| {c.workload} | {short_case(c)} | {c.params.get('threads')} | {c.allocator} | "
                f"{'-' if med is None else f'{med:,.0f}'} | "
                f"{'-' if c.ratio is None else f'{c.ratio:.2f}x'} | {vs_fast} | "
                f"{'-' if rss is None else f'{rss / 2**20:.1f} MiB'} | {c.n_ok} / {c.n} |")
    out += summary + full
    for name, why in missing.items():
        out.append(f"Peer {name} was not measured: {why}.")
    failed = [t for t in results.trials if not t.ok]
    if failed:
        out.append(f"{len(failed)} trials failed (kept in the raw results).")
    return "\n".join(out)


def write_readme(block: str, readme: Path = README, begin: str = BEGIN, end: str = END) -> None:
    """Replace the block between the markers; add the markers under ## Performance if missing."""
    BEGIN, END = begin, end  # noqa: N806
    text = readme.read_text() if readme.exists() else "# Mallard allocator\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1]
    elif "## Performance" in text:
        head, rest = text.split("## Performance", 1)
        first, nl, after = rest.partition("\n")
        # append the markers at the end of the Performance section
        nxt = after.find("\n## ")
        section, tail = (after, "") if nxt < 0 else (after[:nxt + 1], after[nxt + 1:])
        text = (head + "## Performance" + first + nl + section.rstrip("\n") + "\n\n" + BEGIN +
                "\n" + block + "\n" + END + "\n" + ("\n" + tail if tail else ""))
    else:
        text = text.rstrip("\n") + f"\n\n## Performance\n\n{BEGIN}\n{block}\n{END}\n"
    readme.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpus", default=None, help="CPUs to pin to (default: the last one)")
    p.add_argument("--trials", type=int, default=7, help="trials per cell (>= 7 for the README)")
    p.add_argument("--workloads", default=None, help="comma list: only these workloads")
    p.add_argument("--threads", default=None, help="comma list: only these thread counts")
    p.add_argument("--allocators", default=None, help="comma list of selectors (default: all)")
    p.add_argument("--commit", default="HEAD", help="mallard commit to build")
    p.add_argument("--json", type=Path, default=None, help="also write the ResultsIn JSON here")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    args = p.parse_args()
    settings = RunnerSettings()
    suite = bench_suite(settings.suites_dir, args.trials)
    cpus = parse_cpus(args.cpus or str(sorted(os.sched_getaffinity(0))[-1]))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    req = RunRequest(suite=suite,
                     selectors=parse_selectors(args.allocators or ",".join(suite.allocators)),
                     cpus=cpus, raw_dir=settings.raw() / f"bench-allocator-{stamp}",
                     source=str(REPO_ROOT), ref=args.commit, trials=args.trials,
                     workloads=args.workloads.split(",") if args.workloads else None,
                     threads=[int(t) for t in args.threads.split(",")] if args.threads else None)
    load_before = os.getloadavg()[0]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("building mallard, finding peers", total=None)

        def tick(t: TrialIn, cell: Cell) -> None:
            progress.update(task, advance=1, description=f"{cell.target.display} {cell.case}")

        try:
            prep = prepare(settings, req, on_trial=tick)
        except BuildError as e:
            progress.stop()
            console.print(f"[red]mallard does not build at {args.commit}:[/] {e}")
            return 1
        progress.update(task, total=prep.total)
        results = execute(prep)
    block = table(results, prep.trials, cpus, (load_before, os.getloadavg()[0]),
                  prep.resolved.missing)
    print(block)
    if args.json:
        export.write_atomic(args.json, export.to_json(results))
    if not args.no_write:
        write_readme(block)
        console.print(f"wrote {README.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
