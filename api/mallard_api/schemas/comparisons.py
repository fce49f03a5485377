"""Comparisons as requested and answered, with what explains their cells."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_stats.hypothesis import parse_hypothesis
from mallard_wire.fields import (
    Arch,
    InModel,
    JsonDict,
    Threads,
    Warmup,
    Word,
    Workloads,
    check_text,
)
from pydantic import AfterValidator, BaseModel, Field, StringConstraints, field_validator

from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.curves import Point
from mallard_api.models.records import PeerMedian, Side
from mallard_api.peers import Peer


class ComparisonIn(InModel):
    project: Annotated[str, StringConstraints(min_length=1, max_length=200),
                       AfterValidator(check_text)]
    base: Side
    head: Side
    workloads: Workloads | None = None
    threads: Threads | None = None
    trials: Annotated[int, Field(ge=2, le=1000)] | None = None
    warmup: Warmup | None = None
    arch: Arch | None = None
    hypothesis: Annotated[str, StringConstraints(max_length=200)] | None = None
    peers: Annotated[list[Peer], Field(max_length=20)] | None = None
    suite: Word | None = None
    max_follow_ups: Annotated[int, Field(ge=0, le=5)] | None = None

    @field_validator("hypothesis")
    @classmethod
    def _hypothesis(cls, v: str | None) -> str | None:
        parse_hypothesis(v)  # ValueError -> 422 naming body.hypothesis
        return v.strip() if v else None


class JobRef(BaseModel):
    job_id: int
    round: int
    trials: int
    state: str


class ComparisonOut(BaseModel):
    id: int
    project: str
    arch: str
    state: str
    base: Side
    head: Side
    base_label: str
    head_label: str
    workloads: list[str] | None
    threads: list[int] | None
    suite: str
    trials: int
    warmup: int
    peers: list[str]
    hypothesis: str | None
    follow_ups: int
    max_follow_ups: int
    testbed_fingerprint: str | None
    cpu_model: str | None
    note: str | None
    counts: dict[str, int]
    jobs: list[JobRef]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class HypothesisCheck(BaseModel):
    workload: str
    params: JsonDict
    threads: int | None
    measure: str
    expected_low_pct: float
    expected_high_pct: float
    diff_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    outcome: str  # held | undecided | not held (...)


class JointOut(BaseModel):
    """Speed x memory label of one workload x params (mallard_api.analysis.joint)."""

    workload: str
    params: JsonDict
    threads: int | None
    label: str  # better-both | worse-both | faster-but-fatter | slower-but-leaner | faster |
    #             slower | leaner | fatter | same | unknown
    kind: str  # better | worse | trade-off | same | unknown
    speed_verdict: str
    memory_verdict: str
    speed_diff_pct: float | None
    memory_diff_pct: float | None
    speed_measure: str = "ops_per_sec"  # ops_per_cpu_sec where ops_per_sec is not judged


class MovedOut(BaseModel):
    """An allocator counter that moved most under its cell (mallard_api.analysis.moved)."""

    workload: str
    params: JsonDict
    threads: int | None
    measure: str
    name: str
    base_median: float
    head_median: float
    diff_pct: float | None
    text: str


class CurveOut(BaseModel):
    """A thread-scaling curve and its verdict (mallard_api.analysis.curves)."""

    workload: str
    params: JsonDict
    measure: str
    higher_is_better: bool
    points: list[Point]  # threads, both medians, change, verdict, oversubscribed
    moved: list[int]
    area_pct: float | None
    verdict: str  # improved | regressed | mixed | same | unknown
    cpus: int | None
    summary: str


class ComparisonDetail(ComparisonOut):
    cells: list[CellRow]
    counters: list[CellRow]  # the allocator-counter cells (also in cells)
    peer_medians: list[PeerMedian]
    hypothesis_checks: list[HypothesisCheck]
    joint: list[JointOut]
    counters_moved: list[MovedOut]
    curves: list[CurveOut]
    report: str
