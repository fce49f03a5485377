"""Differential profiles of a comparison's cases (db/versions/0026): one row per case
asked for, its `profile` job, and the profile the runner posted (`body`, a wire
`ProfileIn`; NULL until it arrives)."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import BigInteger, Boolean, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


class ComparisonProfile(Base):
    __tablename__ = "comparison_profiles"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"))
    workload: Mapped[str] = mapped_column(Text)
    threads: Mapped[int | None] = mapped_column(Integer)
    params: Mapped[JsonDict] = mapped_column(JSONB, server_default="{}")
    job_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("jobs.id", ondelete="SET NULL"))
    requested: Mapped[bool] = mapped_column(Boolean, server_default="false", default=False)
    body: Mapped[JsonDict | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    stored_at: Mapped[datetime | None] = mapped_column(TS)
