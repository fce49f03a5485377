"""The report format (pure): the line of a cell with its MDE, diagnostics without a verdict,
the summary that counts primary cells, a hypothesis's line."""

import numpy as np
from mallard_api.analysis.report import (
    ReportCell,
    ReportHeader,
    format_line,
    format_report,
    interval_text,
)
from mallard_api.params import params_key
from mallard_stats.hypothesis import parse_hypothesis
from mallard_stats.policy import Policy
from mallard_stats.stats import DIAGNOSTIC, CellStats, adjust_and_decide, compare_samples

P = Policy(n_resamples=2000)


def cell(diff, lo, hi, p, n=8, robust=7, verdict="regressed", hib=True, bm=1e6, mde=2.1,
         primary=True) -> CellStats:
    return CellStats(
        n_base=n, n_head=n, robust_base=n, robust_head=robust, base_median=bm,
        head_median=bm * (1 + diff / 100), ratio=1 + diff / 100, diff_pct=diff,
        ci_low_pct=lo, ci_high_pct=hi, p_value=p, p_adjusted=p if primary else None,
        verdict=verdict if primary else DIAGNOSTIC, higher_is_better=hib, mde_pct=mde,
        primary=primary,
    )


def test_line_format_exact():
    s = cell(-17.3, -18.6, -16.0, 0.0001)
    assert format_line("larson", "threads=2", "ops_per_sec", s) == (
        "larson threads=2 ops_per_sec: -17.3% ±1.3% (p=0.000, 8 trials, 7 robust, mde 2.1%) "
        "REGRESSED"
    )
    s2 = cell(-0.4, -2.5, 1.7, 0.61, n=20, robust=19, verdict="same", mde=2.8)
    assert format_line("larson", "threads=2", "ops_per_sec", s2) == (
        "larson threads=2 ops_per_sec: -0.4% ±2.1% (p=0.610, 20 trials, 19 robust, mde 2.8%) "
        "SAME"
    )


def test_a_decided_line_never_shows_an_interval_across_zero():
    """A lopsided interval wholly below zero reads as change ± half-width across zero
    (`-5.9% ±8.4%`): the line shows its bounds instead; the page's interval column too."""
    s = cell(-5.9, -17.0, -0.2, 0.0001, n=39, robust=31, mde=5.6)
    line = format_line("xmalloc", "threads=2", "ops_per_cpu_sec", s)
    assert line == ("xmalloc threads=2 ops_per_cpu_sec: -5.9% [-17.0%, -0.2%] (p=0.000, "
                    "39 trials, 31 robust, mde 5.6%) REGRESSED")
    assert interval_text(-5.9, -17.0, -0.2) == "[-17.0%, -0.2%]"
    # the other way round: an interval across zero that change ± half-width would not cross
    assert interval_text(4.0, -0.5, 5.0) == "[-0.5%, +5.0%]"
    assert interval_text(-17.3, -18.6, -16.0) == "±1.3%" and interval_text(1.0, None, 2.0) == ""
    # and where change ± half-width would lie inside the SAME band but the interval does not
    assert interval_text(-0.6, -1.24, -0.46, 1.2) == "[-1.2%, -0.5%]"
    assert interval_text(-0.6, -1.24, -0.46) == "±0.4%"  # no band: the side of zero only
    assert interval_text(-0.6, -0.9, -0.3, 1.2) == "±0.3%"


def test_a_paired_cell_counts_pairs():
    s = cell(-3.1, -3.6, -2.6, 0.0001, n=40, robust=38, mde=1.2)
    s.paired = True
    assert format_line("larson", "threads=1", "ops_per_sec", s) == (
        "larson threads=1 ops_per_sec: -3.1% ±0.5% (p=0.000, paired, 40 pairs, 38 robust, "
        "mde 1.2%) REGRESSED")


