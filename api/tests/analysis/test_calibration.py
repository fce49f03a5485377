"""analysis/calibrations.py's pure parts: canary sizing, the SAME band, the table; and the verdict
rule with a calibrated band (stats.adjust_and_decide)."""

import numpy as np
import pytest
from mallard_api.analysis import canaries, noise
from mallard_api.models.calibrations import CalibrationResult
from mallard_api.models.records import Detection
from mallard_stats import stats


def test_canary_is_sized_from_the_time_per_operation_and_frees():
    # 1e6 ops/s: 1000 ns an operation; larson frees one block per operation, rpc two
    assert canaries.canary_ns(3, 1e6, "larson") == 30
    assert canaries.canary_ns(10, 1e6, "rpc") == 50
    assert canaries.canary_ns(1, 1e6, "xmalloc") == 10
    assert canaries.canary_ns(0.01, 1e9, "larson") == 1  # never 0 (0 is "off")
    assert canaries.head_variant("transfer=ring", 30) == "transfer=ring,canary_ns=30"
    assert canaries.head_variant("", 30) == "canary_ns=30"
    assert canaries.head_variant("", None) == ""


def test_band_is_the_cv_clamped(settings):
    assert noise.band_pct(0.3, False, settings) == settings.stats_min_effect_pct
    assert noise.band_pct(4.2, False, settings) == pytest.approx(4.2)
    assert noise.band_pct(40.0, False, settings) == settings.calibration_band_max_pct
    assert noise.band_pct(4.2, True, settings) is None
    assert noise.band_pct(None, False, settings) is None


def test_table_lists_every_size():
    rows = [CalibrationResult(workload="larson", threads=1, measure="ops_per_sec",
                              cv_pct=12.345, false_alarms=1, aa_comparisons=20, band_pct=10.0,
                              detection=[Detection(size_pct=3.0, comparisons=10, detected=4,
                                                   rate=0.4, measured_pct=-2.96)]),
            CalibrationResult(workload="larson", threads=1, measure="instructions", cv_pct=0.0,
                              false_alarms=0, aa_comparisons=20, band_pct=None, detection=[])]
    lines = noise.table(rows).splitlines()
    assert lines[0] == ("| workload | threads | measure | CV | false alarms (A/A) | "
                        "canary 3% | SAME band |")
    assert lines[2] == "| larson | 1 | ops_per_sec | 12.35% | 1 of 20 | 4/10 (-3.0%) | ±10.0% |"
    assert lines[3] == "| larson | 1 | instructions | 0.00% | 0 of 20 |  | n/a |"
    assert noise.table([]) == ""


def test_a_calibrated_band_decides_same_for_a_noisy_series():
    rng = np.random.default_rng(5)
    base = 1e6 * (1 + 0.05 * rng.standard_normal(20))
    head = 1e6 * (1 + 0.05 * rng.standard_normal(20))
    cell = stats.compare_samples(base, head)
    assert cell.half_width_pct is not None and 1.0 < cell.half_width_pct < 6.0
    default, = stats.adjust_and_decide([cell])
    banded, = stats.adjust_and_decide([cell], bands=[8.0])
    assert default.verdict == "unknown" and banded.verdict == "same"
    # a real 20% regression is still one inside a wide band
    worse = stats.compare_samples(base, head * 0.8)
    assert stats.adjust_and_decide([worse], bands=[10.0])[0].verdict == "regressed"


def test_probes_fit_the_canarys_real_cost():
    # a line through the probes: 1.5% + 0.1% per ns
    line = canaries.fit([(5, 2.0), (100, 11.5)])
    assert line is not None and line == pytest.approx((1.5, 0.1))
    assert canaries.fitted_ns(3, line, nominal=30) == 15
    assert canaries.fitted_ns(10, line, nominal=100) == 85
    # a size below the cost of the call itself: the smallest canary there is, 1 ns
    assert canaries.fitted_ns(1, line, nominal=10) == 1
    # no line (one point, or probes that did not slow down more at more ns): nominal
    assert canaries.fit([(5, 2.0)]) is None
    assert canaries.fit([(5, 2.0), (5, 2.5)]) is None
    assert canaries.fit([(5, 3.0), (100, 2.0)]) is None
    assert canaries.fitted_ns(3, None, nominal=30) == 30
