"""Jobs for runners and each attempt at one (lease, log)."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import BigInteger, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)  # commit | comparison
    state: Mapped[str] = mapped_column(Text, server_default="queued")
    arch: Mapped[str] = mapped_column(Text)
    spec: Mapped[JsonDict] = mapped_column(JSONB)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="SET NULL"))
    attempt: Mapped[int] = mapped_column(Integer, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer, server_default="3")
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    claimed_at: Mapped[datetime | None] = mapped_column(TS)
    lease_expires_at: Mapped[datetime | None] = mapped_column(TS)
    finished_at: Mapped[datetime | None] = mapped_column(TS)
    # the token that asked for it and the trials it asks for (db/versions/0020: quotas)
    requested_by: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="SET NULL"))
    trials_requested: Mapped[int | None] = mapped_column(Integer)


class JobAttempt(Base):
    """One claim of a job: who ran it, how it ended (done, failed, expired) and its log."""

    __tablename__ = "job_attempts"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    started_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    ended_at: Mapped[datetime | None] = mapped_column(TS)
    outcome: Mapped[str | None] = mapped_column(Text)
    log: Mapped[str | None] = mapped_column(Text)
