"""`make bench-allocator`: mallard vs the peers on every workload, into allocator/README.md.

Runs, through the runner's executor (one timing loop, one result type:
mallard_runner), every workload of the `full` suite with its params, plus the
`transfer` workload (runner/suites/transfer.yaml) and `redis`
(runner/suites/macro.yaml: Debian's redis-server under the allocator, io-threads
= threads; REDIS_REQUESTS per test here), at 1 and 2 threads. redis at 1 thread: the
server on the first pinned CPU, redis-benchmark on the second; at 2 threads (io-threads
2) on 2 CPUs: its io thread alone on the second CPU, its main thread and redis-benchmark
on the first (placement `threads`, runner/workloads/README.md), so the cell measures the
allocator under redis's threaded reads and writes (query buffers and arguments allocated
by the io thread and freed by the main thread, replies the other way) rather than the
scheduler. mallard built from this checkout's HEAD in its default configuration and
each transfer variant (`ring`, `naive`), beside glibc, jemalloc, mimalloc and
tcmalloc; pinned, interleaved, the median of TRIALS (12) trials after a warm-up, each round
running every case's allocators one after another (the cases and the allocators within a
case in a shuffled order: executor.round_order), so the trials a row pairs run seconds
apart. No cachegrind runs (the full suite's `deterministic` blocks): the table uses no
count. About 18 minutes on the 2-vCPU VM (allocator/README.md, "Speed, eighth round: the
table's power").
Writes a summary (per case: mallard's default against the fastest peer, the ratio of
medians with its interval and the verdict the API's own statistics give it
(mallard_stats with its default policy, which is the API's; trials paired by round; a line
counts faster / same / slower / unknown), and its peak RSS against jemalloc's) and the
full table of ops/s and peak RSS (medians) between <!-- bench-allocator:begin --> and
<!-- bench-allocator:end --> under "## Performance" in allocator/README.md. Raw trials:
.mallard/runner/raw/. `--workloads` and `--threads` narrow it for a quick look (then use
--no-write).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import resource
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mallard_runner import export
from mallard_runner.cells import Cell
from mallard_runner.peers import CATALOGUE_NAMES
from mallard_runner.runs import RunRequest, execute, prepare
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import Scalar, Suite, load_suite
from mallard_runner.summary import CellSummary, summarize
from mallard_runner.testbed import cpu_model, parse_cpus
from mallard_runner.tools import BuildError
from mallard_runner.variants import parse_selectors
from mallard_stats import stats
from mallard_stats.measures import THROUGHPUT, higher_is_better
from mallard_stats.paired import compare_paired
from mallard_stats.policy import DEFAULT_POLICY, Policy
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
PER_CPU = "ops_per_cpu_sec"
JUDGED = (THROUGHPUT, PER_CPU)  # the measures each summary row gets a verdict on
# rounds: from policy.settle_trials (10) a tie can be `same` with a narrow interval around
# 1 (at 7 only within ±1%); 12 keep 10 after the outlier rule drops two
TRIALS = 12
WORDS = {"improved": "faster", "same": "same", "regressed": "slower", "unknown": "unknown"}


def bench_suite(suites_dir: Path, trials: int, quick: bool = False) -> Suite:
    """The full suite's workloads and params, plus transfer, at threads 1 and 2 (`quick`:
    the quick suite's)."""
    full = load_suite("quick" if quick else "full", suites_dir)
    transfer = load_suite("transfer", suites_dir)
    macro = load_suite("macro", suites_dir)
    workloads = dict(full.workloads) | ({} if quick else dict(transfer.workloads))
    # redis: a real server; without redis-server its trials fail, saying so
    if "redis" in macro.workloads and not quick:
        redis = macro.workloads["redis"]
        workloads["redis"] = redis.model_copy(update={
            "threads": [1, 2], "params": redis.params | {"requests": REDIS_REQUESTS}})
    for name, wl in workloads.items():
        threads = [t for t in (wl.threads or [1, 2]) if t in (1, 2)]
        # no cachegrind run (the suite's `deterministic` block): the table uses no count
        workloads[name] = wl.model_copy(update={"threads": threads, "deterministic": None})
    return Suite(name="bench-allocator", description="full + transfer, threads 1 and 2",
                 trials=trials, warmup=1, seed=full.seed, threads=[1, 2],
                 allocators=ALLOCATORS, baseline="glibc", workloads=workloads)


