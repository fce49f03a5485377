"""The statistics policy of DESIGN.md ("How a verdict is reached"), as pure functions.

One *cell* is one workload x params x measure of a comparison: the robust
trials of the base against the robust trials of the head.

Per cell
--------
* **Outliers** are *marked*, never dropped from storage: a trial is robust when
  ``|x - median| <= k * scale`` with ``k = 3.5`` and ``scale = 1.4826 * MAD``
  (the MAD scaled to a normal sigma; Iglewicz & Hoaglin's modified z-score).
  When the MAD is 0 (more than half the trials identical) the scale falls back to
  ``1.2533 * mean absolute deviation``; when that is 0 too every trial is
  identical and robust (deterministic measures such as callgrind instructions).
  The report says "10 trials, 9 robust"; the statistics below use robust trials.
* **Difference**: ``ratio = median(head) / median(base)``, shown as
  ``diff_pct = (ratio - 1) * 100``. Its confidence interval is a seeded
  two-sample percentile bootstrap of that ratio (``scipy.stats.bootstrap``,
  independent resampling of each side; percentile rather than BCa because BCa is
  undefined for zero-variance cells). A fixed seed makes every report
  reproducible.
* **p-value**: two-sided Mann-Whitney U (``scipy.stats.mannwhitneyu``); 1.0 when
  every robust value on both sides is identical.

Across the cells of one comparison
----------------------------------
p-values are adjusted with **Benjamini-Hochberg** (``scipy.stats.false_discovery_control``).
Why BH and not Holm: a comparison tests tens of cells (workloads x threads x
measures) that are strongly *positively* dependent (one code change moves
``ops_per_sec`` and ``wall_seconds`` together), the setting in which BH controls
the false discovery rate; Holm controls the family-wise error and, with tens of
cells, turns most real 2-5% effects into ``unknown``, which costs a follow-up run
each. A false ``regressed`` is further guarded by the effect-size gate below
(|change| >= the minimum effect and an interval excluding 0), so the FDR is the
right error to spend.

Verdict rule (exact, in this order)
-----------------------------------
With ``nb, nh`` the robust trials per side, ``[lo, hi]`` the interval of the
change in percent, ``p`` the adjusted p-value, ``m`` the minimum effect (percent,
setting ``min_effect_pct``, default 1.0) and ``alpha`` (default 0.05):

1. ``unknown`` when ``min(nb, nh) < min_trials`` (default 5) or the ratio is
   undefined (base median 0).
2. ``same`` when ``-m < lo`` and ``hi < m``: the whole interval lies inside the
   practical-equivalence band (equivalence by confidence interval).
3. ``improved`` / ``regressed`` when ``p < alpha`` and the interval excludes 0
   (``lo > 0`` or ``hi < 0``) and ``|diff| >= m``. The direction of the change
   (head above or below base) becomes better/worse through the measure's
   ``higher_is_better`` (contracts section 4).
4. ``same`` when ``p >= alpha``, the interval contains 0, ``|diff| < m``, at least
   ``settle_trials`` (default 10) trials ran per side (robust or not) and the interval
   is no wider than ``±settle_max_half_width_pct`` (default 3%): no evidence of a
   difference, a point estimate inside the band, enough trials to have looked, and
   an interval narrow enough that "same" means something (a ±16% interval is
   ``unknown``, however many trials ran).
5. ``unknown`` otherwise: the interval straddles the band edge, or the effect is
   significant but smaller than the band can decide, or too few trials to settle.
   A comparison asks for more trials (a follow-up) while unknowns remain, up to a cap.

Deterministic measures (``DETERMINISTIC_MEASURES``: callgrind's ``instructions``)
do not depend on timing, so their trials vary by a few instructions at most and a
rank test has nothing to add (with 3 trials a side Mann-Whitney cannot go below
p = 0.1). For them rule 1 needs only ``min_trials_deterministic`` (default 3)
robust trials, and rule 3 needs no p-value: the interval excluding 0 and
``|diff| >= m`` decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

VERDICTS = ("same", "improved", "regressed", "unknown")

# contracts.md section 4: measure -> (unit, higher_is_better)
MEASURES: dict[str, tuple[str, bool]] = {
    "ops_per_sec": ("ops/s", True),
    "wall_seconds": ("s", False),
    "user_seconds": ("s", False),
    "sys_seconds": ("s", False),
    "max_rss_bytes": ("bytes", False),
    "final_rss_bytes": ("bytes", False),
    "peak_rss_bytes": ("bytes", False),
    "instructions": ("count", False),
    "ns_per_op": ("ns", False),
    "transfer_insert_hit_ratio": ("ratio", True),
    "transfer_remove_hit_ratio": ("ratio", True),
}


# Measures whose value does not depend on timing (see the verdict rule above).
DETERMINISTIC_MEASURES = frozenset({"instructions"})

LOWER_IS_BETTER_SUFFIXES = ("_seconds", "_bytes", "_ns", "_per_op", "_misses", "_instructions")


def higher_is_better(measure: str, default: bool = True) -> bool:
    """Direction of a measure per contracts section 4. A name not in the table is judged by
    its unit-like suffix (times, sizes, costs per operation and misses are lower-is-better),
    else ``default``. The measures table of the database, when it says, comes first."""
    entry = MEASURES.get(measure)
    if entry:
        return entry[1]
    if measure.endswith(LOWER_IS_BETTER_SUFFIXES):
        return False
    return default


@dataclass(frozen=True)
class Policy:
    """The tunable numbers of the verdict rule (the API reads them from settings)."""

    alpha: float = 0.05
    min_effect_pct: float = 1.0
    min_trials: int = 5
    min_trials_deterministic: int = 3
    settle_trials: int = 10
    settle_max_half_width_pct: float = 3.0
    confidence: float = 0.95
    n_resamples: int = 5000
    seed: int = 20261121
    outlier_k: float = 3.5


DEFAULT_POLICY = Policy()


def robust_mask(values: Sequence[float] | NDArray[np.float64], k: float = 3.5) -> NDArray[np.bool_]:
    """True for robust trials, False for outliers (median/MAD rule, see module doc)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=bool)
    med = float(np.median(x))
    dev = np.abs(x - med)
    scale = 1.4826 * float(np.median(dev))
    if scale == 0.0:
        scale = 1.2533 * float(np.mean(dev))
    if scale == 0.0:
        return np.ones(x.size, dtype=bool)
    return np.asarray(dev <= k * scale, dtype=bool)


