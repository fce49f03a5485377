"""The analysis queue: work the analysis worker runs outside requests."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


class AnalysisTask(Base):
    """Work for the analysis worker (migration 0005): recompute a comparison, or search
    the series some new trials touched for change points."""

    __tablename__ = "analysis_queue"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    comparison_id: Mapped[int | None] = mapped_column(
        ForeignKey("comparisons.id", ondelete="CASCADE"))
    trial_ids: Mapped[list[int] | None] = mapped_column(ARRAY(BigInteger))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    not_before: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)
    failed_at: Mapped[datetime | None] = mapped_column(TS)
