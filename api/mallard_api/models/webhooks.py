"""Forge webhook deliveries seen (a replayed delivery is not acted on twice)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Text, func
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base


class WebhookDelivery(Base):
    """A forge delivery id seen (migration 0005): a replayed delivery does nothing."""

    __tablename__ = "webhook_deliveries"
    forge: Mapped[str] = mapped_column(Text, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(Text, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
