"""A project's forge settings and the comments Mallard posted there."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


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
    # db/versions/0024: when the one comment is written (always | on-change | never)
    comment_mode: Mapped[str] = mapped_column(Text, server_default="always")
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
    # db/versions/0024: what the comment said last; the head a `/mallard bench` asked for
    summary: Mapped[str | None] = mapped_column(Text)
    asked_head: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
