"""The statistics policy (how a comparison reaches a verdict), as pure functions.

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
The p-values of the *primary* cells (below) are adjusted with **Benjamini-Hochberg**
(``scipy.stats.false_discovery_control``); diagnostics take no part.
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

Deterministic measures (one valgrind run per side)
--------------------------------------------------
``DETERMINISTIC_MEASURES`` (``instructions``, ``d1_misses``, ``llc_misses``) are counted
by valgrind's cachegrind (instructions executed, simulated D1 and last-level misses),
which gives the same count on every run of a workload that repeats (the runner runs
only those under valgrind; runner/README.md lists them with their measured spread).
Hardware counters from ``perf`` (``hw_instructions``, ``hw_cycles``,
``hw_llc_misses``) are *not* deterministic: they are judged by the rule above like
any timing. With ``t`` = ``deterministic_tolerance_pct`` (default 0.1, the
repeatability bound), ``e`` = ``deterministic_min_effect_pct`` (default 0.25) and
``c`` = ``deterministic_min_count`` (default 20: small counts, such as a workload's
1,500 LLC misses, wobble by a few units from run to run under valgrind):

D1. ``unknown`` when a side has fewer than ``min_trials_deterministic`` (default 1)
    values or the base median is 0.
D2. When a side's values deviate from their median by more than ``t`` (a follow-up
    that repeats the run gives a second value), the count did not repeat: the cell is
    judged by the noisy rule above instead (rank test, interval, trials).
D3. Otherwise ``diff`` is the change of the medians; the interval is the range of
    ``head_i / base_j - 1`` over all pairs (one point with one value a side); there is
    no p-value. ``improved`` / ``regressed`` when ``|diff| > t``, ``|diff| >= e`` and
    the medians differ by at least ``c`` counts; ``same`` otherwise. So +0.5%
    instructions is ``regressed`` on every run, and a 0.05% wobble is ``same``. The
    MDE of such a cell is ``max(t, e, 100 * c / base median)`` (``power``).

Which measures are primary, diagnostic or deterministic: ``measures``. The minimum
detectable effect of a cell: ``power``. The tunable numbers: ``policy.Policy``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

from mallard_api.analysis.policy import DEFAULT_POLICY, Policy
from mallard_api.analysis.power import deterministic_mde_pct, mde_pct

VERDICTS = ("same", "improved", "regressed", "unknown")
DIAGNOSTIC = "diagnostic"  # the verdict column of a diagnostic cell: it has none


def robust_mask(values: Sequence[float] | NDArray[np.float64], k: float = 3.5) -> NDArray[np.bool_]:
    """True for robust trials, False for outliers (median/MAD rule, see module doc)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=bool)
    dev = np.abs(x - float(np.median(x)))
    scale = _robust_scale(dev)
    if scale == 0.0:
        return np.ones(x.size, dtype=bool)
    return np.asarray(dev <= k * scale, dtype=bool)


def _robust_scale(dev: NDArray[np.float64]) -> float:
    """A normal sigma from absolute deviations from the median: 1.4826 * MAD, else (MAD 0)
    1.2533 * the mean absolute deviation."""
    scale = 1.4826 * float(np.median(dev))
    return scale if scale != 0.0 else 1.2533 * float(np.mean(dev))