def short_case(c: CellSummary) -> str:
    return " ".join(f"{k}={v}" for k, v in c.params.items() if k not in ("threads", "seed"))


def variant_spread(mallards: list[CellSummary]) -> float | None:
    """Largest over smallest median ops/s of mallard's configurations (None below two)."""
    meds = [m for m in (c.median("ops_per_sec") for c in mallards) if m]
    return max(meds) / min(meds) if len(meds) >= 2 else None


@dataclass
class Row:
    """One summary row: mallard's default against the fastest peer of one case."""

    mallard: CellSummary
    fastest: CellSummary
    jemalloc: CellSummary | None
    spread: float | None
    judged: dict[str, stats.CellStats] = field(default_factory=dict)  # measure -> verdict
    measures: tuple[str, ...] = JUDGED  # what it is judged on; the first is its cost


def summary_rows(cells: list[CellSummary]) -> tuple[list[Row], dict[str, CellSummary | None]]:
    """(rows, fastest peer per case): the fastest peer is the one with the highest median
    ops/s; a case without mallard's default or without a measured peer has no row."""
    by_case: dict[str, list[CellSummary]] = {}
    for s in cells:
        by_case.setdefault(s.case, []).append(s)
    rows: list[Row] = []
    fastest_of: dict[str, CellSummary | None] = {}
    for case, group in by_case.items():
        peers = [c for c in group if c.name in CATALOGUE_NAMES and c.median(THROUGHPUT)]
        fastest = max(peers, key=lambda c: c.median(THROUGHPUT) or 0.0, default=None)
        fastest_of[case] = fastest
        mallard = next((c for c in group if c.name == "mallard" and not c.variant), None)
        if mallard is None or fastest is None:
            continue
        rows.append(Row(mallard, fastest, next((c for c in group if c.name == "jemalloc"), None),
                        variant_spread([c for c in group if c.name == "mallard"])))
    return rows, fastest_of


def by_round(base: CellSummary, head: CellSummary, measure: str
             ) -> tuple[list[float | None], list[float | None]]:
    """The two cells' values of one measure side by side by round (trial seq); a round one
    side lacks (a failed trial) is None there."""
    b = dict(zip(base.seqs.get(measure, []), base.values.get(measure, []), strict=True))
    h = dict(zip(head.seqs.get(measure, []), head.values.get(measure, []), strict=True))
    rounds = sorted(b.keys() | h.keys())
    return [b.get(i) for i in rounds], [h.get(i) for i in rounds]


def judge(rows: list[Row], policy: Policy = DEFAULT_POLICY) -> list[Row]:
    """Each row's verdicts, by the API's own rule (`mallard_stats`): base the
    fastest peer's trials, head mallard's, per measure of JUDGED, paired by round
    (`paired.compare_paired`: the runner interleaves, so a drift of the machine moves both
    trials of a round); the p-values adjusted (Benjamini-Hochberg) over all of them at
    once, as a comparison's cells are."""
    keys = [(r, m) for r in rows for m in r.measures]
    raw = [compare_paired(*by_round(r.fastest, r.mallard, m),
                          higher_is_better=higher_is_better(m), policy=policy)
           for r, m in keys]
    for (r, m), s in zip(keys, stats.adjust_and_decide(raw, policy), strict=True):
        r.judged[m] = s
    return rows


def interval(s: stats.CellStats) -> str:
    """The per-round ratio with its interval, '-' when there is none."""
    if s.ratio is None or s.ci_low_pct is None or s.ci_high_pct is None:
        return "-"
    return f"{s.ratio:.3f}x ({1 + s.ci_low_pct / 100:.3f}-{1 + s.ci_high_pct / 100:.3f})"


