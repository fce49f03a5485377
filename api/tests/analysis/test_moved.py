"""Counters that moved most under each cell (pure, synthetic cells)."""

import math

from explain_cells import rc
from mallard_api.analysis.moved import moved_most, moved_text, score, short_name
from mallard_api.analysis.report import params_key


def test_names_and_scores():
    assert short_name("transfer_remove_hit_ratio") == "remove hit ratio"
    assert short_name("transfer_remove_inflight_misses") == "remove in-flight misses"
    assert short_name("central_refills") == "central refills"
    assert score(0.841, 0.647) == abs(0.647 / 0.841 - 1)
    assert score(0, 5) == math.inf
    assert score(3, 3) == 0.0


def test_ranked_largest_move_first_and_unmoved_left_out():
    d = "diagnostic"
    cells = [
        rc("transfer", "ops_per_sec", 1e6, 0.9e6, "regressed", threads=32),
        rc("transfer", "transfer_remove_hit_ratio", 0.841, 0.647, d, threads=32),
        rc("transfer", "transfer_insert_hit_ratio", 0.861, 0.860, d, threads=32),
        rc("transfer", "transfer_remove_inflight_misses", 0, 1204, d, threads=32, hib=False),
        rc("transfer", "central_refills", 300, 1800, d, threads=32, hib=False),
        rc("transfer", "pages_reclaimed", 4, 4, d, threads=32, hib=False),
        rc("transfer", "wall_seconds", 1.0, 2.0, d, threads=32, hib=False),  # not a counter
        rc("transfer", "transfer_remove_hit_ratio", 1.0, 1.0, d, threads=1),
    ]
    most = moved_most(cells)
    key = ("transfer", params_key({"threads": 32}))
    assert list(most) == [key]  # threads=1: nothing moved
    assert [m.measure for m in most[key]] == [
        "transfer_remove_inflight_misses", "central_refills", "transfer_remove_hit_ratio"]
    assert moved_text(most[key]) == (
        "counters moved most: remove in-flight misses 0 -> 1,204, central refills 300 -> "
        "1,800, remove hit ratio 0.841 -> 0.647")
    assert most[key][0].diff_pct is None
    assert most[key][1].diff_pct == 500.0
    assert len(moved_most(cells, top=1)[key]) == 1
