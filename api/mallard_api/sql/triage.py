"""Alert triage: notes and the audit trail (migration 0023)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mallard_api.models.triage import AlertAudit, AlertNote


def add_note(session: Session, alert_id: int, author: str, body: str) -> AlertNote:
    note = AlertNote(alert_id=alert_id, author=author, body=body)
    session.add(note)
    session.flush()
    return note


def notes(session: Session, alert_id: int) -> list[AlertNote]:
    return list(session.scalars(select(AlertNote).where(AlertNote.alert_id == alert_id)
                                .order_by(AlertNote.id)))


def audit(session: Session, alert_id: int, actor: str, field: str, old: str | None,
          new: str | None) -> None:
    session.add(AlertAudit(alert_id=alert_id, actor=actor, field=field, old_value=old,
                           new_value=new))


def audit_of(session: Session, alert_id: int) -> list[AlertAudit]:
    return list(session.scalars(select(AlertAudit).where(AlertAudit.alert_id == alert_id)
                                .order_by(AlertAudit.id)))
