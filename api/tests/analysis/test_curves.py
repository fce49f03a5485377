"""Thread-scaling curves and their verdict (pure, synthetic curves)."""

import math

import pytest
from explain_cells import rc
from mallard_api.analysis.curves import area_pct, ascii_plot, cpu_count, curve_verdict, curves


def curve_cells(base, head, verdicts, workload="transfer", threads=(1, 2, 4, 8, 16, 32, 64)):
    return [rc(workload, "ops_per_sec", b, h, v, threads=t, size=1024)
            for t, b, h, v in zip(threads, base, head, verdicts, strict=True)]


def test_area_is_signed_and_relative_over_log2_threads():
    assert area_pct([(1, 10.0, 10.0), (2, 10.0, 10.0)]) == 0.0
    assert area_pct([(1, 10.0, 11.0), (4, 10.0, 11.0)]) == pytest.approx(10.0)
    # head 20% low at 4 threads only: half of the last trapezoid of two over log2 1..4
    assert area_pct([(1, 10.0, 10.0), (2, 10.0, 10.0), (4, 10.0, 8.0)]) == pytest.approx(-5.0)
    assert area_pct([(1, 10.0, 12.0)]) is None
    assert area_pct([(1, 0.0, 1.0), (2, 0.0, 1.0)]) is None


def test_verdict_of_a_curve():
    assert curve_verdict(["same", "regressed", "regressed"]) == "regressed"
    assert curve_verdict(["improved", "same"]) == "improved"
    assert curve_verdict(["improved", "regressed"]) == "mixed"
    assert curve_verdict(["same", "unknown"]) == "unknown"
    assert curve_verdict(["same", "same"]) == "same"


def test_cpu_count():
    assert cpu_count("0,1") == 2
    assert cpu_count("0-3,8") == 5
    assert cpu_count("1") == 1
    assert cpu_count(None) is None
    assert cpu_count("x") is None


def test_curves_from_cells_naive_loses_at_high_threads_oversubscribed():
    base = [35e6, 18e6, 11e6, 11.7e6, 11e6, 10.1e6, 10.6e6]
    head = [35e6, 18e6, 11e6, 11.7e6, 11e6, 3.9e6, 6.5e6]
    verdicts = ["same"] * 5 + ["regressed", "regressed"]
    cells = curve_cells(base, head, verdicts) + [
        rc("transfer", "max_rss_bytes", 1e6, 1e6, "same", threads=1, size=1024, hib=False),
        rc("larson", "ops_per_sec", 1e6, 1e6, "same", threads=2),  # one point: no curve
    ]
    [c] = curves(cells, cpus=2)
    assert (c.workload, c.measure, c.params) == ("transfer", "ops_per_sec", {"size": 1024})
    assert c.verdict == "regressed"
    assert c.moved == [32, 64]
    assert [p.oversubscribed for p in c.points] == [False, False, True, True, True, True, True]
    expected = 100 * ((6.2e6 / 2 + (6.2e6 + 4.1e6) / 2) /
                      sum((b0 + b1) / 2 for b0, b1 in zip(base, base[1:], strict=False)))
    assert c.area_pct == pytest.approx(-expected)
    assert c.summary() == (f"scaling transfer ops_per_sec: REGRESSED; moved at threads 32, 64; "
                           f"area between curves {-expected:+.1f}%")
    rows = ascii_plot(c, width=10)
    assert rows[0] == "   1 |**********| base 35,000,000 head 35,000,000 +0.0% SAME"
    assert rows[5].startswith("  32 |*bb       |")
    assert rows[5].endswith("-61.4% REGRESSED oversubscribed")
    assert not math.isnan(c.area_pct)


def test_params_other_than_threads_make_separate_curves_and_unknown_cpus():
    cells = (curve_cells([1, 1], [1, 1], ["same", "same"], threads=(1, 2))
             + [rc("transfer", "ops_per_sec", 1, 2, "improved", threads=t, size=4096)
                for t in (1, 2)])
    got = curves(cells, cpus=None)
    assert [(c.params["size"], c.verdict) for c in got] == [(1024, "same"), (4096, "improved")]
    assert not any(p.oversubscribed for c in got for p in c.points)
