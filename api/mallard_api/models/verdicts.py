"""Commit verdicts, bisections and forge settings (migration 0008, issue 12).
The schema is created only by `db/versions/0008_verdicts.py`; these classes mirror it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, ForeignKey, Integer, Text, UniqueConstraint, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import Base
from mallard_api.models.records import BisectionStep, MovedCell, Record

TS = DateTime(timezone=True)


class CommitVerdict(Base):
    """A commit compared with its branch's last measured commit on one arch."""

    __tablename__ = "commit_verdicts"
    __table_args__ = (UniqueConstraint("project_id", "commit_sha", "arch"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    branch: Mapped[str] = mapped_column(Text)
    commit_sha: Mapped[str] = mapped_column(Text)
    base_sha: Mapped[str] = mapped_column(Text)
    arch: Mapped[str] = mapped_column(Text)
    comparison_id: Mapped[int | None] = mapped_column(
        ForeignKey("comparisons.id", ondelete="SET NULL"))
    state: Mapped[str] = mapped_column(Text, server_default="queued")
    verdict: Mapped[str | None] = mapped_column(Text)
    moved: Mapped[list[MovedCell]] = mapped_column(Record(list[MovedCell]),
                                                  server_default="[]")
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id", ondelete="SET NULL"))
    bisection_id: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(TS)


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


class ProjectForge(Base):
    """Where a project's commit statuses go. `token` is a secret: never returned, never
    logged."""

    __tablename__ = "project_forges"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    base_url: Mapped[str] = mapped_column(Text)
    repo: Mapped[str] = mapped_column(Text)
    token: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class ForgeComment(Base):
    """The one comment Mallard keeps on a pull/merge request (updated, never duplicated)."""

    __tablename__ = "forge_comments"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    comment_id: Mapped[str | None] = mapped_column(Text)
    head_sha: Mapped[str | None] = mapped_column(Text)
    base_sha: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


__all__ = ["Bisection", "CommitVerdict", "ForgeComment", "ProjectForge"]
