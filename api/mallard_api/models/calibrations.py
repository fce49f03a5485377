"""Calibrations: A/A comparisons and canaries that give each series its noise band."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import BigInteger, Float, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import CanaryNs, Detection, Record


class Calibration(Base):
    __tablename__ = "calibrations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    project: Mapped[str] = mapped_column(Text)
    arch: Mapped[str] = mapped_column(Text)
    testbed_id: Mapped[int | None] = mapped_column(ForeignKey("testbeds.id"))
    commit_sha: Mapped[str] = mapped_column(Text)
    variant: Mapped[str] = mapped_column(Text, server_default="")
    suite: Mapped[str] = mapped_column(Text)
    workloads: Mapped[list[str]] = mapped_column(JSONB)
    threads: Mapped[list[int]] = mapped_column(JSONB)
    trials: Mapped[int] = mapped_column(Integer)
    aa_comparisons: Mapped[int] = mapped_column(Integer)
    canary_comparisons: Mapped[int] = mapped_column(Integer)
    sizes_pct: Mapped[list[float]] = mapped_column(JSONB)
    state: Mapped[str] = mapped_column(Text, server_default="queued")
    canary_ns: Mapped[CanaryNs] = mapped_column(Record(CanaryNs), server_default="{}")
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(TS)


class CalibrationResult(Base):
    __tablename__ = "calibration_results"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    calibration_id: Mapped[int] = mapped_column(
        ForeignKey("calibrations.id", ondelete="CASCADE"))
    testbed_id: Mapped[int | None] = mapped_column(ForeignKey("testbeds.id"))
    testbed_fingerprint: Mapped[str] = mapped_column(Text)
    workload: Mapped[str] = mapped_column(Text)
    params: Mapped[JsonDict] = mapped_column(JSONB)
    threads: Mapped[int | None] = mapped_column(Integer)
    measure: Mapped[str] = mapped_column(Text)
    cv_pct: Mapped[float | None] = mapped_column(Float)
    aa_comparisons: Mapped[int] = mapped_column(Integer)
    false_alarms: Mapped[int] = mapped_column(Integer)
    aa_unknown: Mapped[int] = mapped_column(Integer)
    false_alarm_rate: Mapped[float | None] = mapped_column(Float)
    detection: Mapped[list[Detection]] = mapped_column(Record(list[Detection]),
                                                       server_default="[]")
    band_pct: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
