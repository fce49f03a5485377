"""Reads for the bisection page and the links to it: the bisections that named a commit
(culprit or candidate), the bisection of an alert or of a comparison, and why a step's
job failed (its last attempt's log line)."""

from __future__ import annotations

from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session

from mallard_api.models.bisections import Bisection
from mallard_api.models.jobs import JobAttempt

LOG_LINE_MAX = 200


def naming(session: Session, project_id: int, sha: str) -> list[Bisection]:
    """Bisections of the project that named `sha` the culprit or one of the candidates."""
    return list(session.scalars(select(Bisection).where(
        Bisection.project_id == project_id,
        or_(Bisection.culprit == sha,
            Bisection.culprit_candidates.contains([sha])))  # JSONB @>
        .order_by(Bisection.id.desc())))


def of_alert(session: Session, alert_id: int, bisection_id: int | None) -> Bisection | None:
    """The alert's bisection: the one it names, else the newest started for it."""
    q = select(Bisection).where(Bisection.id == bisection_id) if bisection_id is not None \
        else select(Bisection).where(Bisection.alert_id == alert_id)
    return session.scalar(q.order_by(Bisection.id.desc()).limit(1))


# Bisections any of whose steps measured this comparison (its verdict's round 0 too).
_OF_COMPARISON = text("""
SELECT DISTINCT b.id FROM bisections b, jsonb_array_elements(b.steps) s
WHERE s->'comparisons' @> CAST(:c AS jsonb) ORDER BY b.id
""")


def of_comparison(session: Session, comparison_id: int) -> list[Bisection]:
    ids = [int(i) for i in session.scalars(_OF_COMPARISON, {"c": f"[{int(comparison_id)}]"})]
    if not ids:
        return []
    return list(session.scalars(select(Bisection).where(Bisection.id.in_(ids))
                                .order_by(Bisection.id)))


def failure(session: Session, job_id: int) -> str | None:
    """The last non-empty line of the job's last failed attempt's log (capped)."""
    log = session.scalar(select(JobAttempt.log).where(
        JobAttempt.job_id == job_id, JobAttempt.outcome != "done")
        .order_by(JobAttempt.attempt.desc()).limit(1))
    lines = [ln.strip() for ln in (log or "").splitlines() if ln.strip()]
    return lines[-1][:LOG_LINE_MAX] if lines else None
