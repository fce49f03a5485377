"""Runners: register (idempotent by name), heartbeat, retire, list."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from mallard_wire.fields import INT32_MAX
from mallard_wire.runners import Heartbeat, RunnerRegister
from sqlalchemy.orm import Session

from mallard_api.auth import Admin, AnyRole, RunnerOrAdmin, check_runner, field_error
from mallard_api.deps import get_session
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.runners import Runner
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.runners import RunnerOut, RunnerProjectsIn
from mallard_api.sql import runners as sql

router = APIRouter(prefix="/runners", tags=["runners"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]


def runner_out(r: Runner, fingerprint: str | None) -> RunnerOut:
    return RunnerOut(id=r.id, name=r.name, arch=r.arch, cpus=r.cpus, testbed=r.testbed,
                     testbed_fingerprint=fingerprint, registered_at=r.registered_at,
                     last_seen_at=r.last_seen_at, retired_at=r.retired_at,
                     projects="all" if r.all_projects else list(r.projects or []))


@router.post("/register", response_model=RunnerOut)
def register(body: RunnerRegister, session: DB, p: RunnerOrAdmin) -> RunnerOut:
    check_runner(p, body.name, ["body", "name"])
    runner = sql.register(session, name=body.name, arch=body.arch, cpus=body.cpus,
                          testbed=body.testbed)
    session.commit()
    return runner_out(runner, sql.testbed_fingerprint(session, runner))


@router.post("/{runner_id}/heartbeat", response_model=RunnerOut,
             responses={404: {"model": ErrorOut}})
def heartbeat(runner_id: Annotated[int, Path(ge=1, le=INT32_MAX)], body: Heartbeat,
              session: DB, p: RunnerOrAdmin) -> RunnerOut:
    runner = sql.get(session, runner_id)
    if runner is None:
        raise field_error(404, ["path", "runner_id"], f"no runner with id {runner_id}",
                          "not_found")
    check_runner(p, runner.name, ["path", "runner_id"])
    sql.heartbeat(session, runner, body.testbed)
    session.commit()
    return runner_out(runner, sql.testbed_fingerprint(session, runner))


@router.post("/{runner_id}/retire", response_model=RunnerOut,
             responses={404: {"model": ErrorOut}})
def retire(runner_id: Annotated[int, Path(ge=1, le=INT32_MAX)], session: DB,
           _: Admin) -> RunnerOut:
    """Take a runner out of service for good (idempotent): it is no longer exported as
    `mallard_runner_last_seen_timestamp_seconds`, so MallardRunnerDown resolves, and
    push jobs are no longer queued for its arch on its account. Registering again (an
    agent does at start) brings it back."""
    runner = sql.get(session, runner_id)
    if runner is None:
        raise field_error(404, ["path", "runner_id"], f"no runner with id {runner_id}",
                          "not_found")
    sql.retire(session, runner)
    session.commit()
    return runner_out(runner, sql.testbed_fingerprint(session, runner))


@router.put("/{runner_id}/projects", response_model=RunnerOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def set_projects(runner_id: Annotated[int, Path(ge=1, le=INT32_MAX)], body: RunnerProjectsIn,
                 session: DB, _: Admin) -> RunnerOut:
    """The projects the runner may post history without a job to (none until an admin
    says; `"all"`: every one). Its jobs' results go to their own projects regardless."""
    runner = sql.get(session, runner_id)
    if runner is None:
        raise field_error(404, ["path", "runner_id"], f"no runner with id {runner_id}",
                          "not_found")
    sql.set_projects(session, runner, None if body.projects == "all" else body.projects)
    session.commit()
    return runner_out(runner, sql.testbed_fingerprint(session, runner))


@router.get("", response_model=list[RunnerOut])
def list_runners(session: DB, _: AnyRole) -> list[RunnerOut]:
    return [runner_out(r, fp) for r, fp in sql.list_all(session)]
