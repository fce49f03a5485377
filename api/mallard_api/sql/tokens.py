"""API tokens: stored as the sha256 of the token, never the token itself."""

from __future__ import annotations

from sqlalchemy import Row, func, select, text
from sqlalchemy.orm import Session

from mallard_api.models.tokens import ApiToken

_LOOKUP = text("SELECT id, role, runner_name FROM api_tokens "
               "WHERE token_sha256 = :h AND revoked_at IS NULL")


def lookup(session: Session, token_sha256: str) -> Row[tuple[int, str, str | None]] | None:
    """The active token with this hash: (id, role, runner_name); every request asks, so
    it is one plain statement."""
    return session.execute(_LOOKUP, {"h": token_sha256}).first()


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
    row.revoked_at = session.scalar(select(func.now()))
    return True


def list_all(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))
