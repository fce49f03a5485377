"""Forge delivery ids (migration 0005): a delivery seen before is not acted on twice."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def first_time(session: Session, forge: str, delivery_id: str) -> bool:
    """Record the delivery id; False when it was recorded before (a replay)."""
    row = session.execute(text(
        "INSERT INTO webhook_deliveries (forge, delivery_id) VALUES (:f, :d) "
        "ON CONFLICT DO NOTHING RETURNING 1"), {"f": forge, "d": delivery_id}).first()
    return row is not None


def prune(session: Session, keep_days: int) -> int:
    res = session.execute(text(
        "DELETE FROM webhook_deliveries WHERE received_at < now() - make_interval(days => :d)"),
        {"d": keep_days})
    return int(res.rowcount or 0)  # type: ignore[attr-defined]
