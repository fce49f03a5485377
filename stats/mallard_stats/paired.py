"""One cell from interleaved trials taken as pairs: round i's base trial against round i's
head trial (docs/statistics.md, "Paired by round").

The runner runs trial i of every side in round i, so a drift of the machine that lasts
longer than a round (a neighbour's build, the VM's host, a frequency step) moves both
trials of a round alike. ``stats.compare_samples`` resamples each side on its own and
so counts that drift as noise of both sides; here each round gives one log ratio
``log(head_i / base_i)`` in which the drift cancels. The difference is the median of
those ratios, its interval the distribution-free interval of a median from the order
statistics, interpolated (Hettmansperger and Sheather 1986: ``median_interval``; a
percentile bootstrap of the median covers only 90-92% at 10-40 rounds, this one 94-96%,
stats/tests/test_paired.py), the p-value a one-sample t-test of the robust log ratios; a
round whose ratio lies beyond the median/MAD rule's bound is an outlier
(``stats.robust_mask``), as a trial is there. The MDE is ``power.mde_pct``'s paired form.
Not a rank test: with the handful of rounds a table runs, an exact signed-rank test
cannot go below p = 2 / 2^n (1/64 at 7 rounds, 1/16 at 5), so after the
Benjamini-Hochberg adjustment over a table's cells no cell could clear alpha; the
outlier rule has already taken out the rounds that would break the t-test's normality.
The result is a ``CellStats`` that ``stats.adjust_and_decide`` judges by the same rule
as any other cell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

from mallard_stats.policy import DEFAULT_POLICY, Policy
from mallard_stats.power import mde_pct
from mallard_stats.stats import CellStats, robust_cv_pct, robust_mask


def _usable(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0.0


def median_interval(values: NDArray[np.float64], confidence: float) -> tuple[float, float]:
    """The interval of the median of ``values`` at ``confidence``: the order statistics
    ``x(k)`` and ``x(n-k+1)`` whose binomial coverage is the smallest at or above it,
    interpolated towards the next pair inward (Hettmansperger-Sheather), so that it covers
    about ``confidence`` whatever the distribution; the whole range when even that covers
    less (too few values)."""
    x = np.sort(values)
    n = int(x.size)

    def coverage(k: int) -> float:  # of [x(k), x(n-k+1)], 1-based
        return float(1.0 - 2.0 * sps.binom.cdf(k - 1, n, 0.5))

    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= confidence:
        k += 1
    if k + 1 > n // 2 or coverage(k) < confidence:
        return float(x[0]), float(x[-1])
    g, g_in = coverage(k), coverage(k + 1)
    share = (g - confidence) / (g - g_in)
    lam = (n - k) * share / (k + (n - 2 * k) * share)
    low = (1.0 - lam) * x[k - 1] + lam * x[k]
    high = (1.0 - lam) * x[n - k] + lam * x[n - k - 1]
    return float(low), float(high)


def compare_paired(
    base: Sequence[float | None],
    head: Sequence[float | None],
    *,
    higher_is_better: bool = True,
    primary: bool = True,
    policy: Policy = DEFAULT_POLICY,
) -> CellStats:
    """``base[i]`` and ``head[i]`` ran in round i. A round missing either side (``None``,
    not finite, not positive) is left out; ``n_base``/``n_head`` count the rounds kept,
    ``robust_*`` those within the outlier bound. ``noise_pct`` is the rounds' log-ratio
    scatter over sqrt(2), so that ``power.mde_pct``'s two-sided formula gives the paired
    standard error (its ``sigma * sqrt(2/n)`` is then the ratios' scatter over sqrt(n))."""
    if len(base) != len(head):
        raise ValueError(f"paired sides differ in length: {len(base)} base, {len(head)} head")
    pairs = [(b, h) for b, h in zip(base, head, strict=True) if _usable(b) and _usable(h)]
    b_all = np.asarray([float(b) for b, _ in pairs if b is not None], dtype=np.float64)
    h_all = np.asarray([float(h) for _, h in pairs if h is not None], dtype=np.float64)
    logs_all = np.log(h_all) - np.log(b_all)
    keep = robust_mask(logs_all, policy.outlier_k)
    logs, b, h = logs_all[keep], b_all[keep], h_all[keep]
    n = int(logs.size)
    scatter = robust_cv_pct(np.exp(logs)) if n >= 2 else None
    noise = scatter / math.sqrt(2.0) if scatter is not None else None
    out = CellStats(
        n_base=int(b_all.size), n_head=int(h_all.size), robust_base=n, robust_head=n,
        base_median=float(np.median(b)) if n else None,
        head_median=float(np.median(h)) if n else None,
        ratio=None, diff_pct=None, ci_low_pct=None, ci_high_pct=None, p_value=None,
        higher_is_better=higher_is_better, deterministic=False, primary=primary,
        noise_pct=noise, mde_pct=mde_pct(n, noise, policy, paired=True), paired=True)
    if n == 0:
        return out
    ratio = math.exp(float(np.median(logs)))
    out.ratio = ratio
    out.diff_pct = (ratio - 1.0) * 100.0
    if n < 2:
        return out
    low, high = median_interval(logs, policy.confidence)
    lo, hi = math.exp(low), math.exp(high)
    out.ci_low_pct = (lo - 1.0) * 100.0
    out.ci_high_pct = (hi - 1.0) * 100.0
    if np.ptp(logs) == 0.0:
        # every round the same ratio: no difference at all, or one beyond any doubt
        out.p_value = 1.0 if logs[0] == 0.0 else 0.0
    else:
        out.p_value = float(sps.ttest_1samp(logs, 0.0).pvalue)
    return out
