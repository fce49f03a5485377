"""Results ingest: idempotent by trial uid. A job's trials are accepted only from the
runner that holds the job's current lease and attempt, while the job runs and the lease
is live, and only for the job's project; the job is completed in the same transaction.
History without a job goes only to a project the runner may write (runners.projects).
The analysis (comparison cells, change detection) is queued for the analysis worker,
never done here."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from mallard_wire.results import ResultsIn
from mallard_wire.scrub import scrub
from sqlalchemy.orm import Session

from mallard_api.analysis import ingest, why
from mallard_api.auth import Principal, authenticate, check_role, check_runner, field_error
from mallard_api.config import Settings
from mallard_api.deps import close_session, in_thread
from mallard_api.errors import StrictJsonRoute
from mallard_api.metrics import TRIALS_INGESTED
from mallard_api.rawbody import body_schema, json_values, parse
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.results import ResultsOut
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import measures as measure_sql
from mallard_api.sql import profiles as profile_sql
from mallard_api.sql import results as sql
from mallard_api.sql import runners as runner_sql

router = APIRouter(prefix="/results", tags=["results"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})


def poster(session: Session, p: Principal, body: ResultsIn) -> int | None:
    """The id of the runner posting (None: an admin posting without runner_id)."""
    if body.runner_id is not None:
        runner = runner_sql.seen(session, runner_id=body.runner_id)
        if runner is None:
            raise field_error(422, ["body", "runner_id"], f"no runner with id {body.runner_id}")
        check_runner(p, runner.name, ["body", "runner_id"])
        return runner.id
    if p.role == "runner":
        assert p.runner_name is not None
        runner = runner_sql.seen(session, name=p.runner_name)
        if runner is None:
            raise field_error(422, ["body", "runner_id"],
                              f"runner '{p.runner_name}' is not registered")
        return runner.id
    return None


def check_project(session: Session, p: Principal, body: ResultsIn, runner_id: int | None,
                  project_id: int | None, job: job_sql.Holding | None) -> None:
    """403 naming `project` unless the post may write there: a job's results go to the
    job's project only (or to none); history without a job, to the projects an admin let
    the runner write (runners.projects; admins may post anywhere)."""
    if job is not None:
        if project_id is not None and project_id != job.project_id:
            raise field_error(403, ["body", "project"], f"job {body.job_id} is not a job of "
                              f"project '{body.project}': its results go to its own project",
                              "forbidden")
        return
    if project_id is None or p.role == "admin" or runner_id is None:
        return
    if not runner_sql.may_write(session, runner_id, str(body.project)):
        raise field_error(403, ["body", "project"], f"runner {runner_id} may not post history "
                          f"without a job to project '{body.project}' (an admin sets its "
                          "projects: PUT /api/v1/runners/{id}/projects)", "forbidden")


def lease_lost(msg: str) -> Exception:
    return field_error(409, ["body", "job_id"], msg, "lease_lost")


def check_holder(session: Session, body: ResultsIn, runner_id: int | None
                 ) -> job_sql.Holding | None:
    """Raise 409 unless `runner_id` holds the job's current lease and attempt; return the
    job. None when the post is a re-post of a job this runner already completed in this
    attempt with exactly these trials (answered as duplicates; nothing is stored)."""
    assert body.job_id is not None and body.attempt is not None
    job = job_sql.lock_for_results(session, body.job_id)
    if job is None:
        raise field_error(422, ["body", "job_id"], f"no job with id {body.job_id}")
    mine = runner_id is not None and job.runner_id == runner_id and job.attempt == body.attempt
    if job.state == "done" and mine:
        uids = [t.uid for t in body.trials]
        if job_sql.stored_uids(session, body.job_id, uids) == len(set(uids)):
            return None
        raise lease_lost(f"job {body.job_id} is done: it takes no new trials")
    if job.state != "running":
        raise lease_lost(f"job {body.job_id} is {job.state}, not running: results are "
                         "taken only from the runner holding its lease")
    if not mine:
        raise lease_lost(f"job {body.job_id} attempt {job.attempt} is held by another "
                         f"runner or attempt (posted: runner {runner_id}, attempt "
                         f"{body.attempt})")
    if not job.lease_live:
        raise lease_lost(f"the lease of job {body.job_id} expired")
    return job


# Served by direct.py, before FastAPI's routing and without its dependency solving (the
# route is declared here for the OpenAPI document): the token is checked before the body
# is read (its size capped by the BodyLimitMiddleware); the body is parsed once, in Rust
# (rawbody.py), and stored in one hop to a request thread (deps.in_thread); the answer is
# encoded directly.
@router.post("", response_model=ResultsOut, status_code=201, openapi_extra=body_schema(ResultsIn),
             responses={409: {"model": ErrorOut}, 413: {"model": ErrorOut},
                        422: {"model": ErrorOut}})
async def post_results(request: Request) -> Response:
    session: Session = request.app.state.sessionmaker()
    try:
        p = check_role(await authenticate(request, session), ("runner", "admin"))
        raw = await request.body()
        return await in_thread(request.app.state.request_threads, store, request, session,
                               p, raw)
    finally:
        await close_session(session)


def store(request: Request, session: Session, p: Principal, raw: bytes) -> Response:
    settings: Settings = request.app.state.settings
    if json_values(raw, settings.max_results_body_values) > settings.max_results_body_values:
        raise field_error(413, ["body"], f"the body holds more than "
                          f"{settings.max_results_body_values} JSON values "
                          "(MALLARD_MAX_RESULTS_BODY_VALUES)", "too_large")
    body = parse(ResultsIn, raw)
    if body.job_id is not None and not body.trials and not body.profiles:
        raise field_error(422, ["body", "trials"], "a job's results must carry its trials")
    if len(body.trials) > settings.max_trials_per_post:
        raise field_error(413, ["body", "trials"], f"{len(body.trials)} trials; a post carries "
                          f"at most {settings.max_trials_per_post} "
                          "(MALLARD_MAX_TRIALS_PER_POST)", "too_large")
    for t in body.trials:  # a stderr tail is written by the code under test
        if t.stderr_tail:
            t.stderr_tail = scrub(t.stderr_tail, settings.secret_values())
    if body.artifacts and len(json.dumps(body.artifacts)) > settings.max_artifacts_bytes:
        raise field_error(413, ["body", "artifacts"], f"artifacts are larger than "
                          f"{settings.max_artifacts_bytes} bytes (MALLARD_MAX_ARTIFACTS_BYTES)",
                          "too_large")
    runner_id = poster(session, p, body)
    project_id = None
    if body.project is not None:
        project_id = sql.project_id(session, body.project)
        if project_id is None:
            raise field_error(422, ["body", "project"], f"no project named '{body.project}'")
    job = None
    if body.job_id is not None:
        job = check_holder(session, body, runner_id)
        if job is None:
            session.rollback()
            return answer(ResultsOut(stored=0, duplicates=len(body.trials), job_id=body.job_id))
    check_project(session, p, body, runner_id, project_id, job)
    if body.profiles is not None:
        if job is None or job.kind != "profile":
            raise field_error(422, ["body", "profiles"], "profiles come only with the results "
                              "of a profile job")
        assert body.job_id is not None
        why.on_stored(session, settings, profile_sql.store(session, body.job_id, body.profiles))

    caps = measure_sql.Caps(settings.max_new_measures_per_post,
                            settings.max_measures_per_project)
    stored, duplicates = sql.ingest(session, body, runner_id=runner_id, project_id=project_id,
                                    caps=caps, queue_changes=ingest.queues_changes(job))
    if body.artifacts and stored:  # a re-post (all duplicates) does not store them twice
        sql.store_artifacts(session, job_id=body.job_id, runner_id=runner_id,
                            artifacts=body.artifacts)
    completed = False
    if body.job_id is not None:
        completed = job_sql.complete(session, job_id=body.job_id, runner_id=runner_id)
    queued = ingest.after_ingest(session, job_id=body.job_id, stored=stored,
                                 job_completed=completed, job=job)
    session.commit()
    if queued:
        request.app.state.analysis.wake()
    TRIALS_INGESTED.inc(stored)
    return answer(ResultsOut(stored=stored, duplicates=duplicates, job_id=body.job_id))


def answer(out: ResultsOut) -> Response:
    return Response(out.model_dump_json(), status_code=201, media_type="application/json")
