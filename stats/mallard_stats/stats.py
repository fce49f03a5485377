"""One comparison cell, as pure functions: which trials are robust (median/MAD), the
ratio of medians with its bootstrap interval, the Mann-Whitney p-value, the
Benjamini-Hochberg adjustment over the primary cells, and the verdict rule, with its
deterministic variant for cachegrind's counts (rules D1-D3). docs/statistics.md states
the policy and numbers its rules. Which measures are primary, diagnostic or deterministic,
and byte measures' floor: `measures`; a cell's MDE: `power`; numbers: `policy`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

from mallard_stats.measures import floor_pct
from mallard_stats.policy import DEFAULT_POLICY, Policy
from mallard_stats.power import deterministic_mde_pct, mde_pct

VERDICTS = ("same", "improved", "regressed", "unknown")
DIAGNOSTIC = "diagnostic"  # the verdict column of a diagnostic cell: it has none


def robust_mask(values: Sequence[float] | NDArray[np.float64], k: float = 3.5) -> NDArray[np.bool_]:
    """True for robust trials, False for outliers (the median/MAD rule, docs/statistics.md)."""
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
class CellNumbers:
    """The numbers of one cell that are stored and shown (`cells.CellRow` adds what the
    cell is). Percentages are of the base median."""

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
    mde_pct: float | None = None
    paired: bool = False  # judged on pairs of rounds (``paired``): the counts are pairs
    block_effect: float = 1.0  # the pairs' design effect over blocks of rounds (``paired``)
    alpha: float | None = None  # the level of the cell's look when spent (``spending``)


@dataclass
class CellStats(CellNumbers):
    """Statistics of one cell as computed, with what only the computation knows."""

    deterministic: bool = False
    primary: bool = True
    noise_pct: float | None = None
    spread_pct: float | None = None  # a deterministic cell's values that did not repeat
    band_pct: float | None = None  # the SAME band the verdict used (``same_band``)
    min_effect_abs: float | None = None  # in the measure's unit (``measures.min_effect_abs``)

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
    min_effect_abs: float | None = None,
) -> CellStats:
    """Everything for one cell but the adjustment and verdict (:func:`adjust_and_decide`
    over all cells of a comparison, or :func:`decide` with ``p_adjusted = p_value``). A
    deterministic cell whose values did not repeat (rule D2) comes back with
    ``deterministic=False`` and its spread in ``spread_pct``. ``min_effect_abs``: the
    smallest change that counts, in the measure's unit (it widens the SAME band)."""
    b_all = np.asarray([v for v in base if v is not None and math.isfinite(v)], dtype=np.float64)
    h_all = np.asarray([v for v in head if v is not None and math.isfinite(v)], dtype=np.float64)
    if deterministic and b_all.size and h_all.size:
        spread = max(_spread_pct(b_all), _spread_pct(h_all))
        if spread > policy.deterministic_tolerance_pct:
            out = compare_samples(base, head, higher_is_better=higher_is_better,
                                  deterministic=False, primary=primary, policy=policy,
                                  min_effect_abs=min_effect_abs)
            out.spread_pct = spread
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
        min_effect_abs=min_effect_abs)
    if b.size == 0 or h.size == 0 or out.base_median == 0.0:
        return out
    assert out.base_median is not None and out.head_median is not None
    ratio = out.head_median / out.base_median
    out.ratio = ratio
    out.diff_pct = (ratio - 1.0) * 100.0
    if b.size >= 2 and h.size >= 2:
        _interval_and_p(out, b, h, ratio, policy)
    return out


