"""Alerts and change points: the series an ingest touched, alert rows, change point rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.analysis import Alert, ChangePoint


@dataclass(frozen=True)
class TouchedSeries:
    project_id: int
    project: str
    branch_id: int
    branch: str
    workload: str
    params: Any
    params_sha: str
    threads: int | None
    allocator: str
    variant: str
    arch: str
    testbed_fingerprint: str
    measure: str


TOUCHED_SQL = text("""
SELECT DISTINCT p.id AS project_id, p.name AS project, b.id AS branch_id, b.name AS branch,
       p.default_branch, p.tracked_branches,
       w.name AS workload, w.params, w.params_sha256, w.threads, a.name AS allocator,
       a.variant, tb.arch, tb.fingerprint, m.key AS measure
FROM trials t
JOIN projects p ON p.id = t.project_id
JOIN branches b ON b.id = t.branch_id
JOIN workloads w ON w.id = t.workload_id
JOIN allocators a ON a.id = t.allocator_id
JOIN testbeds tb ON tb.id = t.testbed_id
CROSS JOIN LATERAL jsonb_object_keys(t.measures) AS m(key)
WHERE t.id = ANY(:ids) AND t.ok AND NOT t.warmup AND t.label = 'head' AND a.commit_sha <> ''
""")


def touched_series(session: Session, trial_ids: list[int]) -> list[TouchedSeries]:
    """The branch series (head allocator at a commit, on a tracked branch) of these trials."""
    if not trial_ids:
        return []
    out = []
    for r in session.execute(TOUCHED_SQL, {"ids": list(trial_ids)}):
        if r.branch != r.default_branch and r.branch not in (r.tracked_branches or []):
            continue
        out.append(TouchedSeries(
            r.project_id, r.project, r.branch_id, r.branch, r.workload, r.params,
            r.params_sha256, r.threads, r.allocator, r.variant, r.arch, r.fingerprint,
            r.measure))
    return out


def measure_direction(session: Session, name: str) -> bool | None:
    value = session.scalar(text("SELECT higher_is_better FROM measures WHERE name = :n"),
                           {"n": name})
    return None if value is None else bool(value)


def add_change_point(session: Session, **fields: Any) -> bool:
    """Insert a change point; False when this series already has it."""
    res = session.execute(insert(ChangePoint).values(**fields)
                          .on_conflict_do_nothing(index_elements=["series_key", "commit_sha"])
                          .returning(ChangePoint.id))
    return res.scalar() is not None


def link_change_point(session: Session, series_key: str, commit_sha: str, alert_id: int) -> None:
    session.execute(text(
        "UPDATE change_points SET alert_id = :a WHERE series_key = :k AND commit_sha = :c"),
        {"a": alert_id, "k": series_key, "c": commit_sha})


def alerts_of_series(session: Session, series_key: str) -> list[Alert]:
    return list(session.scalars(select(Alert).where(Alert.series_key == series_key)
                                .order_by(Alert.id)))


def add_alert(session: Session, **fields: Any) -> Alert | None:
    """Insert an alert; None when this series already has one for that first bad commit."""
    res = session.execute(insert(Alert).values(**fields)
                          .on_conflict_do_nothing(index_elements=["series_key",
                                                                  "first_bad_commit"])
                          .returning(Alert.id))
    alert_id = res.scalar()
    return None if alert_id is None else session.get(Alert, alert_id)


def get(session: Session, alert_id: int, *, lock: bool = False) -> Alert | None:
    q = select(Alert).where(Alert.id == alert_id)
    if lock:
        q = q.with_for_update()
    return session.scalar(q)


def list_alerts(session: Session, *, state: str | None, project: str | None,
                workload: str | None, limit: int, offset: int) -> list[Alert]:
    q = select(Alert)
    if state:
        q = q.where(Alert.state == state)
    if project:
        q = q.where(Alert.project == project)
    if workload:
        q = q.where(Alert.workload == workload)
    return list(session.scalars(q.order_by(Alert.id.desc()).limit(limit).offset(offset)))


def set_state(alert: Alert, state: str) -> None:
    now = datetime.now(UTC)
    alert.state = state
    alert.updated_at = now
    if state == "acknowledged" and alert.acknowledged_at is None:
        alert.acknowledged_at = now
    if state == "resolved":
        alert.resolved_at = now


def set_label(alert: Alert, label: str | None) -> None:
    alert.label = label
    alert.updated_at = datetime.now(UTC)
