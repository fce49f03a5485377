"""Counters that explain: under each cell, the allocator counters that moved most.

A throughput change is explained by what the allocator did differently: a transfer
cache whose remove hit ratio fell from 0.841 to 0.647 sends more batches to the slow
path. The runner turns a trial's allocator counters into diagnostic measures (contracts
section 2: the hit ratios, and raw counts such as in-flight misses, waits and central
refills); every workload x params then has one diagnostic cell per counter. Here they
are ranked by how far the head's median moved from the base's, relative to the base
(from zero to anything is the largest move), and the first few that moved at all are
kept: ``remove hit ratio 0.841 -> 0.647``. Pure functions of report cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mallard_wire.fields import JsonDict

from mallard_api.analysis.report import ReportCell, is_counter
from mallard_api.params import params_key

TOP = 3


@dataclass(frozen=True)
class Moved:
    workload: str
    params: JsonDict
    threads: int | None
    measure: str
    name: str  # the short name: ``remove hit ratio``
    base_median: float
    head_median: float
    diff_pct: float | None  # None when the base is zero
    score: float  # |relative move|; inf from zero

    def text(self) -> str:
        return f"{self.name} {_value(self.measure, self.base_median)} -> " \
               f"{_value(self.measure, self.head_median)}"


def short_name(measure: str) -> str:
    """``transfer_remove_hit_ratio`` -> ``remove hit ratio``; ``central_refills`` ->
    ``central refills``; ``transfer_remove_inflight_misses`` -> ``remove in-flight
    misses``."""
    name = measure.removeprefix("transfer_").replace("inflight", "in-flight")
    return name.replace("_", " ")


def _value(measure: str, v: float) -> str:
    if measure.endswith("_ratio"):
        return f"{v:.3f}"
    return f"{v:,.0f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"


def score(base: float, head: float) -> float:
    """How far a counter moved: |head / base - 1|, inf from zero, 0 when equal."""
    if base == head:
        return 0.0
    if base == 0:
        return math.inf
    return abs(head / base - 1.0)


def moved_most(cells: Sequence[ReportCell], top: int = TOP) -> dict[tuple[str, str], list[Moved]]:
    """Per (workload, params_key(params)): the counters that moved, largest first, at most
    ``top`` (ties by name). Counters with a missing side or no move are left out."""
    groups: dict[tuple[str, str], list[Moved]] = {}
    for c in cells:
        s = c.stats
        if not is_counter(c.measure) or s.base_median is None or s.head_median is None:
            continue
        sc = score(s.base_median, s.head_median)
        if sc == 0.0 or math.isnan(sc):
            continue
        threads = c.params.get("threads")
        groups.setdefault((c.workload, params_key(c.params)), []).append(Moved(
            workload=c.workload, params=dict(c.params),
            threads=int(threads) if isinstance(threads, int | float) else None,
            measure=c.measure, name=short_name(c.measure), base_median=s.base_median,
            head_median=s.head_median,
            diff_pct=None if s.base_median == 0 else (s.head_median / s.base_median - 1) * 100,
            score=sc))
    return {k: sorted(v, key=lambda m: (-m.score, m.measure))[:top]
            for k, v in sorted(groups.items())}


def moved_text(moved: Sequence[Moved]) -> str:
    """The report line under a cell (indented by the caller)."""
    return "counters moved most: " + ", ".join(m.text() for m in moved)
