"""The webhook outbox and webhook endpoints: add messages, claim due ones, record outcomes.

A message is leased with ``FOR UPDATE SKIP LOCKED`` (its next attempt pushed past the
delivery timeout, committed before the POST), so several API processes can run delivery
workers without sending one message twice, and no transaction is open during a POST.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from mallard_api.models.outbox import OutboxMessage, WebhookEndpoint
from mallard_api.schemas.outbox import OutboxPayload


def add(session: Session, *, event: str, alert_id: int | None, kind: str, url: str,
        payload: OutboxPayload) -> OutboxMessage:
    msg = OutboxMessage(event=event, alert_id=alert_id, kind=kind, url=url, payload=payload,
                        state="pending", attempts=0)
    session.add(msg)
    session.flush()
    return msg


def due_receivers(session: Session, *, now: datetime | None = None) -> list[str]:
    """The receivers (URLs) that have messages due."""
    due = func.now() if now is None else now
    return [str(u) for u in session.scalars(
        select(OutboxMessage.url).where(OutboxMessage.state == "pending",
                                        OutboxMessage.next_attempt_at <= due)
        .distinct().order_by(OutboxMessage.url))]


_LEASE_NEXT = text("""
UPDATE webhook_outbox SET next_attempt_at = COALESCE(CAST(:now AS timestamptz), now())
                                            + make_interval(secs => :lease)
WHERE id = (SELECT id FROM webhook_outbox
            WHERE state = 'pending' AND url = :url
              AND next_attempt_at <= COALESCE(CAST(:now AS timestamptz), now())
            ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
""")


def lease_next(session: Session, url: str, *, now: datetime | None, lease_seconds: float
               ) -> OutboxMessage | None:
    """The receiver's next due message, leased: not due again for `lease_seconds` unless
    its outcome is recorded first. The caller commits the lease before POSTing."""
    row = session.execute(_LEASE_NEXT, {"now": now, "lease": lease_seconds, "url": url}).first()
    if row is None:
        return None
    return session.get(OutboxMessage, int(row[0]), populate_existing=True)


def newer_payloads(session: Session, msg: OutboxMessage) -> list[JsonDict]:
    """The payloads of the messages queued after `msg` for the same URL and event that
    were not given up (pending or delivered)."""
    return list(session.scalars(select(OutboxMessage.payload).where(
        OutboxMessage.url == msg.url, OutboxMessage.event == msg.event,
        OutboxMessage.id > msg.id, OutboxMessage.state != "failed")))


def last_payload(session: Session, url: str, event: str,
                 matches: Callable[[JsonDict], bool]) -> JsonDict | None:
    """The payload of the newest message for `url` and `event` that matches and was not
    given up (pending or delivered)."""
    rows = session.scalars(select(OutboxMessage.payload).where(
        OutboxMessage.url == url, OutboxMessage.event == event,
        OutboxMessage.state != "failed").order_by(OutboxMessage.id.desc()).limit(50))
    return next((p for p in rows if matches(p)), None)


def forge_failures(session: Session, project_id: int, limit: int = 10) -> list[OutboxMessage]:
    """The project's forge messages given up (newest first): why, in the forge's words."""
    return list(session.scalars(select(OutboxMessage).where(
        OutboxMessage.project_id == project_id, OutboxMessage.state == "failed",
        OutboxMessage.event.startswith("forge.")).order_by(OutboxMessage.id.desc())
        .limit(limit)))


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
