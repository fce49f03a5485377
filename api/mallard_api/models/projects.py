"""Projects: a repository whose allocator Mallard measures, the recipe it builds by and
the peers it is compared beside (db/versions/0022)."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.recipes import Recipe
from sqlalchemy import Boolean, Integer, Text, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import Record


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    repo_url: Mapped[str] = mapped_column(Text)
    # how its allocator builds (set by an admin; None: not set, no build can be queued)
    recipe: Mapped[Recipe | None] = mapped_column(Record(Recipe))
    # what it is compared beside: catalogue names or `project@ref` (None: MALLARD_PEERS)
    peers: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    default_branch: Mapped[str] = mapped_column(Text, server_default="main")
    tracked_branches: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    webhook_secret: Mapped[str | None] = mapped_column(Text)
    # readable without a token (its pages, badge and images; never its settings)
    public: Mapped[bool] = mapped_column(Boolean, server_default="false")
    # db/versions/0024: retention (None: kept forever): pull-request and calibration
    # trials, and every other raw trial (its values stay in series_points)
    keep_pr_days: Mapped[int | None] = mapped_column(Integer)
    keep_raw_days: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
