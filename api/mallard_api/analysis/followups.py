"""Follow-ups that settle the most unknown cells within a time budget, and that know when
to stop (issue 11 item 5, issue 29 item 4).

When a comparison's jobs have all reported and some primary cells are ``unknown``, the
next round is planned from the trials so far, per unknown cell (workload x params x
measure; allocator counters and diagnostics never ask for one). The cell is judged again
as the comparison judges it (``pairs.judge``: on its pairs where it has them; within its
modes where a side has two, ``modes.within_modes``), giving ``n`` its trials (pairs, or
the smaller side), ``sigma`` its noise (the pairs' ratio scatter over
sqrt(2), else the sides' robust CV), ``d`` its change, ``h`` its interval's half-width and
``B`` its SAME band (the calibrated band of the series, else the minimum effect ``m``; for
a byte measure at least its floor). If the MDE fell as ``1/sqrt(n)``, the trials a side
needs to settle it would be the fewest ``N0`` of:

* **same** (rule 2): the interval inside ``(-B, B)``: ``n x (h / (B - d))^2`` when
  ``d < B``; or rule 4 (no calibrated band): ``n x (h / settle_max_half_width)^2`` and
  ``n x (se / (B - d))^2`` (``se`` one standard error, ``h / 1.96``: rule 4 asks ``d + se <
  B``), at least ``settle_trials`` and at least ``trials_for_mde(sigma, settle_max_mde)``;
* **improved/regressed** (rule 3): the MDE down to the change, ``trials_for_mde(sigma, d)``
  when ``d >= B`` (the MDE measured against the band, ``stats.band_mde_pct``);
* the target MDE (``stats_target_mde_pct``, default 2%): ``trials_for_mde(sigma)``.

**How fast the MDE falls**: with at least ``FALL_MIN`` pairs, and when the second half of
the pairs scatters more than the first by a test (``falling``), the noise of the first half
is set against the noise of all of them; a noise that grows with the trials (a drift the
pairs do not cancel) as ``n^beta`` makes the MDE fall as ``n^(beta - 1/2)``,
and the trials needed become ``n x (N0 / n)^(1 / (1 - 2 beta))`` (``beta`` kept within
``[0, MAX_BETA]``; 0 with fewer pairs). Times ``SAFETY`` (the interval measured on few
trials is itself uncertain), and at least ``step`` (the comparison's own trial count) more
than it has.

A cell's **cost** is its trials times ``2 sides x`` the median ``wall_seconds`` of its
workload x threads (plus the warm-ups): the cost per trial measured on this testbed. A cell
that needs more than ``max_trials`` or whose trials would cost more than the whole budget
left is **hopeless**: it gets no trials at all and is settled at once as ``unknown``, its
line and the comparison's note saying the MDE it would need and the trials (and seconds)
that would take (``Hopeless``), unless it has fewer than ``MIN_PAIRS_HOPELESS`` (10)
trials a side and that many fit the budget: it gets them first (its noise on 5 pairs is a
guess within a factor of two, and a two-mode cell is judged within its modes, with a far
smaller noise, only from 10 values a side). The others are taken **closest to settling
first** (fewest seconds), each raising its workload x threads group to the trials it
needs (a group's trials serve every cell of it, so a later cell of a planned group costs only the
difference; a round at most quadruples a cell's trials, ``GROWTH``), while the
comparison's runner-time budget
(``comparison_follow_up_budget_seconds``; what earlier rounds took is the wall time of
their trials) allows; a cell that does not fit is left for the note. Each round is planned
afresh from all trials, so the comparison stops as soon as every cell is settled or
hopeless; the count of rounds stays capped by ``max_follow_ups``. One follow-up job per
workload x threads group, each with its own trial count.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from mallard_stats.measures import floor_pct, is_deterministic, min_effect_abs
from mallard_stats.modes import MIN_N as MODES_MIN_N
from mallard_stats.paired import compare_paired
from mallard_stats.policy import Policy
from mallard_stats.power import trials_for_mde
from mallard_stats.stats import CellStats, standard_error_pct
from scipy import stats as sps  # type: ignore[import-untyped]

from mallard_api.analysis import modes, pairs, report
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
    hopeless: list[Need] = field(default_factory=list)  # settled at once as unknown


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
FALL_MIN = 16  # the fewest pairs whose halves say how fast the MDE falls
MAX_BETA = 0.4  # the noise's growth with the trials kept below 1/2 (where nothing falls)
FALL_ALPHA = 0.05  # the test that the noise grows (``falling``)
HOPELESS_NAMED = 6  # the hopeless cells a note names
# the fewest trials a side (pairs) on which a cell may be judged out of reach: a noise
# measured on 5 pairs is uncertain by a factor of 2 either way (chi-square, 4 degrees of
# freedom), and two modes are seen only from this many values a side (modes.within_modes)
MIN_PAIRS_HOPELESS = MODES_MIN_N
# a round gives a cell at most this many times the trials it has: a need estimated on 5
# pairs is itself a guess (one demo spent 79 s of its 120 s on 874 trials of one cell
# planned from 5 pairs); the next round plans again on more
GROWTH = 4
Key = pairs.Key


@dataclass
class Need:
    """What an unknown cell needs: ``trials`` a side in all (it has ``have``), to bring its
    MDE (or interval) to ``goal`` (``mde 2.0%``, ``interval ±0.8%``), costing ``seconds``."""

    cell: CellRow
    group: tuple[str, int | None]
    have: int
    trials: int
    goal: str
    seconds: float = 0.0

    @property
    def extra(self) -> int:
        return max(self.trials - self.have, 0)

    def this_round(self, step: int) -> int:
        """The trials it gets this round: at most ``GROWTH`` times what it has (module doc)."""
        return min(self.extra, max((GROWTH - 1) * self.have, step))

    def text(self) -> str:
        return (f"would need {self.goal}: about {self.trials} trials a side, "
                f"{self.seconds:.0f} s")


def _options(c: CellRow, n: int, noise: float, band: float, calibrated: bool,
             policy: Policy) -> list[tuple[float, str]]:
    """Trials a side (pairs for a paired cell) that settle cell ``c`` if its MDE fell as
    1/sqrt(n), each with what it reaches (module doc)."""
    options: list[tuple[float, str]] = []
    at_band = replace(policy, min_effect_pct=max(band, policy.min_effect_pct))  # the cell's MDE
    d = abs(c.diff_pct) if c.diff_pct is not None and math.isfinite(c.diff_pct) else None
    hw = (None if c.ci_low_pct is None or c.ci_high_pct is None
          else (c.ci_high_pct - c.ci_low_pct) / 2.0)
    if d is not None and hw is not None and math.isfinite(hw) and hw > 0:
        if d < band:
            options.append((n * (hw / (band - d)) ** 2, f"interval ±{band - d:.1f}%"))
        sensitive = trials_for_mde(noise, policy.settle_max_mde_pct, policy=at_band,
                                   paired=c.paired)
        if not calibrated and d < band and sensitive is not None:
            options.append((max(n * (hw / policy.settle_max_half_width_pct) ** 2,
                                n * (standard_error_pct(hw, policy) / (band - d)) ** 2,
                                policy.settle_trials, sensitive),
                            f"mde {policy.settle_max_mde_pct:.1f}%"))
    if d is not None and d >= band:
        sig = trials_for_mde(noise, d, policy=at_band, paired=c.paired)
        if sig is not None:
            options.append((sig, f"mde {d:.1f}%"))
    target = trials_for_mde(noise, policy=at_band, paired=c.paired)
    if target is not None:
        options.append((target, f"mde {policy.target_mde_pct:.1f}%"))
    return options


def falling(sides: pairs.Sides, s: CellStats, policy: Policy) -> float:
    """``beta``: how much the growth of the noise keeps the MDE from falling as 1/sqrt(n)
    (the noise of all pairs against that of the first half, module doc); 0 with fewer than
    ``FALL_MIN`` pairs, or unless the second half's log ratios scatter more than the first
    half's by a Brown-Forsythe test at ``FALL_ALPHA`` (with a steady noise the halves alone
    would say beta >= 0.4 in a fifth of the cells at 16-40 pairs)."""
    base, head = sides.pairs()
    n = len(base)
    if not s.paired or n < FALL_MIN or not s.noise_pct:
        return 0.0
    logs = np.log(np.asarray(head)) - np.log(np.asarray(base))
    first, second = logs[:n // 2], logs[n // 2:]
    if np.ptp(first) == 0.0 or np.ptp(second) == 0.0:
        return 0.0
    test = sps.levene(first, second, center="median")
    if not (test.pvalue < FALL_ALPHA and np.std(second) > np.std(first)):
        return 0.0
    half = compare_paired(base[:n // 2], head[:n // 2], policy=policy)
    if not half.noise_pct:
        return MAX_BETA
    beta = math.log(s.noise_pct / half.noise_pct) / math.log(n / (n // 2))
    return min(max(beta, 0.0), MAX_BETA)


def _need(c: CellRow, sides: Mapping[Key, pairs.Sides], bands: Mapping[Key, float],
          step: int, policy: Policy) -> Need:
    """The trials an unknown cell needs (module doc): a step for a deterministic cell or one
    without both sides."""
    key = (c.workload, params_key(c.params), c.measure)
    group = (c.workload, c.threads)
    s = sides.get(key)
    if s is None or not (s.base and s.head) or is_deterministic(c.measure):
        return Need(c, group, 0, step, "another step")
    raw = pairs.judge(s, higher_is_better=c.higher_is_better, deterministic=False,
                      primary=True, policy=policy)
    judged = modes.within_modes(raw, s.values("base"), s.values("head"), s.pairs(),
                                policy, measure=c.measure, blocks=s.blocks()).cell
    # within two modes only the rounds whose trials share a mode count: `ran` rounds
    # give `n` such pairs, and the rounds needed are the pairs needed times ran / n
    ran, n = min(raw.n_base, raw.n_head), min(judged.n_base, judged.n_head)
    if judged.noise_pct is None or n == 0:
        return Need(c, group, ran, ran + step, "another step")
    band = max(bands.get(key, policy.min_effect_pct), floor_pct(
        min_effect_abs(c.measure, policy.min_effect_bytes), c.base_median))
    options = _options(c, n, judged.noise_pct, band, key in bands, policy)
    if not options:
        return Need(c, group, n, policy.max_trials + 1, f"mde {policy.target_mde_pct:.1f}%")
    n0, goal = min(options)
    beta = falling(s, judged, policy)
    if n0 > n > 0 and beta > 0.0:
        n0 = n * (n0 / n) ** (1.0 / (1.0 - 2.0 * beta))
    total = math.ceil(min(n0, 1e9) * SAFETY * ran / n)
    return Need(c, group, ran, max(total, ran + step), goal)


def _young(w: Need, cost: Callable[[tuple[str, int | None], int], float],
           budget_left: float, policy: Policy) -> Need:
    """A cell out of reach on fewer than ``MIN_PAIRS_HOPELESS`` trials a side is not yet
    settled: if that many fit the budget it gets them first (module doc)."""
    if not (w.trials > policy.max_trials or w.seconds > budget_left) or not (
            0 < w.have < MIN_PAIRS_HOPELESS):
        return w
    young = Need(w.cell, w.group, w.have, MIN_PAIRS_HOPELESS,
                 f"{MIN_PAIRS_HOPELESS} trials a side before it is judged out of reach")
    young.seconds = cost(young.group, young.extra)
    return young if young.seconds <= budget_left else w


def _wall(rows: list[TrialRow]) -> dict[tuple[str, int | None], list[float]]:
    """The wall seconds of base's and head's trials per workload x threads (what a trial
    costs)."""
    wall: dict[tuple[str, int | None], list[float]] = defaultdict(list)
    for r in rows:
        w = r.measures.get("wall_seconds")
        if r.label in ("base", "head") and w is not None and math.isfinite(w):
            wall[(r.workload, r.threads)].append(float(w))
    return wall


def plan(unknown: list[CellRow], rows: list[TrialRow], *, step: int, warmup: int,
         budget_left: float, policy: Policy, bands: Mapping[Key, float] | None = None
         ) -> Plan:
    """The next round for ``unknown`` cells from the comparison's trials (module doc);
    ``bands`` are the calibrated SAME bands by (workload, params key, measure)."""
    sides, wall = pairs.by_round(rows), _wall(rows)

    def cost(g: tuple[str, int | None], n: int) -> float:
        per_trial = 2 * (statistics.median(wall[g]) if wall.get(g) else 1.0)
        return 0.0 if n == 0 else (n + warmup) * per_trial

    needs = [_need(c, sides, bands or {}, step, policy) for c in unknown]
    for w in needs:
        w.seconds = cost(w.group, w.extra)
    needs = [_young(w, cost, budget_left, policy) for w in needs]
    hopeless = [w for w in needs if w.trials > policy.max_trials or w.seconds > budget_left]
    wants = sorted((w for w in needs if w not in hopeless),
                   key=lambda w: (w.seconds, w.group[0], w.group[1] or 0))
    trials: dict[tuple[str, int | None], int] = {}
    spent = 0.0
    left_out = []
    for w in wants:
        have, extra = trials.get(w.group, 0), w.this_round(step)
        more = cost(w.group, max(have, extra)) - cost(w.group, have)
        if spent + more <= budget_left:
            trials[w.group] = max(have, extra)
            spent += more
        else:
            left_out.append(w)
    groups = [Group(w, th, n, cost((w, th), n))
              for (w, th), n in sorted(trials.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))]
    return Plan(groups, sum(g.seconds for g in groups),
                _note(left_out, hopeless, budget_left), hopeless)


def _note(left_out: list[Need], hopeless: list[Need], budget_left: float) -> str | None:
    """Why the plan is smaller than what the unknown cells want, or None."""
    parts = []
    if hopeless:
        noun = "cell" if len(hopeless) == 1 else "cells"
        named = "; ".join(f"{w.cell.workload} threads={w.cell.threads} {w.cell.measure} "
                          f"{w.text()}" for w in hopeless[:HOPELESS_NAMED])
        more = len(hopeless) - HOPELESS_NAMED
        parts.append(f"{len(hopeless)} unknown {noun} settled at once, out of reach of the "
                     f"budget ({budget_left:.0f} s left) or of the trial cap: {named}"
                     + (f"; and {more} more" if more > 0 else ""))
    if left_out:  # each fits the budget alone (else hopeless): the first always goes
        need = sum(w.seconds for w in left_out)
        parts.append(f"follow-ups cut to the time budget ({budget_left:.0f} s left of the "
                     f"budget; {len(left_out)} unknown cells need more, about {need:.0f} s)")
    return "; ".join(parts) or None
