"""API tokens: stored as the sha256 of the token, never the token itself."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mallard_api.models.core import ApiToken


def lookup(session: Session, token_sha256: str) -> ApiToken | None:
    return session.scalar(
        select(ApiToken).where(ApiToken.token_sha256 == token_sha256,
                               ApiToken.revoked_at.is_(None))
    )


def create(session: Session, *, token_sha256: str, role: str, runner_name: str | None,
           description: str | None = None) -> ApiToken:
    row = ApiToken(token_sha256=token_sha256, role=role, runner_name=runner_name,
                   description=description)
    session.add(row)
    session.flush()
    return row


def revoke(session: Session, token_id: int) -> bool:
    row = session.get(ApiToken, token_id)
    if row is None or row.revoked_at is not None:
        return False
    from sqlalchemy import func

    row.revoked_at = session.scalar(select(func.now()))
    return True


def list_all(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))
