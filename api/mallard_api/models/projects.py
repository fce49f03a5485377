"""Projects: a repository whose allocator Mallard measures."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, Text, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    repo_url: Mapped[str] = mapped_column(Text)
    allocator_dir: Mapped[str] = mapped_column(Text, server_default="allocator")
    default_branch: Mapped[str] = mapped_column(Text, server_default="main")
    tracked_branches: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    webhook_secret: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