def verdict(s: stats.CellStats) -> str:
    """faster / same / slower (with the adjusted p-value) or unknown (with the MDE)."""
    word = WORDS[s.verdict]
    if s.verdict in ("improved", "regressed") and s.p_adjusted is not None:
        return f"{word} (p={s.p_adjusted:.3f})"
    if s.verdict == "unknown":
        if s.mde_pct is not None:
            return f"{word} (mde {s.mde_pct:.1f}%)"
        return f"{word} ({min(s.robust_base, s.robust_head)} robust)"  # too few to judge
    return word


def counts(rows: list[Row], measure: str = THROUGHPUT) -> str:
    """The acceptance line: how many cells are faster, the same, slower, unknown."""
    n = {w: sum(1 for r in rows if r.judged[measure].verdict == w) for w in WORDS}
    above = sum(1 for r in rows if (r.mallard.median(measure) or 0.0) >=
                (r.fastest.median(measure) or math.inf))
    return (f"Cells: {len(rows)}; mallard's default against the fastest peer ({measure}): "
            f"{n['improved']} faster, {n['same']} same (a tie within the interval), "
            f"{n['regressed']} slower, {n['unknown']} unknown (an interval too wide to tell); "
            f"by the medians alone {above} at or above, {len(rows) - above} below.")


def legend(policy: Policy, isolated: bool | None, by_case: bool = False) -> str:
    """What the summary's columns mean, with the policy's numbers."""
    conf = f"{policy.confidence:.0%}"
    order = ("each round runs every case's allocators one after another (cases and "
             "allocators in a shuffled order), so a slow spell of the machine (they last "
             "seconds) moves both trials of a pair alike and cancels in their ratio"
             if by_case else "the runner interleaves, so a drift of the machine moves both "
             "trials of a round alike and cancels in their ratio")
    text = (
        f"Summary: mallard's default configuration against the fastest peer (the peer with the "
        f"highest median ops/s), on the raw trials, by the service's statistics "
        f"(mallard_stats, docs/statistics.md) with the trials paired by round: "
        f"{order}. `mallard / fastest` is the ratio of median ops/s; "
        f"`per round ({conf} CI)` the median of the rounds' ratios, mallard over the peer, "
        f"with its bootstrap interval (rounds whose ratio is a median/MAD outlier left out, "
        f"{policy.n_resamples} resamples); `verdict`: `faster` "
        f"or `slower` when the interval excludes 1, the paired t-test's p-value (log ratios) "
        f"adjusted "
        f"(Benjamini-Hochberg) over every judged cell of this table is below {policy.alpha} "
        f"and the difference is at least {policy.min_effect_pct:g}%; `same` when the interval "
        f"lies within ±{policy.min_effect_pct:g}% (or, from {policy.settle_trials} rounds, an "
        f"interval around 1 at most ±{policy.settle_max_half_width_pct:g}% wide with a median "
        f"within ±{policy.min_effect_pct:g}%); else `unknown`, with the smallest difference "
        f"the cell could have detected (mde, {policy.power:.0%} power), or, under "
        f"{policy.min_trials} robust rounds (the others' ratios more than "
        f"{policy.outlier_k:g} MADs from the median), the robust count. "
        f"`per CPU-second`: the verdict on ops_per_cpu_sec (operations per CPU-second of the "
        f"workload, of the server for redis), the throughput the service judges on CPUs that "
        f"are not isolated. `spread`: "
        f"the largest over the smallest median ops/s of mallard's own three configurations "
        f"(default, ring, naive), the same code at one thread: a between-builds A/A (the "
        f"variants are chosen by an environment variable, which also moves the workload's "
        f"initial stack). "
        f"`RSS mallard / jemalloc`: the ratio of median peak RSS.")
    if isolated is False:
        text += (" The pinned CPUs were not isolated (other processes may run on them): the "
                 "service would show wall-clock ops/s from such a run without a verdict and "
                 "judge only ops/s per CPU-second; this table judges both, ops/s because "
                 "issue #14's goal is stated in it.")
    return text