def _interval_and_p(out: CellStats, b: NDArray[np.float64], h: NDArray[np.float64],
                    ratio: float, policy: Policy) -> None:
    """The bootstrap interval of the ratio of medians and the Mann-Whitney U p-value, into
    ``out`` (both sides have at least two robust values)."""
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
    """The verdict rule (docs/statistics.md), for a cell whose ``p_adjusted`` is set
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
    if n < policy.min_trials or cell.diff_pct is None:
        return "unknown"
    lo, hi, p, diff = cell.ci_low_pct, cell.ci_high_pct, cell.p_adjusted, cell.diff_pct
    if lo is None or hi is None or p is None:
        return "unknown"
    band = same_band(cell, policy)  # not deterministic here
    if -band < lo and hi < band:
        return "same"
    # a change inside the band that calls a whole interval inside it SAME is no change
    if p < policy.alpha and (lo > 0 or hi < 0) and abs(diff) >= band:
        better = (diff > 0) == cell.higher_is_better
        return "improved" if better else "regressed"
    if p >= policy.alpha and lo <= 0 <= hi and abs(diff) + standard_error_pct(
            (hi - lo) / 2.0, policy) < band and _settled(cell, policy):
        return "same"
    return "unknown"


def _settled(cell: CellStats, policy: Policy) -> bool:
    """Rule 4's evidence that "no difference" means something: enough trials ran, the
    interval is narrow, and a change of ``settle_max_mde_pct`` would have shown (without
    it, ``-0.7% ±1.9% mde 3.4%`` was called same where another run of the same comparison
    measured ``-2.7% ±1.2%``)."""
    assert cell.ci_low_pct is not None and cell.ci_high_pct is not None
    narrow = (cell.ci_high_pct - cell.ci_low_pct) / 2.0 <= (
        policy.settle_max_half_width_pct if policy.same_band_pct is None
        else policy.same_band_pct)
    sensitive = cell.mde_pct is not None and cell.mde_pct <= policy.settle_max_mde_pct
    return min(cell.n_base, cell.n_head) >= policy.settle_trials and narrow and sensitive


def standard_error_pct(half_width_pct: float, policy: Policy = DEFAULT_POLICY) -> float:
    """One standard error of a change: its interval's half-width over the normal quantile
    of the interval (1.96 at 95%). Rule 4 asks that the change plus one of them lie inside
    the band, so that a change as big as the band is not called ``same`` each time its
    estimate lands just inside."""
    return half_width_pct / float(sps.norm.ppf(0.5 + policy.confidence / 2.0))


def same_band(cell: CellStats, policy: Policy = DEFAULT_POLICY) -> float:
    """Half-width of the band inside which ``decide`` calls a cell ``same``: rule D3's
    minimum for a deterministic cell, else the calibrated band, else rule 2's minimum;
    at least the cell's ``min_effect_abs`` in percent of its base median."""
    if cell.deterministic:
        return policy.deterministic_min_effect_pct
    band = policy.same_band_pct if policy.same_band_pct is not None else policy.min_effect_pct
    return max(band, floor_pct(cell.min_effect_abs, cell.base_median))


def band_mde_pct(cell: CellStats, policy: Policy = DEFAULT_POLICY) -> float | None:
    """The cell's MDE against its SAME band: rule 3 needs ``|diff|`` at least the band, so
    a band wider than ``m`` (calibrated, or a byte measure's floor) raises the MDE."""
    band = cell.band_pct
    if cell.deterministic or cell.mde_pct is None or band is None or (
            band <= policy.min_effect_pct):
        return cell.mde_pct
    n = min(cell.robust_base, cell.robust_head)
    return mde_pct(n, cell.noise_pct, replace(policy, min_effect_pct=band), paired=cell.paired)


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
    alphas: Sequence[float] | None = None,
) -> list[CellStats]:
    """Adjust the p-values across the primary cells of one comparison (diagnostics keep
    ``p_adjusted = None``), then give each cell its verdict; ``bands[i]``, when set, is
    cell i's calibrated SAME band (rules 2 and 4, module doc), ``alphas[i]`` the level of
    cell i's look (``spending``; the policy's alpha when not given)."""
    adjusted = adjust_pvalues([c.p_value if c.primary else None for c in cells])
    out = []
    for i, (c, p) in enumerate(zip(cells, adjusted, strict=True)):
        c2 = replace(c, p_adjusted=p)
        band = bands[i] if bands is not None else None
        cell_policy = policy if band is None else replace(policy, same_band_pct=band)
        if alphas is not None and alphas[i] != policy.alpha and c.primary \
                and not c.deterministic:  # rule D3 and diagnostics test nothing
            cell_policy = replace(cell_policy, alpha=alphas[i])
            c2.alpha = alphas[i]
        c2.band_pct = same_band(c2, cell_policy) if c2.primary else None
        c2.mde_pct = band_mde_pct(c2, cell_policy)
        c2.verdict = decide(c2, cell_policy)
        out.append(c2)
    return out


def bootstrap_median_change(
    before: Sequence[float], after: Sequence[float], policy: Policy = DEFAULT_POLICY
) -> tuple[float, float, float]:
    """Change of the median from ``before`` to ``after`` in percent, with its interval
    (change detection: the two segments around a change point)."""
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