def robust_cv_pct(values: Sequence[float] | NDArray[np.float64]) -> float | None:
    """The noise of one side: ``1.4826 * MAD / median`` in percent (the mean absolute
    deviation scaled likewise when the MAD is 0); ``None`` under 2 values or median 0."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return None
    med = float(np.median(x))
    if med == 0.0:
        return None
    return 100.0 * _robust_scale(np.abs(x - med)) / abs(med)


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
    primary: bool = True
    mde_pct: float | None = None
    noise_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def half_width_pct(self) -> float | None:
        if self.ci_low_pct is None or self.ci_high_pct is None:
            return None
        return (self.ci_high_pct - self.ci_low_pct) / 2.0


def _spread_pct(x: NDArray[np.float64]) -> float:
    """The largest deviation from the median, in percent of it (rule D2)."""
    med = float(np.median(x))
    if med == 0.0:
        return 0.0 if not np.any(x) else math.inf
    return float(np.max(np.abs(x / med - 1.0))) * 100.0


def compare_samples(
    base: Sequence[float],
    head: Sequence[float],
    *,
    higher_is_better: bool = True,
    deterministic: bool = False,
    primary: bool = True,
    policy: Policy = DEFAULT_POLICY,
) -> CellStats:
    """Everything for one cell except the multiple-comparison adjustment and verdict.

    Call :func:`adjust_and_decide` over all cells of a comparison afterwards (or
    :func:`decide` with ``p_adjusted = p_value`` for a lone cell). A deterministic cell
    whose values did not repeat (rule D2) comes back with ``deterministic=False`` and its
    spread in ``extra["spread_pct"]``.
    """
    b_all = np.asarray([v for v in base if v is not None and math.isfinite(v)], dtype=np.float64)
    h_all = np.asarray([v for v in head if v is not None and math.isfinite(v)], dtype=np.float64)
    if deterministic and b_all.size and h_all.size:
        spread = max(_spread_pct(b_all), _spread_pct(h_all))
        if spread > policy.deterministic_tolerance_pct:
            out = compare_samples(base, head, higher_is_better=higher_is_better,
                                  deterministic=False, primary=primary, policy=policy)
            out.extra["spread_pct"] = spread
            return out
        return _compare_deterministic(b_all, h_all, higher_is_better, primary, policy)
    b = b_all[robust_mask(b_all, policy.outlier_k)]
    h = h_all[robust_mask(h_all, policy.outlier_k)]
    noises = [c for c in (robust_cv_pct(b), robust_cv_pct(h)) if c is not None]
    noise = math.sqrt(sum(c * c for c in noises) / len(noises)) if noises else None
    out = CellStats(
        n_base=int(b_all.size), n_head=int(h_all.size),
        robust_base=int(b.size), robust_head=int(h.size),
        base_median=float(np.median(b)) if b.size else None,
        head_median=float(np.median(h)) if h.size else None,
        ratio=None, diff_pct=None, ci_low_pct=None, ci_high_pct=None, p_value=None,
        higher_is_better=higher_is_better, deterministic=False, primary=primary,
        noise_pct=noise, mde_pct=mde_pct(int(min(b.size, h.size)), noise, policy),
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


def _compare_deterministic(b: NDArray[np.float64], h: NDArray[np.float64], hib: bool,
                           primary: bool, policy: Policy) -> CellStats:
    """Rule D3: medians, the range of all pair ratios as the interval, no p-value."""
    bm, hm = float(np.median(b)), float(np.median(h))
    out = CellStats(
        n_base=int(b.size), n_head=int(h.size), robust_base=int(b.size),
        robust_head=int(h.size), base_median=bm, head_median=hm, ratio=None, diff_pct=None,
        ci_low_pct=None, ci_high_pct=None, p_value=None, higher_is_better=hib,
        deterministic=True, primary=primary, noise_pct=0.0,
        mde_pct=deterministic_mde_pct(policy, bm))
    if bm == 0.0:
        return out
    out.ratio = hm / bm
    out.diff_pct = (out.ratio - 1.0) * 100.0
    pairs = np.divide.outer(h, b)
    out.ci_low_pct = (float(np.min(pairs)) - 1.0) * 100.0
    out.ci_high_pct = (float(np.max(pairs)) - 1.0) * 100.0
    return out


def decide(cell: CellStats, policy: Policy = DEFAULT_POLICY) -> str:
    """The verdict rule of the module doc, for a cell whose ``p_adjusted`` is set
    (deterministic and diagnostic cells need none)."""
    if not cell.primary:
        return DIAGNOSTIC
    n = min(cell.robust_base, cell.robust_head)
    if cell.deterministic:
        if n < policy.min_trials_deterministic or cell.diff_pct is None:
            return "unknown"
        change = abs(cell.diff_pct)
        counts = abs((cell.head_median or 0.0) - (cell.base_median or 0.0))
        if change > policy.deterministic_tolerance_pct and (
                change >= policy.deterministic_min_effect_pct) and (
                counts >= policy.deterministic_min_count):
            return "improved" if (cell.diff_pct > 0) == cell.higher_is_better else "regressed"
        return "same"
    m = policy.min_effect_pct
    if n < policy.min_trials or cell.diff_pct is None:
        return "unknown"
    lo, hi, p, diff = cell.ci_low_pct, cell.ci_high_pct, cell.p_adjusted, cell.diff_pct
    if lo is None or hi is None or p is None:
        return "unknown"
    if -m < lo and hi < m:
        return "same"
    if p < policy.alpha and (lo > 0 or hi < 0) and abs(diff) >= m:
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
    """Adjust the p-values across the primary cells of one comparison (diagnostics keep
    ``p_adjusted = None``), then give each cell its verdict."""
    adjusted = adjust_pvalues([c.p_value if c.primary else None for c in cells])
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
