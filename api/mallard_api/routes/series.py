"""Series: the history of one measure along a branch."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api.auth import AnyRole, field_error
from mallard_api.deps import get_session
from mallard_api.errors import StrictJsonRoute
from mallard_api.params import params_sha256
from mallard_api.query import params_object
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.series import SeriesOut
from mallard_api.sql import series as sql

router = APIRouter(prefix="/series", tags=["series"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
Word = r"^[A-Za-z0-9_.+=,:/@-]+$"


@router.get("", response_model=SeriesOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def get_series(
    session: DB, _: AnyRole,
    project: Annotated[str, Query(min_length=1, max_length=200, pattern=r"^[^\x00]+$")],
    workload: Annotated[str, Query(min_length=1, max_length=100, pattern=Word)],
    measure: Annotated[str, Query(min_length=1, max_length=100,
                                  pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")] = "ops_per_sec",
    branch: Annotated[str | None, Query(min_length=1, max_length=200,
                                        pattern=r"^[^\x00]+$")] = None,
    allocator: Annotated[str | None, Query(
        min_length=1, max_length=100, pattern=Word,
        description="default: the project's own allocator (named after it)")] = None,
    variant: Annotated[str | None, Query(max_length=500, pattern=r"^[^\x00]*$",
                                         description="'default' or empty: no variant")] = None,
    params: Annotated[str | None, Query(max_length=10000,
                                        description="the workload params as a JSON object "
                                                    "(exact match)")] = None,
    threads: Annotated[int | None, Query(ge=0, le=INT32_MAX)] = None,
    arch: Annotated[str | None, Query(max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")] = None,
    testbed: Annotated[str | None, Query(max_length=64, pattern=r"^[0-9a-f]+$",
                                         description="testbed fingerprint")] = None,
) -> Response:
    parsed = params_object(params)
    params_sha = None if parsed is None else params_sha256(parsed)
    ref = sql.branch_ref(session, project, branch)
    if ref is None:
        raise field_error(404, ["query", "project"], f"no project named '{project}'",
                          "not_found")
    if ref.branch_id is None:
        raise field_error(404, ["query", "branch"], f"no branch '{ref.branch}' in '{project}'",
                          "not_found")
    v = "" if variant in (None, "", "default") else variant
    allocator = allocator or ref.project  # the project's own builds are named after it
    found = sql.answer(session, sql.SeriesCell(
        branch_id=ref.branch_id, workload=workload, params_sha=params_sha, threads=threads,
        allocator=allocator, variant=v or "", measure=measure, arch=arch, testbed=testbed))
    # SeriesOut, its points already JSON (built by PostgreSQL): a 1000-commit answer is
    # ~0.5 MB that Python would otherwise decode, validate and encode again.
    head = json.dumps(dict(project=ref.project, branch=ref.branch, workload=workload,
                           measure=measure, unit=found.unit,
                           higher_is_better=found.higher_is_better, allocator=allocator,
                           variant=v or "default"))
    return Response(f'{head[:-1]}, "points": {found.points}}}', media_type="application/json")
