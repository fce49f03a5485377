"""The statistics policy: outliers, difference, interval, p-value, correction, verdicts."""

import numpy as np
import pytest
from mallard_api.analysis import measures, power
from mallard_api.analysis.policy import Policy
from mallard_api.analysis.stats import (
    DIAGNOSTIC,
    adjust_and_decide,
    compare_samples,
    decide,
    robust_mask,
)
from scipy.stats import norm as sps_norm  # type: ignore[import-untyped]

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


def test_deterministic_measure_settles_with_one_trial_a_side():
    """cachegrind counts repeat: one run a side decides, without a rank test."""

    def cell(base, head, deterministic=True):
        c = compare_samples(base, head, higher_is_better=False, deterministic=deterministic,
                            policy=POLICY)
        return adjust_and_decide([c], POLICY)[0]

    base = [367_300_112.0]
    assert cell(base, [367_300_131.0]).verdict == "same"
    assert cell(base, [base[0] * 1.03]).verdict == "regressed"
    assert cell(base, [base[0] * 0.97]).verdict == "improved"
    assert cell(base, [base[0] * 1.002]).verdict == "same"  # above the tolerance, under 0.25%
    one = cell(base, [base[0] * 1.005])
    assert one.deterministic and one.p_value is None
    assert one.ci_low_pct == one.ci_high_pct == pytest.approx(0.5)
    assert one.mde_pct == power.deterministic_mde_pct(POLICY) == 0.25
    # the same numbers as a timing measure: too few trials to say anything
    assert cell(base * 3, [base[0] * 1.03] * 3, deterministic=False).verdict == "unknown"
    assert cell([], [base[0]]).verdict == "unknown"


def test_half_a_percent_more_instructions_is_regressed_every_time():
    rng = np.random.default_rng(21)
    for count in rng.integers(100_000, 10_000_000_000, size=200):
        c = compare_samples([float(count)], [float(count) * 1.005], higher_is_better=False,
                            deterministic=True, policy=POLICY)
        assert adjust_and_decide([c], POLICY)[0].verdict == "regressed", count


def test_small_counts_need_a_change_of_some_counts():
    """1,538 LLC misses wobble by a few from run to run: +4 misses (+0.26%) is no verdict,
    +62 (+4%) is; the MDE says so."""

    def cell(base, head):
        c = compare_samples([base], [head], higher_is_better=False, deterministic=True,
                            policy=POLICY)
        return adjust_and_decide([c], POLICY)[0]

    assert cell(1538.0, 1542.0).verdict == "same"
    assert cell(1538.0, 1600.0).verdict == "regressed"
    assert cell(1538.0, 1542.0).mde_pct == pytest.approx(100 * 20 / 1538)
    assert cell(8_000_000.0, 8_040_000.0).mde_pct == 0.25


def test_deterministic_counts_that_do_not_repeat_take_the_noisy_rule():
    # follow-ups ran the count twice a side and it moved by 3%: not deterministic here
    c = compare_samples([100_000.0, 103_000.0], [104_000.0, 107_000.0], higher_is_better=False,
                        deterministic=True, policy=POLICY)
    assert not c.deterministic and c.spread_pct == pytest.approx(1500 / 1015)
    assert adjust_and_decide([c], POLICY)[0].verdict == "unknown"  # 2 trials: rule 1
    # within the tolerance: still deterministic, interval = range of the pair ratios
    c = compare_samples([100_000.0, 100_050.0], [101_000.0, 101_010.0], higher_is_better=False,
                        deterministic=True, policy=POLICY)
    assert c.deterministic
    assert c.ci_low_pct == pytest.approx((101_000 / 100_050 - 1) * 100)
    assert c.ci_high_pct == pytest.approx(1.01)


def test_perf_counts_never_take_the_deterministic_rule():
    hw = ("hw_instructions", "hw_cycles", "hw_llc_misses")
    assert not set(hw) & measures.DETERMINISTIC_MEASURES
    for m in hw:
        assert not measures.is_deterministic(m)
        assert measures.higher_is_better(m) is False
        c = compare_samples([1e9], [1.05e9], higher_is_better=False,
                            deterministic=measures.is_deterministic(m), policy=POLICY)
        assert adjust_and_decide([c], POLICY)[0].verdict == "unknown"  # one trial: no verdict
    assert {m for m in ("instructions", "d1_misses", "llc_misses") if measures.is_deterministic(m)
            } == {"instructions", "d1_misses", "llc_misses"}


def test_primary_and_diagnostic_measures():
    for m in ("ops_per_sec", "max_rss_bytes", "instructions", "llc_misses"):
        assert measures.measure_role(m) == "primary"
    for m in ("wall_seconds", "user_seconds", "sys_seconds", "d1_misses", "hw_cycles",
              "ns_per_op", "transfer_insert_hit_ratio", "peak_rss_bytes"):
        assert measures.measure_role(m) == "diagnostic"
    assert measures.measure_role("wall_seconds", ["wall_seconds"]) == "primary"  # requested


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


def known_noise(n: int, level: float, cv: float) -> list[float]:
    """n values whose spread is exactly a normal's with this CV (its quantiles)."""
    q = sps_norm.ppf((np.arange(n) + 0.5) / n)
    return list(level * (1.0 + cv * q))


