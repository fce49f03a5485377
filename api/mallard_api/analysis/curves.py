"""Thread-scaling curves: a comparison's cells of one workload x params at several thread
counts read as two curves (base and head against threads), with a curve verdict.

* **points**: per thread count, both medians, the change and the cell's verdict, and
  whether the thread count exceeded the testbed's pinned CPUs (``oversubscribed``: on a
  small node that is where contention comes from);
* **moved**: the thread counts whose cell was ``improved`` or ``regressed``;
* **area_pct**: the signed area between the curves relative to the area under the base
  curve, over log2(threads) (1, 2, 4, ... 64 are evenly spaced; trapezoids between
  neighbouring points): ``100 * integral(head - base) / integral(base)``. Its sign is the
  sign of head - base, like a cell's change; whether that is better depends on the
  measure's direction;
* **verdict**: ``improved`` or ``regressed`` when some thread counts moved and all the
  same way, ``mixed`` when they moved both ways, ``unknown`` when none moved but some
  could not tell, else ``same``.

A curve needs a primary cell at two thread counts or more. Pure functions of report cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mallard_stats.measures import THROUGHPUT
from mallard_wire.fields import JsonDict

from mallard_api.analysis.report import ReportCell

CURVE_MEASURES = (THROUGHPUT, "ops_per_cpu_sec")  # each only where it is judged


@dataclass(frozen=True)
class Point:
    threads: int
    base_median: float | None
    head_median: float | None
    diff_pct: float | None
    verdict: str
    oversubscribed: bool


@dataclass(frozen=True)
class Curve:
    workload: str
    params: JsonDict  # without threads
    measure: str
    higher_is_better: bool
    points: list[Point]
    moved: list[int]
    area_pct: float | None
    verdict: str
    cpus: int | None = None

    def plot(self) -> list[str]:
        return ascii_plot(self)

    def summary(self) -> str:
        moved = ", ".join(f"{t}" for t in self.moved) or "none"
        area = "n/a" if self.area_pct is None else f"{self.area_pct:+.1f}%"
        return (f"scaling {self.workload} {self.measure}: {self.verdict.upper()}; "
                f"moved at threads {moved}; area between curves {area}")


def cpu_count(cpus: str | None) -> int | None:
    """The number of CPUs in a list like ``0,1`` or ``0-3,8``; None when unknown."""
    if not cpus:
        return None
    n = 0
    for part in str(cpus).split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            n += (int(hi) - int(lo) + 1) if hi else (int(lo) >= 0)
        except ValueError:
            return None
    return n or None


def area_pct(points: Sequence[tuple[int, float, float]]) -> float | None:
    """Signed relative area between the curves (module doc); None when the base area is 0
    or fewer than two points."""
    pts = sorted(p for p in points if p[0] > 0)
    if len(pts) < 2:
        return None
    diff = base = 0.0
    for (t0, b0, h0), (t1, b1, h1) in zip(pts, pts[1:], strict=False):
        dx = math.log2(t1) - math.log2(t0)
        diff += dx * ((h0 - b0) + (h1 - b1)) / 2
        base += dx * (b0 + b1) / 2
    if base == 0:
        return None
    return 100.0 * diff / base


def curve_verdict(verdicts: Sequence[str]) -> str:
    moved = {v for v in verdicts if v in ("improved", "regressed")}
    if len(moved) == 2:
        return "mixed"
    if moved:
        return moved.pop()
    if "unknown" in verdicts:
        return "unknown"
    return "same"


def _rest_key(params: JsonDict) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != "threads"))


def curves(cells: Sequence[ReportCell], cpus: int | None = None,
           measures: Sequence[str] = CURVE_MEASURES) -> list[Curve]:
    """The curves of a comparison: per workload x params-but-threads x measure with a
    primary cell at two or more thread counts."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...], str], list[ReportCell]] = {}
    for c in cells:
        t = c.params.get("threads")
        if c.measure not in measures or not c.stats.primary or not isinstance(t, int):
            continue
        groups.setdefault((c.workload, _rest_key(dict(c.params)), c.measure), []).append(c)
    out = []
    for (workload, _, measure), group in sorted(groups.items()):
        by_threads = {t: c for c in group if isinstance(t := c.params.get("threads"), int)}
        if len(by_threads) < 2:
            continue
        points = [
            Point(threads=t, base_median=c.stats.base_median, head_median=c.stats.head_median,
                  diff_pct=c.stats.diff_pct, verdict=c.stats.verdict,
                  oversubscribed=cpus is not None and t > cpus)
            for t, c in sorted(by_threads.items())
        ]
        both = [(p.threads, p.base_median, p.head_median) for p in points
                if p.base_median is not None and p.head_median is not None]
        first = group[0]
        out.append(Curve(
            workload=workload,
            params={k: v for k, v in first.params.items() if k != "threads"},
            measure=measure, higher_is_better=first.stats.higher_is_better, points=points,
            moved=[p.threads for p in points if p.verdict in ("improved", "regressed")],
            area_pct=area_pct(both),
            verdict=curve_verdict([p.verdict for p in points]), cpus=cpus))
    return out


def ascii_plot(curve: Curve, width: int = 40) -> list[str]:
    """Both curves as text, one row per thread count: a bar of ``b`` for base and ``h`` for
    head scaled to the largest median, ``*`` where they overlap, and the numbers."""
    values = [v for p in curve.points for v in (p.base_median, p.head_median) if v is not None]
    top = max(values) if values else 0.0
    rows = []
    for p in curve.points:
        nb = _cols(p.base_median, top, width)
        nh = _cols(p.head_median, top, width)
        bar = "".join("*" if i < min(nb, nh) else ("b" if i < nb else ("h" if i < nh else " "))
                      for i in range(max(nb, nh)))
        over = " oversubscribed" if p.oversubscribed else ""
        change = "n/a" if p.diff_pct is None else f"{p.diff_pct:+.1f}%"
        rows.append(f"{p.threads:>4} |{bar:<{width}}| base {_num(p.base_median)} head "
                    f"{_num(p.head_median)} {change} {p.verdict.upper()}{over}")
    return rows


def _cols(v: float | None, top: float, width: int) -> int:
    if v is None or top <= 0:
        return 0
    return max(1, round(width * v / top))


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
