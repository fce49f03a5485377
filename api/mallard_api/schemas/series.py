"""A series of per-commit points (branch history)."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from pydantic import BaseModel


# --- series -------------------------------------------------------------------------------
class SeriesPoint(BaseModel):
    commit_sha: str
    commit_short: str
    position: int
    commit_time: datetime | None
    params: JsonDict
    threads: int | None
    arch: str
    testbed_fingerprint: str
    median: float
    p25: float
    p75: float
    n: int
    values: list[float]


class SeriesOut(BaseModel):
    project: str
    branch: str
    workload: str
    measure: str
    unit: str
    higher_is_better: bool | None
    allocator: str
    variant: str
    points: list[SeriesPoint]