def table(results: ResultsIn, trials: int, cpus: list[int], load: tuple[float, float],
          missing: dict[str, str], policy: Policy = DEFAULT_POLICY) -> str:
    cells = summarize(results.trials, baseline="glibc")
    rows, fastest_of = summary_rows(cells)
    judge(rows, policy)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    tb = results.testbed
    by_case = (results.artifacts or {}).get("order_by_case") is True
    block = ", each case's trials run one after another within a round" if by_case else ""
    out = [f"Measured {date} by `make bench-allocator` on {platform.machine()}, {cpu_model()}, "
           f"{os.cpu_count()} cores (workloads pinned to CPU {tb.cpus}), kernel {tb.kernel}, "
           f"{tb.compiler}, {tb.libc}. Each cell: the median of {trials} interleaved trials "
           f"after a warm-up{block}; ops/s is the workload's own count over its own clock. "
           f"1-minute load average {load[0]:.1f} before the run and {load[1]:.1f} at its end "
           f"(the run itself keeps about one CPU busy); the VM is shared with other people's "
           f"builds and tests, and repeated runs of this table have differed by tens of percent on "
           f"larson: treat it as indicative, and compare with the A/A figures in "
           f"runner/README.md before believing a difference.", "",
           legend(policy, tb.isolated, by_case), "", counts(rows), "",
           "| workload | params | threads | mallard ops/s | fastest peer | mallard / fastest | "
           f"per round ({policy.confidence:.0%} CI) | verdict | per CPU-second | spread | "
           "RSS mallard / jemalloc |", "|---|---|---:|---:|---|---:|---:|---|---|---:|---:|"]
    for r in rows:
        m, f = r.mallard, r.fastest
        med, fast = m.median(THROUGHPUT), f.median(THROUGHPUT)
        rss = m.median("max_rss_bytes")
        je_rss = r.jemalloc.median("max_rss_bytes") if r.jemalloc else None
        wall, cpu = r.judged[THROUGHPUT], r.judged[PER_CPU]
        out.append(
            f"| {m.workload} | {short_case(m)} | {m.params.get('threads')} | "
            f"{'-' if med is None else f'{med:,.0f}'} | {f.name} | "
            f"{'-' if not med or not fast else f'{med / fast:.2f}x'} | {interval(wall)} | "
            f"{verdict(wall)} | {verdict(cpu)} | "
            f"{'-' if r.spread is None else f'{r.spread:.2f}x'} | "
            f"{'-' if not rss or not je_rss else f'{rss / je_rss:.2f}x'} |")
    out += ["", "| workload | params | threads | allocator | ops/s (median) | vs glibc | "
            "vs fastest peer | peak RSS (median) | ok / n |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for c in sorted(cells, key=lambda c: (c.case, c.name != "mallard", c.allocator)):
        fastest = fastest_of.get(c.case)
        fast = fastest.median(THROUGHPUT) if fastest else None
        med = c.median(THROUGHPUT)
        rss = c.median("max_rss_bytes")
        vs_fast = f"{med / fast:.2f}x" if med and fast else "-"
        if fastest is not None and c is fastest:
            vs_fast += " (fastest)"
        out.append(
            f"| {c.workload} | {short_case(c)} | {c.params.get('threads')} | {c.allocator} | "
            f"{'-' if med is None else f'{med:,.0f}'} | "
            f"{'-' if c.ratio is None else f'{c.ratio:.2f}x'} | {vs_fast} | "
            f"{'-' if rss is None else f'{rss / 2**20:.1f} MiB'} | {c.n_ok} / {c.n} |")
    for name, why in missing.items():
        out.append(f"Peer {name} was not measured: {why}.")
    failed = [t for t in results.trials if not t.ok]
    if failed:
        out.append(f"{len(failed)} trials failed (kept in the raw results).")
    return "\n".join(out)


# -- the standard suite (runner/suites/standard.yaml: mimalloc-bench's programs) -------------
STANDARD_ALLOCATORS = ["mallard", "glibc", "jemalloc", "mimalloc", "tcmalloc"]
STANDARD_MARKERS = ("<!-- bench-allocator-standard:begin -->",
                    "<!-- bench-allocator-standard:end -->")
FULL = REPO_ROOT / "docs" / "benchmarks.md"  # the full tables (every allocator of every cell)
FULL_MARKERS = {"mallard": ("<!-- bench-allocator-full:begin -->",
                            "<!-- bench-allocator-full:end -->"),
                "standard": ("<!-- bench-allocator-standard-full:begin -->",
                             "<!-- bench-allocator-standard-full:end -->")}
FULL_HEADER = "| workload | params | threads | allocator |"  # where a table's full part starts
STANDARD_TRIALS = 5  # as the runs: 5 interleaved rounds
QUICK_TRIALS = 3
# a standard program's cost: the first of these its cells have (throughput, the program's
# own operations per CPU-second, else the run's seconds); CPU time is judged beside it
COSTS = (THROUGHPUT, PER_CPU, "run_seconds")
CPU_TIME = "cpu_seconds"
# --quick (and the test): the standard programs at tiny work, a trial well under a second
# where the program allows (rptest sleeps ~16 s, alloc-test and espresso run ~4 s fixed)
QUICK_WORK: dict[str, dict[str, Scalar]] = {
    "cfrac": {"n": "175451865205073170563711388363"},
    "larson": {"seconds": 1, "chunks": 500, "rounds": 10},
    "larson-sized": {"seconds": 1, "chunks": 500, "rounds": 10},
    "mstress": {"load": 5, "iterations": 2},
    "rptest": {"loops": 5, "allocs": 100, "ops": 10},
    "xmalloc-test": {"seconds": 1},
    "cache-scratch": {"iterations": 100, "repetitions": 2000},
    "cache-thrash": {"iterations": 100, "repetitions": 2000},
    "mleak": {"n": 1},
}


def standard_bundle() -> Path:
    """mimalloc-bench's bundle in ../shared/benchmarks/ (from a worktree: one level up)."""
    paths = [root / "shared" / "benchmarks" / "mimalloc-bench.bundle"
             for root in (REPO_ROOT.parent, REPO_ROOT.parent.parent)]
    return next((p for p in paths if p.exists()), paths[0])


def standard_suite(suites_dir: Path, repo: str, trials: int, quick: bool = False) -> Suite:
    """The standard suite with its programs fetched from `repo` (default the bundle), at
    its bench.sh's work or (`quick`) at QUICK_WORK."""
    suite = load_suite("standard", suites_dir)
    workloads = {}
    for name, wl in suite.workloads.items():
        assert wl.program is not None
        tiny = QUICK_WORK.get(name, {}) if quick else {}
        work = {k: tiny.get(k, v) for k, v in wl.program.work.items()}
        params = {k: tiny.get(k, v) for k, v in wl.params.items()}
        program = wl.program.model_copy(update={"repo": repo, "work": work})
        workloads[name] = wl.model_copy(update={"params": params, "program": program})
    return suite.model_copy(update={"trials": trials, "allocators": STANDARD_ALLOCATORS,
                                    "workloads": workloads})


def cost_measure(group: list[CellSummary]) -> str | None:
    return next((m for m in COSTS if any(c.median(m) for c in group)), None)


def standard_rows(cells: list[CellSummary]
                  ) -> tuple[list[Row], dict[str, tuple[str, CellSummary | None]]]:
    """(rows, (cost measure, fastest peer) per case): the fastest peer has the lowest median
    cost (the highest throughput)."""
    by_case: dict[str, list[CellSummary]] = {}
    for s in cells:
        by_case.setdefault(s.case, []).append(s)
    rows: list[Row] = []
    fastest_of: dict[str, tuple[str, CellSummary | None]] = {}
    for case, group in by_case.items():
        measure = cost_measure(group)
        if measure is None:
            continue
        sign = 1.0 if higher_is_better(measure) else -1.0
        peers = [c for c in group if c.name in CATALOGUE_NAMES and c.median(measure)]
        fastest = max(peers, key=lambda c: sign * (c.median(measure) or 0.0), default=None)
        fastest_of[case] = (measure, fastest)
        mallard = next((c for c in group if c.name == "mallard" and not c.variant), None)
        if mallard is None or fastest is None:
            continue
        rows.append(Row(mallard, fastest, next((c for c in group if c.name == "jemalloc"), None),
                        None, measures=(measure, CPU_TIME)))
    return rows, fastest_of


def cost_ratio(cell: CellSummary, fastest: CellSummary, measure: str) -> float | None:
    """cell's cost over the fastest's: seconds over seconds, or the inverse of throughput."""
    a, b = cell.median(measure), fastest.median(measure)
    if not a or not b:
        return None
    return b / a if higher_is_better(measure) else a / b


def cost_interval(s: stats.CellStats, measure: str) -> str:
    """The per-round ratio as a cost (mallard's over the peer's) with its interval."""
    if s.ratio is None or s.ci_low_pct is None or s.ci_high_pct is None:
        return "-"
    lo, hi, r = 1 + s.ci_low_pct / 100, 1 + s.ci_high_pct / 100, s.ratio
    if higher_is_better(measure):
        lo, hi, r = 1 / hi, 1 / lo, 1 / r
    return f"{r:.3f}x ({lo:.3f}-{hi:.3f})"


def standard_summary(rows: list[Row], policy: Policy) -> list[str]:
    ahead = sum(1 for r in rows if (cost_ratio(r.mallard, r.fastest, r.measures[0]) or 9) <= 1)
    slower = sum(1 for r in rows if r.judged[r.measures[0]].verdict == "regressed")
    out = [f"Cells: {len(rows)}; mallard at or ahead of the fastest peer by the medians on "
           f"{ahead}, behind on {len(rows) - ahead}; judged slower on {slower}.", "",
           "| program | params | threads | cost | fastest peer | mallard's cost / fastest's | "
           f"per round ({policy.confidence:.0%} CI) | verdict | CPU time | "
           "RSS mallard / jemalloc |", "|---|---|---:|---|---|---:|---:|---|---|---:|"]
    for r in rows:
        m, f, measure = r.mallard, r.fastest, r.measures[0]
        ratio = cost_ratio(m, f, measure)
        rss = m.median("max_rss_bytes")
        je_rss = r.jemalloc.median("max_rss_bytes") if r.jemalloc else None
        out.append(
            f"| {m.workload} | {short_case(m)} | {m.params.get('threads')} | "
            f"{'1/' if higher_is_better(measure) else ''}{measure} | {f.name} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
            f"{cost_interval(r.judged[measure], measure)} | {verdict(r.judged[measure])} | "
            f"{verdict(r.judged[CPU_TIME])} | "
            f"{'-' if not rss or not je_rss else f'{rss / je_rss:.2f}x'} |")
    return out


def standard_full(cells: list[CellSummary],
                  fastest_of: dict[str, tuple[str, CellSummary | None]]) -> list[str]:
    out = [FULL_HEADER + " cost (median) | vs fastest peer | peak RSS (median) | ok / n |",
           "|---|---|---:|---|---:|---:|---:|---:|"]
    for c in sorted(cells, key=lambda c: (c.case, c.name != "mallard", c.allocator)):
        measure, fastest = fastest_of.get(c.case, (None, None))
        med = c.median(measure) if measure else None
        vs = cost_ratio(c, fastest, measure) if measure and fastest else None
        rss = c.median("max_rss_bytes")
        out.append(
            f"| {c.workload} | {short_case(c)} | {c.params.get('threads')} | {c.allocator} | "
            f"{'-' if med is None else f'{med:,.4g} {measure}'} | "
            f"{'-' if vs is None else f'{vs:.2f}x'}{' (fastest)' if c is fastest else ''} | "
            f"{'-' if rss is None else f'{rss / 2**20:.1f} MiB'} | {c.n_ok} / {c.n} |")
    return out


def standard_table(results: ResultsIn, trials: int, load: tuple[float, float],
                   missing: dict[str, str], policy: Policy = DEFAULT_POLICY) -> str:
    """The standard suite's table: mallard's cost over the fastest peer's per program and
    threads, judged paired by round on the cost and on CPU time; then every cell."""
    cells = summarize(results.trials, baseline="glibc")
    rows, fastest_of = standard_rows(cells)
    judge(rows, policy)
    tb = results.testbed
    out = [f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M UTC} by `make bench-allocator` on "
           f"{platform.machine()}, {cpu_model()}, {os.cpu_count()} cores (pinned to CPU "
           f"{tb.cpus}), kernel {tb.kernel}, {tb.compiler}, {tb.libc}: mimalloc-bench's "
           f"programs at its bench.sh's arguments, the median of {trials} interleaved trials "
           f"after a warm-up. 1-minute load average {load[0]:.1f} before and {load[1]:.1f} "
           f"after{' (CPUs not isolated)' if tb.isolated is False else ''}. `cost`: the "
           f"measure a program is judged on (`1/` a throughput); `verdict` on it and `CPU "
           f"time` on cpu_seconds, by the service's statistics paired by round "
           f"(docs/statistics.md); every cell in docs/benchmarks.md.", "",
           *standard_summary(rows, policy), "", *standard_full(cells, fastest_of)]
    out += [f"Peer {name} was not measured: {why}." for name, why in missing.items()]
    failed = [t for t in results.trials if not t.ok]
    if failed:
        out.append(f"{len(failed)} trials failed (kept in the raw results): " + ", ".join(
            sorted({f"{t.allocator.name} {t.workload.name}" for t in failed}))[:300] + ".")
    return "\n".join(out)


