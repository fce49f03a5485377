"""One cell from interleaved trials taken as pairs: round i's base trial against round i's
head trial (docs/statistics.md, "Paired by round").

The runner runs trial i of every side in round i, so a drift of the machine that lasts
longer than a round (a neighbour's build, the VM's host, a frequency step) moves both
trials of a round alike. ``stats.compare_samples`` resamples each side on its own and
so counts that drift as noise of both sides; here each round gives one log ratio
``log(head_i / base_i)`` in which the drift cancels. A round whose ratio lies beyond the
median/MAD rule's bound is an outlier (``stats.robust_mask``), as a trial is there. One
statistic then serves the change, its interval, its p-value and its MDE: the **10%
trimmed mean** of the robust log ratios with Yuen's standard error (from the winsorized
standard deviation; his one-sample t-test and interval on it), and that
standard error times ``sqrt(n / 2)`` as the cell's noise (so that ``power.mde_pct``'s
paired form gives it back). Not the median: on the ratios of the demo's comparison,
resampled 40 at a time, the median scattered up to 1.26x as far as the mean (broad, flat
ratios: fragmentation, fastpath, cache-scratch) and the mean up to 1.22x as far as the
median (heavier tails: rpc, xmalloc at 2 threads), while the trimmed mean stayed within
0.90-1.12x of the better of the two, never past the worse (docs/statistics.md, "Paired
by round"). And a test on the mean beside a change read from the median could disagree
with itself. Not a rank test: with the handful of rounds a table runs, an exact
signed-rank test cannot go below p = 2 / 2^n (1/64 at 7 rounds, 1/16 at 5), so after the
Benjamini-Hochberg adjustment over a table's cells no cell could clear alpha; the outlier
rule has already taken out the rounds that would break the t-test's normality.
The result is a ``CellStats`` that ``stats.adjust_and_decide`` judges by the same rule
as any other cell.

**Blocks of rounds.** Pairing cancels a drift slower than a round, not one that moves the
*ratio*: two threads on one CPU, or a neighbour that slows one allocator more than the
other, make the ratios of rounds run a minute apart differ by more than the ratios of one
minute do. Given each pair's ``blocks`` label (the service's: job and ``seq //
BLOCK_ROUNDS``), a one-way analysis of variance of the robust log ratios by block
estimates their intraclass correlation ``icc`` when the blocks differ (F-test at
``BLOCK_ALPHA``), and the design effect ``1 + (m0 - 1) * icc`` (``m0`` the pairs a block)
widens the interval, the t-test's standard error and the noise (so the MDE and the
follow-up planner) by its square root, on ``n / effect`` pairs' degrees of freedom: the
pairs count as the independent evidence they are (``block_effect`` on the cell; 1 when
the blocks agree or there is one block).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

from mallard_stats.policy import DEFAULT_POLICY, Policy
from mallard_stats.power import mde_pct
from mallard_stats.stats import CellStats, robust_mask

BLOCK_ALPHA = 0.10  # blocks that differ at this level count as blocks (module doc)
TRIM = 0.10  # the share of log ratios trimmed from each end (module doc)


def _usable(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0.0


def compare_paired(
    base: Sequence[float | None],
    head: Sequence[float | None],
    *,
    higher_is_better: bool = True,
    primary: bool = True,
    policy: Policy = DEFAULT_POLICY,
    blocks: Sequence[int] | None = None,
) -> CellStats:
    """``base[i]`` and ``head[i]`` ran in round i, of block ``blocks[i]`` when given. A
    round missing either side (``None``, not finite, not positive) is left out;
    ``n_base``/``n_head`` count the rounds kept, ``robust_*`` those within the outlier
    bound. ``noise_pct`` is the trimmed mean's standard error (with the blocks' design
    effect) times ``sqrt(n / 2)``, so that ``power.mde_pct``'s two-sided formula, ``sigma *
    sqrt(2/n)``, gives that standard error back."""
    if len(base) != len(head):
        raise ValueError(f"paired sides differ in length: {len(base)} base, {len(head)} head")
    labels = [0] * len(base) if blocks is None else list(blocks)
    pairs = [(b, h, g) for b, h, g in zip(base, head, labels, strict=True)
             if _usable(b) and _usable(h)]
    b_all = np.asarray([float(b) for b, _, _ in pairs if b is not None], dtype=np.float64)
    h_all = np.asarray([float(h) for _, h, _ in pairs if h is not None], dtype=np.float64)
    logs_all = np.log(h_all) - np.log(b_all)
    keep = robust_mask(logs_all, policy.outlier_k)
    logs, b, h = logs_all[keep], b_all[keep], h_all[keep]
    effect = design_effect(logs, np.asarray([g for _, _, g in pairs], dtype=np.int64)[keep])
    n = int(logs.size)
    est = trimmed_mean(logs, effect) if n >= 2 else None
    # the noise whose paired MDE formula, sigma * sqrt(2 / n), gives the estimate's SE
    noise = 100.0 * est.se * math.sqrt(n / 2.0) if est is not None else None
    out = CellStats(
        n_base=int(b_all.size), n_head=int(h_all.size), robust_base=n, robust_head=n,
        base_median=float(np.median(b)) if n else None,
        head_median=float(np.median(h)) if n else None,
        ratio=None, diff_pct=None, ci_low_pct=None, ci_high_pct=None, p_value=None,
        higher_is_better=higher_is_better, deterministic=False, primary=primary,
        noise_pct=noise, mde_pct=mde_pct(n, noise, policy, paired=True), paired=True,
        block_effect=effect)
    if n == 0:
        return out
    mid = est.mean if est is not None else float(logs[0])
    out.ratio = math.exp(mid)
    out.diff_pct = (out.ratio - 1.0) * 100.0
    if est is None:
        return out
    half = float(sps.t.ppf(0.5 + policy.confidence / 2.0, est.df)) * est.se
    out.ci_low_pct = (math.exp(mid - half) - 1.0) * 100.0
    out.ci_high_pct = (math.exp(mid + half) - 1.0) * 100.0
    out.p_value = est.p_value()
    return out


@dataclass(frozen=True)
class Trimmed:
    """The trimmed mean of the log ratios, its standard error and degrees of freedom
    (``trimmed_mean``)."""

    mean: float
    se: float
    df: float

    def p_value(self) -> float:
        """The one-sample (Yuen) t-test against 0."""
        if self.se == 0.0:
            # every round the same ratio: no difference at all, or one beyond any doubt
            return 1.0 if self.mean == 0.0 else 0.0
        return float(2.0 * sps.t.sf(abs(self.mean) / self.se, self.df))


def trimmed_mean(logs: NDArray[np.float64], effect: float = 1.0) -> Trimmed:
    """The ``TRIM`` trimmed mean of ``logs`` (at least 2) with Yuen's standard error: the
    ``g`` smallest and largest values winsorized, ``h = n - 2g`` kept, ``s_w *
    sqrt((n - 1) / (h (h - 1)))`` on ``h - 1`` degrees of freedom; the SE widened by the
    square root of the blocks' design effect and the degrees of freedom shrunk by it
    (module doc). Under 10 values ``g`` is 0: the plain mean and t."""
    x = np.sort(logs)
    n = int(x.size)
    g = int(TRIM * n)
    h = n - 2 * g
    winsorized = np.clip(x, x[g], x[n - g - 1])
    se = float(np.std(winsorized, ddof=1)) * math.sqrt((n - 1) / (h * (h - 1)) * effect)
    return Trimmed(float(np.mean(x[g:n - g])), se, max(1.0, h / effect - 1.0))


def design_effect(logs: NDArray[np.float64], blocks: NDArray[np.int64]) -> float:
    """``1 + (m0 - 1) * icc`` of the log ratios grouped by block when the blocks differ
    (one-way ANOVA, F-test at ``BLOCK_ALPHA``), else 1 (module doc)."""
    groups = [logs[blocks == g] for g in np.unique(blocks)]
    groups = [x for x in groups if x.size >= 2]
    if len(groups) < 2:
        return 1.0
    sizes = np.asarray([x.size for x in groups], dtype=np.float64)
    n, k = float(sizes.sum()), len(groups)
    grand = float(np.concatenate(groups).mean())
    msb = float(sum(x.size * (x.mean() - grand) ** 2 for x in groups)) / (k - 1)
    msw = float(sum(((x - x.mean()) ** 2).sum() for x in groups)) / (n - k)
    if msb == 0.0:
        return 1.0
    if msw > 0.0 and float(sps.f.sf(msb / msw, k - 1, n - k)) >= BLOCK_ALPHA:
        return 1.0
    m0 = (n - float((sizes ** 2).sum()) / n) / (k - 1)
    icc = (msb - msw) / (msb + (m0 - 1.0) * msw)
    return 1.0 + (m0 - 1.0) * max(0.0, icc)
