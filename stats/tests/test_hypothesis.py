"""A comparison's hypothesis: parsing it, and whether a cell bore it out."""

import pytest
from mallard_stats.hypothesis import Hypothesis, hypothesis_outcome, parse_hypothesis
from mallard_stats.stats import DIAGNOSTIC, CellStats


def cell(diff, lo, hi, p, n=8, robust=7, verdict="regressed", hib=True, bm=1e6, mde=2.1,
         primary=True) -> CellStats:
    return CellStats(
        n_base=n, n_head=n, robust_base=n, robust_head=robust, base_median=bm,
        head_median=bm * (1 + diff / 100), ratio=1 + diff / 100, diff_pct=diff,
        ci_low_pct=lo, ci_high_pct=hi, p_value=p, p_adjusted=p if primary else None,
        verdict=verdict if primary else DIAGNOSTIC, higher_is_better=hib, mde_pct=mde,
        primary=primary,
    )


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
