"""Testbeds: a node as measured (its fingerprint and what it is made of)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import FingerprintFields, Record


class Testbed(Base):
    __tablename__ = "testbeds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(Text, unique=True)
    arch: Mapped[str] = mapped_column(Text)
    cpu_model: Mapped[str | None] = mapped_column(Text)
    fields: Mapped[FingerprintFields] = mapped_column(Record(FingerprintFields))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
