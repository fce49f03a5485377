"""Comparisons: the report format (pure) and the API end to end (real PostgreSQL)."""

import numpy as np
import pytest
from mallard_api.report import (
    Hypothesis,
    ReportCell,
    ReportHeader,
    format_line,
    format_report,
    hypothesis_outcome,
    params_key,
    parse_hypothesis,
)
from mallard_api.stats import CellStats, Policy, adjust_and_decide, compare_samples

P = Policy(n_resamples=2000)


def cell(diff, lo, hi, p, n=8, robust=7, verdict="regressed", hib=True, bm=1e6) -> CellStats:
    return CellStats(
        n_base=n, n_head=n, robust_base=n, robust_head=robust, base_median=bm,
        head_median=bm * (1 + diff / 100), ratio=1 + diff / 100, diff_pct=diff,
        ci_low_pct=lo, ci_high_pct=hi, p_value=p, p_adjusted=p, verdict=verdict,
        higher_is_better=hib,
    )


def test_line_format_exact():
    s = cell(-17.3, -18.6, -16.0, 0.0001)
    assert format_line("larson", "threads=2", "ops_per_sec", s) == (
        "larson threads=2 ops_per_sec: -17.3% ±1.3% (p=0.000, 8 trials, 7 robust) REGRESSED"
    )
    s2 = cell(2.04, 1.5, 2.6, 0.0123, n=12, robust=12, verdict="improved")
    assert format_line("rpc", "threads=1", "ops_per_sec", s2) == (
        "rpc threads=1 ops_per_sec: +2.0% ±0.6% (p=0.012, 12 trials, 12 robust) IMPROVED"
    )


def test_line_without_data():
    s = CellStats(3, 2, 3, 2, None, None, None, None, None, None, None)
    assert format_line("larson", "threads=1", "wall_seconds", s) == (
        "larson threads=1 wall_seconds: n/a (p=n/a, 2 trials, 2 robust) UNKNOWN"
    )


def test_line_from_real_stats():
    rng = np.random.default_rng(1)
    base = list(1e6 * (1 + 0.01 * rng.standard_normal(8)))
    head = list(0.83e6 * (1 + 0.01 * rng.standard_normal(8)))
    head[3] = 0.5e6
    c = adjust_and_decide([compare_samples(base, head, policy=P)], P)[0]
    line = format_line("larson", "threads=2", "ops_per_sec", c)
    assert line.startswith("larson threads=2 ops_per_sec: -17.")
    assert line.endswith("(p=0.001, 8 trials, 7 robust) REGRESSED")


@pytest.mark.parametrize("text,expected", [
    ("+15%", (15, 15, "ops_per_sec")),
    ("expected +15%", (15, 15, "ops_per_sec")),
    ("Expected: +15-25%", (15, 25, "ops_per_sec")),
    ("-3..-5% wall_seconds", (-5, -3, "wall_seconds")),
    ("-3-5%", (-5, -3, "ops_per_sec")),
    ("10%", (10, 10, "ops_per_sec")),
])
def test_parse_hypothesis(text, expected):
    h = parse_hypothesis(text)
    assert h is not None and (h.low_pct, h.high_pct, h.measure) == expected


@pytest.mark.parametrize("bad", ["fast", "+15", "15 percent", "expected ++15%", "+1%%"])
def test_parse_hypothesis_rejects(bad):
    with pytest.raises(ValueError):
        parse_hypothesis(bad)


def test_hypothesis_outcomes():
    h = Hypothesis(15, 25)
    assert hypothesis_outcome(h, cell(-3.0, -3.5, -2.5, 0.001)) == "not held (wrong direction)"
    assert hypothesis_outcome(h, cell(17.0, 14.0, 20.0, 0.001, verdict="improved")) == "held"
    assert hypothesis_outcome(h, cell(5.0, 4.0, 6.0, 0.001, verdict="improved")) == (
        "not held (smaller than expected)"
    )
    same = cell(0.1, -0.4, 0.5, 0.9, verdict="same")
    assert hypothesis_outcome(h, same) == "not held (no change)"
    assert hypothesis_outcome(h, cell(3.0, -4.0, 10.0, 0.4, verdict="unknown")) == "undecided"


def test_whole_report():
    thr = cell(-17.3, -18.6, -16.0, 0.0001)
    ratio = cell(-31.9, -32.0, -31.8, 0.0001, bm=0.91)
    rss = cell(0.2, -0.3, 0.6, 0.8, verdict="same", hib=False)
    other = cell(4.0, 3.0, 5.0, 0.001, verdict="improved")
    cells = [
        ReportCell("larson", {"threads": 2}, "max_rss_bytes", rss),
        ReportCell("larson", {"threads": 2}, "ops_per_sec", thr),
        ReportCell("larson", {"threads": 2}, "transfer_insert_hit_ratio", ratio),
        ReportCell("rpc", {"threads": 1}, "ops_per_sec", other),
    ]
    header = ReportHeader(
        3, "mallard", "x86_64", "mallard@abc1234 transfer=mutex", "mallard@abc1234 transfer=ring",
        "done", testbed="Xeon, cpus 1", follow_ups=1, hypothesis=parse_hypothesis("expected +15%"),
    )
    peers = {("larson", params_key({"threads": 2})): {"glibc": 8e5, "jemalloc": 1.056e6}}
    text = format_report(header, cells, peers)
    lines = text.splitlines()
    assert lines[0] == (
        "Comparison #3 (mallard, x86_64): base mallard@abc1234 transfer=mutex "
        "vs head mallard@abc1234 transfer=ring"
    )
    assert "state: done; 4 cells: 1 improved, 2 regressed, 1 same, 0 unknown; follow-ups: 1" in (
        lines
    )
    i = lines.index("larson")
    assert lines[i + 1] == (
        "  larson threads=2 ops_per_sec: -17.3% ±1.3% (p=0.000, 8 trials, 7 robust) REGRESSED"
    )
    assert lines[i + 2] == "    counters: transfer_insert_hit_ratio 0.910 -> 0.620 (-31.9%)"
    assert lines[i + 3].endswith("actual -17.3% [-18.6%, -16.0%]: NOT HELD (WRONG DIRECTION)")
    assert lines[i + 4].startswith("  larson threads=2 max_rss_bytes: +0.2%")
    assert "      jemalloc: 1.32x glibc" in lines
    assert "      base: 1.25x glibc" in lines
    assert lines.index("rpc") > i
    assert lines[-1] == "hypothesis (expected +15% ops_per_sec): held in 0 of 2 cells"
