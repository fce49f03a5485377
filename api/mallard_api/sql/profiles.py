"""Differential profiles (db/versions/0026): a case asked for once per comparison, its
profile job, the profile its runner posts, and the profiles of comparisons as read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from mallard_wire.fields import JsonDict
from mallard_wire.profiles import ProfileCase, ProfileIn
from sqlalchemy import text
from sqlalchemy.orm import Session

_COLUMNS = ("p.id, p.comparison_id, p.workload, p.threads, p.params, p.job_id, p.requested, "
            "p.body, p.created_at, j.state AS job_state")


@dataclass
class ProfileRow:
    id: int
    comparison_id: int
    workload: str
    threads: int | None
    params: JsonDict
    job_id: int | None
    requested: bool
    body: ProfileIn | None
    created_at: datetime
    job_state: str | None

    @property
    def state(self) -> str:
        """done (stored), failed (its job failed or is gone), else queued or running."""
        if self.body is not None:
            return "done"
        if self.job_state in (None, "failed", "cancelled", "done"):
            return "failed"
        return self.job_state


def _row(r: object) -> ProfileRow:
    m = r._mapping  # type: ignore[attr-defined]
    body = ProfileIn.model_validate(m["body"]) if m["body"] is not None else None
    return ProfileRow(id=m["id"], comparison_id=m["comparison_id"], workload=m["workload"],
                      threads=m["threads"], params=m["params"], job_id=m["job_id"],
                      requested=m["requested"], body=body, created_at=m["created_at"],
                      job_state=m["job_state"])


def ask(session: Session, comparison_id: int, case: ProfileCase, requested: bool
        ) -> tuple[int, bool]:
    """The row of the case (created when new): (its id, whether it was created)."""
    new = session.scalar(text(
        "INSERT INTO comparison_profiles (comparison_id, workload, threads, params, requested) "
        "VALUES (:c, :w, :t, CAST(:p AS jsonb), :r) ON CONFLICT DO NOTHING RETURNING id"),
        {"c": comparison_id, "w": case.workload, "t": case.threads,
         "p": json.dumps(case.params, sort_keys=True), "r": requested})
    if new is not None:
        return int(new), True
    old = session.scalar(text(
        "SELECT id FROM comparison_profiles WHERE comparison_id = :c AND workload = :w "
        "AND COALESCE(threads, 0) = COALESCE(CAST(:t AS integer), 0) "
        "AND params = CAST(:p AS jsonb)"),
        {"c": comparison_id, "w": case.workload, "t": case.threads,
         "p": json.dumps(case.params, sort_keys=True)})
    return int(old), False


def attach_job(session: Session, profile_id: int, job_id: int) -> None:
    session.execute(text("UPDATE comparison_profiles SET job_id = :j WHERE id = :id"),
                    {"j": job_id, "id": profile_id})


def get(session: Session, comparison_id: int, profile_id: int) -> ProfileRow | None:
    r = session.execute(text(
        f"SELECT {_COLUMNS} FROM comparison_profiles p LEFT JOIN jobs j ON j.id = p.job_id "
        "WHERE p.comparison_id = :c AND p.id = :id"),
        {"c": comparison_id, "id": profile_id}).first()
    return None if r is None else _row(r)


def of_comparisons(session: Session, comparison_ids: list[int]) -> list[ProfileRow]:
    """The profiles of these comparisons, oldest first."""
    if not comparison_ids:
        return []
    rows = session.execute(text(
        f"SELECT {_COLUMNS} FROM comparison_profiles p LEFT JOIN jobs j ON j.id = p.job_id "
        "WHERE p.comparison_id = ANY(:c) ORDER BY p.id"), {"c": comparison_ids})
    return [_row(r) for r in rows]


def store(session: Session, job_id: int, profiles: list[ProfileIn]) -> list[int]:
    """The profiles a profile job's runner posted, each into its case's row; the
    comparisons they were stored for (one id per profile stored)."""
    stored: list[int] = []
    for p in profiles:
        c = p.case
        stored += [int(cid) for cid in session.scalars(text(
            "UPDATE comparison_profiles SET body = CAST(:b AS jsonb), stored_at = now() "
            "WHERE job_id = :j AND workload = :w "
            "AND COALESCE(threads, 0) = COALESCE(CAST(:t AS integer), 0) "
            "AND params = CAST(:p AS jsonb) RETURNING comparison_id"),
            {"b": p.model_dump_json(), "j": job_id, "w": c.workload, "t": c.threads,
             "p": json.dumps(c.params, sort_keys=True)})]
    return stored