def _median_ratio(head: NDArray[np.float64], base: NDArray[np.float64], axis: int = -1) -> Any:
    return np.median(head, axis=axis) / np.median(base, axis=axis)


@dataclass
class CellStats:
    """Statistics of one cell. Percentages are of the base median."""

    n_base: int
    n_head: int
    robust_base: int
    robust_head: int
    base_median: float | None
    head_median: float | None
    ratio: float | None
    diff_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    p_adjusted: float | None = None
    verdict: str = "unknown"
    higher_is_better: bool = True
    deterministic: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def half_width_pct(self) -> float | None:
        if self.ci_low_pct is None or self.ci_high_pct is None:
            return None
        return (self.ci_high_pct - self.ci_low_pct) / 2.0


def compare_samples(
    base: Sequence[float],
    head: Sequence[float],
    *,
    higher_is_better: bool = True,
    deterministic: bool = False,
    policy: Policy = DEFAULT_POLICY,
) -> CellStats:
    """Everything for one cell except the multiple-comparison adjustment and verdict.

    Call :func:`adjust_and_decide` over all cells of a comparison afterwards (or
    :func:`decide` with ``p_adjusted = p_value`` for a lone cell).
    """
    b_all = np.asarray([v for v in base if v is not None and math.isfinite(v)], dtype=np.float64)
    h_all = np.asarray([v for v in head if v is not None and math.isfinite(v)], dtype=np.float64)
    b = b_all[robust_mask(b_all, policy.outlier_k)]
    h = h_all[robust_mask(h_all, policy.outlier_k)]
    out = CellStats(
        n_base=int(b_all.size), n_head=int(h_all.size),
        robust_base=int(b.size), robust_head=int(h.size),
        base_median=float(np.median(b)) if b.size else None,
        head_median=float(np.median(h)) if h.size else None,
        ratio=None, diff_pct=None, ci_low_pct=None, ci_high_pct=None, p_value=None,
        higher_is_better=higher_is_better, deterministic=deterministic,
    )
    if b.size == 0 or h.size == 0 or out.base_median == 0.0:
        return out
    assert out.base_median is not None and out.head_median is not None
    ratio = out.head_median / out.base_median
    out.ratio = ratio
    out.diff_pct = (ratio - 1.0) * 100.0
    if b.size >= 2 and h.size >= 2:
        if np.ptp(b) == 0.0 and np.ptp(h) == 0.0:
            lo = hi = ratio  # zero variance on both sides: the bootstrap can only say this
        else:
            res = sps.bootstrap(
                (h, b), _median_ratio, vectorized=True, paired=False, method="percentile",
                n_resamples=policy.n_resamples, confidence_level=policy.confidence,
                rng=np.random.default_rng(policy.seed),
            )
            lo = float(res.confidence_interval.low)
            hi = float(res.confidence_interval.high)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                lo, hi = math.nan, math.nan
        if math.isfinite(lo):
            out.ci_low_pct = (lo - 1.0) * 100.0
            out.ci_high_pct = (hi - 1.0) * 100.0
        if np.ptp(np.concatenate([b, h])) == 0.0:
            out.p_value = 1.0
        else:
            out.p_value = float(sps.mannwhitneyu(h, b, alternative="two-sided").pvalue)
    return out


