"""`make demo SCENARIO=transfer-cache`: its closing line is made from the measured cells
(synthetic comparison answers here; the demo itself runs the real stack); the demo keeps
the API off the runner's CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mallard_runner.settings import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import demo_transfer_cache as scenario  # noqa: E402


def cell(workload, threads, measure, base, head, verdict):
    diff = None if not base or head is None else (head / base - 1) * 100
    return {"workload": workload, "threads": threads, "measure": measure,
            "base_median": base, "head_median": head, "diff_pct": diff, "verdict": verdict}


def detail(*cells):
    return {"cells": list(cells), "curves": [], "joint": []}


def test_summary_line_names_the_best_micro_ratio_and_the_worst_regressed_macro_cell():
    d = detail(
        cell("transfer", 1, "ops_per_sec", 30e6, 27e6, "regressed"),
        cell("transfer", 16, "ops_per_sec", 10e6, 10.5e6, "same"),
        cell("transfer", 32, "ops_per_sec", 10e6, 4e6, "regressed"),
        cell("transfer", 32, "transfer_remove_hit_ratio", 0.85, 0.74, "diagnostic"),
        cell("redis", 1, "ops_per_sec", 100e3, 95e3, "same"),
        cell("python", 2, "ops_per_sec", 1000.0, 960.0, "regressed"),
        cell("python", 2, "transfer_remove_hit_ratio", 0.841, 0.647, "diagnostic"),
    )
    assert scenario.summary_line(d) == (
        "transfer-cache: naive vs mutex: micro 1.05x at 16 threads; python ops_per_sec -4.0% "
        "REGRESSED; remove hit ratio 0.841 -> 0.647")


def test_without_a_regression_the_largest_loss_and_missing_counters_say_na():
    d = detail(cell("transfer", 2, "ops_per_sec", 10.0, 9.0, "regressed"),
               cell("redis", 1, "ops_per_sec", 100.0, 101.0, "same"),
               cell("python", 2, "ops_per_sec", 100.0, 99.0, "same"))
    assert scenario.summary_line(d) == (
        "transfer-cache: naive vs mutex: micro 0.90x at 2 threads; python ops_per_sec -1.0% "
        "SAME; remove hit ratio n/a -> n/a")
    lines = scenario.macro_lines("transfer=naive", d)
    assert lines[0] == ("naive vs mutex: python threads=2 ops_per_sec -1.0% SAME; remove hit "
                        "ratio n/a -> n/a, insert hit ratio n/a -> n/a")


def test_micro_lines_put_both_heads_side_by_side_with_the_hit_ratios():
    ring = detail(cell("transfer", 32, "ops_per_sec", 10.0, 4.0, "regressed"),
                  cell("transfer", 32, "transfer_remove_hit_ratio", 0.81, 0.805, "diagnostic"))
    naive = detail(cell("transfer", 32, "ops_per_sec", 10.0, 8.0, "unknown"),
                   cell("transfer", 32, "transfer_remove_hit_ratio", 0.81, 0.783, "diagnostic"))
    lines = scenario.micro_lines({"transfer=ring": ring, "transfer=naive": naive})
    assert lines[0] == ("micro tier: transfer ops/s vs mutex, and remove hit ratio "
                        "(mutex / ring / naive)")
    assert lines[2].split() == ["32", "0.40x", "REGRESSED", "0.80x", "UNKNOWN",
                                "0.810", "/", "0.805", "/", "0.783"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_api_is_started_off_the_runners_cpu():
    """What starts inside keep_off (the API, its PostgreSQL) never runs on the runner's
    CPU, for its whole life; what starts after (the runner agent) may."""
    from demo import keep_off, pinned_cpu

    before = os.sched_getaffinity(0)
    cpu = pinned_cpu()
    with keep_off(cpu):
        child = subprocess.Popen(["sleep", "5"])
    try:
        allowed = os.sched_getaffinity(child.pid)
        assert int(cpu) not in allowed and allowed == before - {int(cpu)}
        assert os.sched_getaffinity(0) == before  # restored for the runner agent
    finally:
        child.kill()
        child.wait()
