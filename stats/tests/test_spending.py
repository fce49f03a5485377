"""Alpha spent over a cell's looks: the levels sum to alpha, and a null cell judged at
every follow-up look crosses them no more often than alpha (at one alpha a look, more)."""

import numpy as np
import pytest
from mallard_stats.paired import compare_paired
from mallard_stats.policy import Policy
from mallard_stats.spending import at_look, look_alpha
from mallard_stats.stats import adjust_and_decide

POLICY = Policy(n_resamples=200)


def test_the_looks_spend_alpha_and_no_more():
    levels = [look_alpha(0.05, k, 6) for k in range(6)]
    assert sum(levels) == pytest.approx(0.05)
    assert levels == sorted(levels, reverse=True)  # Pocock's shape: early looks a little more
    assert levels[0] == pytest.approx(0.0126, abs=1e-4)
    assert look_alpha(0.05, 0, 1) == pytest.approx(0.05)  # no follow-ups: the whole alpha
    assert look_alpha(0.05, 9, 6) == levels[-1]  # past the plan: the last look's level
    assert at_look(POLICY, 2, 6).alpha == pytest.approx(levels[2])


def false_calls(policy: Policy, spend: bool, sims: int, seed: int) -> float:
    """A/A cells that grow as follow-ups grow them (5 pairs, then x2 each look, 6 looks),
    judged after each look; the share called IMPROVED or REGRESSED at some look."""
    rng = np.random.default_rng(seed)
    sizes = [5, 10, 20, 40, 80, 160]
    hits = 0
    for _ in range(sims):
        level = 1000.0 * (1.0 + 0.05 * rng.standard_normal(sizes[-1]))
        base = level * (1.0 + 0.01 * rng.standard_normal(sizes[-1]))
        head = level * (1.0 + 0.01 * rng.standard_normal(sizes[-1]))
        for look, n in enumerate(sizes):
            at = at_look(policy, look, len(sizes)) if spend else policy
            cell = compare_paired(list(base[:n]), list(head[:n]), policy=at)
            cell = adjust_and_decide([cell], policy, alphas=[at.alpha])[0]
            if cell.verdict in ("improved", "regressed"):
                hits += 1
                break
    return hits / sims


def test_a_null_cell_looked_at_six_times_is_falsely_called_at_most_alpha():
    """By simulation (the minimum effect of 1% is set to 0 so that only alpha gates): six
    looks at one alpha call 13% of them; spent, 4.3%: at most alpha."""
    gated_by_alpha = Policy(n_resamples=200, min_effect_pct=0.0)
    unspent = false_calls(gated_by_alpha, spend=False, sims=600, seed=1)
    spent = false_calls(gated_by_alpha, spend=True, sims=600, seed=2)
    assert unspent > 0.08, unspent
    assert spent <= 0.06, spent
