"""The minimum detectable effect (MDE) of a comparison cell.

The smallest true change that the noisy verdict rule (``stats``) calls
``improved``/``regressed`` in 80% of repetitions (``power``), at the cell's trial
count and noise, before the multiple-comparison correction. With ``n`` the robust
trials of the smaller side,
``sigma`` the noise (the robust CV, ``1.4826 * MAD / median`` in percent, the root
mean square of the two sides), ``s = sqrt(pi/2) * sigma * sqrt(2/n)`` the standard
error of the change of two medians (a median of normal data has ``pi/2`` times the
variance of a mean) and ``q(p)`` the ``p`` quantile of Student's t with ``2n - 2``
degrees of freedom::

    crit = max(q((1 + confidence) / 2) * s,                    # interval excludes 0
               q(1 - alpha / 2) * sqrt(pi/3) * sigma * sqrt(2/n))  # Mann-Whitney, ARE 3/pi
    mde  = max(crit, min_effect_pct) + q(power) * s

(``stats.band_mde_pct`` puts a cell's SAME band in place of ``min_effect_pct`` where the
band is wider.) The three gates of rule 3 (interval, p-value, ``|diff| >= band``) act
on nearly the same statistic, so the change must clear the highest of them with 80% probability; the
percentile bootstrap of medians is the binding one for normal noise. Checked by
simulation (stats/tests/test_power.py): at 0.8 x MDE the simulated rule detects less
than 80% of the time, at 1.2 x MDE more. ``None`` when fewer than ``min_trials``
robust trials ran (rule 1 of ``stats``: nothing is detectable).
:func:`trials_for_mde` inverts it: the trials a side needs for a target MDE
(``target_mde_pct``, default 2%).
"""

from __future__ import annotations

import math

from scipy import stats as sps  # type: ignore[import-untyped]

from mallard_stats.policy import DEFAULT_POLICY, Policy

# Standard error factors relative to sigma * sqrt(2/n) (module doc).
MEDIAN_SE = math.sqrt(math.pi / 2.0)  # a median's standard error over a mean's (normal data)
RANK_SE = math.sqrt(math.pi / 3.0)  # Mann-Whitney's asymptotic relative efficiency is 3/pi


def mde_pct(n: int, noise_pct: float | None, policy: Policy = DEFAULT_POLICY, *,
            paired: bool = False) -> float | None:
    """The minimum detectable effect (percent) of the noisy rule with ``n`` robust trials a
    side and noise ``noise_pct`` (robust CV, percent): the formula of the module doc.
    ``paired``: ``n`` pairs, judged as one sample of ratios (``paired``; ``noise_pct`` the
    ratios' scatter over sqrt(2)): ``n - 1`` degrees of freedom and a t-test's factor 1 in
    place of the rank test's."""
    if noise_pct is None or not math.isfinite(noise_pct) or n < max(2, policy.min_trials):
        return None
    unit = noise_pct * math.sqrt(2.0 / n)
    df = n - 1 if paired else 2 * n - 2
    q = sps.t.ppf
    se = MEDIAN_SE * unit
    crit = max(float(q((1.0 + policy.confidence) / 2.0, df)) * se,
               float(q(1.0 - policy.alpha / 2.0, df)) * (1.0 if paired else RANK_SE) * unit)
    return max(crit, policy.min_effect_pct) + float(q(policy.power, df)) * se


def deterministic_mde_pct(policy: Policy = DEFAULT_POLICY, base: float | None = None) -> float:
    """A deterministic cell decides any change above all three thresholds (rule D3)."""
    floor = 100.0 * policy.deterministic_min_count / abs(base) if base else 0.0
    return max(policy.deterministic_tolerance_pct, policy.deterministic_min_effect_pct, floor)


def trials_for_mde(noise_pct: float, target_pct: float | None = None,
                   policy: Policy = DEFAULT_POLICY, *, paired: bool = False) -> int | None:
    """Trials a side (``paired``: pairs) needs so that the MDE is at most ``target_pct``
    (default the policy's ``target_mde_pct``) at this noise; ``None`` when no count up to
    ``max_trials`` reaches it (a target at or below ``min_effect_pct`` never is)."""
    target = policy.target_mde_pct if target_pct is None else target_pct
    lo = max(2, policy.min_trials)
    hi = policy.max_trials
    top = mde_pct(hi, noise_pct, policy, paired=paired)
    if top is None or top > target:
        return None
    while lo < hi:  # the MDE falls as n grows: the first n at or under the target
        mid = (lo + hi) // 2
        m = mde_pct(mid, noise_pct, policy, paired=paired)
        if m is not None and m <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo
