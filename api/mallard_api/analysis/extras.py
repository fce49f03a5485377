"""What a comparison report prints beyond its cells (`report.format_report`), built by
`explain.report_extras`: the counters that moved most, the speed x memory label under
each cell, and the thread-scaling curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class _Line(Protocol):
    def text(self) -> str: ...


class _Curve(Protocol):
    def summary(self) -> str: ...

    def plot(self) -> list[str]: ...


@dataclass
class Extras:
    """What the report prints beyond the cells, keyed by ``(workload, params_key)``:
    the counters that moved most (one line), the speed x memory label, and the curves."""

    moved: Mapping[tuple[str, str], str] = field(default_factory=dict)
    joint: Mapping[tuple[str, str], _Line] = field(default_factory=dict)
    curves: Sequence[_Curve] = ()

    def under(self, key: tuple[str, str]) -> list[str]:
        lines = []
        if key in self.moved:
            lines.append(self.moved[key])
        if key in self.joint:
            lines.append(self.joint[key].text())
        return lines
