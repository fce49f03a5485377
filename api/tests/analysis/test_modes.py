"""A cell of two-mode trials in the service: judged within its modes when both sides share
them, UNKNOWN with `modes moved` when they do not (analysis/modes.py)."""

from __future__ import annotations

import numpy as np
from mallard_api.analysis import modes
from mallard_stats import stats
from mallard_stats.policy import DEFAULT_POLICY


def mixture(rng: np.random.Generator, n: int, share_fast: float,
            scale: float = 1.0) -> list[float]:
    k = round(n * share_fast)
    v = np.r_[28.1e6 * np.exp(rng.normal(0, 0.01, k)), 21.4e6 * np.exp(rng.normal(0, 0.01, n - k))]
    rng.shuffle(v)
    return list(v * scale)


def judged(base: list[float], head: list[float]) -> tuple[modes.Judged, stats.CellStats]:
    cell = stats.compare_samples(base, head, policy=DEFAULT_POLICY)
    j = modes.within_modes(cell, base, head, (base, head), DEFAULT_POLICY,
                        measure="ops_per_cpu_sec")
    return j, stats.adjust_and_decide([j.cell], DEFAULT_POLICY)[0]


def test_shared_modes_are_judged_on_the_pairs_within_them():
    rng = np.random.default_rng(2)
    base = mixture(rng, 40, 0.6)
    head = [b * 0.97 * float(np.exp(rng.normal(0, 0.003))) for b in base]  # both modes -3%
    j, decided = judged(base, head)
    assert j.modes is not None and not j.modes.moved
    assert decided.verdict == "regressed" and decided.ci_high_pct is not None
    assert -3.5 < decided.diff_pct < -2.5 and decided.ci_high_pct < 0  # type: ignore[operator]
    line = modes.line("larson threads=1", "ops_per_cpu_sec", j.modes)
    assert line.startswith("larson threads=1 ops_per_cpu_sec modes: base 60% at 28.")
    assert "M, 40% at 21." in line and "; head 60% at 27." in line


def test_modes_that_moved_leave_the_cell_unknown_and_say_so():
    rng = np.random.default_rng(4)
    base, head = mixture(rng, 40, 0.7), mixture(rng, 40, 0.2)
    plain = stats.adjust_and_decide([stats.compare_samples(base, head)], DEFAULT_POLICY)[0]
    assert plain.verdict == "regressed"  # the draw of modes, taken for a change
    j, decided = judged(base, head)
    assert j.modes is not None and j.modes.moved and decided.verdict == "unknown"
    assert modes.line("larson threads=1", "ops_per_cpu_sec", j.modes).startswith(
        "larson threads=1 ops_per_cpu_sec modes moved (upper-mode share 70% -> 20%")


def test_one_mode_cells_are_left_as_they_were():
    rng = np.random.default_rng(6)
    base = list(25e6 * np.exp(rng.normal(0, 0.02, 40)))
    head = list(25e6 * np.exp(rng.normal(0, 0.02, 40)))
    cell = stats.compare_samples(base, head)
    j = modes.within_modes(cell, base, head, (base, head), DEFAULT_POLICY,
                        measure="ops_per_cpu_sec")
    assert j.modes is None and j.cell is cell
    assert modes.si(28.14e6) == "28.1M" and modes.si(3740.0) == "3.74k" and modes.si(0.5) == "0.5"


def test_a_byte_measure_is_never_judged_in_modes():
    """Peak RSS of a demo's larson at 2 threads: 4.90M or 5.03M (a few page counts), in
    shares 18% and 58%: a mixture fit calls them modes that moved, and the cell would be
    UNKNOWN though it moved 0.2%; modes are for timings only."""
    rng = np.random.default_rng(8)
    base = [5.03e6 if rng.random() < 0.18 else 4.90e6 for _ in range(60)]
    head = [5.03e6 if rng.random() < 0.58 else 4.90e6 for _ in range(60)]
    base, head = [v + rng.normal(0, 2e3) for v in base], [v + rng.normal(0, 2e3) for v in head]
    cell = stats.compare_samples(base, head, higher_is_better=False)
    timed = modes.within_modes(cell, base, head, (base, head), DEFAULT_POLICY,
                               measure="ops_per_cpu_sec")
    assert timed.modes is not None and timed.modes.moved  # what a fit of them says
    j = modes.within_modes(cell, base, head, (base, head), DEFAULT_POLICY,
                           measure="max_rss_bytes")
    assert j.modes is None and j.cell is cell


def test_the_pairs_within_modes_keep_their_blocks():
    """Two modes on both sides, and a ratio that moves from block to block (8 blocks of 5
    rounds, offsets of 2%): judged within the modes, the cell is still widened for its
    blocks (before, the same-mode pairs were judged as if every round stood alone)."""
    rng = np.random.default_rng(11)
    base = mixture(rng, 40, 0.6)
    offsets = np.repeat(rng.normal(0, 0.02, 8), 5)
    head = [b * 0.98 * float(np.exp(o + rng.normal(0, 0.003)))
            for b, o in zip(base, offsets, strict=True)]
    blocks = [i // 5 for i in range(40)]
    cell = stats.compare_samples(base, head, policy=DEFAULT_POLICY)
    plain = modes.within_modes(cell, base, head, (base, head), DEFAULT_POLICY,
                               measure="ops_per_cpu_sec")
    counted = modes.within_modes(cell, base, head, (base, head), DEFAULT_POLICY,
                                 measure="ops_per_cpu_sec", blocks=blocks)
    assert counted.modes is not None and not counted.modes.moved
    assert plain.cell.block_effect == 1.0 and counted.cell.block_effect > 1.5
    width = [j.cell.ci_high_pct - j.cell.ci_low_pct  # type: ignore[operator]
             for j in (plain, counted)]
    assert width[1] > 1.2 * width[0], width