def write_tables(suite: str, block: str) -> None:
    """The summary into allocator/README.md, the full table (from FULL_HEADER) into
    docs/benchmarks.md, each between its suite's markers."""
    summary, sep, full = block.partition("\n" + FULL_HEADER)
    markers = (BEGIN, END) if suite == "mallard" else STANDARD_MARKERS
    export.write_block(README, markers, summary.rstrip(), "Performance")
    if sep:
        export.write_block(FULL, FULL_MARKERS[suite], (sep + full).strip(), "Full tables")
    console.print(f"wrote {README.relative_to(REPO_ROOT)} and {FULL.relative_to(REPO_ROOT)} "
                  f"({suite})")


def runner_cpu(before: resource.struct_rusage, after: resource.struct_rusage,
               wall: float) -> str:
    """The CPU time of this process (not its children) over the run: what we ourselves put
    on the other vCPU while the trials ran."""
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (f"the runner's own process: {cpu:.1f} CPU-s over {wall:.0f} s of trials "
            f"({cpu / wall:.1%} of a CPU)" if wall > 0 else "")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=("both", "mallard", "standard"), default="both",
                   help="which suite: Mallard's own workloads, the standard one "
                        "(mimalloc-bench), or both (default), one table each")
    p.add_argument("--quick", action="store_true",
                   help=f"a quick look: {QUICK_TRIALS} trials, the standard programs at tiny "
                        f"work, Mallard's `quick` suite instead of `full`")
    p.add_argument("--standard-repo", default=None,
                   help="mimalloc-bench's repository (URL or path; default its bundle in "
                        "../shared/benchmarks/)")
    p.add_argument("--cpus", default=None, help="CPUs to pin to (default: the last one)")
    p.add_argument("--trials", type=int, default=None,
                   help=f"trials per cell (default {TRIALS}, the standard suite "
                        f"{STANDARD_TRIALS}; >= 10 lets a tie read `same`)")
    p.add_argument("--workloads", default=None, help="comma list: only these workloads")
    p.add_argument("--threads", default=None, help="comma list: only these thread counts")
    p.add_argument("--allocators", default=None, help="comma list of selectors (default: all)")
    p.add_argument("--commit", default="HEAD", help="mallard commit to build")
    p.add_argument("--json", type=Path, default=None, help="also write the ResultsIn JSON here")
    p.add_argument("--no-write", action="store_true", help="print only; leave README alone")
    p.add_argument("--order", choices=("case", "shuffled"), default="case",
                   help="a round's order: each case's allocators together (default), or all "
                        "cells shuffled (the service's runs)")
    return p


