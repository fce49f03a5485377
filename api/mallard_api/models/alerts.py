"""Alerts and the change points found on a branch's history."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import BigInteger, Float, ForeignKey, Integer, Text, UniqueConstraint, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import AlertCell, Record


class Alert(Base):
    __tablename__ = "alerts"
    __table_args__ = (UniqueConstraint("series_key", "first_bad_commit"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    series_key: Mapped[str] = mapped_column(Text)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    project: Mapped[str] = mapped_column(Text)
    branch: Mapped[str] = mapped_column(Text)
    workload: Mapped[str] = mapped_column(Text)
    params: Mapped[JsonDict] = mapped_column(JSONB)
    threads: Mapped[int | None] = mapped_column(Integer)
    arch: Mapped[str] = mapped_column(Text)
    testbed_fingerprint: Mapped[str] = mapped_column(Text)
    allocator: Mapped[str] = mapped_column(Text)
    variant: Mapped[str] = mapped_column(Text)
    measure: Mapped[str] = mapped_column(Text)
    first_bad_commit: Mapped[str] = mapped_column(Text)
    last_good_commit: Mapped[str | None] = mapped_column(Text)
    change_pct: Mapped[float] = mapped_column(Float)
    ci_low_pct: Mapped[float | None] = mapped_column(Float)
    ci_high_pct: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    before_median: Mapped[float | None] = mapped_column(Float)
    after_median: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(Text, server_default="open")
    label: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    opened_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    acknowledged_at: Mapped[datetime | None] = mapped_column(TS)
    resolved_at: Mapped[datetime | None] = mapped_column(TS)
    # db/versions/0008_verdicts.py: verdict alerts group their cells; bisection's culprit
    source: Mapped[str] = mapped_column(Text, server_default="changepoint")
    cells: Mapped[list[AlertCell] | None] = mapped_column(Record(list[AlertCell]))
    culprit: Mapped[str | None] = mapped_column(Text)
    bisection_id: Mapped[int | None] = mapped_column(BigInteger)
    # db/versions/0023: what people decided (analysis/triage.py); `state` is the lifecycle
    triage: Mapped[str] = mapped_column(Text, server_default="untriaged")
    assignee: Mapped[str | None] = mapped_column(Text)
    bug_url: Mapped[str | None] = mapped_column(Text)


class ChangePoint(Base):
    __tablename__ = "change_points"
    __table_args__ = (UniqueConstraint("series_key", "commit_sha"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    series_key: Mapped[str] = mapped_column(Text)
    project: Mapped[str] = mapped_column(Text)
    branch: Mapped[str] = mapped_column(Text)
    workload: Mapped[str] = mapped_column(Text)
    params: Mapped[JsonDict] = mapped_column(JSONB)
    arch: Mapped[str] = mapped_column(Text)
    testbed_fingerprint: Mapped[str] = mapped_column(Text)
    allocator: Mapped[str] = mapped_column(Text)
    variant: Mapped[str] = mapped_column(Text)
    measure: Mapped[str] = mapped_column(Text)
    commit_sha: Mapped[str] = mapped_column(Text)
    prev_commit_sha: Mapped[str | None] = mapped_column(Text)
    change_pct: Mapped[float] = mapped_column(Float)
    ci_low_pct: Mapped[float | None] = mapped_column(Float)
    ci_high_pct: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    direction: Mapped[str] = mapped_column(Text)
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id", ondelete="SET NULL"))
    detected_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