def decide(cell: CellStats, policy: Policy = DEFAULT_POLICY) -> str:
    """The verdict rule of the module doc, for a cell whose ``p_adjusted`` is set."""
    m = policy.min_effect_pct
    n = min(cell.robust_base, cell.robust_head)
    need = policy.min_trials_deterministic if cell.deterministic else policy.min_trials
    if n < need or cell.diff_pct is None:
        return "unknown"
    lo, hi, p, diff = cell.ci_low_pct, cell.ci_high_pct, cell.p_adjusted, cell.diff_pct
    if lo is None or hi is None or p is None:
        return "unknown"
    if -m < lo and hi < m:
        return "same"
    if (cell.deterministic or p < policy.alpha) and (lo > 0 or hi < 0) and abs(diff) >= m:
        better = (diff > 0) == cell.higher_is_better
        return "improved" if better else "regressed"
    ran = min(cell.n_base, cell.n_head)
    narrow = (hi - lo) / 2.0 <= policy.settle_max_half_width_pct
    if (p >= policy.alpha and lo <= 0 <= hi and abs(diff) < m and ran >= policy.settle_trials
            and narrow):
        return "same"
    return "unknown"


def adjust_pvalues(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values; ``None`` entries stay ``None``."""
    idx = [i for i, p in enumerate(p_values) if p is not None and math.isfinite(p)]
    out: list[float | None] = [None] * len(p_values)
    if idx:
        adj = sps.false_discovery_control([float(p_values[i]) for i in idx], method="bh")  # type: ignore[arg-type]
        for i, a in zip(idx, np.atleast_1d(adj), strict=True):
            out[i] = float(a)
    return out


def adjust_and_decide(
    cells: Sequence[CellStats], policy: Policy = DEFAULT_POLICY
) -> list[CellStats]:
    """Adjust the p-values across all cells of one comparison, then give each its verdict."""
    adjusted = adjust_pvalues([c.p_value for c in cells])
    out = []
    for c, p in zip(cells, adjusted, strict=True):
        c2 = replace(c, p_adjusted=p)
        c2.verdict = decide(c2, policy)
        out.append(c2)
    return out


def bootstrap_median_change(
    before: Sequence[float], after: Sequence[float], policy: Policy = DEFAULT_POLICY
) -> tuple[float, float, float]:
    """Change of the median from ``before`` to ``after`` in percent, with its interval.

    Used by change detection for the two segments around a change point.
    """
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    mb = float(np.median(b))
    if mb == 0.0:
        return math.nan, math.nan, math.nan
    change = (float(np.median(a)) / mb - 1.0) * 100.0
    if b.size < 2 or a.size < 2 or (np.ptp(b) == 0.0 and np.ptp(a) == 0.0):
        return change, change, change
    res = sps.bootstrap(
        (a, b), _median_ratio, vectorized=True, paired=False, method="percentile",
        n_resamples=policy.n_resamples, confidence_level=policy.confidence,
        rng=np.random.default_rng(policy.seed),
    )
    lo = (float(res.confidence_interval.low) - 1.0) * 100.0
    hi = (float(res.confidence_interval.high) - 1.0) * 100.0
    return change, lo, hi
