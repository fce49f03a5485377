"""Alpha spent over a cell's looks.

A comparison judges a cell once per round of trials that adds to it: its first job, then
each follow-up of its workload x threads. A cell that stays ``unknown`` is judged again,
and at one alpha per look a null cell gets up to ``1 + max_follow_ups`` chances to cross
it by chance. So look ``k`` (0-based) of ``K`` planned looks rejects at an increment of a
Pocock-type spending function (Lan and DeMets 1983)::

    spent(t) = alpha * ln(1 + (e - 1) * t),   t = (k + 1) / K
    alpha_k  = spent(t_k) - spent(t_(k-1))

The increments sum to ``alpha``, so by the union bound a cell's chance of a false call
over all its looks is at most ``alpha`` whatever the looks' correlation. A group-sequential
boundary that uses that correlation would be less strict, but it needs each look's share
of the information in advance, which follow-ups sized from the data do not have. With
``K = 6`` (5 follow-ups) and alpha 0.05 the looks reject at 0.0126, 0.0101, 0.0084, 0.0072,
0.0063 and 0.0056; a comparison with no follow-ups planned (``K = 1``) keeps the whole
alpha at its one look. The Pocock shape spends nearly evenly; O'Brien-Fleming's would
leave the first look, where most cells are decided, almost nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace

from mallard_stats.policy import Policy


def spent(alpha: float, fraction: float) -> float:
    """The alpha spent by a ``fraction`` (0..1) of the planned looks."""
    return alpha * math.log1p((math.e - 1.0) * min(max(fraction, 0.0), 1.0))


def look_alpha(alpha: float, look: int, looks: int) -> float:
    """The level of look ``look`` (0-based) of ``looks`` planned; a look past the plan gets
    the last one's (a cell judged again on data it already had is no new look)."""
    k = max(1, looks)
    i = min(max(look, 0), k - 1)
    return spent(alpha, (i + 1) / k) - spent(alpha, i / k)


def at_look(policy: Policy, look: int, looks: int) -> Policy:
    """``policy`` with the alpha of its look (module doc)."""
    return replace(policy, alpha=look_alpha(policy.alpha, look, looks))
