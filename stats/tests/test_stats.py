"""The statistics policy: outliers, difference, interval, p-value, correction, verdicts;
the measures' own rules are in test_measures.py, the power (MDE) in test_power.py."""

from dataclasses import replace

import numpy as np
import pytest
from mallard_stats import measures
from mallard_stats.policy import Policy
from mallard_stats.stats import (
    DIAGNOSTIC,
    CellStats,
    adjust_and_decide,
    compare_samples,
    decide,
    robust_mask,
)

POLICY = Policy(n_resamples=2000)


def noisy(n: int, level: float, noise: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1.0 + noise * rng.standard_normal(n)))


def one_cell(base, head, hib=True, policy=POLICY):
    return adjust_and_decide([compare_samples(base, head, higher_is_better=hib, policy=policy)],
                             policy)[0]


def test_outlier_marked_not_dropped():
    values = [100.0, 101.0, 99.5, 100.2, 99.8, 100.4, 100.1, 99.9, 100.3, 140.0]
    mask = robust_mask(values)
    assert mask.tolist() == [True] * 9 + [False]
    cell = compare_samples(values[:9], values, policy=POLICY)
    assert (cell.n_head, cell.robust_head) == (10, 9)
    assert (cell.n_base, cell.robust_base) == (9, 9)
    # the outlier does not move the robust median
    assert cell.head_median == pytest.approx(np.median(values[:9]))


def test_mad_zero_falls_back_and_identical_all_robust():
    assert robust_mask([5.0] * 7).all()
    m = robust_mask([5.0] * 6 + [9.0])
    assert m.tolist() == [True] * 6 + [False]


def test_five_percent_regression():
    base = noisy(12, 1e6, 0.01, 1)
    head = noisy(12, 0.95e6, 0.01, 2)
    c = one_cell(base, head)
    assert c.verdict == "regressed"
    assert c.diff_pct == pytest.approx(-5, abs=1.5)
    assert c.ci_low_pct < c.diff_pct < c.ci_high_pct < 0
    assert c.p_adjusted is not None and c.p_adjusted < 0.001


def test_no_shift_is_same():
    c = one_cell(noisy(12, 1e6, 0.01, 3), noisy(12, 1e6, 0.01, 4))
    assert c.verdict == "same"
    assert abs(c.diff_pct) < 1


def test_lower_is_better_direction():
    base = noisy(12, 2.0, 0.01, 5)
    faster = noisy(12, 1.9, 0.01, 6)
    assert one_cell(base, faster, hib=False).verdict == "improved"
    assert one_cell(base, faster, hib=True).verdict == "regressed"
    assert measures.higher_is_better("wall_seconds") is False
    assert measures.higher_is_better("ops_per_sec") is True
    assert measures.higher_is_better("transfer_insert_hit_ratio") is True
    assert measures.higher_is_better("p99_latency_ns") is False
    assert measures.higher_is_better("cpu_seconds") is False
    assert measures.higher_is_better("requests_per_sec") is True


def test_too_few_trials_unknown():
    c = one_cell(noisy(4, 1e6, 0.01, 7), noisy(4, 0.8e6, 0.01, 8))
    assert c.verdict == "unknown"


def test_wide_interval_unknown():
    # 10% noise, no real shift, 6 trials: cannot tell within +-1%
    c = one_cell(noisy(6, 1e6, 0.10, 9), noisy(6, 1e6, 0.10, 10))
    assert c.verdict == "unknown"


def test_zero_variance_deterministic_measure():
    same = one_cell([123456.0] * 5, [123456.0] * 5, hib=False)
    assert same.verdict == "same"
    assert same.diff_pct == 0 and same.ci_low_pct == 0 and same.ci_high_pct == 0
    assert same.p_value == 1.0
    fewer = one_cell([100000.0] * 6, [95000.0] * 6, hib=False)
    assert fewer.verdict == "improved"
    assert fewer.diff_pct == pytest.approx(-5.0)


def test_correction_across_cells():
    # 1 real effect among 20 cells; a marginal p-value loses significance after BH
    cells = [compare_samples(noisy(12, 1.0, 0.01, 100 + i), noisy(12, 1.0, 0.01, 200 + i),
                             policy=POLICY) for i in range(19)]
    marginal = compare_samples(noisy(6, 1.0, 0.02, 12), noisy(6, 0.96, 0.02, 112), policy=POLICY)
    assert marginal.p_value is not None and marginal.p_value < 0.05
    alone = adjust_and_decide([marginal], POLICY)[0]
    together = adjust_and_decide([*cells, marginal], POLICY)
    assert together[-1].p_adjusted > alone.p_adjusted
    assert together[-1].p_adjusted >= 0.05
    assert together[-1].verdict == "unknown"
    assert alone.verdict == "regressed"
    # BH adjusted p-values are monotone in the raw ones and never below them
    for c in together:
        assert c.p_adjusted >= c.p_value


def test_significant_but_tiny_effect_is_not_regressed():
    c = one_cell(noisy(30, 1.0, 0.002, 13), noisy(30, 0.996, 0.002, 14))
    assert c.p_adjusted < 0.05
    assert c.verdict == "same"  # interval inside +-1%


def test_bootstrap_is_deterministic():
    a = compare_samples(noisy(8, 1.0, 0.02, 15), noisy(8, 0.9, 0.02, 16), policy=POLICY)
    b = compare_samples(noisy(8, 1.0, 0.02, 15), noisy(8, 0.9, 0.02, 16), policy=POLICY)
    assert (a.ci_low_pct, a.ci_high_pct) == (b.ci_low_pct, b.ci_high_pct)


def test_decide_requires_adjusted_p():
    c = compare_samples(noisy(8, 1.0, 0.01, 17), noisy(8, 0.9, 0.01, 18), policy=POLICY)
    assert decide(c, POLICY) == "unknown"  # p_adjusted not set yet


def test_correction_only_across_primary_cells():
    marginal = compare_samples(noisy(6, 1.0, 0.02, 12), noisy(6, 0.96, 0.02, 112), policy=POLICY)
    alone = adjust_and_decide([marginal], POLICY)[0]
    diagnostics = [compare_samples(noisy(12, 1.0, 0.01, 300 + i), noisy(12, 1.0, 0.01, 400 + i),
                                   primary=False, policy=POLICY) for i in range(19)]
    together = adjust_and_decide([*diagnostics, marginal], POLICY)
    assert together[-1].p_adjusted == alone.p_adjusted
    assert together[-1].verdict == alone.verdict == "regressed"
    for d in together[:-1]:
        assert d.verdict == DIAGNOSTIC and d.p_adjusted is None and d.p_value is not None
    # a strong diagnostic difference is still no verdict
    big = compare_samples(noisy(12, 1.0, 0.01, 1), noisy(12, 2.0, 0.01, 2), primary=False,
                          policy=POLICY)
    assert adjust_and_decide([big], POLICY)[0].verdict == DIAGNOSTIC


def test_no_evidence_with_a_wide_interval_is_unknown_not_same():
    """Rule 4 settles on `same` only when the interval is narrow enough to mean it."""
    base = noisy(20, 100.0, 0.01, seed=11)
    assert one_cell(base, noisy(20, 100.0, 0.01, seed=12)).verdict == "same"
    wide_b, wide_h = noisy(20, 100.0, 0.30, seed=13), noisy(20, 100.0, 0.30, seed=14)
    cell = one_cell(wide_b, wide_h)
    assert cell.half_width_pct is not None and cell.half_width_pct > 3.0
    assert cell.verdict == "unknown"


def test_no_evidence_with_an_mde_too_large_to_see_the_change_is_unknown():
    """Rule 4 also asks for an MDE of at most ``settle_max_mde_pct``: an interval within
    +-3% on a noise that could hide a 3% change does not settle as same."""
    for seed in range(40):
        base, head = noisy(12, 100.0, 0.014, seed=100 + seed), noisy(12, 100.0, 0.014, 200 + seed)
        loose = one_cell(base, head, policy=replace(POLICY, settle_max_mde_pct=100.0))
        if loose.verdict == "same" and loose.mde_pct is not None and loose.mde_pct > 2.0:
            break
    else:
        raise AssertionError("no seed gave a rule-4 same with an MDE above 2%")
    assert loose.half_width_pct is not None and loose.half_width_pct <= 3.0
    assert one_cell(base, head).verdict == "unknown"
    quiet_b, quiet_h = noisy(30, 100.0, 0.004, seed=7), noisy(30, 100.0, 0.004, seed=8)
    quiet = one_cell(quiet_b, quiet_h)
    assert quiet.mde_pct is not None and quiet.mde_pct <= 2.0 and quiet.verdict == "same"


def test_a_change_inside_its_band_is_never_improved_or_regressed():
    """Rule 3 asks for ``|diff|`` at least the cell's SAME band, not only ``m``: with a
    calibrated band of +-1.4%, a -1.3% change whose interval clears zero is unknown (a run
    landing just inside the band is same by rule 2, so the two would flip), and its MDE is
    measured against the band; a change beyond the band is still regressed."""
    base, head = noisy(40, 100.0, 0.005, 21), noisy(40, 99.0, 0.005, 22)
    cell = compare_samples(base, head, policy=POLICY)
    loose = adjust_and_decide([cell], POLICY)[0]
    banded = adjust_and_decide([cell], POLICY, bands=[1.4])[0]
    assert -1.4 < banded.diff_pct < -1.0 and banded.ci_high_pct < 0
    assert loose.verdict == "regressed" and banded.verdict == "unknown"
    assert banded.band_pct == 1.4 and banded.mde_pct > 1.4 > loose.mde_pct
    far = compare_samples(base, noisy(40, 97.0, 0.005, 22), policy=POLICY)
    assert adjust_and_decide([far], POLICY, bands=[1.4])[0].verdict == "regressed"


def test_rule_4_needs_the_change_one_standard_error_inside_the_band():
    """No significant difference, settled (200 pairs, +-0.9%, mde 1.5%): -0.3% is same,
    but -0.6% is not, since one standard error (0.46%) on top of it reaches past the +-1%
    band: a change as big as the band lands that far inside it one run in six."""
    def cell(diff: float) -> CellStats:
        return CellStats(n_base=200, n_head=200, robust_base=200, robust_head=200,
                         base_median=100.0, head_median=100.0 + diff, ratio=1 + diff / 100,
                         diff_pct=diff, ci_low_pct=diff - 0.9, ci_high_pct=diff + 0.9,
                         p_value=0.2, p_adjusted=0.2, mde_pct=1.5, paired=True)

    assert decide(cell(-0.3), POLICY) == "same"
    assert decide(cell(-0.6), POLICY) == "unknown"
    assert decide(cell(-0.6), replace(POLICY, same_band_pct=1.2)) == "same"
