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

A series calibrated on its testbed has its own **SAME band** ``b`` (``same_band_pct``;
its calibrated CV clamped to ``[min_effect_pct, 10%]``, ``calibration.py``): rule 2 reads
``-b < lo and hi < b`` (the interval inside the band the testbed's own noise allows) and
rule 4 bounds the half-width by ``b`` instead of ``settle_max_half_width_pct``. Rule 3 is
unchanged: a change of at least ``m`` is still a verdict when the test says so.
5. ``unknown`` otherwise: the interval straddles the band edge, or the effect is
   significant but smaller than the band can decide, or too few trials to settle.
   A comparison asks for more trials (a follow-up) while unknowns remain, up to a cap.

Which measures get a verdict
----------------------------
This module is the one place that says it (``measure_role``):

* **primary** measures get a verdict and take part in the multiple-comparison
  correction: ``PRIMARY_MEASURES`` (``ops_per_sec``, ``max_rss_bytes``,
  ``instructions``, ``llc_misses``) plus any measure the request names (a comparison's
  hypothesis names one);
* every other measure is a **diagnostic** (wall/user/sys seconds, ``ns_per_op``, the
  other RSS figures, ``d1_misses``, the ``hw_*`` counters, allocator counters): its
  difference and interval are computed and shown under its cell, its verdict is
  ``DIAGNOSTIC`` and its p-value is left out of the correction.

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
    MDE of such a cell is ``max(t, e, 100 * c / base median)``.

Minimum detectable effect (MDE)
-------------------------------
The smallest true change that the noisy rule above calls ``improved``/``regressed``
in 80% of repetitions (``power``), at the cell's trial count and noise, before the
multiple-comparison correction. With ``n`` the robust trials of the smaller side,
``sigma`` the noise (the robust CV, ``1.4826 * MAD / median`` in percent, the root
mean square of the two sides), ``s = sqrt(pi/2) * sigma * sqrt(2/n)`` the standard
error of the change of two medians (a median of normal data has ``pi/2`` times the
variance of a mean) and ``q(p)`` the ``p`` quantile of Student's t with ``2n - 2``
degrees of freedom::

    crit = max(q((1 + confidence) / 2) * s,                    # interval excludes 0
               q(1 - alpha / 2) * sqrt(pi/3) * sigma * sqrt(2/n))  # Mann-Whitney, ARE 3/pi
    mde  = max(crit, min_effect_pct) + q(power) * s

The three gates of rule 3 (interval, p-value, ``|diff| >= m``) act on nearly the same
statistic, so the change must clear the highest of them with 80% probability; the
percentile bootstrap of medians is the binding one for normal noise. Checked by
simulation (api/tests/test_stats.py): at 0.8 x MDE the simulated rule detects less
than 80% of the time, at 1.2 x MDE more. ``None`` when fewer than ``min_trials``
robust trials ran (rule 1: nothing is detectable). :func:`trials_for_mde` inverts it:
the trials a side needs for a target MDE (``target_mde_pct``, default 2%).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

VERDICTS = ("same", "improved", "regressed", "unknown")
DIAGNOSTIC = "diagnostic"  # the verdict column of a diagnostic cell: it has none

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
    "d1_misses": ("count", False),
    "llc_misses": ("count", False),
    "hw_instructions": ("count", False),
    "hw_cycles": ("count", False),
    "hw_llc_misses": ("count", False),
    "ns_per_op": ("ns", False),
    "transfer_insert_hit_ratio": ("ratio", True),
    "transfer_remove_hit_ratio": ("ratio", True),
}

# Counted by simulation (valgrind cachegrind): the same on every run (module doc).
DETERMINISTIC_MEASURES = frozenset({"instructions", "d1_misses", "llc_misses"})
# Get a verdict; every other measure is a diagnostic (module doc).
PRIMARY_MEASURES = frozenset({"ops_per_sec", "max_rss_bytes", "instructions", "llc_misses"})

LOWER_IS_BETTER_SUFFIXES = ("_seconds", "_bytes", "_ns", "_per_op", "_misses", "_instructions",
                            "_cycles")


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


def is_deterministic(measure: str) -> bool:
    """True for valgrind's counts; never for perf's ``hw_*`` counters."""
    return measure in DETERMINISTIC_MEASURES


