"""What each measure is: deterministic counts (one run a side decides), perf counts (never),
primary and diagnostic roles, and the page floor of byte measures."""

import numpy as np
import pytest
from mallard_stats import measures, power
from mallard_stats.policy import Policy
from mallard_stats.stats import adjust_and_decide, compare_samples

POLICY = Policy(n_resamples=2000)


def test_deterministic_measure_settles_with_two_runs_a_side():
    """cachegrind counts repeat: two runs a side that agree decide, without a rank test;
    one run a side cannot show that they repeat (an allocator that purges by the clock
    moves its counts), so it decides nothing."""

    def cell(base, head, deterministic=True):
        c = compare_samples(base * 2, head * 2, higher_is_better=False,
                            deterministic=deterministic, policy=POLICY)
        return adjust_and_decide([c], POLICY)[0]

    lone = compare_samples([367_300_112.0], [367_300_112.0 * 1.03], higher_is_better=False,
                           deterministic=True, policy=POLICY)
    assert adjust_and_decide([lone], POLICY)[0].verdict == "unknown"

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
    noisy = compare_samples(base * 3, [base[0] * 1.03] * 3, higher_is_better=False,
                            policy=POLICY)
    assert adjust_and_decide([noisy], POLICY)[0].verdict == "unknown"
    assert cell([], [base[0]]).verdict == "unknown"


def test_half_a_percent_more_instructions_is_regressed_every_time():
    rng = np.random.default_rng(21)
    for count in rng.integers(100_000, 10_000_000_000, size=200):
        c = compare_samples([float(count)] * 2, [float(count) * 1.005] * 2,
                            higher_is_better=False, deterministic=True, policy=POLICY)
        assert adjust_and_decide([c], POLICY)[0].verdict == "regressed", count


def test_small_counts_need_a_change_of_some_counts():
    """1,538 LLC misses wobble by a few from run to run: +4 misses (+0.26%) is no verdict,
    +62 (+4%) is; the MDE says so."""

    def cell(base, head):
        c = compare_samples([base] * 2, [head] * 2, higher_is_better=False,
                            deterministic=True, policy=POLICY)
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


def test_recorded_measures_are_judged_lower_is_better_and_timed():
    for call in ("malloc", "free"):
        for q in ("p50", "p99", "p999"):
            m = f"{call}_{q}_ns"
            assert measures.measure_role(m) == "primary" and not measures.higher_is_better(m)
            assert measures.unjudged_reason(m, emulated=True) == measures.EMULATED_REASON
            assert measures.unjudged_reason(m, emulated=False) is None
    assert measures.measure_role("rss_area_byte_seconds") == "primary"
    assert not measures.higher_is_better("rss_area_byte_seconds")
    assert measures.measure_role("final_rss_bytes") == "diagnostic"


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


def test_each_upload_format_has_a_judged_main_measure_of_its_direction():
    # mallard_wire/formats: hyperfine, pytest-benchmark, Bencher (BMF), Google Benchmark
    for m, hib in (("run_seconds", False), ("round_seconds", False), ("latency_ns", False),
                   ("throughput", True), ("real_time_ns", False), ("items_per_second", True)):
        assert measures.measure_role(m) == "primary", m
        assert measures.higher_is_better(m) is hib, m
        assert measures.unjudged_reason(m, emulated=True) == measures.EMULATED_REASON, m
    assert measures.measure_role("wall_seconds") == "diagnostic"  # the runner's stays so
