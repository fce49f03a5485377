"""The power of the rule: the reported MDE matches the simulated detection power, falls with
more trials, and gives the trials a target MDE needs."""

import numpy as np
import pytest
from mallard_stats import power
from mallard_stats.policy import Policy
from mallard_stats.stats import adjust_and_decide, compare_samples
from scipy.stats import norm as sps_norm  # type: ignore[import-untyped]


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