def test_unknown_shows_the_mde_it_reached_and_deterministic_mde():
    s = cell(1.9, -2.0, 5.8, 0.3, n=10, robust=10, verdict="unknown", mde=4.37)
    assert format_line("rpc", "threads=1", "ops_per_sec", s).endswith(
        "(p=0.300, 10 trials, 10 robust, mde 4.4%) UNKNOWN")
    few = cell(1.9, -2.0, 5.8, 0.3, n=3, robust=3, verdict="unknown", mde=None)
    assert format_line("rpc", "threads=1", "ops_per_sec", few).endswith(
        "(p=0.300, 3 trials, 3 robust, mde n/a) UNKNOWN")
    det = adjust_and_decide([compare_samples([1e6] * 2, [1.005e6] * 2, higher_is_better=False,
                                             deterministic=True, policy=P)], P)[0]
    assert format_line("fastpath", "threads=1 ops=20000", "instructions", det) == (
        "fastpath threads=1 ops=20000 instructions: +0.5% ±0.0% (p=n/a, 2 trials, 2 robust, "
        "mde 0.25%, band ±0.25%) REGRESSED"
    )


def test_line_shows_the_same_band_the_verdict_used():
    s2 = cell(-0.4, -2.5, 1.7, 0.61, n=20, robust=19, verdict="same", mde=2.8)
    s2.band_pct = 3.0
    assert format_line("larson", "threads=2", "ops_per_sec", s2) == (
        "larson threads=2 ops_per_sec: -0.4% ±2.1% (p=0.610, 20 trials, 19 robust, mde 2.8%, "
        "band ±3.0%) SAME"
    )
    rng = np.random.default_rng(3)
    base = list(1e6 * (1 + 0.01 * rng.standard_normal(20)))
    head = list(1e6 * (1 + 0.01 * rng.standard_normal(20)))
    calibrated, plain = adjust_and_decide([compare_samples(base, head, policy=P)] * 2, P,
                                          [3.0, None])
    assert calibrated.band_pct == 3.0 and plain.band_pct == P.min_effect_pct
    assert format_line("rpc", "threads=1", "ops_per_cpu_sec", calibrated).endswith(
        f"mde {calibrated.mde_pct:.1f}%, band ±3.0%) SAME")
    # rule 3 counts only a change beyond the band, so the band sets the smallest detectable
    assert calibrated.mde_pct is not None and plain.mde_pct is not None
    assert calibrated.mde_pct > 3.0 > plain.mde_pct


def test_line_without_data():
    s = CellStats(3, 2, 3, 2, None, None, None, None, None, None, None)
    assert format_line("larson", "threads=1", "ops_per_sec", s) == (
        "larson threads=1 ops_per_sec: n/a (p=n/a, 2 trials, 2 robust, mde n/a) UNKNOWN"
    )


def test_diagnostic_line_has_no_verdict():
    s = cell(98.5, -20.0, 220.0, 0.01, primary=False)
    assert format_line("rpc", "threads=1", "sys_seconds", s) == (
        "rpc threads=1 sys_seconds: +98.5% ±120.0% (8 trials, 7 robust) diagnostic"
    )


def test_line_from_real_stats():
    rng = np.random.default_rng(1)
    base = list(1e6 * (1 + 0.01 * rng.standard_normal(8)))
    head = list(0.83e6 * (1 + 0.01 * rng.standard_normal(8)))
    head[3] = 0.5e6
    c = adjust_and_decide([compare_samples(base, head, policy=P)], P)[0]
    line = format_line("larson", "threads=2", "ops_per_sec", c)
    assert line.startswith("larson threads=2 ops_per_sec: -17.")
    assert line.endswith(f"(p=0.001, 8 trials, 7 robust, mde {c.mde_pct:.1f}%, band ±1.0%) "
                         "REGRESSED")
    assert c.mde_pct is not None and 1.0 < c.mde_pct < 5.0


