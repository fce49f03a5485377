"""Speed x memory labels from the two cells' verdicts (pure, synthetic cells)."""

import pytest
from explain_cells import rc
from mallard_api.analysis.joint import joint_labels, label


@pytest.mark.parametrize(("speed", "memory", "name", "kind"), [
    ("improved", "improved", "better-both", "better"),
    ("regressed", "regressed", "worse-both", "worse"),
    ("improved", "regressed", "faster-but-fatter", "trade-off"),
    ("regressed", "improved", "slower-but-leaner", "trade-off"),
    ("same", "same", "same", "same"),
    ("improved", "same", "faster", "better"),
    ("same", "improved", "leaner", "better"),
    ("regressed", "same", "slower", "worse"),
    ("same", "regressed", "fatter", "worse"),
    ("improved", "unknown", "unknown", "unknown"),
    ("unknown", "same", "unknown", "unknown"),
])
def test_label_table(speed, memory, name, kind):
    assert label(speed, memory) == (name, kind)


def test_a_shared_pool_that_buys_throughput_with_rss_is_a_trade_off():
    cells = [
        rc("larson", "ops_per_sec", 1e6, 1.12e6, "improved"),
        rc("larson", "max_rss_bytes", 10e6, 13e6, "regressed", hib=False),
        rc("larson", "wall_seconds", 1.0, 0.9, "diagnostic", hib=False),
        rc("rpc", "ops_per_sec", 1e6, 1.1e6, "improved", threads=1),
        rc("rpc", "max_rss_bytes", 10e6, 9e6, "improved", threads=1, hib=False),
        rc("xmalloc", "ops_per_sec", 1e6, 1.1e6, "improved"),  # no memory cell: no label
    ]
    joints = joint_labels(cells)
    assert [(j.workload, j.label, j.kind) for j in joints] == [
        ("larson", "faster-but-fatter", "trade-off"), ("rpc", "better-both", "better")]
    larson = joints[0]
    assert larson.threads == 2
    assert larson.speed_diff_pct == pytest.approx(12.0)
    assert larson.memory_diff_pct == pytest.approx(30.0)
    assert larson.text() == ("speed x memory: faster-but-fatter (trade-off): ops_per_sec "
                             "+12.0% IMPROVED, max_rss_bytes +30.0% REGRESSED")


def test_cells_pair_by_params_not_only_by_workload():
    cells = [
        rc("transfer", "ops_per_sec", 1e6, 0.8e6, "regressed", threads=1),
        rc("transfer", "max_rss_bytes", 1e6, 1e6, "same", threads=1, hib=False),
        rc("transfer", "ops_per_sec", 1e6, 1e6, "same", threads=2),
        rc("transfer", "max_rss_bytes", 1e6, 0.7e6, "improved", threads=2, hib=False),
    ]
    assert [(j.threads, j.label) for j in joint_labels(cells)] == [(1, "slower"), (2, "leaner")]
