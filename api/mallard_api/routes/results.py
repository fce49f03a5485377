"""Results ingest: idempotent by trial uid; completes the job in the same transaction."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session

from mallard_api import analysis
from mallard_api.auth import RunnerOrAdmin, check_runner, field_error
from mallard_api.deps import get_session
from mallard_api.metrics import TRIALS_INGESTED
from mallard_api.schemas import ErrorOut, ResultsIn, ResultsOut
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import results as sql
from mallard_api.sql import runners as runner_sql

router = APIRouter(prefix="/results", tags=["results"],
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]


@router.post("", response_model=ResultsOut, status_code=201,
             responses={422: {"model": ErrorOut}})
def post_results(body: ResultsIn, request: Request, session: DB, p: RunnerOrAdmin
                 ) -> ResultsOut:
    runner_id = body.runner_id
    if runner_id is not None:
        runner = runner_sql.get(session, runner_id)
        if runner is None:
            raise field_error(422, ["body", "runner_id"], f"no runner with id {runner_id}")
        check_runner(p, runner.name, ["body", "runner_id"])
    elif p.role == "runner":
        assert p.runner_name is not None
        runner = runner_sql.get_by_name(session, p.runner_name)
        if runner is None:
            raise field_error(422, ["body", "runner_id"],
                              f"runner '{p.runner_name}' is not registered")
        runner_id = runner.id
    project_id = None
    if body.project is not None:
        project = project_sql.get(session, body.project)
        if project is None:
            raise field_error(422, ["body", "project"], f"no project named '{body.project}'")
        project_id = project.id
    if body.job_id is not None and not sql.job_exists(session, body.job_id):
        raise field_error(422, ["body", "job_id"], f"no job with id {body.job_id}")

    new_ids, duplicates = sql.ingest(session, body, runner_id=runner_id, project_id=project_id)
    if body.artifacts and new_ids:  # a re-post (all duplicates) does not store them twice
        sql.store_artifacts(session, job_id=body.job_id, runner_id=runner_id,
                            artifacts=body.artifacts)
    if body.job_id is not None:
        job_sql.complete(session, job_id=body.job_id, runner_id=runner_id)
    if runner_id is not None:
        runner_sql.touch(session, runner_id)
    analysis.after_ingest(session, job_id=body.job_id, trial_ids=new_ids)
    session.commit()
    TRIALS_INGESTED.inc(len(new_ids))
    return ResultsOut(stored=len(new_ids), duplicates=duplicates, job_id=body.job_id)
