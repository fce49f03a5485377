"""The tunable numbers of the analysis, as plain frozen dataclasses: `Policy` (the verdict
rule of a comparison cell, `stats`) and `ChangePolicy` (change points on a branch,
`changepoints`), and how the API's settings fill them in (`stats_policy`,
`change_policy`). docs/statistics.md explains each number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mallard_api.config import Settings


@dataclass(frozen=True)
class Policy:
    """The tunable numbers of the verdict rule (the API reads them from settings)."""

    alpha: float = 0.05
    min_effect_pct: float = 1.0
    min_trials: int = 5
    min_trials_deterministic: int = 1
    deterministic_tolerance_pct: float = 0.1
    deterministic_min_effect_pct: float = 0.25
    deterministic_min_count: float = 20.0
    settle_trials: int = 10
    settle_max_half_width_pct: float = 3.0
    confidence: float = 0.95
    power: float = 0.8
    target_mde_pct: float = 2.0
    max_trials: int = 1000
    n_resamples: int = 5000
    seed: int = 20261121
    outlier_k: float = 3.5
    same_band_pct: float | None = None  # a series' calibrated SAME band (stats module doc)
    min_effect_bytes: float = 262144.0  # byte measures' floor: 64 pages (docs/statistics.md)


DEFAULT_POLICY = Policy()


@dataclass(frozen=True)
class ChangePolicy:
    max_pvalue: float = 0.001
    min_magnitude: float = 0.02  # relative, 0.02 = 2%
    window_len: int = 50
    min_segment: int = 3
    confirm_pvalue: float = 0.01


DEFAULT_CHANGE_POLICY = ChangePolicy()


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
        n_resamples=s.stats_bootstrap_resamples,
        min_effect_bytes=s.stats_min_effect_bytes,
    )


def change_policy(s: Settings) -> ChangePolicy:
    return ChangePolicy(
        max_pvalue=s.changepoint_max_pvalue,
        min_magnitude=s.changepoint_min_magnitude_pct / 100,
        min_segment=s.changepoint_min_segment,
    )
