"""Commit verdicts: a commit compared with its branch's last measured commit."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Text, UniqueConstraint, func
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import MovedCell, Record


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