def request(args: argparse.Namespace, settings: RunnerSettings,
            suite_name: str = "mallard") -> RunRequest:
    """The run the arguments ask for, of one suite."""
    if suite_name == "standard":
        trials = args.trials or (QUICK_TRIALS if args.quick else STANDARD_TRIALS)
        suite = standard_suite(settings.suites_dir, args.standard_repo or str(standard_bundle()),
                               trials, quick=args.quick)
    else:
        trials = args.trials or (QUICK_TRIALS if args.quick else TRIALS)
        suite = bench_suite(settings.suites_dir, trials, quick=args.quick)
    cpus = parse_cpus(args.cpus or str(sorted(os.sched_getaffinity(0))[-1]))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    wanted = args.workloads.split(",") if args.workloads else None
    return RunRequest(suite=suite,
                      selectors=parse_selectors(args.allocators or ",".join(suite.allocators)),
                      cpus=cpus, raw_dir=settings.raw() / f"bench-allocator-{suite_name}-{stamp}",
                      source=str(REPO_ROOT), ref=args.commit, trials=trials,
                      workloads=[w for w in wanted if w in suite.workloads] if wanted else None,
                      threads=[int(t) for t in args.threads.split(",")] if args.threads else None,
                      by_case=args.order == "case")


def run_suite(args: argparse.Namespace, settings: RunnerSettings, suite_name: str) -> int:
    """One suite's run and table."""
    req = request(args, settings, suite_name)
    if req.workloads == []:
        return 0  # --workloads named none of this suite's
    load_before = os.getloadavg()[0]
    # redrawn between trials only (no refresh thread): nothing of ours runs on the other
    # vCPU while a trial runs
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, auto_refresh=False) as progress:
        task = progress.add_task(f"{suite_name}: building, finding peers", total=None)

        def tick(t: TrialIn, cell: Cell) -> None:
            progress.update(task, advance=1, description=f"{cell.target.display} {cell.case}",
                            refresh=True)

        try:
            prep = prepare(settings, req, on_trial=tick)
        except BuildError as e:
            progress.stop()
            console.print(f"[red]{suite_name}: a build failed at {args.commit}:[/] {e}")
            return 1
        progress.update(task, total=prep.total, refresh=True)
        started, own = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
        results = execute(prep)
        console.print(runner_cpu(own, resource.getrusage(resource.RUSAGE_SELF),
                                 time.monotonic() - started))
    load = (load_before, os.getloadavg()[0])
    block = (standard_table(results, prep.trials, load, prep.resolved.missing)
             if suite_name == "standard" else
             table(results, prep.trials, req.cpus, load, prep.resolved.missing))
    print(block)
    if args.json:
        export.write_atomic(args.json.with_suffix(f".{suite_name}.json"), export.to_json(results))
    if not args.no_write:
        write_tables(suite_name, block)
    return 0


def main() -> int:
    args = parser().parse_args()
    settings = RunnerSettings()
    names = ["standard", "mallard"] if args.suite == "both" else [args.suite]
    return max(run_suite(args, settings, name) for name in names)


if __name__ == "__main__":
    sys.exit(main())
