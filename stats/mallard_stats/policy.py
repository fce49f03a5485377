"""The tunable numbers of the analysis, as plain frozen dataclasses: `Policy` (the verdict
rule of a comparison cell, `stats`) and `ChangePolicy` (change points on a branch,
`changepoints`), with their defaults. The API fills them from its settings; the benches
use the defaults. docs/statistics.md explains each number.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """The tunable numbers of the verdict rule (the API reads them from its settings)."""

    alpha: float = 0.05
    min_effect_pct: float = 1.0
    min_trials: int = 5
    min_trials_deterministic: int = 2
    deterministic_tolerance_pct: float = 0.1
    deterministic_min_effect_pct: float = 0.25
    deterministic_min_count: float = 20.0
    settle_trials: int = 10
    settle_max_half_width_pct: float = 3.0
    settle_max_mde_pct: float = 2.0  # rule 4 also asks that a change this big would show
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

