"""Follow-ups that settle the most unknown cells within a time budget (issue 11 item 5).

When a comparison's jobs have all reported and some primary cells are ``unknown``, the
next round is planned from the trials so far, per unknown cell (workload x params x
measure; allocator counters and diagnostics never ask for one). With ``n`` its trials (the
smaller side), ``sigma`` its noise (robust CV, root mean square of the sides), ``d`` its
change, ``h`` its interval's half-width and ``B`` its SAME band (the calibrated band of the
series, else the minimum effect ``m``; for a byte measure at least its floor), the trials
a side needs to settle it are the fewest of:

* **same** (rule 2): the interval inside ``(-B, B)``: ``h`` shrinks as ``1/sqrt(n)``, so
  ``n x (h / (B - d))^2`` when ``d < B``; or rule 4 (no calibrated band, ``d < m``):
  ``n x (h / settle_max_half_width)^2`` and at least ``settle_trials``;
* **improved/regressed** (rule 3): the MDE down to the change, ``trials_for_mde(sigma, d)``
  when ``d >= m``;
* the target MDE (``stats_target_mde_pct``, default 2%): ``trials_for_mde(sigma)``;

times ``SAFETY`` (the interval measured on few trials is itself uncertain), and at least
``step`` (the comparison's own trial count) more than it has; ``max_trials`` when nothing
reaches. A deterministic cell without a value on a side gets ``step``.

Cells are then taken **closest to settling first** (fewest seconds), each raising its
workload x threads group to the trials it needs (a group's trials serve every cell of it,
so a later cell of a planned group costs only the difference), while the comparison's
runner-time budget (``comparison_follow_up_budget_seconds``; what earlier rounds took is
the wall time of their trials) allows; a cell that does not fit is left for the note. A
group's cost is ``trials x 2 sides x`` the median ``wall_seconds`` of its trials (plus the
warm-ups). Each round is planned afresh from all trials, so the comparison stops as soon as
every cell is settled; the count of rounds stays capped by ``max_follow_ups``. Nothing
fits: the comparison is ``done`` and its note says why and which MDE each unknown cell
reached. One follow-up job per workload x threads group, each with its own trial count.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from mallard_stats.measures import floor_pct, is_deterministic, min_effect_abs
from mallard_stats.policy import Policy
from mallard_stats.power import trials_for_mde
from mallard_stats.stats import robust_cv_pct

from mallard_api.analysis import report
from mallard_api.analysis.cells import CellRow
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


SAFETY = 1.25  # planned trials over the estimate: an interval from few trials is uncertain
Key = tuple[str, str, str]  # workload, params key, measure


def _needed(c: CellRow, n: int, noise: float, band: float, calibrated: bool,
            policy: Policy) -> int:
    """Trials a side that settle cell ``c`` (module doc), ``max_trials`` when none do."""
    options: list[float] = []
    d = abs(c.diff_pct) if c.diff_pct is not None and math.isfinite(c.diff_pct) else None
    hw = (None if c.ci_low_pct is None or c.ci_high_pct is None
          else (c.ci_high_pct - c.ci_low_pct) / 2.0)
    if d is not None and hw is not None and math.isfinite(hw) and hw > 0:
        if d < band:
            options.append(n * (hw / (band - d)) ** 2)
        if not calibrated and d < policy.min_effect_pct:
            options.append(max(n * (hw / policy.settle_max_half_width_pct) ** 2,
                               policy.settle_trials))
    if d is not None and d >= policy.min_effect_pct:
        sig = trials_for_mde(noise, d, policy=policy)
        if sig is not None:
            options.append(sig)
    target = trials_for_mde(noise, policy=policy)
    if target is not None:
        options.append(target)
    if not options:
        return policy.max_trials
    return min(policy.max_trials, math.ceil(min(options) * SAFETY))


def _sides_and_wall(rows: list[TrialRow]) -> tuple[
        dict[Key, dict[str, list[float]]], dict[tuple[str, int | None], list[float]]]:
    """Base's and head's values per cell key, and the wall seconds of their trials per
    workload x threads (what a trial costs)."""
    sides: dict[Key, dict[str, list[float]]] = defaultdict(lambda: {"base": [], "head": []})
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
    return sides, wall


def _extra_trials(c: CellRow, sides: Mapping[Key, dict[str, list[float]]],
                  bands: Mapping[Key, float], step: int, policy: Policy) -> int:
    """The trials a side an unknown cell wants next: what its noise says it needs to
    settle, at least one step."""
    key = (c.workload, params_key(c.params), c.measure)
    s = sides.get(key)
    if not (s and s["base"] and s["head"]) or is_deterministic(c.measure):
        return step
    b = [v for v in s["base"] if math.isfinite(v)]
    h = [v for v in s["head"] if math.isfinite(v)]
    noises = [n for n in (robust_cv_pct(b), robust_cv_pct(h)) if n is not None]
    if not noises:
        return step
    noise = math.sqrt(sum(n * n for n in noises) / len(noises))
    n = min(len(b), len(h))
    band = max(bands.get(key, policy.min_effect_pct), floor_pct(
        min_effect_abs(c.measure, policy.min_effect_bytes), c.base_median))
    return max(_needed(c, n, noise, band, key in bands, policy) - n, step)


def plan(unknown: list[CellRow], rows: list[TrialRow], *, step: int, warmup: int,
         budget_left: float, policy: Policy, bands: Mapping[Key, float] | None = None
         ) -> Plan:
    """The next round for ``unknown`` cells from the comparison's trials (module doc);
    ``bands`` are the calibrated SAME bands by (workload, params key, measure)."""
    bands = bands or {}
    sides, wall = _sides_and_wall(rows)
    # (group, extra trials a side)
    wants = [((c.workload, c.threads), _extra_trials(c, sides, bands, step, policy))
             for c in unknown]

    def per_trial(g: tuple[str, int | None]) -> float:
        return 2 * (statistics.median(wall[g]) if wall.get(g) else 1.0)

    def cost(g: tuple[str, int | None], n: int) -> float:
        return 0.0 if n == 0 else (n + warmup) * per_trial(g)

    wants.sort(key=lambda w: (cost(w[0], w[1]), w[0][0], w[0][1] or 0))
    trials: dict[tuple[str, int | None], int] = {}
    spent = 0.0
    left_out = 0
    for g, add in wants:
        have = trials.get(g, 0)
        more = cost(g, max(have, add)) - cost(g, have)
        if spent + more <= budget_left:
            trials[g] = max(have, add)
            spent += more
        else:
            left_out += 1
    groups = [Group(w, th, n, cost((w, th), n))
              for (w, th), n in sorted(trials.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
    total = sum(g.seconds for g in groups)
    if not left_out:
        return Plan(groups, total)
    need = sum(cost(g, a) for g, a in wants)
    if groups:
        note = (f"follow-ups cut to the time budget ({budget_left:.0f} s left of the budget; "
                f"{left_out} unknown cells need more, about {need:.0f} s in all)")
    else:
        cheapest = min(cost(g, a) for g, a in wants)
        note = (f"follow-ups stopped: the time budget is spent ({budget_left:.0f} s left; "
                f"the cell closest to settling needed about {cheapest:.0f} s)")
    return Plan(groups, total, note)
