"""The webhook outbox and webhook endpoints: add messages, claim due ones, record outcomes.

A message is claimed with ``FOR UPDATE SKIP LOCKED``, so several API processes can run
delivery workers without sending one message twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mallard_api.models.analysis import OutboxMessage, WebhookEndpoint


def add(session: Session, *, event: str, alert_id: int | None, kind: str, url: str,
        payload: dict[str, Any]) -> OutboxMessage:
    msg = OutboxMessage(event=event, alert_id=alert_id, kind=kind, url=url, payload=payload,
                        state="pending", attempts=0)
    session.add(msg)
    session.flush()
    return msg


def claim_due(session: Session, *, now: datetime | None = None, limit: int = 50
              ) -> list[OutboxMessage]:
    """Pending messages whose time has come, locked for this transaction."""
    due = func.now() if now is None else now
    q = (select(OutboxMessage)
         .where(OutboxMessage.state == "pending", OutboxMessage.next_attempt_at <= due)
         .order_by(OutboxMessage.next_attempt_at, OutboxMessage.id)
         .limit(limit)
         .with_for_update(skip_locked=True))
    return list(session.scalars(q))


def list_messages(session: Session, *, alert_id: int | None = None) -> list[OutboxMessage]:
    q = select(OutboxMessage).order_by(OutboxMessage.id)
    if alert_id is not None:
        q = q.where(OutboxMessage.alert_id == alert_id)
    return list(session.scalars(q))


def endpoints(session: Session) -> list[WebhookEndpoint]:
    return list(session.scalars(
        select(WebhookEndpoint).where(WebhookEndpoint.enabled).order_by(WebhookEndpoint.id)))


def add_endpoint(session: Session, *, kind: str, url: str) -> WebhookEndpoint:
    ep = WebhookEndpoint(kind=kind, url=url, enabled=True)
    session.add(ep)
    session.flush()
    return ep
