"""What a comparison shows beyond its cells, made from the same cells: the counters that
moved most and the speed x memory label under each cell, and the thread-scaling curves.
One place builds them for the text report (``extras.Extras``) and for the JSON answer of
``GET /comparisons/{id}`` (``explain`` below), so the two never disagree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mallard_api.analysis import curves, joint, moved
from mallard_api.analysis.extras import Extras
from mallard_api.analysis.report import ReportCell
from mallard_api.params import params_key


def report_extras(cells: Sequence[ReportCell], cpus: str | None) -> Extras:
    most = moved.moved_most(cells)
    return Extras(
        moved={k: moved.moved_text(v) for k, v in most.items()},
        joint={(j.workload, params_key(j.params)): j for j in joint.joint_labels(cells)},
        curves=curves.curves(cells, curves.cpu_count(cpus)))


@dataclass(frozen=True)
class Explained:
    """What the response fields ``joint``, ``counters_moved`` and ``curves`` are made of
    (docs/contracts.md)."""

    joint: list[joint.Joint]
    counters_moved: list[moved.Moved]
    curves: list[curves.Curve]


def explain(cells: Sequence[ReportCell], cpus: str | None) -> Explained:
    return Explained(
        joint=joint.joint_labels(cells),
        counters_moved=[m for group in moved.moved_most(cells).values() for m in group],
        curves=curves.curves(cells, curves.cpu_count(cpus)))