def detection_rate(n: int, cv: float, effect_pct: float, policy: Policy, sims: int,
                   seed: int) -> float:
    """How often the real rule (compare, correct, decide) calls a true change improved."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        base = 100.0 * (1.0 + cv * rng.standard_normal(n))
        head = 100.0 * (1.0 + effect_pct / 100.0) * (1.0 + cv * rng.standard_normal(n))
        c = compare_samples(base, head, policy=policy)
        hits += adjust_and_decide([c], policy)[0].verdict == "improved"
    return hits / sims


@pytest.mark.parametrize(("n", "cv"), [(10, 0.01), (20, 0.03)])
def test_mde_matches_the_simulated_detection_power(n, cv):
    """The reported MDE is within 20% of the effect the rule detects 80% of the time: the
    simulated rule detects 0.8 x MDE less than 80% of the time and 1.2 x MDE more often."""
    policy = Policy(n_resamples=400)
    cell = compare_samples(known_noise(n, 1e6, cv), known_noise(n, 1e6, cv), policy=policy)
    assert cell.noise_pct == pytest.approx(100 * cv, rel=0.1)
    mde = cell.mde_pct
    assert mde is not None and mde == power.mde_pct(n, cell.noise_pct, policy)
    below = detection_rate(n, cv, 0.8 * mde, policy, sims=250, seed=n)
    above = detection_rate(n, cv, 1.2 * mde, policy, sims=250, seed=n + 1)
    assert below < 0.8 < above, (mde, below, above)


def test_mde_needs_enough_trials_and_falls_with_more():
    assert power.mde_pct(4, 1.0) is None  # under min_trials nothing is detectable
    assert power.mde_pct(10, None) is None
    values = [power.mde_pct(n, 3.0) for n in (5, 10, 20, 40, 80)]
    assert None not in values and values == sorted(values, reverse=True)
    assert len(set(values)) == len(values)
    assert power.mde_pct(1000, 0.0) == pytest.approx(1.0)  # no noise: the minimum effect


def test_trials_for_a_target_mde():
    for noise in (0.5, 1.0, 3.0, 5.0):
        n = power.trials_for_mde(noise, 2.0)
        assert n is not None
        assert power.mde_pct(n, noise) <= 2.0
        assert n == 5 or power.mde_pct(n - 1, noise) > 2.0
    assert power.trials_for_mde(3.0) == power.trials_for_mde(3.0, 2.0)  # the policy's target
    assert power.trials_for_mde(3.0, 4.0) < power.trials_for_mde(3.0, 2.0)
    assert power.trials_for_mde(1.0, 1.0) is None  # at the minimum effect: never
    assert power.trials_for_mde(50.0, 2.0) is None  # not within max_trials


def test_no_evidence_with_a_wide_interval_is_unknown_not_same():
    """Rule 4 settles on `same` only when the interval is narrow enough to mean it."""
    base = noisy(20, 100.0, 0.01, seed=11)
    assert one_cell(base, noisy(20, 100.0, 0.01, seed=12)).verdict == "same"
    wide_b, wide_h = noisy(20, 100.0, 0.30, seed=13), noisy(20, 100.0, 0.30, seed=14)
    cell = one_cell(wide_b, wide_h)
    assert cell.half_width_pct is not None and cell.half_width_pct > 3.0
    assert cell.verdict == "unknown"


PAGE = 4096.0


def rss(n: int, pages: float, seed: int) -> list[float]:
    """Peak RSS as the kernel reports it for one build: its pages give or take up to 48
    (the spread measured over 113-162 trials of one build, docs/statistics.md)."""
    rng = np.random.default_rng(seed)
    return [(pages + float(j)) * PAGE for j in rng.integers(-48, 49, n)]


def rss_cell(base, head, policy=POLICY):
    cell = compare_samples(base, head, higher_is_better=False, policy=policy,
                           min_effect_abs=measures.min_effect_abs("max_rss_bytes",
                                                                  policy.min_effect_bytes))
    return adjust_and_decide([cell], policy)[0]


def test_a_few_pages_of_peak_rss_are_same_within_the_floor():
    base, head = rss(13, 751, 1), rss(13, 757, 2)
    c = rss_cell(base, head)
    assert c.verdict == "same"
    assert c.band_pct == pytest.approx(100 * 64 / np.median(base) * PAGE, rel=0.01)
    assert c.band_pct > 8  # 64 pages of a 3 MB process
    # the same trials without a floor do not settle: the interval crosses +-1%
    bare = rss_cell(base, head, Policy(n_resamples=2000, min_effect_bytes=0))
    assert bare.verdict == "unknown" and bare.band_pct == 1.0


def test_peak_rss_beyond_the_floor_is_still_regressed():
    # +25% (190 pages) and +12% (90 pages: its interval reaches past 64 pages)
    for extra, seed in ((190, 3), (90, 5)):
        c = rss_cell(rss(13, 751, seed), rss(13, 751 + extra, seed + 1))
        assert c.verdict == "regressed", (extra, c)


def test_the_floor_only_widens_the_band_of_byte_measures_of_small_processes():
    assert measures.min_effect_abs("ops_per_cpu_sec", 262144.0) is None
    assert measures.min_effect_abs("max_rss_bytes", 0.0) is None
    assert measures.floor_pct(262144.0, 100e6) == pytest.approx(0.262, rel=0.01)
    big = rss_cell(rss(13, 25_000, 7), rss(13, 25_000, 8))
    assert big.band_pct == 1.0  # 64 pages of 100 MB is under the 1% band
