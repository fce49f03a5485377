"""One comparison cell as one record, `CellRow`: computed from `stats` by
`comparisons.compute_cells`, stored and read by `sql/comparisons.py`, answered as is by
GET /comparisons/{id}, and turned back into `stats.CellStats` for reports and pages."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

from mallard_stats.stats import DIAGNOSTIC, CellNumbers, CellStats
from mallard_wire.fields import JsonDict

N = TypeVar("N", bound=CellNumbers)


def with_numbers(cls: type[N], cell: CellNumbers, **rest: Any) -> N:
    """A `cls` record (`CellRow`, `CellStats`) with `cell`'s `CellNumbers` and `rest`, the
    fields `cls` adds."""
    return cls(**{f.name: getattr(cell, f.name) for f in fields(CellNumbers)}, **rest)


@dataclass(kw_only=True)
class CellRow(CellNumbers):
    """A cell: workload x params x measure, its numbers and its report line. The verdict is
    same | improved | regressed | unknown, or diagnostic for a diagnostic measure; mde_pct
    is the minimum detectable effect at 80% power; unjudged_reason says why a cell's
    timings are shown but never judged (an emulated testbed, `measures.unjudged_reason`)."""

    workload: str
    params: JsonDict
    threads: int | None
    measure: str
    line: str
    unjudged_reason: str | None = None

    @classmethod
    def of(cls, s: CellStats, *, workload: str, params: JsonDict, threads: int | None,
           measure: str, line: str, unjudged_reason: str | None = None) -> CellRow:
        return with_numbers(cls, s, workload=workload, params=params, threads=threads,
                            measure=measure, line=line, unjudged_reason=unjudged_reason)

    @classmethod
    def from_attributes(cls, obj: object) -> CellRow:
        """From anything with the same attribute names (a stored `ComparisonCell`)."""
        return cls(**{f.name: getattr(obj, f.name) for f in fields(cls)})

    def stats(self, deterministic_measure: bool = False) -> CellStats:
        """The cell's `CellStats`; a deterministic measure's cell that took rule D3 (no
        p-value) is marked deterministic again."""
        return with_numbers(CellStats, self, primary=self.verdict != DIAGNOSTIC,
                            deterministic=deterministic_measure and self.p_value is None
                            and self.diff_pct is not None)
