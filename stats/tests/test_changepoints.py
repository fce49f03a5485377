"""E-Divisive change points (Otava) on per-commit medians."""

import numpy as np
import pytest
from mallard_stats.changepoints import detect, regressions
from mallard_stats.policy import ChangePolicy, Policy

SP = Policy(n_resamples=2000)


def series(n: int, seed: int, noise: float = 0.01, level: float = 1e6) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1.0 + noise * rng.standard_normal(n)))


COMMITS = [f"c{i:02d}" for i in range(30)]


def test_step_down_names_first_bad_commit():
    values = series(30, 1)
    for i in range(20, 30):
        values[i] *= 0.92
    found = regressions(COMMITS, values, higher_is_better=True, stats_policy=SP)
    assert len(found) == 1
    cp = found[0]
    assert cp.first_bad_commit == "c20" and cp.last_good_commit == "c19"
    assert cp.change_pct == pytest.approx(-8, abs=1.5)
    assert cp.ci_low_pct < cp.change_pct < cp.ci_high_pct < 0
    assert cp.direction == "regression"


def test_step_direction_follows_measure():
    values = series(30, 2, level=2.0)
    for i in range(20, 30):
        values[i] *= 0.92  # seconds went down: better for wall_seconds
    assert regressions(COMMITS, values, higher_is_better=False, stats_policy=SP) == []
    found = detect(COMMITS, values, higher_is_better=False, stats_policy=SP)
    assert [c.direction for c in found] == ["improvement"]


@pytest.mark.parametrize("seed", [3, 4, 5, 6, 7])
def test_pure_noise_opens_nothing(seed):
    assert detect(COMMITS, series(30, seed), higher_is_better=True, stats_policy=SP) == []


@pytest.mark.parametrize("where", [15, 28, 29])
def test_single_outlier_opens_nothing(where):
    values = series(30, 8)
    values[where] *= 0.7
    assert detect(COMMITS, values, higher_is_better=True, stats_policy=SP) == []


def test_step_at_the_tail_waits_for_min_segment():
    values = series(30, 9)
    values[28] *= 0.9
    values[29] *= 0.9
    assert detect(COMMITS, values, higher_is_better=True, stats_policy=SP) == []
    values = series(32, 9)
    for i in range(28, 32):
        values[i] *= 0.9
    commits = [f"c{i:02d}" for i in range(32)]
    found = regressions(commits, values, higher_is_better=True,
                        policy=ChangePolicy(min_segment=3), stats_policy=SP)
    assert [c.first_bad_commit for c in found] == ["c28"]


def test_deterministic_series():
    values = [1000.0] * 10 + [1100.0] * 10  # instructions up 10%: worse
    found = regressions(COMMITS[:20], values, higher_is_better=False, stats_policy=SP)
    assert [(c.first_bad_commit, round(c.change_pct, 3)) for c in found] == [("c10", 10.0)]
    assert detect(COMMITS[:20], [1000.0] * 20, higher_is_better=False, stats_policy=SP) == []


def test_short_series_is_quiet():
    assert detect(COMMITS[:4], [1.0, 1.0, 0.5, 0.5], higher_is_better=True) == []
    with pytest.raises(ValueError):
        detect(COMMITS[:3], [1.0, 2.0], higher_is_better=True)
