"""The benchmark scripts' README writers touch only what is between their markers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from mallard_runner import export
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import expand, load_suite
from mallard_runner.summary import summarize
from mallard_stats import stats
from mallard_stats.paired import compare_paired
from mallard_stats.policy import DEFAULT_POLICY
from mallard_stats.stats import adjust_and_decide
from mallard_wire.results import AllocatorIn, ResultsIn, TrialIn, WorkloadIn
from mallard_wire.results import TestbedIn as Bed


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


allocators = load(REPO_ROOT / "runner" / "bench" / "allocators.py")
transfer = load(REPO_ROOT / "runner" / "bench" / "transfer.py")  # imports allocators
noise = load(REPO_ROOT / "runner" / "bench" / "noise.py")


def test_the_allocator_tables_go_into_the_allocator_readme():
    readme = REPO_ROOT / "allocator" / "README.md"
    assert allocators.README == transfer.README == readme
    text = readme.read_text()
    for begin, end in ((allocators.BEGIN, allocators.END), transfer.SCALING, transfer.GRID):
        assert text.count(begin) == text.count(end) == 1 and text.index(begin) < text.index(end)


def test_transfer_table_replaced_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    begin, end = transfer.GRID
    readme.write_text(f"# A\n\n{begin}\nold\n{end}\n\n## After\n")
    export.write_block(readme, (begin, end), "| grid |", "Performance")
    assert readme.read_text() == f"# A\n\n{begin}\n| grid |\n{end}\n\n## After\n"


def test_allocator_table_goes_at_the_end_of_the_performance_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A\n\nintro\n\n## Performance\n\nwords.\n\n## Design\n\nmore.\n")
    export.write_block(readme, (allocators.BEGIN, allocators.END), "| table 1 |", "Performance")
    text = readme.read_text()
    assert text.startswith("# A\n\nintro\n\n## Performance\n\nwords.\n\n")
    assert text.index(allocators.BEGIN) < text.index("| table 1 |") < text.index(allocators.END) < \
        text.index("## Design\n\nmore.\n")
    export.write_block(readme, (allocators.BEGIN, allocators.END), "| table 2 |",
                       "Performance")  # again: replaced, not appended
    text2 = readme.read_text()
    assert "| table 1 |" not in text2 and text2.count(allocators.BEGIN) == 1
    assert text2.replace("| table 2 |", "| table 1 |") == text


def test_allocator_table_without_a_performance_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A\n\n## Design\n\nx\n")
    export.write_block(readme, (allocators.BEGIN, allocators.END), "| t |", "Performance")
    text = readme.read_text()
    assert text.startswith("# A\n\n## Design\n\nx\n") and "## Performance" in text
    assert text.index("## Performance") < text.index(allocators.BEGIN)


def test_noise_block_replaced_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# R\n\n{noise.BEGIN}\nold\n{noise.END}\n\n## After\n")
    export.write_block(readme, (noise.BEGIN, noise.END), "new figures", "Measurement noise")
    assert readme.read_text() == f"# R\n\n{noise.BEGIN}\nnew figures\n{noise.END}\n\n## After\n"


def test_allocator_bench_covers_full_transfer_and_redis_at_1_and_2_threads():
    suites = RunnerSettings().suites_dir
    suite = allocators.bench_suite(suites, trials=7)
    expected = set(load_suite("full", suites).workloads) | {"transfer", "redis"}
    assert set(suite.workloads) == expected
    for name, wl in suite.workloads.items():
        assert set(wl.threads or []) <= {1, 2}, name
    assert suite.workloads["redis"].threads == [1, 2]
    # a step of redis-benchmark's millisecond clock is at most 0.5% of a test at ~1 M requests/s
    redis = suite.workloads["redis"].params
    assert redis["requests"] == allocators.REDIS_REQUESTS >= 200_000
    assert allocators.REDIS_REQUESTS % int(redis["pipeline"]) == 0   # -n a multiple of -P
    assert suite.trials == 7 and "mallard" in suite.allocators


def test_allocator_bench_runs_no_cachegrind_cells():
    """The full suite's `deterministic` blocks (one cachegrind run per mallard cell at small
    params) measure nothing the table uses: the bench suite has none, so neither the run
    nor the table has those cells."""

    suites = RunnerSettings().suites_dir
    assert any(wl.deterministic for wl in load_suite("full", suites).workloads.values())
    suite = allocators.bench_suite(suites, trials=7)
    assert all(wl.deterministic is None for wl in suite.workloads.values())
    cases = expand(suite)
    assert cases and all(c.deterministic_params is None for c in cases)


# Real shapes: ops/s (millions) of 7 interleaved trials from the quiet full run of
# 2026-11-24 (allocator/README.md), mallard's default beside the peers of one case.
XMALLOC_2T = {"mallard": [33.09, 25.3, 35.32, 32.37, 31.19, 21.39, 36.11],   # 2.21x tcmalloc
              "tcmalloc": [10.95, 15.38, 14.65, 14.7, 14.91, 10.92, 10.58],
              "jemalloc": [9.1, 9.5, 9.3, 9.0, 9.4, 9.2, 9.6]}
SCRATCH_1T = {"mallard": [3.985, 3.991, 3.984, 3.986, 3.983, 3.987, 3.985],  # a tie
              "tcmalloc": [3.990, 3.992, 3.986, 3.991, 3.989, 3.993, 3.988],
              "glibc": [3.95, 3.96, 3.94, 3.95, 3.96, 3.95, 3.94]}
# larson 1T max=256 with the sides swapped: mallard 0.88x the fastest peer, the machine
# slow in rounds 2 and 6 for both (a drift the pairing by round cancels)
LARSON_SLOW = {"mallard": [24.91, 24.68, 16.85, 24.69, 25.2, 25.27, 14.37],
               "jemalloc": [27.73, 28.59, 19.1, 28.12, 28.4, 28.05, 16.3]}
# bimodal: the slow mode (two or three trials of each side) is outside 3.5 MADs
XMALLOC_BIMODAL = {"mallard": [42.55, 42.52, 36.02, 40.47, 24.49, 41.9, 41.69],
                   "tcmalloc": [17.45, 21.15, 16.66, 17.35, 17.87, 12.68, 12.01]}
# rounds that do not agree: ratios from 0.72x to 1.58x, no verdict at 7 rounds
RPC_NOISY = {"mallard": [20.0, 26.0, 22.0, 30.0, 18.0, 25.0, 21.0],
             "jemalloc": [24.0, 21.0, 27.0, 19.0, 25.0, 22.0, 25.5]}


def trials_of(workload: str, threads: int, ops: dict[str, list[float]]) -> list[TrialIn]:
    """Interleaved trials (seq = round) of one case; CPU time a tenth above wall time."""
    out = []
    for seq in range(7):
        for name, values in ops.items():
            v = values[seq] * 1e6
            out.append(TrialIn(
                uid=f"{workload}-{threads}-{name}-{seq}", label="peer" if name != "mallard"
                else "head", allocator=AllocatorIn(name=name, commit="a" * 40 if name ==
                                                   "mallard" else None),
                workload=WorkloadIn(name=workload, params={"threads": threads, "ops": 1000}),
                seq=seq, measures={"ops_per_sec": v, "ops_per_cpu_sec": v * 1.1,
                                   "max_rss_bytes": 2.0e6 if name == "mallard" else 4.0e6}))
    return out


def rows_of(*cases: tuple[str, int, dict[str, list[float]]]) -> list[TrialIn]:
    return [t for c in cases for t in trials_of(*c)]


def test_allocator_verdicts_are_the_services_on_the_fastest_peer():
    cases = [("xmalloc", 2, XMALLOC_2T), ("cache-scratch", 1, SCRATCH_1T),
             ("larson", 1, LARSON_SLOW), ("fastpath", 2, XMALLOC_BIMODAL),
             ("rpc", 2, RPC_NOISY)]
    rows, fastest = allocators.summary_rows(summarize(rows_of(*cases)))
    allocators.judge(rows)
    assert [(r.mallard.workload, r.fastest.name) for r in rows] == [
        ("cache-scratch", "tcmalloc"), ("fastpath", "tcmalloc"), ("larson", "jemalloc"),
        ("rpc", "jemalloc"), ("xmalloc", "tcmalloc")]
    got = {r.mallard.workload: allocators.verdict(r.judged["ops_per_sec"]) for r in rows}
    assert got["xmalloc"].startswith("faster (p=") and got["fastpath"].startswith("faster (p=")
    assert got["cache-scratch"] == "same"
    assert got["larson"].startswith("slower (p=")
    assert got["rpc"].startswith("unknown (mde ")
    # the same numbers the API's comparison gets: base the fastest peer, head mallard,
    # every judged measure of every row adjusted together
    trials = rows_of(*cases)

    def side(wl: str, name: str, m: str) -> list[float]:
        return [t.measures[m] for t in trials
                if t.workload.name == wl and t.allocator.name == name]

    peer = {"xmalloc": "tcmalloc", "cache-scratch": "tcmalloc", "larson": "jemalloc",
            "fastpath": "tcmalloc", "rpc": "jemalloc"}
    direct = stats.adjust_and_decide([
        compare_paired(side(wl, peer[wl], m), side(wl, "mallard", m))
        for wl in sorted(peer) for m in allocators.JUDGED])
    mine = [r.judged[m] for r in rows for m in allocators.JUDGED]
    assert [(s.verdict, s.ci_low_pct, s.ci_high_pct, s.p_adjusted) for s in mine] == \
        [(s.verdict, s.ci_low_pct, s.ci_high_pct, s.p_adjusted) for s in direct]
    xm = rows[4].judged["ops_per_sec"]
    assert allocators.interval(xm) == (f"{xm.ratio:.3f}x ({1 + xm.ci_low_pct / 100:.3f}-"
                                       f"{1 + xm.ci_high_pct / 100:.3f})")
    assert xm.ci_low_pct is not None and xm.ci_low_pct > 50  # mallard more than 1.5x
    # larson: the drift of rounds 2 and 6 cancels, every round reads ~0.88x
    la = rows[2].judged["ops_per_sec"]
    assert la.robust_base == 7 and 0.86 < la.ratio < 0.90 and la.ci_high_pct < 0


def test_allocator_verdicts_pair_by_round_and_drop_a_round_a_side_lacks():
    trials = [t for t in rows_of(("larson", 1, LARSON_SLOW))
              if not (t.allocator.name == "jemalloc" and t.seq == 3)]
    failed = next(t for t in rows_of(("larson", 1, LARSON_SLOW))
                  if t.allocator.name == "jemalloc" and t.seq == 3)
    trials.append(failed.model_copy(update={"ok": False, "exit_code": 1, "measures": {}}))
    rows, _ = allocators.summary_rows(summarize(trials))
    base, head = allocators.by_round(rows[0].fastest, rows[0].mallard, "ops_per_sec")
    assert len(base) == len(head) == 7 and base[3] is None and head[3] is not None
    cell = allocators.judge(rows)[0].judged["ops_per_sec"]
    assert (cell.n_base, cell.n_head) == (6, 6)
    # pairing matters: the same values in another order are no longer a clean 0.88x
    shuffled = {"mallard": LARSON_SLOW["mallard"],
                "jemalloc": LARSON_SLOW["jemalloc"][3:] + LARSON_SLOW["jemalloc"][:3]}
    rows2, _ = allocators.summary_rows(summarize(rows_of(("larson", 1, shuffled))))
    assert allocators.judge(rows2)[0].judged["ops_per_sec"].verdict != "regressed"


def test_allocator_summary_counts_the_cells_and_names_the_columns():
    trials = rows_of(("xmalloc", 2, XMALLOC_2T), ("cache-scratch", 1, SCRATCH_1T),
                     ("larson", 1, LARSON_SLOW), ("fastpath", 2, XMALLOC_BIMODAL),
                     ("rpc", 2, RPC_NOISY))
    res = ResultsIn(testbed=Bed(arch="x86_64", cpus="0,1", isolated=False), trials=trials)
    text = allocators.table(res, 7, [0, 1], (0.1, 1.9), {})
    assert ("Cells: 5; mallard's default against the fastest peer (ops_per_sec): 2 faster, "
            "1 same (a tie within the interval), 1 slower, 1 unknown (an interval too wide to "
            "tell); by the medians alone 2 at or above, 3 below.") in text
    for column in ("`mallard / fastest`", "`per round (95% CI)`", "`verdict`", "`per CPU-second`",
                   "`spread`", "`RSS mallard / jemalloc`"):
        assert column in text.split("| workload |")[0], column
    assert "were not isolated" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| larson | ops=1000 | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[4:6] == ["jemalloc", "0.88x"] and cells[9:] == ["-", "0.50x"]
    assert cells[7].startswith("slower (p=") and cells[8] == cells[7]
    ratio, lo, hi = (float(x) for x in cells[6].replace("x (", " ").replace("-", " ")
                     .rstrip(")").split())
    assert lo <= ratio <= hi < 1.0 and 0.86 < ratio < 0.90  # the interval excludes 1
    isolated = ResultsIn(testbed=Bed(arch="x86_64", cpus="0,1", isolated=True),
                         trials=trials)
    assert "were not isolated" not in allocators.table(isolated, 7, [0, 1], (0.1, 1.9), {})


def test_allocator_table_says_how_a_round_was_ordered():
    """A run whose rounds kept each case's trials together (artifacts `order_by_case`) says
    so in the header and the legend; the verdicts and the count line are the same rule."""

    trials = rows_of(("larson", 1, LARSON_SLOW), ("xmalloc", 2, XMALLOC_2T))
    bed = Bed(arch="x86_64", cpus="0,1", isolated=False)
    shuffled = allocators.table(ResultsIn(testbed=bed, trials=trials), 7, [0, 1], (0.1, 1.9), {})
    grouped = allocators.table(ResultsIn(testbed=bed, trials=trials,
                                         artifacts={"order_by_case": True}), 7, [0, 1],
                               (0.1, 1.9), {})
    assert "one after another within a round" in grouped
    assert "one after another within a round" not in shuffled
    assert "moves both trials of a pair alike" in grouped
    assert "moves both trials of a round alike" in shuffled
    count = [ln for ln in grouped.splitlines() if ln.startswith("Cells: ")]
    assert count == [ln for ln in shuffled.splitlines() if ln.startswith("Cells: ")]
    assert count[0].startswith("Cells: 2; mallard's default against the fastest peer "
                               "(ops_per_sec): 1 faster, 0 same (a tie within the interval), "
                               "1 slower, 0 unknown (an interval too wide to tell); by the "
                               "medians alone 1 at or above, 1 below.")
    # the settle rule's numbers are the policy's
    assert (f"from {DEFAULT_POLICY.settle_trials} rounds, an interval around 1 at most "
            f"±{DEFAULT_POLICY.settle_max_half_width_pct:g}% wide") in grouped


def test_allocator_bench_runs_enough_rounds_for_a_tie_to_read_same():
    """At 7 rounds a tie is `same` only inside ±1%; from settle_trials rounds also with a
    narrow interval around 1 and an MDE of at most 2%. The default keeps that many after the
    outlier rule drops two."""

    assert allocators.TRIALS >= DEFAULT_POLICY.settle_trials + 2
    # a real tie with ±1.5% per-round scatter: unknown at 7 rounds, same at 12 (at ±2% the
    # MDE of 12 rounds is 2.1%, and rule 4 asks for 2%)
    mallard = [100.0, 101.5, 98.875, 100.75, 99.25, 100.375, 98.5, 101.125, 99.625, 100.0,
               101.5, 98.875]
    peer = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    at = {n: adjust_and_decide([compare_paired(peer[:n], mallard[:n])])[0].verdict
          for n in (7, allocators.TRIALS)}
    assert at == {7: "unknown", allocators.TRIALS: "same"}


def test_allocator_bench_defaults_run_by_case_12_rounds_no_cachegrind():
    """`make bench-allocator` without ARGS: 12 trials, each round by case, every allocator;
    `--order shuffled` is the service's order."""

    settings = RunnerSettings()
    req = allocators.request(allocators.parser().parse_args(["--cpus", "0"]), settings)
    assert req.trials == allocators.TRIALS == req.suite.trials == 12 and req.by_case is True
    assert [(s.name, s.variant) for s in req.selectors] == [
        ("mallard", None), ("mallard", "transfer=ring"), ("mallard", "transfer=naive"),
        ("glibc", None), ("jemalloc", None), ("mimalloc", None), ("tcmalloc", None)]
    assert req.cpus == [0] and req.workloads is None and req.threads is None
    assert all(wl.deterministic is None for wl in req.suite.workloads.values())
    shuffled = allocators.request(allocators.parser().parse_args(
        ["--cpus", "0", "--order", "shuffled", "--trials", "7", "--workloads", "larson"]),
        settings)
    assert shuffled.by_case is False and shuffled.trials == 7
    assert shuffled.workloads == ["larson"]

