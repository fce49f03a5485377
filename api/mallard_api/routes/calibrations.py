"""Calibrations: POST one (queues its A/A comparisons as `calibrate` jobs), read one with
its comparisons and results (analysis/calibrations.py has the method)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import calibrations, noise
from mallard_api.analysis.specs import SpecError
from mallard_api.auth import AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.calibrations import Calibration
from mallard_api.routes.checks import buildable_project, spec_error
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.calibrations import CalibrationIn, CalibrationOut, ComparisonRef, ResultOut
from mallard_api.sql import calibrations as sql

router = APIRouter(prefix="/calibrations", tags=["calibrations"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
CalibrationPath = Annotated[int, Path(ge=1, le=INT32_MAX)]
DEFAULT_WORKLOADS = ["larson", "rpc"]


def calibration_out(session: Session, cal: Calibration) -> CalibrationOut:
    rows = sql.results(session, cal.id)
    results = [ResultOut.model_validate(r, from_attributes=True) for r in rows]
    return CalibrationOut(
        id=cal.id, project=cal.project, arch=cal.arch, testbed_id=cal.testbed_id,
        commit=cal.commit_sha, variant=cal.variant, suite=cal.suite, workloads=cal.workloads,
        threads=cal.threads, trials=cal.trials, aa_comparisons=cal.aa_comparisons,
        canary_comparisons=cal.canary_comparisons, sizes_pct=cal.sizes_pct, state=cal.state,
        canary_ns=cal.canary_ns or {}, note=cal.note,
        comparisons=[ComparisonRef(id=c.id, state=c.state, canary_pct=c.canary_pct,
                                   probe=c.canary_probe)
                     for c in sql.comparisons(session, cal.id)],
        results=results, table=noise.table(rows),
        created_at=cal.created_at, finished_at=cal.finished_at)


@router.post("", response_model=CalibrationOut, status_code=201,
             responses={422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
def create_calibration(body: CalibrationIn, request: Request, session: DB, p: UserOrAdmin,
                       settings: Annotated[Settings, Depends(get_settings)]) -> CalibrationOut:
    suite = body.suite or settings.suite
    catalog = request.app.state.catalog
    workloads = body.workloads or [w for w in DEFAULT_WORKLOADS
                                   if not catalog.check_workloads(suite, [w])]
    for field, reason in (("suite", catalog.check_suite(suite)),
                          ("workloads", catalog.check_workloads(suite, workloads))):
        if reason:
            raise field_error(422, ["body", field], reason)
    if not workloads:
        raise field_error(422, ["body", "workloads"], f"suite {suite!r} runs neither "
                          f"{' nor '.join(DEFAULT_WORKLOADS)}: name the workloads")
    project = buildable_project(session, body.project, settings)
    arch = body.arch or settings.default_arch
    if body.testbed_id is not None:
        testbed = sql.testbed(session, body.testbed_id)
        if testbed is None:
            raise field_error(422, ["body", "testbed_id"], f"no testbed {body.testbed_id}")
        if body.arch is not None and body.arch != testbed.arch:
            raise field_error(422, ["body", "arch"], f"testbed {testbed.id} is "
                              f"{testbed.arch}, not {body.arch}")
        arch = testbed.arch
    sizes = sorted(set(body.sizes_pct))
    if body.canary_comparisons and sizes and body.aa_comparisons == 0:
        raise field_error(422, ["body", "aa_comparisons"], "canaries are sized from the A/A "
                          "trials: ask for at least one A/A comparison")
    total = body.aa_comparisons + body.canary_comparisons * len(sizes) * len(workloads)
    if total == 0:
        raise field_error(422, ["body", "aa_comparisons"], "nothing to run: ask for A/A or "
                          "canary comparisons")
    if total > settings.calibration_max_comparisons:
        field = ("aa_comparisons" if body.aa_comparisons > settings.calibration_max_comparisons
                 else "canary_comparisons")
        raise field_error(422, ["body", field], f"{total} comparisons in all (A/A + canary "
                          f"comparisons x sizes x workloads); at most "
                          f"{settings.calibration_max_comparisons}")
    cal = sql.create(session, Calibration(
        project_id=project.id, project=project.name, arch=arch,
        testbed_id=body.testbed_id, commit_sha=body.commit, variant=body.variant or "",
        suite=suite, workloads=workloads, threads=body.threads or [1], trials=body.trials,
        aa_comparisons=body.aa_comparisons, canary_comparisons=body.canary_comparisons,
        sizes_pct=sizes, state="queued", canary_ns={}))
    try:
        calibrations.start(session, cal, settings)
    except SpecError as exc:  # e.g. a variant key the project's recipe does not know
        exc.field = ["variant"] if exc.field[-1] == "variant" else exc.field
        raise spec_error(exc) from exc
    quotas.charge(session, settings, catalog, p,
                  comparisons=[c.id for c in sql.comparisons(session, cal.id)])
    session.commit()
    return calibration_out(session, cal)


@router.get("/{calibration_id}", response_model=CalibrationOut,
            responses={404: {"model": ErrorOut}})
def get_calibration(calibration_id: CalibrationPath, session: DB, _: AnyRole
                    ) -> CalibrationOut:
    cal = sql.get(session, calibration_id)
    if cal is None:
        raise field_error(404, ["path", "calibration_id"], f"no calibration {calibration_id}",
                          "not_found")
    return calibration_out(session, cal)