def is_primary(measure: str, requested: Iterable[str] = ()) -> bool:
    return measure in PRIMARY_MEASURES or measure in set(requested)


def measure_role(measure: str, requested: Iterable[str] = ()) -> str:
    """``primary`` (gets a verdict) or ``diagnostic`` (shown, never judged)."""
    return "primary" if is_primary(measure, requested) else "diagnostic"


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
    same_band_pct: float | None = None  # a series' calibrated SAME band (module doc)


DEFAULT_POLICY = Policy()


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


# Standard error factors relative to sigma * sqrt(2/n) (module doc, MDE).
MEDIAN_SE = math.sqrt(math.pi / 2.0)  # a median's standard error over a mean's (normal data)
RANK_SE = math.sqrt(math.pi / 3.0)  # Mann-Whitney's asymptotic relative efficiency is 3/pi


def mde_pct(n: int, noise_pct: float | None, policy: Policy = DEFAULT_POLICY) -> float | None:
    """The minimum detectable effect (percent) of the noisy rule with ``n`` robust trials a
    side and noise ``noise_pct`` (robust CV, percent): the formula of the module doc."""
    if noise_pct is None or not math.isfinite(noise_pct) or n < max(2, policy.min_trials):
        return None
    unit = noise_pct * math.sqrt(2.0 / n)
    df = 2 * n - 2
    q = sps.t.ppf
    se = MEDIAN_SE * unit
    crit = max(float(q((1.0 + policy.confidence) / 2.0, df)) * se,
               float(q(1.0 - policy.alpha / 2.0, df)) * RANK_SE * unit)
    return max(crit, policy.min_effect_pct) + float(q(policy.power, df)) * se


def deterministic_mde_pct(policy: Policy = DEFAULT_POLICY, base: float | None = None) -> float:
    """A deterministic cell decides any change above all three thresholds (rule D3)."""
    floor = 100.0 * policy.deterministic_min_count / abs(base) if base else 0.0
    return max(policy.deterministic_tolerance_pct, policy.deterministic_min_effect_pct, floor)


def trials_for_mde(noise_pct: float, target_pct: float | None = None,
                   policy: Policy = DEFAULT_POLICY) -> int | None:
    """Trials a side needs so that the MDE is at most ``target_pct`` (default the policy's
    ``target_mde_pct``) at this noise; ``None`` when no count up to ``max_trials`` reaches it
    (a target at or below ``min_effect_pct`` never is)."""
    target = policy.target_mde_pct if target_pct is None else target_pct
    lo = max(2, policy.min_trials)
    hi = policy.max_trials
    top = mde_pct(hi, noise_pct, policy)
    if top is None or top > target:
        return None
    while lo < hi:  # the MDE falls as n grows: the first n at or under the target
        mid = (lo + hi) // 2
        m = mde_pct(mid, noise_pct, policy)
        if m is not None and m <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


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
    band = policy.same_band_pct if policy.same_band_pct is not None else m
    if -band < lo and hi < band:
        return "same"
    if p < policy.alpha and (lo > 0 or hi < 0) and abs(diff) >= m:
        better = (diff > 0) == cell.higher_is_better
        return "improved" if better else "regressed"
    ran = min(cell.n_base, cell.n_head)
    narrow = (hi - lo) / 2.0 <= (policy.settle_max_half_width_pct
                                 if policy.same_band_pct is None else policy.same_band_pct)
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
    cells: Sequence[CellStats], policy: Policy = DEFAULT_POLICY,
    bands: Sequence[float | None] | None = None,
) -> list[CellStats]:
    """Adjust the p-values across the primary cells of one comparison (diagnostics keep
    ``p_adjusted = None``), then give each cell its verdict; ``bands[i]``, when set, is
    cell i's calibrated SAME band (rules 2 and 4, module doc)."""
    adjusted = adjust_pvalues([c.p_value if c.primary else None for c in cells])
    out = []
    for i, (c, p) in enumerate(zip(cells, adjusted, strict=True)):
        c2 = replace(c, p_adjusted=p)
        band = bands[i] if bands is not None else None
        c2.verdict = decide(c2, policy if band is None
                            else replace(policy, same_band_pct=band))
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
