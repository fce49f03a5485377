"""What a trend plot draws (`svg.trend_plot`): the medians of a series along a branch's
commits, the change points, alerts and baselines marked on it, level segments, and the
broken ranges greyed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class TrendPoint:
    index: int  # position on the x axis (the commit's index among the plotted commits)
    median: float
    p25: float
    p75: float
    title: str = ""
    href: str | None = None


@dataclass
class TrendSeries:
    name: str
    points: Sequence[TrendPoint]
    css: str = "s0"


@dataclass
class Marker:
    index: int  # the first bad commit's index (a baseline's: its first commit's)
    kind: str  # "change" (a change point), "alert" or "baseline" (a series restarts)
    label: str = ""
    href: str | None = None
    title: str = ""


@dataclass
class Level:
    """A horizontal segment from index i0 to i1 at `value` (e.g. the median before a change)."""

    i0: int
    i1: int
    value: float
    title: str = ""


@dataclass
class TrendAxis:
    """The plotted commits, in branch order, and their short labels."""

    labels: Sequence[str]
    extra: dict[int, str] = field(default_factory=dict)


@dataclass
class Span:
    """Commits i0..i1 (both included) left out of analysis: a broken range, drawn grey."""

    i0: int
    i1: int
    title: str = ""
