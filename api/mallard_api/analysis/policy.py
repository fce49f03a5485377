"""How the API's settings fill the statistics' tunable numbers (`mallard_stats.policy`):
`stats_policy` (the verdict rule of a comparison cell) and `change_policy` (change points
on a branch). docs/statistics.md explains each number.
"""

from __future__ import annotations

from mallard_stats.policy import ChangePolicy, Policy

from mallard_api.config import Settings


def stats_policy(s: Settings) -> Policy:
    return Policy(
        alpha=s.stats_alpha,
        min_effect_pct=s.stats_min_effect_pct,
        min_trials=s.stats_min_trials,
        min_trials_deterministic=s.stats_min_trials_deterministic,
        deterministic_tolerance_pct=s.stats_deterministic_tolerance_pct,
        deterministic_min_effect_pct=s.stats_deterministic_min_effect_pct,
        deterministic_min_count=s.stats_deterministic_min_count,
        target_mde_pct=s.stats_target_mde_pct,
        settle_trials=s.stats_settle_trials,
        settle_max_half_width_pct=s.stats_settle_max_half_width_pct,
        settle_max_mde_pct=s.stats_settle_max_mde_pct,
        n_resamples=s.stats_bootstrap_resamples,
        min_effect_bytes=s.stats_min_effect_bytes,
    )


def change_policy(s: Settings) -> ChangePolicy:
    return ChangePolicy(
        max_pvalue=s.changepoint_max_pvalue,
        min_magnitude=s.changepoint_min_magnitude_pct / 100,
        min_segment=s.changepoint_min_segment,
    )
