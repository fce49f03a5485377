"""Results from other harnesses: POST /api/v1/uploads?project=P&format=F&commit=SHA&arch=...
with the harness's file as the body (docs/allocators.md, "Uploading results").

The file is read by its format's reader (mallard_wire.formats) into samples, each made
one trial of the project's allocator at the commit (label `head`, no variant), and the
trials are stored as a results post without a job stores them (sql/results.ingest, the
same insert, idempotent by uid: a trial's uid is the digest of the upload and its place
in the file, so the same file uploaded again stores nothing twice). The commit is put on
the branch after its last commit unless it is on it already, so the branch's series,
change points and alerts follow (analysis/ingest.py queues the change detection).

Who may upload: as POST /results without a job, an admin, or a registered runner an
admin let write the project (PUT /runners/{id}/projects); a user token reads only. The
token is checked before the body is read (a `streamed` route of the BodyLimitMiddleware,
capped at MALLARD_MAX_RESULTS_BODY_BYTES), the body's JSON values are counted before it
is parsed (MALLARD_MAX_RESULTS_BODY_VALUES), its trials capped
(MALLARD_MAX_TRIALS_PER_POST). A malformed file is a 422 naming the place in the file
(`["body", "benchmarks[3].real_time"]`, msg `benchmarks[3].real_time: must be a finite
number, got 'fast'`), and nothing is stored: one transaction.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from mallard_wire.formats import READERS, FormatError, Sample, Samples
from mallard_wire.results import AllocatorIn, ResultsIn
from pydantic import ValidationError
from sqlalchemy.orm import Session

from mallard_api.analysis import ingest
from mallard_api.auth import Principal, RunnerOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session
from mallard_api.errors import StrictJsonRoute
from mallard_api.metrics import TRIALS_INGESTED
from mallard_api.models.projects import Project
from mallard_api.rawbody import json_values
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.uploads import UploadOut, UploadQuery
from mallard_api.sql import measures as measure_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import results as results_sql
from mallard_api.sql import runners as runner_sql
from mallard_api.sql import uploads as sql

router = APIRouter(prefix="/uploads", tags=["uploads"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
BODY = {"requestBody": {"required": True, "description": "the harness's file, as it wrote it",
                        "content": {"application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}}}}}


@router.post("", response_model=UploadOut, status_code=201, openapi_extra=BODY,
             responses={413: {"model": ErrorOut}, 422: {"model": ErrorOut}})
async def upload(request: Request, query: Annotated[UploadQuery, Query()], p: RunnerOrAdmin,
                 session: DB) -> UploadOut:
    """Store another harness's results file as trials of the project's allocator at the
    commit, on the testbed the query describes (module doc)."""
    raw = await request.body()
    return await run_in_threadpool(store, request.app.state.settings, session, p, query, raw)


def store(settings: Settings, session: Session, p: Principal, q: UploadQuery,
          raw: bytes) -> UploadOut:
    project, runner_id = writer(session, p, q)
    samples = read(settings, q, raw)
    allocator = q.allocator or project.name
    branch = q.branch or project.default_branch
    body = results(q, raw, samples, allocator=allocator, branch=branch)
    caps = measure_sql.Caps(settings.max_new_measures_per_post,
                            settings.max_measures_per_project)
    stored, duplicates = results_sql.ingest(session, body, runner_id=runner_id,
                                            project_id=project.id, caps=caps,
                                            queue_changes=ingest.queues_changes(None))
    sql.on_branch(session, project.id, branch, q.commit)
    ingest.after_ingest(session, job_id=None, stored=stored)
    session.commit()
    TRIALS_INGESTED.inc(stored)
    return UploadOut(format=q.format, project=project.name, branch=branch, commit=q.commit,
                     allocator=allocator, trials=len(body.trials), stored=stored,
                     duplicates=duplicates,
                     cells=len({(s.workload, repr(sorted(s.params.items()))) for s in samples}),
                     measures=sorted({m for s in samples for m in s.measures}),
                     notes=list(getattr(samples, "notes", [])))


def writer(session: Session, p: Principal, q: UploadQuery) -> tuple[Project, int | None]:
    """The project, and the runner posting (None: an admin); 422 for no such project or
    an unregistered runner, 403 for a runner that may not write the project."""
    project = project_sql.get(session, q.project)
    if project is None:
        raise field_error(422, ["query", "project"], f"no project named '{q.project}'")
    if q.allocator is None:
        try:
            AllocatorIn(name=project.name)
        except ValidationError as e:
            raise field_error(422, ["query", "allocator"], f"the project's name "
                              f"'{project.name}' is no allocator name: give one") from e
    if p.role != "runner":
        return project, None
    assert p.runner_name is not None
    runner = runner_sql.seen(session, name=p.runner_name)
    if runner is None:
        raise field_error(422, ["header", "authorization"], f"runner '{p.runner_name}' is "
                          "not registered (mallard-runner upload registers it)")
    if not runner_sql.may_write(session, runner.id, project.name):
        raise field_error(403, ["query", "project"], f"runner '{p.runner_name}' may not post "
                          f"history to project '{project.name}' (an admin sets its "
                          "projects: mallard-api runner projects NAME --allow PROJECT)",
                          "forbidden")
    return project, runner.id


def read(settings: Settings, q: UploadQuery, raw: bytes) -> list[Sample]:
    """The file's samples; 413 past the caps, 422 naming what is wrong with the file."""
    if not raw:
        raise field_error(422, ["body"], "the body is the harness's file: it is empty")
    if json_values(raw, settings.max_results_body_values) > settings.max_results_body_values:
        raise field_error(413, ["body"], f"the file holds more than "
                          f"{settings.max_results_body_values} JSON values "
                          "(MALLARD_MAX_RESULTS_BODY_VALUES)", "too_large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise field_error(422, ["body"], f"the file is not UTF-8 (byte {e.start})",
                          "format_error") from e
    try:
        samples = READERS[q.format](text)
    except FormatError as e:
        raise field_error(422, ["body", e.where], f"{q.format}: {e}", "format_error") from e
    if len(samples) > settings.max_trials_per_post:
        raise field_error(413, ["body"], f"the file makes {len(samples)} trials; an upload "
                          f"stores at most {settings.max_trials_per_post} "
                          "(MALLARD_MAX_TRIALS_PER_POST): split it", "too_large")
    return samples if isinstance(samples, Samples) else Samples(samples)


def results(q: UploadQuery, raw: bytes, samples: list[Sample], *, allocator: str,
            branch: str) -> ResultsIn:
    """The samples as a results post without a job: one head trial each, its uid the
    upload's digest and its place (module doc)."""
    digest = hashlib.sha256("\0".join([q.format, q.project, allocator, q.commit]).encode()
                            + b"\0" + raw).hexdigest()[:40]
    trials = [{"uid": f"upload-{digest}-{i}", "label": "head",
               "allocator": {"name": allocator, "commit": q.commit},
               "workload": {"name": s.workload, "params": s.params}, "seq": s.seq,
               "measures": s.measures} for i, s in enumerate(samples)]
    try:
        return ResultsIn.model_validate({"project": q.project, "branch": branch,
                                         "testbed": q.testbed(), "trials": trials})
    except ValidationError as e:  # a reader let through what a trial cannot hold
        err = e.errors(include_url=False)[0]
        raise field_error(422, ["body"], f"{q.format}: the file makes a trial the API "
                          f"cannot store: {'.'.join(map(str, err['loc']))}: {err['msg']}",
                          "format_error") from e