def test_whole_report():
    thr = cell(-17.3, -18.6, -16.0, 0.0001)
    ratio = cell(-31.9, -32.0, -31.8, 0.0001, bm=0.91, primary=False)
    rss = cell(0.2, -0.3, 0.6, 0.8, verdict="same", hib=False)
    wall = cell(20.9, 19.0, 22.8, 0.0001, hib=False, primary=False)
    other = cell(4.0, 3.0, 5.0, 0.001, verdict="improved")
    cells = [
        ReportCell("larson", {"threads": 2}, "max_rss_bytes", rss),
        ReportCell("larson", {"threads": 2}, "wall_seconds", wall),
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
    # the summary counts primary cells only (the ratio and wall_seconds are diagnostics)
    assert ("state: done; 3 primary cells: 1 improved, 1 regressed, 1 same, 0 unknown; "
            "follow-ups: 1") in lines
    i = lines.index("larson threads=2 ops_per_sec: -17.3% ±1.3% (p=0.000, 8 trials, 7 robust, "
                    "mde 2.1%) REGRESSED")
    assert lines[i - 1] == ""
    assert lines[i + 1] == "  counters: transfer_insert_hit_ratio 0.910 -> 0.620 (-31.9%)"
    assert lines[i + 2].endswith("actual -17.3% [-18.6%, -16.0%]: NOT HELD (WRONG DIRECTION)")
    assert lines[i + 3].startswith("larson threads=2 max_rss_bytes: +0.2%")
    # diagnostics under their cell, indented, without a verdict
    assert lines[i + 4] == (
        "  larson threads=2 wall_seconds: +20.9% ±1.9% (8 trials, 7 robust) diagnostic")
    assert lines[i + 5] == "  reference (ops_per_sec medians):"
    assert "    jemalloc: 1.32x glibc" in lines
    assert "    base: 1.25x glibc" in lines
    j = next(n for n, ln in enumerate(lines) if ln.startswith("rpc threads=1 ops_per_sec: "))
    assert j > i and lines[j - 1] == ""
    assert lines[-1] == "hypothesis (expected +15% ops_per_sec): held in 0 of 2 cells"


def test_summary_line_counts_primary_cells():
    verdicts = ["regressed"] + ["same"] * 21 + ["unknown"] * 2
    cells = [ReportCell("w", {"threads": 1, "n": i}, "ops_per_sec", cell(0, -1, 1, 0.5, verdict=v))
             for i, v in enumerate(verdicts)]
    cells += [ReportCell("w", {"threads": 1, "n": i}, "wall_seconds",
                         cell(0, -1, 1, 0.5, primary=False)) for i in range(24)]
    header = ReportHeader(None, "mallard", None, "a", "b", "done", follow_ups=1)
    assert format_report(header, cells).splitlines()[1] == (
        "state: done; 24 primary cells: 0 improved, 1 regressed, 21 same, 2 unknown; "
        "follow-ups: 1")


def test_a_hypothesis_on_a_diagnostic_measure_makes_it_primary():
    hyp = parse_hypothesis("expected -2..-4% wall_seconds")
    assert hyp is not None
    c = adjust_and_decide([compare_samples([1.0] * 6, [0.97] * 6, higher_is_better=False,
                                           primary=True, policy=P)], P)[0]
    lines = format_report(ReportHeader(1, "m", None, "a", "b", "done", hypothesis=hyp),
                          [ReportCell("rpc", {"threads": 1}, "wall_seconds", c)]).splitlines()
    assert any(ln.startswith("rpc threads=1 wall_seconds: -3.0%") and ln.endswith("IMPROVED")
               for ln in lines)
    assert lines[-1] == "hypothesis (expected -4..-2% wall_seconds): held in 1 of 1 cells"


def test_diagnostics_without_a_primary_line():
    cells = [
        ReportCell("fragmentation", {"threads": 1}, "final_rss_bytes",
                   cell(-2.0, -2.5, -1.5, 0.001, hib=False, primary=False)),
        ReportCell("fragmentation", {"threads": 1}, "transfer_remove_hit_ratio",
                   cell(5.0, 4.0, 6.0, 0.001, bm=0.5, primary=False)),
        ReportCell("fastpath", {"threads": 1}, "transfer_remove_hit_ratio",
                   cell(0.0, 0.0, 0.0, 1.0, bm=0.5, primary=False)),
    ]
    header = ReportHeader(1, "mallard", None, "a", "b", "done")
    lines = format_report(header, cells).splitlines()
    assert lines[0] == "Comparison #1 (mallard): base a vs head b"
    assert lines[1] == ("state: done; 0 primary cells: 0 improved, 0 regressed, 0 same, "
                        "0 unknown; follow-ups: 0")
    i = lines.index("fragmentation threads=1 final_rss_bytes: -2.0% ±0.5% (8 trials, 7 robust) "
                    "diagnostic")
    assert lines[i + 1] == (
        "fragmentation threads=1 counters: transfer_remove_hit_ratio 0.500 -> 0.525 (+5.0%)")
    assert "fastpath threads=1 counters: transfer_remove_hit_ratio 0.500 -> 0.500 (+0.0%)" in lines
