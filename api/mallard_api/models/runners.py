"""Runners: the benchmark nodes that claim jobs."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import Boolean, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


class Runner(Base):
    __tablename__ = "runners"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    arch: Mapped[str] = mapped_column(Text)
    cpus: Mapped[str | None] = mapped_column(Text)
    testbed: Mapped[JsonDict | None] = mapped_column(JSONB)
    testbed_id: Mapped[int | None] = mapped_column(ForeignKey("testbeds.id"))
    registered_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    last_seen_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    retired_at: Mapped[datetime | None] = mapped_column(TS)  # out of service (0012)
    # the projects it may post history without a job to (0020), set by an admin
    projects: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    all_projects: Mapped[bool] = mapped_column(Boolean, server_default="false")
