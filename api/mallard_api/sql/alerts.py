"""Alerts and change points: the series an ingest touched, alert rows, change point rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mallard_stats.changepoints import Change
from mallard_wire.fields import JsonDict
from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.alerts import Alert, ChangePoint


@dataclass(frozen=True)
class TouchedSeries:
    project_id: int
    project: str
    branch_id: int
    branch: str
    workload: str
    params: JsonDict
    params_sha: str
    threads: int | None
    allocator: str
    variant: str
    arch: str
    testbed_fingerprint: str
    measure: str
    emulated: bool = False  # the testbed ran another architecture under qemu-user


TOUCHED_SQL = text("""
SELECT DISTINCT p.id AS project_id, p.name AS project, b.id AS branch_id, b.name AS branch,
       p.default_branch, p.tracked_branches,
       w.name AS workload, w.params, w.params_sha256, w.threads, a.name AS allocator,
       a.variant, tb.arch, tb.fingerprint, m.key AS measure,
       COALESCE((tb.fields->>'emulated')::boolean, false) AS emulated
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
            r.measure, bool(r.emulated)))
    return out


def measure_direction(session: Session, name: str) -> bool | None:
    value = session.scalar(text("SELECT higher_is_better FROM measures WHERE name = :n"),
                           {"n": name})
    return None if value is None else bool(value)


def add_change_point(session: Session, s: TouchedSeries, series_key: str, ch: Change) -> bool:
    """Insert a change point of series `s`; False when this series already has it."""
    res = session.execute(insert(ChangePoint).values(
        series_key=series_key, project=s.project, branch=s.branch, workload=s.workload,
        params=s.params, arch=s.arch, testbed_fingerprint=s.testbed_fingerprint,
        allocator=s.allocator, variant=s.variant, measure=s.measure,
        commit_sha=ch.first_bad_commit, prev_commit_sha=ch.last_good_commit,
        change_pct=ch.change_pct, ci_low_pct=ch.ci_low_pct, ci_high_pct=ch.ci_high_pct,
        p_value=ch.p_value, direction=ch.direction)
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


def add_alert(session: Session, s: TouchedSeries, series_key: str, ch: Change, text: str
              ) -> Alert | None:
    """Open an alert for change `ch` of series `s`; None when this series already has one
    for that first bad commit."""
    return add_alert_row(session, Alert(
        series_key=series_key, project_id=s.project_id, project=s.project, branch=s.branch,
        workload=s.workload, params=s.params, threads=s.threads, arch=s.arch,
        testbed_fingerprint=s.testbed_fingerprint, allocator=s.allocator, variant=s.variant,
        measure=s.measure, first_bad_commit=ch.first_bad_commit,
        last_good_commit=ch.last_good_commit, change_pct=ch.change_pct,
        ci_low_pct=ch.ci_low_pct, ci_high_pct=ch.ci_high_pct, p_value=ch.p_value,
        before_median=ch.before_median, after_median=ch.after_median, state="open", text=text))


def add_alert_row(session: Session, alert: Alert) -> Alert | None:
    """Insert a new (unsaved) alert; None when its series already has one for that first
    bad commit (a commit verdict's alert is built whole by `analysis/verdicts.py`)."""
    values = {c.key: getattr(alert, c.key) for c in Alert.__table__.columns
              if getattr(alert, c.key) is not None}
    res = session.execute(insert(Alert).values(**values)
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


def touch(alert: Alert) -> None:
    alert.updated_at = datetime.now(UTC)


def set_label(alert: Alert, label: str | None) -> None:
    alert.label = label
    alert.updated_at = datetime.now(UTC)


# -- verdict alerts (migration 0008) --------------------------------------------------------
def changepoint_alert_on(session: Session, series_key: str, commit: str) -> bool:
    """Whether change detection already alerted this series at this commit."""
    return session.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM alerts WHERE series_key = :k AND first_bad_commit = :c "
        "AND source = 'changepoint')"), {"k": series_key, "c": commit}) is True


def verdict_alert_covers(session: Session, series_key: str, commit: str) -> bool:
    """Whether a verdict alert on this commit groups a cell of this series."""
    return session.scalar(text(
        "SELECT EXISTS (SELECT 1 FROM alerts WHERE source = 'verdict' AND "
        "first_bad_commit = :c AND cells @> CAST(:cell AS jsonb))"),
        {"c": commit, "cell": f'[{{"series_key": "{series_key}"}}]'}) is True


# Triage labels per series: a verdict alert counts once for every series it groups.
_TRIAGE = text("""
WITH per_series AS (
    SELECT a.series_key, a.project, a.workload, a.threads, a.measure, a.arch, a.label
    FROM alerts a WHERE a.source = 'changepoint'
  UNION ALL
    SELECT c->>'series_key', a.project, c->>'workload', CAST(c->>'threads' AS integer),
           c->>'measure', a.arch, a.label
    FROM alerts a, jsonb_array_elements(a.cells) c WHERE a.source = 'verdict'
)
SELECT series_key, project, workload, threads, measure, arch,
       count(*) AS alerts,
       count(*) FILTER (WHERE label = 'true_positive') AS true_positive,
       count(*) FILTER (WHERE label = 'false_positive') AS false_positive
FROM per_series
WHERE (CAST(:project AS text) IS NULL OR project = :project)
GROUP BY series_key, project, workload, threads, measure, arch
ORDER BY project, workload, threads NULLS FIRST, measure, arch
""")


def triage_counts(session: Session, project: str | None) -> list[Any]:
    return list(session.execute(_TRIAGE, {"project": project}))
