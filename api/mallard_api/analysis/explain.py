"""What a comparison shows beyond its cells, made from the same cells: the counters that
moved most and the speed x memory label under each cell, and the thread-scaling curves.
One place builds them for the text report (``extras.Extras``) and for the JSON answer of
``GET /comparisons/{id}`` (``explain`` below), so the two never disagree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

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


def explain(cells: Sequence[ReportCell], cpus: str | None) -> dict[str, list[dict[str, Any]]]:
    """The response fields ``joint``, ``counters_moved`` and ``curves`` (docs/contracts.md)."""
    return {
        "joint": [asdict(j) for j in joint.joint_labels(cells)],
        "counters_moved": [
            {k: v for k, v in asdict(m).items() if k != "score"} | {"text": m.text()}
            for group in moved.moved_most(cells).values() for m in group],
        "curves": [asdict(c) | {"summary": c.summary()}
                   for c in curves.curves(cells, curves.cpu_count(cpus))],
    }
