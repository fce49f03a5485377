"""Alerts: list (filters), read, acknowledge, resolve (sends alert.resolved), label, triage
(state, assignee, bug URL, label, notes; audited) and accept as the new baseline. Every
change goes through analysis/triage.py; readers and runners may not make one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api.analysis import triage
from mallard_api.auth import (
    AnyRole,
    Principal,
    UserOrAdmin,
    actor_name,
    field_error,
    may_triage,
)
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.alerts import Alert
from mallard_api.schemas.alerts import (
    AcceptIn,
    AlertOut,
    AlertTriageOut,
    AuditOut,
    LabelIn,
    NoteOut,
    TriageIn,
)
from mallard_api.schemas.base import ErrorOut
from mallard_api.sql import alerts as sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import triage as triage_sql

router = APIRouter(prefix="/alerts", tags=["alerts"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
AlertPath = Annotated[int, Path(ge=1, le=INT32_MAX)]


def alert_out(a: Alert) -> AlertOut:
    return AlertOut(
        alert_id=a.id, opened_at=a.opened_at, updated_at=a.updated_at,
        acknowledged_at=a.acknowledged_at, resolved_at=a.resolved_at, state=a.state,
        label=a.label, triage=a.triage, assignee=a.assignee, bug_url=a.bug_url,
        project=a.project, branch=a.branch, workload=a.workload,
        params=a.params, threads=a.threads, arch=a.arch,
        testbed_fingerprint=a.testbed_fingerprint, measure=a.measure, allocator=a.allocator,
        variant=a.variant, first_bad_commit=a.first_bad_commit,
        last_good_commit=a.last_good_commit, change_pct=a.change_pct,
        ci_low_pct=a.ci_low_pct, ci_high_pct=a.ci_high_pct, p_value=a.p_value,
        before_median=a.before_median, after_median=a.after_median, text=a.text)


def _load(session: Session, alert_id: int, *, lock: bool = False) -> Alert:
    a = sql.get(session, alert_id, lock=lock)
    if a is None:
        raise field_error(404, ["path", "alert_id"], f"no alert {alert_id}", "not_found")
    return a


@router.get("", response_model=list[AlertOut], responses={422: {"model": ErrorOut}})
def list_alerts(
    session: DB, _: AnyRole,
    state: Annotated[str | None, Query(pattern=r"^(open|acknowledged|resolved)$")] = None,
    project: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    workload: Annotated[str | None, Query(max_length=100, pattern=r"^[A-Za-z0-9_.-]*$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> list[AlertOut]:
    rows = sql.list_alerts(session, state=state, project=project, workload=workload,
                           limit=limit, offset=offset)
    return [alert_out(a) for a in rows]


@router.get("/{alert_id}", response_model=AlertOut, responses={404: {"model": ErrorOut}})
def get_alert(alert_id: AlertPath, session: DB, _: AnyRole) -> AlertOut:
    return alert_out(_load(session, alert_id))


def _may_triage(who: Principal, a: Alert) -> str:
    """403 unless `who` may triage the alert's project; the name audit rows give them."""
    if not may_triage(who, a.project):
        raise field_error(403, ["header", "authorization"],
                          f"this token may not triage alerts of {a.project}", "forbidden")
    return actor_name(who)


def _refused(exc: triage.Refused) -> HTTPException:
    return field_error(exc.status, ["path" if exc.field == "alert_id" else "body", exc.field],
                       exc.msg, "conflict" if exc.status == 409 else "not_found")


Conf = Annotated[Settings, Depends(get_settings)]


@router.post("/{alert_id}/acknowledge", response_model=AlertOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}})
def acknowledge(alert_id: AlertPath, session: DB, who: UserOrAdmin, settings: Conf
                ) -> AlertOut:
    """Acknowledge (a pull request's regression: its status turns green with a note)."""
    a = _load(session, alert_id, lock=True)
    try:
        triage.acknowledge(session, settings, a, _may_triage(who, a))
    except triage.Refused as exc:
        raise _refused(exc) from exc
    session.commit()
    return alert_out(a)


@router.post("/{alert_id}/resolve", response_model=AlertOut,
             responses={404: {"model": ErrorOut}})
def resolve(alert_id: AlertPath, session: DB, who: UserOrAdmin, settings: Conf) -> AlertOut:
    a = _load(session, alert_id, lock=True)
    triage.resolve(session, settings, a, _may_triage(who, a))
    session.commit()
    return alert_out(a)


@router.post("/{alert_id}/label", response_model=AlertOut,
             responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def label(alert_id: AlertPath, body: LabelIn, session: DB, who: UserOrAdmin, settings: Conf
          ) -> AlertOut:
    a = _load(session, alert_id, lock=True)
    triage.apply(session, settings, a, _may_triage(who, a), TriageIn(label=body.label))
    session.commit()
    return alert_out(a)


def triage_out(session: Session, a: Alert) -> AlertTriageOut:
    return AlertTriageOut(
        alert_id=a.id, state=a.state, triage=a.triage, assignee=a.assignee,
        bug_url=a.bug_url, label=a.label,
        notes=[NoteOut(author=n.author, body=n.body, created_at=n.created_at)
               for n in triage_sql.notes(session, a.id)],
        audit=[AuditOut(actor=r.actor, field=r.field, old_value=r.old_value,
                        new_value=r.new_value, at=r.at)
               for r in triage_sql.audit_of(session, a.id)])


@router.get("/{alert_id}/triage", response_model=AlertTriageOut,
            responses={404: {"model": ErrorOut}})
def get_triage(alert_id: AlertPath, session: DB, _: AnyRole) -> AlertTriageOut:
    return triage_out(session, _load(session, alert_id))


@router.post("/{alert_id}/triage", response_model=AlertTriageOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut},
                        422: {"model": ErrorOut}})
def set_triage(alert_id: AlertPath, body: TriageIn, session: DB, who: UserOrAdmin,
               settings: Conf) -> AlertTriageOut:
    """Change what the fields sent say (null or "" clears one); a `note` is added."""
    a = _load(session, alert_id, lock=True)
    try:
        triage.apply(session, settings, a, _may_triage(who, a), body)
    except triage.Refused as exc:
        raise _refused(exc) from exc
    session.commit()
    return triage_out(session, a)


@router.post("/{alert_id}/accept", response_model=AlertOut,
             responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def accept(alert_id: AlertPath, body: AcceptIn, session: DB, who: UserOrAdmin,
           settings: Conf) -> AlertOut:
    """Accept the alert's change as intended: its first bad commit becomes the branch's new
    baseline (later verdicts and change points compare against it); the alert resolves."""
    a = _load(session, alert_id, lock=True)
    actor = _may_triage(who, a)
    proj = project_sql.get(session, a.project)
    branch = None if proj is None else project_sql.get_branch(session, proj, a.branch)
    if branch is None:
        raise field_error(404, ["path", "alert_id"], f"alert {alert_id}'s branch is gone",
                          "not_found")
    try:
        triage.accept_baseline(session, settings, branch, a.first_bad_commit, actor,
                               note=body.note or "", alert=a)
    except triage.Refused as exc:
        raise _refused(exc) from exc
    session.commit()
    return alert_out(a)
