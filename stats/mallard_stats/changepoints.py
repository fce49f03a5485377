"""Change points on a branch's history (E-Divisive, with Apache Otava).

Input: one series = one workload x params x allocator x variant x testbed x measure
along a branch, **one value per commit: the median of that commit's robust trials**
(``v_series.median``), in branch order. Per-commit medians rather than raw trials
because trials of one commit share one build and one run and are not independent
evidence about the commit-to-commit process; feeding raw trials would make every
change look far more significant than it is (and one commit with many trials would
weigh more than its neighbours).

Detection is ``otava.analysis.compute_change_points`` (Hunter's variant of
Matteson & James' E-Divisive: split with sliding windows, then merge weak points
until each has a t-test p-value below ``max_pvalue`` *and* a relative magnitude
above ``min_magnitude``). On top of Otava:

* a change point is reported only when the segments on *both* sides of it hold at
  least ``min_segment`` commits (default 3). A single noisy commit, even a wild one,
  forms a one-commit segment and so opens nothing; the price is that a real change is
  confirmed after ``min_segment`` commits have run past it.
* the two segments are compared on their robust commits (the median/MAD rule of
  ``stats``), each of which must still hold ``min_segment`` commits;
* the step must also be confirmed by rank: a two-sided Mann-Whitney U test of the two
  segments with p below ``confirm_pvalue`` (0.01), so that a short segment whose mean
  moved because of one outlier does not pass (Otava's merge step uses a t-test).
* its size is the change of the **median** from the segment before to the segment
  after (``(after / before - 1) * 100``), with a seeded percentile-bootstrap interval
  of that ratio (``stats.bootstrap_median_change``).
* its direction is judged by the measure's ``higher_is_better``: ``regression``
  (worse) or ``improvement``. Alerts are opened for regressions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otava.analysis import (  # type: ignore[import-untyped]
    TTestSignificanceTester,
    compute_change_points,
    merge,
)
from scipy.stats import mannwhitneyu  # type: ignore[import-untyped]

from mallard_stats.policy import DEFAULT_CHANGE_POLICY, DEFAULT_POLICY, ChangePolicy, Policy
from mallard_stats.stats import bootstrap_median_change, robust_mask


@dataclass
class Change:
    index: int  # position in the series of the first commit after the change
    first_bad_commit: str
    last_good_commit: str
    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    before_median: float
    after_median: float
    direction: str  # "regression" | "improvement"

    @property
    def is_regression(self) -> bool:
        return self.direction == "regression"


def _long_segments(cps: Sequence[Any], series: list[float], policy: ChangePolicy
                   ) -> list[Any]:
    """Only the change points whose both segments are long enough; then Otava's merge step
    again on what is left: the segments were re-cut, so a point that was significant only
    next to a dropped one-commit segment must prove itself again."""
    n = len(series)
    cps = sorted(cps, key=lambda cp: int(cp.index))
    kept_cps: list[Any] = []
    for cp in cps:
        prev = int(kept_cps[-1].index) if kept_cps else 0
        if int(cp.index) - prev >= policy.min_segment:
            kept_cps.append(cp)
    while kept_cps and n - int(kept_cps[-1].index) < policy.min_segment:
        kept_cps.pop()
    if len(kept_cps) != len(cps):
        tester = TTestSignificanceTester(policy.max_pvalue)
        intervals = tester.get_intervals(kept_cps)
        kept_cps = [tester.change_point(cp.to_candidate(), series, intervals) for cp in kept_cps]
        kept_cps = merge(kept_cps, series, policy.max_pvalue, policy.min_magnitude)
    return kept_cps


def detect(
    commits: Sequence[str],
    values: Sequence[float],
    *,
    higher_is_better: bool,
    policy: ChangePolicy = DEFAULT_CHANGE_POLICY,
    stats_policy: Policy = DEFAULT_POLICY,
) -> list[Change]:
    """Every confirmed change point of one series, oldest first."""
    if len(commits) != len(values):
        raise ValueError("commits and values differ in length")
    n = len(values)
    if n < 2 * policy.min_segment:
        return []
    series = [float(v) for v in values]
    cps, _weak = compute_change_points(
        series, window_len=policy.window_len, max_pvalue=policy.max_pvalue,
        min_magnitude=policy.min_magnitude,
    )
    kept_cps = _long_segments(cps, series, policy)
    kept = [int(cp.index) for cp in kept_cps]
    pvalues = {int(cp.index): float(cp.stats.pvalue) for cp in kept_cps}
    out: list[Change] = []
    bounds = [0, *kept, n]
    for i, idx in enumerate(kept):
        # compare the segments on their robust commits (median/MAD, as for trials)
        before = _robust(series[bounds[i]:idx], stats_policy)
        after = _robust(series[idx:bounds[i + 2]], stats_policy)
        if min(len(before), len(after)) < policy.min_segment:
            continue  # a segment that is mostly one outlier is no segment
        change, lo, hi = bootstrap_median_change(before, after, stats_policy)
        if not (lo > 0 or hi < 0) or abs(change) < policy.min_magnitude * 100:
            continue  # the median step is not distinguishable from no step
        p_rank = float(mannwhitneyu(before, after, alternative="two-sided").pvalue)
        if p_rank >= policy.confirm_pvalue:
            continue  # ranks do not confirm it: a short segment carried by one outlier
        worse = (change < 0) if higher_is_better else (change > 0)
        out.append(Change(
            index=idx,
            first_bad_commit=commits[idx],
            last_good_commit=commits[idx - 1],
            change_pct=change, ci_low_pct=lo, ci_high_pct=hi,
            p_value=pvalues.get(idx, float("nan")),
            before_median=_median(before), after_median=_median(after),
            direction="regression" if worse else "improvement",
        ))
    return out


def regressions(
    commits: Sequence[str], values: Sequence[float], *, higher_is_better: bool,
    policy: ChangePolicy = DEFAULT_CHANGE_POLICY, stats_policy: Policy = DEFAULT_POLICY,
) -> list[Change]:
    """Only the change points in the bad direction for the measure."""
    return [
        c for c in detect(commits, values, higher_is_better=higher_is_better, policy=policy,
                          stats_policy=stats_policy)
        if c.is_regression
    ]


def _robust(xs: Sequence[float], stats_policy: Policy) -> list[float]:
    mask = robust_mask(xs, stats_policy.outlier_k)
    return [x for x, ok in zip(xs, mask, strict=True) if ok]


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2.0
