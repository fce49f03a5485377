"""Bisections: the search that names the culprit commit in a range."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import BisectionStep, Record


class Bisection(Base):
    __tablename__ = "bisections"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    project: Mapped[str] = mapped_column(Text)
    branch: Mapped[str | None] = mapped_column(Text)
    arch: Mapped[str] = mapped_column(Text)
    workload: Mapped[str] = mapped_column(Text)
    measure: Mapped[str] = mapped_column(Text)
    threads: Mapped[int | None] = mapped_column(Integer)
    good: Mapped[str] = mapped_column(Text)
    bad: Mapped[str] = mapped_column(Text)
    commits: Mapped[list[str]] = mapped_column(JSONB)
    skipped: Mapped[list[int]] = mapped_column(JSONB, server_default="[]")
    verdicts: Mapped[dict[str, str]] = mapped_column(JSONB, server_default="{}")
    steps: Mapped[list[BisectionStep]] = mapped_column(Record(list[BisectionStep]),
                                                      server_default="[]")
    state: Mapped[str] = mapped_column(Text, server_default="running")
    culprit: Mapped[str | None] = mapped_column(Text)
    culprit_candidates: Mapped[list[str]] = mapped_column(JSONB, server_default="[]")
    builds: Mapped[int] = mapped_column(Integer, server_default="0")
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id", ondelete="SET NULL"))
    origin: Mapped[str] = mapped_column(Text, server_default="request")
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(TS)
