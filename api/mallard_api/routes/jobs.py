"""Jobs: claim with a lease, renew the lease, report failure, list and read."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from mallard_wire.fields import INT64_MAX
from mallard_wire.jobs import ClaimIn, FailIn, JobSpec, LeaseIn, SpecAllocator
from mallard_wire.scrub import scrub
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import ingest, verdicts
from mallard_api.analysis.specs import SpecError, built_side, project_build
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
from mallard_api.models.jobs import Job
from mallard_api.models.projects import Project
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.jobs import (
    AllocatorIn,
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
from mallard_api.urls import check_repo_url, parse_allow_list, same_repository

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


def lost(job_id: int, runner_id: int, attempt: int, job: Job | None) -> HTTPException:
    """409 `lease_lost`: naming `attempt` when the runner holds the job at another
    attempt (a stale report of an attempt whose lease expired), else the job."""
    if job is not None and job.state == "running" and job.runner_id == runner_id \
            and job.attempt != attempt:
        return field_error(409, ["body", "attempt"],
                           f"attempt {attempt} of job {job_id} is over: the job runs "
                           f"attempt {job.attempt} now", "lease_lost")
    return field_error(409, ["path", "job_id"],
                       f"runner {runner_id} no longer holds the lease of job {job_id}",
                       "lease_lost")


@router.post("/{job_id}/lease", response_model=JobOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut},
                        422: {"model": ErrorOut}})
def renew(job_id: JobPath, body: LeaseIn, session: DB, p: RunnerOrAdmin) -> JobOut:
    """Renew the lease of the attempt the runner claimed (409 when it is lost)."""
    runner = acting_runner(session, p, body.runner_id)
    if sql.get(session, job_id) is None:
        raise field_error(404, ["path", "job_id"], f"no job with id {job_id}", "not_found")
    job = sql.renew(session, job_id=job_id, runner_id=runner.id, attempt=body.attempt,
                    lease_seconds=body.lease_seconds)
    session.commit()
    if job is None:
        raise lost(job_id, runner.id, body.attempt,
                   sql.get(session, job_id, fresh=True))
    return job_out(job)


@router.post("/{job_id}/fail", response_model=JobOut,
             responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut},
                        422: {"model": ErrorOut}})
def fail(job_id: JobPath, body: FailIn, request: Request, session: DB, p: RunnerOrAdmin
         ) -> JobOut:
    """The attempt the runner claimed failed, with its log (409 when it is not running)."""
    runner = acting_runner(session, p, body.runner_id)
    if sql.get(session, job_id) is None:
        raise field_error(404, ["path", "job_id"], f"no job with id {job_id}", "not_found")
    job = sql.fail(session, job_id=job_id, runner_id=runner.id, attempt=body.attempt,
                   log=scrub(body.log, request.app.state.settings.secret_values()),
                   retryable=body.retryable)
    if job is None:
        raise lost(job_id, runner.id, body.attempt, sql.get(session, job_id))
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
    for field in ("comparison_id", "round", "bisection_id", "profile"):
        if getattr(spec, field) is not None:
            raise field_error(422, [*loc, field], "set only by the API for a comparison's jobs")


def job_project(session: Session, body: JobIn) -> Project | None:
    """The project a job's results go to: the one the body names, else its spec's (the
    same when both do), which must exist; its repository is the job's: a job of a project
    builds that project's repo_url and no other (else another repository's results would
    land in its series)."""
    spec = body.spec
    if body.project is not None and spec.project not in (None, body.project):
        raise field_error(422, ["body", "spec", "project"],
                          f"names project '{spec.project}'; the job is for '{body.project}'")
    loc: list[str | int] = ["body", "project"] if body.project else ["body", "spec", "project"]
    name = body.project or spec.project
    if name is None:
        return None
    project = project_sql.get(session, name)
    if project is None:
        raise field_error(422, loc, f"no project named '{name}'")
    if not same_repository(spec.repo_url, project.repo_url):
        raise field_error(422, ["body", "spec", "repo_url"],
                          f"a job of project '{name}' builds the project's repository "
                          f"(its repo_url), not another one")
    return project


def side_of(session: Session, settings: Settings, p: Principal, project: Project | None,
            a: AllocatorIn, i: int) -> SpecAllocator:
    """A side of a job queued by hand, with its build: a side with a commit (or a variant)
    is the build of the registered project it names (the job's, or one whose repository
    runners may fetch), by that project's recipe, so no request brings a recipe of its
    own; a hand-written `build` is an admin's (403 otherwise). Without a commit it is a
    catalogue entry."""
    loc: list[str | int] = ["body", "spec", "allocators", i]
    build = a.build
    if build is not None:
        if p.role != "admin":
            raise field_error(403, [*loc, "build"], "a side's build is the registered "
                              "project's (its repository and recipe, filled in by the "
                              "API): leave it out; only an admin may write one", "forbidden")
        reason = check_repo_url(build.repo_url, parse_allow_list(settings.repo_url_allow))
        if reason:
            raise field_error(422, [*loc, "build", "repo_url"], reason)
    elif a.commit is not None or a.variant:
        other = project if project is not None and project.name == a.name \
            else project_sql.get(session, a.name)
        if other is None:
            raise field_error(422, [*loc, "name"], f"no project named '{a.name}': a side "
                              "with a commit is a registered project's build (a catalogue "
                              "allocator takes no commit)")
        reason = check_repo_url(other.repo_url, parse_allow_list(settings.repo_url_allow))
        if reason:
            raise field_error(422, [*loc, "name"], f"project '{other.name}': {reason}")
        try:
            build = project_build(other)
        except SpecError as exc:
            raise field_error(exc.status, [*loc, "name"], exc.msg, "conflict") from exc
    if build is None:
        return SpecAllocator(label=a.label, name=a.name)
    try:
        return built_side(a.label, a.name, build, a.commit, a.variant, loc)
    except SpecError as exc:
        raise field_error(422, exc.field, exc.msg) from exc


@router.post("", response_model=JobOut, status_code=201,
             responses={403: {"model": ErrorOut}, 409: {"model": ErrorOut},
                        422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
def create_job(body: JobIn, request: Request, session: DB, p: UserOrAdmin,
               settings: Annotated[Settings, Depends(get_settings)]) -> JobOut:
    """Queue a job by hand (operators; comparisons queue their own). A job of a project
    runs that project's repository; each built side is a registered project's build by
    its recipe (`side_of`); the token's quotas count it (quotas.py)."""
    catalog = request.app.state.catalog
    check_spec(body.spec, settings, catalog, ["body", "spec"])
    project = job_project(session, body)
    spec = JobSpec.model_validate({
        **body.spec.model_dump(exclude={"allocators"}),
        "project": None if project is None else project.name,
        "allocators": [side_of(session, settings, p, project, a, i)
                       for i, a in enumerate(body.spec.allocators)]})
    job = sql.enqueue(session, kind=body.kind, arch=body.arch, spec=spec,
                      project_id=None if project is None else project.id,
                      max_attempts=body.max_attempts)
    quotas.charge(session, settings, catalog, p, jobs=[(job.id, spec)])
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
