"""Reads of what trials recorded besides measures (mallard_wire/timelines.py): the
memory timelines and latency histograms of a comparison's base and head trials."""

from __future__ import annotations

from dataclasses import dataclass

from mallard_wire.fields import JsonDict
from sqlalchemy import text
from sqlalchemy.orm import Session


@dataclass
class Recorded:
    label: str  # base or head
    workload: str
    params: JsonDict
    memory: JsonDict | None
    latency: JsonDict | None


RECORDED_SQL = text("""
SELECT t.label, w.name AS workload, w.params, t.memory, t.latency
FROM comparison_jobs cj
JOIN trials t ON t.job_id = cj.job_id
JOIN workloads w ON w.id = t.workload_id
JOIN testbeds tb ON tb.id = t.testbed_id
WHERE cj.comparison_id = :id AND t.ok AND NOT t.warmup AND t.label IN ('base', 'head')
  AND tb.fingerprint IS NOT DISTINCT FROM :fingerprint
  AND (t.memory IS NOT NULL OR t.latency IS NOT NULL)
ORDER BY t.id
""")


def recorded(session: Session, comparison_id: int, fingerprint: str | None) -> list[Recorded]:
    """The comparison's valid base and head trials on its testbed that recorded a memory
    timeline or latency histograms, in the order they were stored."""
    return [Recorded(r.label, r.workload, dict(r.params), r.memory, r.latency)
            for r in session.execute(RECORDED_SQL, {"id": comparison_id,
                                                    "fingerprint": fingerprint})]
