"""Alerts: list (filters), read, acknowledge, resolve (sends alert.resolved), label."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api import notify
from mallard_api.analysis import alerts
from mallard_api.auth import AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.alerts import Alert
from mallard_api.schemas.alerts import AlertOut, LabelIn
from mallard_api.schemas.base import ErrorOut
from mallard_api.sql import alerts as sql

router = APIRouter(prefix="/alerts", tags=["alerts"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
AlertPath = Annotated[int, Path(ge=1, le=INT32_MAX)]


def alert_out(a: Alert) -> AlertOut:
    return AlertOut(
        alert_id=a.id, opened_at=a.opened_at, updated_at=a.updated_at,
        acknowledged_at=a.acknowledged_at, resolved_at=a.resolved_at, state=a.state,
        label=a.label, project=a.project, branch=a.branch, workload=a.workload,
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


@router.post("/{alert_id}/acknowledge", response_model=AlertOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}})
def acknowledge(alert_id: AlertPath, session: DB, p: UserOrAdmin,
                settings: Annotated[Settings, Depends(get_settings)]) -> AlertOut:
    """Acknowledge (a pull request's regression: its status turns green with a note)."""
    a = _load(session, alert_id, lock=True)
    if a.state == "resolved":
        raise field_error(409, ["path", "alert_id"], f"alert {alert_id} is already resolved",
                          "conflict")
    alerts.acknowledge(session, settings, a, f"{p.role} token {p.token_id}")
    session.commit()
    return alert_out(a)


@router.post("/{alert_id}/resolve", response_model=AlertOut,
             responses={404: {"model": ErrorOut}})
def resolve(alert_id: AlertPath, session: DB, _: UserOrAdmin,
            settings: Annotated[Settings, Depends(get_settings)]) -> AlertOut:
    a = _load(session, alert_id, lock=True)
    alerts.resolve(session, a, notify.targets(session, settings.alert_webhooks))
    session.commit()
    return alert_out(a)


@router.post("/{alert_id}/label", response_model=AlertOut,
             responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def label(alert_id: AlertPath, body: LabelIn, session: DB, _: UserOrAdmin) -> AlertOut:
    a = _load(session, alert_id, lock=True)
    sql.set_label(a, body.label)
    session.commit()
    return alert_out(a)
