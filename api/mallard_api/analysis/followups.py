"""Follow-ups sized to a target MDE within a time budget (issue 11 item 5).

When a comparison's jobs have all reported and some primary cells are ``unknown``, the
next round is planned from the trials so far, per unknown cell (workload x params x
measure; allocator counters and diagnostics never ask for one):

* its noise (robust CV of each side, root mean square) and trials ``n`` (smaller side);
* the trials a side needs for the target MDE (``power.trials_for_mde``, setting
  ``stats_target_mde_pct``, default 2%), or ``max_trials`` when no count reaches it;
  ``extra = max(needed - n, step)`` with ``step`` the comparison's own trial count (a cell
  whose MDE already meets the target but is still unknown sits at the edge of the band:
  it gets another ``step``); a deterministic cell without a value on a side gets ``step``;
* per workload x threads, the largest ``extra`` of its cells; its cost is
  ``extra x 2 sides x`` the median ``wall_seconds`` of its trials (plus the warm-ups).

The budget (setting ``comparison_follow_up_budget_seconds``) is the runner time all
follow-ups of the comparison may take; what earlier rounds took is the wall time of
their trials. A plan over what is left is scaled down to fit; groups left with fewer than
``min_trials`` extra trials are dropped (too few to move an MDE). Nothing left: the
comparison is ``done`` and its note says why and which MDE the unknown cells reached.
The count of rounds stays capped by ``max_follow_ups``. One follow-up job per workload x
threads group, each with its own trial count.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from mallard_api.analysis import report
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.measures import is_deterministic
from mallard_api.analysis.policy import Policy
from mallard_api.analysis.power import trials_for_mde
from mallard_api.analysis.stats import robust_cv_pct
from mallard_api.params import params_key
from mallard_api.sql.comparisons import TrialRow


@dataclass
class Group:
    workload: str
    threads: int | None
    trials: int
    seconds: float


@dataclass
class Plan:
    groups: list[Group] = field(default_factory=list)
    seconds: float = 0.0
    note: str | None = None  # why no (or a smaller) follow-up, when that is the case


def unknown_primary(cells: list[CellRow]) -> list[CellRow]:
    return [c for c in cells if c.verdict == "unknown" and not report.is_counter(c.measure)]


def mde_reached(cells: list[CellRow], target: float) -> str:
    """``3 unknown primary cells reached mde 2.4-9.1% (target 2.0%)``."""
    mdes = [c.mde_pct for c in cells]
    known = [m for m in mdes if m is not None and math.isfinite(m)]
    span = "n/a" if not known else (f"{min(known):.1f}%" if len(set(known)) == 1 else
                                    f"{min(known):.1f}-{max(known):.1f}%")
    noun = "cell" if len(cells) == 1 else "cells"
    return f"{len(cells)} unknown primary {noun} reached mde {span} (target {target:.1f}%)"


def plan(unknown: list[CellRow], rows: list[TrialRow], *, step: int, warmup: int,
         budget_left: float, policy: Policy) -> Plan:
    """The next round for ``unknown`` cells from the comparison's trials (module doc)."""
    sides: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: {"base": [], "head": []})
    wall: dict[tuple[str, int | None], list[float]] = defaultdict(list)
    for r in rows:
        if r.label not in ("base", "head"):
            continue
        pk = params_key(r.params)
        for m, v in r.measures.items():
            sides[(r.workload, pk, m)][r.label].append(float(v))
        w = r.measures.get("wall_seconds")
        if w is not None and math.isfinite(w):
            wall[(r.workload, r.threads)].append(float(w))
    extra: dict[tuple[str, int | None], int] = {}
    for c in unknown:
        s = sides.get((c.workload, params_key(c.params), c.measure))
        add = step
        if s and s["base"] and s["head"] and not is_deterministic(c.measure):
            b = [v for v in s["base"] if math.isfinite(v)]
            h = [v for v in s["head"] if math.isfinite(v)]
            noises = [n for n in (robust_cv_pct(b), robust_cv_pct(h))
                      if n is not None]
            if noises:
                noise = math.sqrt(sum(n * n for n in noises) / len(noises))
                needed = trials_for_mde(noise, policy=policy) or policy.max_trials
                add = max(needed - min(len(b), len(h)), step)
        key = (c.workload, c.threads)
        extra[key] = max(extra.get(key, 0), add)
    groups = []
    for (workload, threads), n in sorted(extra.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        per = statistics.median(wall[(workload, threads)]) if wall.get((workload, threads)) else 1.0
        groups.append(Group(workload, threads, n, (n + warmup) * 2 * per))
    cost = sum(g.seconds for g in groups)
    if cost <= budget_left:
        return Plan(groups, cost)
    scale = max(budget_left, 0.0) / cost
    fitted = []
    for g in groups:
        n = math.floor(g.trials * scale)
        if n >= policy.min_trials:
            fitted.append(Group(g.workload, g.threads, n, g.seconds * n / g.trials))
    note = (f"follow-ups cut to the time budget ({budget_left:.0f} s left of the budget; "
            f"the target MDE needed about {cost:.0f} s)")
    if not fitted:
        note = (f"follow-ups stopped: the time budget is spent ({budget_left:.0f} s left; "
                f"the target MDE needed about {cost:.0f} s)")
    return Plan(fitted, sum(g.seconds for g in fitted), note)
