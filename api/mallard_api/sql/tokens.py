"""API tokens: stored as the sha256 of the token, never the token itself."""

from __future__ import annotations

from dataclasses import dataclass

from mallard_wire.fields import JsonDict
from sqlalchemy import Row, func, select, text
from sqlalchemy.orm import Session

from mallard_api.models.tokens import ApiToken

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
    row.revoked_at = session.scalar(select(func.now()))
    return True


def list_all(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


# --- quotas (quotas.py): the work a token asked for that has not finished ----------------
@dataclass(frozen=True)
class Queued:
    """A token's queued and running work."""

    jobs: int
    comparisons: int
    trials: int


def lock_quota(session: Session, token_id: int) -> None:
    """Serialize a token's requests that queue work until the caller's transaction ends,
    so two at once cannot both pass a quota (a row lock that blocks no foreign key)."""
    session.execute(text("SELECT 1 FROM api_tokens WHERE id = :t FOR NO KEY UPDATE"),
                    {"t": token_id})


def charge(session: Session, token_id: int, *, jobs: dict[int, int],
           comparisons: list[int]) -> None:
    """Mark jobs (id -> trials requested) and comparisons as asked for by the token."""
    if jobs:
        session.execute(text(
            "UPDATE jobs j SET requested_by = :t, trials_requested = u.n "
            "FROM unnest(CAST(:ids AS bigint[]), CAST(:ns AS integer[])) AS u(id, n) "
            "WHERE j.id = u.id"), {"t": token_id, "ids": list(jobs), "ns": list(jobs.values())})
    if comparisons:
        session.execute(text("UPDATE comparisons SET requested_by = :t WHERE id = ANY(:ids)"),
                        {"t": token_id, "ids": comparisons})


_QUEUED = text("""
SELECT (SELECT count(*) FROM jobs WHERE requested_by = :t AND state IN ('queued', 'running')),
       (SELECT count(*) FROM comparisons
        WHERE requested_by = :t AND state IN ('queued', 'running')),
       (SELECT coalesce(sum(trials_requested), 0) FROM jobs
        WHERE requested_by = :t AND state IN ('queued', 'running'))
""")


def queued(session: Session, token_id: int) -> Queued:
    row = session.execute(_QUEUED, {"t": token_id}).one()
    return Queued(int(row[0]), int(row[1]), int(row[2]))


def comparison_jobs(session: Session, comparison_ids: list[int]) -> list[tuple[int, JsonDict]]:
    """(job id, spec) of every job of these comparisons."""
    rows = session.execute(text(
        "SELECT j.id, j.spec FROM comparison_jobs cj JOIN jobs j ON j.id = cj.job_id "
        "WHERE cj.comparison_id = ANY(:ids)"), {"ids": comparison_ids})
    return [(int(r[0]), r[1]) for r in rows]


def jobs_with_comparisons(session: Session, job_ids: list[int]
                          ) -> tuple[list[tuple[int, JsonDict]], list[int]]:
    """(job id, spec) of these jobs, and the comparisons they belong to."""
    rows = session.execute(text(
        "SELECT j.id, j.spec, cj.comparison_id FROM jobs j "
        "LEFT JOIN comparison_jobs cj ON cj.job_id = j.id WHERE j.id = ANY(:ids)"),
        {"ids": job_ids}).all()
    return ([(int(r[0]), r[1]) for r in rows],
            sorted({int(r[2]) for r in rows if r[2] is not None}))
