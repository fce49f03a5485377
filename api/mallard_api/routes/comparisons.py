"""Comparisons: POST one (queues a `comparison` job), list, read (JSON), report (text)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse
from mallard_stats.hypothesis import hypothesis_outcome
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import comparisons
from mallard_api.analysis.explain import explain
from mallard_api.analysis.report import ReportCell, is_counter
from mallard_api.analysis.specs import SpecError
from mallard_api.auth import AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.comparisons import Comparison
from mallard_api.routes.checks import buildable_project, spec_error
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.comparisons import (
    ComparisonDetail,
    ComparisonIn,
    ComparisonOut,
    CurveOut,
    HypothesisCheck,
    JobRef,
    JointOut,
    MovedOut,
)
from mallard_api.sql import comparisons as sql

router = APIRouter(prefix="/comparisons", tags=["comparisons"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
ComparisonPath = Annotated[int, Path(ge=1, le=INT32_MAX)]
Conf = Annotated[Settings, Depends(get_settings)]


def comparison_out(session: Session, c: Comparison) -> ComparisonOut:
    return ComparisonOut(
        id=c.id, project=c.project, arch=c.arch, state=c.state, base=c.base, head=c.head,
        base_label=c.base_label, head_label=c.head_label, workloads=c.workloads,
        threads=c.threads, suite=c.suite, trials=c.trials, warmup=c.warmup, peers=c.peers,
        hypothesis=c.hypothesis, follow_ups=c.follow_ups, max_follow_ups=c.max_follow_ups,
        testbed_fingerprint=c.testbed_fingerprint, cpu_model=c.cpu_model, note=c.note,
        counts=sql.counts(session, c.id),
        jobs=[JobRef(**vars(j)) for j in sql.jobs(session, c.id)],
        created_at=c.created_at, updated_at=c.updated_at, finished_at=c.finished_at)


@router.post("", response_model=ComparisonOut, status_code=201,
             responses={422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
def create_comparison(body: ComparisonIn, request: Request, session: DB, p: UserOrAdmin,
                      settings: Conf) -> ComparisonOut:
    suite = body.suite or settings.suite
    catalog = request.app.state.catalog
    for field, reason in (("suite", catalog.check_suite(suite)),
                          ("workloads", catalog.check_workloads(suite, body.workloads))):
        if reason:
            raise field_error(422, ["body", field], reason)
    project = buildable_project(session, body.project, settings)
    try:
        comp, _job = comparisons.open_comparison(
            session, settings, project, arch=body.arch or settings.default_arch,
            base=body.base, head=body.head, workloads=body.workloads, threads=body.threads,
            suite=suite, trials=body.trials or max(settings.trials, 2), warmup=body.warmup,
            peers=body.peers, max_follow_ups=body.max_follow_ups, hypothesis=body.hypothesis)
    except SpecError as exc:  # a variant key the recipe does not know, an unknown peer
        raise spec_error(exc) from exc
    quotas.charge(session, settings, catalog, p, comparisons=[comp.id])
    session.commit()
    return comparison_out(session, comp)


@router.get("", response_model=list[ComparisonOut], responses={422: {"model": ErrorOut}})
def list_comparisons(
    session: DB, _: AnyRole,
    project: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    state: Annotated[str | None, Query(pattern=r"^(queued|running|done|failed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> list[ComparisonOut]:
    rows = sql.list_all(session, project=project, state=state, limit=limit, offset=offset)
    return [comparison_out(session, c) for c in rows]


def _load(session: Session, comparison_id: int) -> Comparison:
    """Read only: the state is settled by the analysis worker, never by a read."""
    comp = sql.get(session, comparison_id)
    if comp is None:
        raise field_error(404, ["path", "comparison_id"], f"no comparison {comparison_id}",
                          "not_found")
    return comp


@router.get("/{comparison_id}", response_model=ComparisonDetail,
            responses={404: {"model": ErrorOut}})
def get_comparison(comparison_id: ComparisonPath, session: DB, _: AnyRole,
                   settings: Conf) -> ComparisonDetail:
    comp = _load(session, comparison_id)
    cells = sql.cells(session, comp.id)
    hyp = comparisons.hypothesis_of(comp)
    checks = [] if hyp is None else [
        HypothesisCheck(
            workload=c.workload, params=c.params, threads=c.threads, measure=c.measure,
            expected_low_pct=hyp.low_pct, expected_high_pct=hyp.high_pct,
            diff_pct=c.diff_pct, ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct,
            outcome=hypothesis_outcome(hyp, c.stats()))
        for c in cells if c.measure == hyp.measure
    ]
    rcells = [ReportCell(c.workload, c.params, c.measure, c.stats()) for c in cells]
    extra = explain(rcells, sql.testbed_cpus(session, comp.testbed_fingerprint))
    return ComparisonDetail(
        **dict(comparison_out(session, comp)), cells=cells,
        counters=[c for c in cells if is_counter(c.measure)],
        peer_medians=comp.peer_medians or [],
        hypothesis_checks=checks, joint=[JointOut(**asdict(j)) for j in extra.joint],
        counters_moved=[MovedOut(**asdict(m), text=m.text()) for m in extra.counters_moved],
        curves=[CurveOut(**asdict(c), summary=c.summary()) for c in extra.curves],
        report=comparisons.render_report(session, settings, comp))


@router.get("/{comparison_id}/report", response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {}}}, 404: {"model": ErrorOut}})
def get_report(comparison_id: ComparisonPath, session: DB, _: AnyRole, settings: Conf
               ) -> PlainTextResponse:
    comp = _load(session, comparison_id)
    return PlainTextResponse(comparisons.render_report(session, settings, comp))
