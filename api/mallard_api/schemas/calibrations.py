"""Calibrations as requested and answered, and a testbed's noise."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_wire.fields import (
    INT32_MAX,
    Arch,
    GitRef,
    InModel,
    JsonDict,
    Threads,
    Word,
    Workloads,
    check_text,
)
from mallard_wire.recipes import Variant
from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from mallard_api.models.records import Detection

SizePct = Annotated[float, Field(gt=0, le=50, allow_inf_nan=False)]


class CalibrationIn(InModel):
    """One build (project, commit, variant) calibrated on the testbed of the runner that
    takes its jobs; `testbed_id`, when given, must be a known testbed (its arch is used)."""

    project: Annotated[str, StringConstraints(min_length=1, max_length=200),
                       AfterValidator(check_text)]
    commit: GitRef
    variant: Variant | None = None
    testbed_id: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    arch: Arch | None = None
    suite: Word | None = None
    workloads: Workloads | None = None
    threads: Threads | None = None
    trials: Annotated[int, Field(ge=2, le=200)] = 5
    aa_comparisons: Annotated[int, Field(ge=0, le=500)] = 10
    canary_comparisons: Annotated[int, Field(ge=0, le=100)] = 5
    sizes_pct: Annotated[list[SizePct], Field(max_length=10)] = [1.0, 3.0, 10.0]


class ComparisonRef(BaseModel):
    id: int
    state: str
    canary_pct: float | None  # null: an A/A comparison or a probe
    probe: bool = False  # a probe that sized the canaries (analysis/calibrations.py)


class SeriesNoiseFields(BaseModel):
    """What a calibration measured for one series (analysis/calibrations.py)."""

    workload: str
    params: JsonDict
    threads: int | None
    measure: str
    cv_pct: float | None
    aa_comparisons: int
    false_alarms: int
    aa_unknown: int
    false_alarm_rate: float | None
    detection: list[Detection]
    band_pct: float | None  # the series' SAME band; null: the default rule applies


class ResultOut(SeriesNoiseFields):
    testbed_id: int | None
    testbed_fingerprint: str


class CalibrationOut(BaseModel):
    id: int
    project: str
    arch: str
    testbed_id: int | None
    commit: str
    variant: str
    suite: str
    workloads: list[str]
    threads: list[int]
    trials: int
    aa_comparisons: int
    canary_comparisons: int
    sizes_pct: list[float]
    state: str  # queued | aa | canary | done | failed
    canary_ns: dict[str, dict[str, int]]  # workload -> size -> ns per free
    note: str | None
    comparisons: list[ComparisonRef]
    results: list[ResultOut]
    table: str  # the results as a markdown table
    created_at: datetime
    finished_at: datetime | None


class SeriesNoise(SeriesNoiseFields):
    calibration_id: int
    finished_at: datetime | None


class NoiseOut(BaseModel):
    testbed_id: int
    fingerprint: str
    arch: str
    cpu_model: str | None
    series: list[SeriesNoise]  # empty until a calibration of this testbed finished
