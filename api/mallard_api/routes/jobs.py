"""Jobs: claim with a lease, renew the lease, report failure, list and read."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from mallard_wire.fields import INT64_MAX
from mallard_wire.jobs import ClaimIn, FailIn, JobSpec, LeaseIn
from mallard_wire.scrub import scrub
from sqlalchemy.orm import Session

from mallard_api.analysis import ingest, verdicts
from mallard_api.auth import (
    AnyRole,
    Principal,
    RunnerOrAdmin,
    UserOrAdmin,
    check_runner,
    field_error,
    may_read_job,
)
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.known import Catalog
from mallard_api.models.core import Job
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.core import (
    AttemptOut,
    JobDetail,
    JobIn,
    JobKind,
    JobOut,
    JobState,
)
from mallard_api.sql import jobs as sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import runners as runner_sql
from mallard_api.urls import check_repo_url, parse_allow_list

router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
JobPath = Annotated[int, Path(ge=1, le=INT64_MAX)]


def job_out(j: Job) -> JobOut:
    return JobOut(id=j.id, kind=j.kind, state=j.state, attempt=j.attempt,
                  max_attempts=j.max_attempts, arch=j.arch, lease_expires_at=j.lease_expires_at,
                  spec=j.spec, project_id=j.project_id, runner_id=j.runner_id,
                  created_at=j.created_at, claimed_at=j.claimed_at, finished_at=j.finished_at)


def acting_runner(session: Session, p: Principal, runner_id: int) -> runner_sql.RunnerRef:
    runner = runner_sql.ref(session, runner_id=runner_id, touch=True)
    if runner is None:
        raise field_error(422, ["body", "runner_id"], f"no runner with id {runner_id}")
    check_runner(p, runner.name, ["body", "runner_id"])
    return runner


@router.post("/claim", response_model=JobOut,
             responses={204: {"description": "nothing queued for the runner's arch"},
                        422: {"model": ErrorOut}})
def claim(body: ClaimIn, session: DB, p: RunnerOrAdmin,
          settings: Annotated[Settings, Depends(get_settings)]) -> JobOut | Response:
    runner = acting_runner(session, p, body.runner_id)
    if body.lease_seconds > settings.lease_seconds_max:
        raise field_error(422, ["body", "lease_seconds"],
                          f"at most {settings.lease_seconds_max} seconds")
    ingest.jobs_changed(session, sql.requeue_expired(session, runner.arch))
    job = sql.claim(session, runner_id=runner.id, arch=runner.arch,
                    lease_seconds=body.lease_seconds)
    if job is None and verdicts.backfill(session, settings, runner.arch) is not None:
        job = sql.claim(session, runner_id=runner.id, arch=runner.arch,
                        lease_seconds=body.lease_seconds)  # idle: a deferred commit
    if job is not None:  # a comparison's job: it (and its commit verdicts) run now
        comparison_id = (job.spec or {}).get("comparison_id")
        verdicts.job_claimed(session, settings,
                             comparison_id if isinstance(comparison_id, int) else None)
    session.commit()
    if job is None:
        return Response(status_code=204)
    return job_out(job)


@router.post("/{job_id}/lease", response_model=JobOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut},
                        422: {"model": ErrorOut}})
def renew(job_id: JobPath, body: LeaseIn, session: DB, p: RunnerOrAdmin) -> JobOut:
    runner = acting_runner(session, p, body.runner_id)
    if sql.get(session, job_id) is None:
        raise field_error(404, ["path", "job_id"], f"no job with id {job_id}", "not_found")
    job = sql.renew(session, job_id=job_id, runner_id=runner.id,
                    lease_seconds=body.lease_seconds)
    session.commit()
    if job is None:
        raise field_error(409, ["path", "job_id"],
                          f"runner {runner.id} no longer holds the lease of job {job_id}",
                          "lease_lost")
    return job_out(job)


@router.post("/{job_id}/fail", response_model=JobOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut},
                        422: {"model": ErrorOut}})
def fail(job_id: JobPath, body: FailIn, request: Request, session: DB, p: RunnerOrAdmin
         ) -> JobOut:
    runner = acting_runner(session, p, body.runner_id)
    if sql.get(session, job_id) is None:
        raise field_error(404, ["path", "job_id"], f"no job with id {job_id}", "not_found")
    job = sql.fail(session, job_id=job_id, runner_id=runner.id,
                   log=scrub(body.log, request.app.state.settings.secret_values()),
                   retryable=body.retryable)
    if job is None:
        raise field_error(409, ["path", "job_id"],
                          f"job {job_id} is not running for runner {runner.id}", "lease_lost")
    ingest.jobs_changed(session, [job_id])  # a comparison settles when its job fails
    session.commit()
    request.app.state.analysis.wake()
    return job_out(job)


def check_spec(spec: JobSpec, settings: Settings, catalog: Catalog,
               loc: list[str | int]) -> None:
    """What a spec names must be allowed here: its repo_url, suite and workloads."""
    reason = check_repo_url(spec.repo_url, parse_allow_list(settings.repo_url_allow))
    if reason:
        raise field_error(422, [*loc, "repo_url"], reason)
    reason = catalog.check_suite(spec.suite)
    if reason:
        raise field_error(422, [*loc, "suite"], reason)
    reason = catalog.check_workloads(spec.suite, spec.workloads)
    if reason:
        raise field_error(422, [*loc, "workloads"], reason)
    for field in ("comparison_id", "round", "bisection_id"):
        if getattr(spec, field) is not None:
            raise field_error(422, [*loc, field], "set only by the API for a comparison's jobs")


@router.post("", response_model=JobOut, status_code=201,
             responses={422: {"model": ErrorOut}})
def create_job(body: JobIn, request: Request, session: DB, _: UserOrAdmin,
               settings: Annotated[Settings, Depends(get_settings)]) -> JobOut:
    """Queue a job by hand (operators; comparisons queue their own)."""
    check_spec(body.spec, settings, request.app.state.catalog, ["body", "spec"])
    project_id = None
    if body.project is not None:
        project = project_sql.get(session, body.project)
        if project is None:
            raise field_error(422, ["body", "project"], f"no project named '{body.project}'")
        project_id = project.id
    job = sql.enqueue(session, kind=body.kind, arch=body.arch,
                      spec=body.spec,
                      project_id=project_id, max_attempts=body.max_attempts)
    session.commit()
    return job_out(job)


@router.get("", response_model=list[JobOut])
def list_jobs(session: DB, _: AnyRole,
              state: JobState | None = None,
              arch: Annotated[str | None, Query(max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")]
              = None,
              kind: JobKind | None = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100,
              offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> list[JobOut]:
    return [job_out(j) for j in sql.list_jobs(session, state=state, arch=arch, kind=kind,
                                              limit=limit, offset=offset)]


@router.get("/{job_id:int}", response_model=JobDetail, responses={404: {"model": ErrorOut}})
def get_job(job_id: JobPath, session: DB, p: AnyRole) -> JobDetail:
    """A job with its attempts and their logs: for an admin, a runner that ran it, a user
    token of its project (auth.may_read_job); for anyone else there is no such job."""
    job = sql.get(session, job_id)
    if job is None or not may_read_job(p, *sql.readers(session, job_id)):
        raise field_error(404, ["path", "job_id"], f"no job with id {job_id}", "not_found")
    return JobDetail(**job_out(job).model_dump(), attempts=[
        AttemptOut(attempt=a.attempt, runner_id=a.runner_id, started_at=a.started_at,
                   ended_at=a.ended_at, outcome=a.outcome, log=a.log)
        for a in sql.attempts(session, job_id)])
