"""API tokens: stored as the sha256 of the token, never the token itself."""

from __future__ import annotations

from sqlalchemy import Row, select, text
from sqlalchemy.orm import Session

from mallard_api.models.core import ApiToken

_LOOKUP = text("SELECT id, role, runner_name, projects FROM api_tokens "
               "WHERE token_sha256 = :h AND revoked_at IS NULL")


def lookup(session: Session, token_sha256: str
           ) -> Row[tuple[int, str, str | None, list[str] | None]] | None:
    """The active token with this hash: (id, role, runner_name, projects); every request
    asks, so it is one plain statement."""
    return session.execute(_LOOKUP, {"h": token_sha256}).first()


def create(session: Session, *, token_sha256: str, role: str, runner_name: str | None,
           description: str | None = None, projects: list[str] | None = None) -> ApiToken:
    """A token; `projects` (user tokens): the only projects whose jobs it may read."""
    row = ApiToken(token_sha256=token_sha256, role=role, runner_name=runner_name,
                   description=description, projects=projects)
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
