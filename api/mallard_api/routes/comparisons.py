"""Comparisons: POST one (queues a `comparison` job), list, read (JSON), report (text)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import AfterValidator, BaseModel, Field, StringConstraints, field_validator
from sqlalchemy.orm import Session

from mallard_api import analysis
from mallard_api.auth import AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.explain import explain
from mallard_api.fields import GitRef, Peer, Variant, Word, check_text
from mallard_api.models.analysis import Comparison
from mallard_api.report import ReportCell, hypothesis_outcome, is_counter, parse_hypothesis
from mallard_api.schemas import INT32_MAX, Arch, ErrorOut, InModel, Threads, Warmup, Workloads
from mallard_api.sql import comparisons as sql
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import projects as project_sql
from mallard_api.urls import check_repo_url, parse_allow_list

router = APIRouter(prefix="/comparisons", tags=["comparisons"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
ComparisonPath = Annotated[int, Path(ge=1, le=INT32_MAX)]

class Side(InModel):
    """One side: a full sha or a git ref name (never an option), and a variant of known
    keys."""

    commit: GitRef
    variant: Variant | None = None


class ComparisonIn(InModel):
    project: Annotated[str, StringConstraints(min_length=1, max_length=200),
                       AfterValidator(check_text)]
    base: Side
    head: Side
    workloads: Workloads | None = None
    threads: Threads | None = None
    trials: Annotated[int, Field(ge=2, le=1000)] | None = None
    warmup: Warmup | None = None
    arch: Arch | None = None
    hypothesis: Annotated[str, StringConstraints(max_length=200)] | None = None
    peers: Annotated[list[Peer], Field(max_length=20)] | None = None
    suite: Word | None = None
    max_follow_ups: Annotated[int, Field(ge=0, le=5)] | None = None

    @field_validator("hypothesis")
    @classmethod
    def _hypothesis(cls, v: str | None) -> str | None:
        parse_hypothesis(v)  # ValueError -> 422 naming body.hypothesis
        return v.strip() if v else None


class JobRef(BaseModel):
    job_id: int
    round: int
    trials: int
    state: str


class CellOut(BaseModel):
    workload: str
    params: dict[str, Any]
    threads: int | None
    measure: str
    higher_is_better: bool
    base_median: float | None
    head_median: float | None
    ratio: float | None
    diff_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    p_adjusted: float | None
    n_base: int
    n_head: int
    robust_base: int
    robust_head: int
    verdict: str  # same | improved | regressed | unknown; diagnostic for a diagnostic measure
    mde_pct: float | None = None  # minimum detectable effect at 80% power
    line: str


class PeerOut(BaseModel):
    workload: str
    params: dict[str, Any]
    allocator: str
    median: float


class ComparisonOut(BaseModel):
    id: int
    project: str
    arch: str
    state: str
    base: dict[str, Any]
    head: dict[str, Any]
    base_label: str
    head_label: str
    workloads: list[str] | None
    threads: list[int] | None
    suite: str
    trials: int
    warmup: int
    peers: list[str]
    hypothesis: str | None
    follow_ups: int
    max_follow_ups: int
    testbed_fingerprint: str | None
    cpu_model: str | None
    note: str | None
    counts: dict[str, int]
    jobs: list[JobRef]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class HypothesisCheck(BaseModel):
    workload: str
    params: dict[str, Any]
    threads: int | None
    measure: str
    expected_low_pct: float
    expected_high_pct: float
    diff_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    outcome: str  # held | undecided | not held (...)


class JointOut(BaseModel):
    """Speed x memory label of one workload x params (mallard_api.joint)."""

    workload: str
    params: dict[str, Any]
    threads: int | None
    label: str  # better-both | worse-both | faster-but-fatter | slower-but-leaner | faster |
    #             slower | leaner | fatter | same | unknown
    kind: str  # better | worse | trade-off | same | unknown
    speed_verdict: str
    memory_verdict: str
    speed_diff_pct: float | None
    memory_diff_pct: float | None


class MovedOut(BaseModel):
    """An allocator counter that moved most under its cell (mallard_api.moved)."""

    workload: str
    params: dict[str, Any]
    threads: int | None
    measure: str
    name: str
    base_median: float
    head_median: float
    diff_pct: float | None
    text: str


class PointOut(BaseModel):
    threads: int
    base_median: float | None
    head_median: float | None
    diff_pct: float | None
    verdict: str
    oversubscribed: bool


class CurveOut(BaseModel):
    """A thread-scaling curve and its verdict (mallard_api.curves)."""

    workload: str
    params: dict[str, Any]
    measure: str
    higher_is_better: bool
    points: list[PointOut]
    moved: list[int]
    area_pct: float | None
    verdict: str  # improved | regressed | mixed | same | unknown
    cpus: int | None
    summary: str


class ComparisonDetail(ComparisonOut):
    cells: list[CellOut]
    counters: list[CellOut]  # the allocator-counter cells (also in cells)
    peer_medians: list[PeerOut]
    hypothesis_checks: list[HypothesisCheck]
    joint: list[JointOut]
    counters_moved: list[MovedOut]
    curves: list[CurveOut]
    report: str


def comparison_out(session: Session, c: Comparison) -> dict[str, Any]:
    return dict(
        id=c.id, project=c.project, arch=c.arch, state=c.state, base=c.base, head=c.head,
        base_label=c.base_label, head_label=c.head_label, workloads=c.workloads,
        threads=c.threads, suite=c.suite, trials=c.trials, warmup=c.warmup, peers=c.peers,
        hypothesis=c.hypothesis, follow_ups=c.follow_ups, max_follow_ups=c.max_follow_ups,
        testbed_fingerprint=c.testbed_fingerprint, cpu_model=c.cpu_model, note=c.note,
        counts=sql.counts(session, c.id),
        jobs=[JobRef(**vars(j)) for j in sql.jobs(session, c.id)],
        created_at=c.created_at, updated_at=c.updated_at, finished_at=c.finished_at)


@router.post("", response_model=ComparisonOut, status_code=201,
             responses={422: {"model": ErrorOut}})
def create_comparison(body: ComparisonIn, request: Request, session: DB, _: UserOrAdmin,
                      settings: Annotated[Settings, Depends(get_settings)]) -> ComparisonOut:
    suite = body.suite or settings.suite
    catalog = request.app.state.catalog
    for field, reason in (("suite", catalog.check_suite(suite)),
                          ("workloads", catalog.check_workloads(suite, body.workloads))):
        if reason:
            raise field_error(422, ["body", field], reason)
    project = project_sql.get(session, body.project)
    if project is None:
        raise field_error(422, ["body", "project"], f"no project named '{body.project}'")
    reason = check_repo_url(project.repo_url, parse_allow_list(settings.repo_url_allow))
    if reason:
        raise field_error(422, ["body", "project"], f"project '{project.name}': {reason}")
    hyp = parse_hypothesis(body.hypothesis)
    trials = body.trials or max(settings.trials, 2)
    arch = body.arch or settings.default_arch
    base = body.base.model_dump()
    head = body.head.model_dump()
    comp = sql.create(
        session, project_id=project.id, project=project.name, arch=arch, base=base, head=head,
        base_label=analysis.allocator_label(base), head_label=analysis.allocator_label(head),
        workloads=body.workloads, threads=body.threads, suite=suite,
        trials=trials, warmup=settings.warmup if body.warmup is None else body.warmup,
        peers=body.peers or [], hypothesis=body.hypothesis,
        hypothesis_low_pct=hyp.low_pct if hyp else None,
        hypothesis_high_pct=hyp.high_pct if hyp else None,
        hypothesis_measure=hyp.measure if hyp else None, state="queued",
        max_follow_ups=(settings.comparison_max_follow_ups
                        if body.max_follow_ups is None else body.max_follow_ups))
    spec = analysis.comparison_spec(
        comp, project_repo=project.repo_url, allocator_dir=project.allocator_dir,
        workloads=body.workloads, threads=body.threads, trials=trials, peers=comp.peers)
    job = job_sql.enqueue(session, kind="comparison", arch=arch, spec=spec,
                          project_id=project.id, max_attempts=settings.job_max_attempts)
    sql.link_job(session, comparison_id=comp.id, job_id=job.id, round=0, trials=trials)
    session.commit()
    return ComparisonOut(**comparison_out(session, comp))


@router.get("", response_model=list[ComparisonOut], responses={422: {"model": ErrorOut}})
def list_comparisons(
    session: DB, _: AnyRole,
    project: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    state: Annotated[str | None, Query(pattern=r"^(queued|running|done|failed)$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
) -> list[ComparisonOut]:
    rows = sql.list_all(session, project=project, state=state, limit=limit, offset=offset)
    return [ComparisonOut(**comparison_out(session, c)) for c in rows]


def _load(session: Session, comparison_id: int) -> Comparison:
    """Read only: the state is settled by the analysis worker, never by a read."""
    comp = sql.get(session, comparison_id)
    if comp is None:
        raise field_error(404, ["path", "comparison_id"], f"no comparison {comparison_id}",
                          "not_found")
    return comp


@router.get("/{comparison_id}", response_model=ComparisonDetail,
            responses={404: {"model": ErrorOut}})
def get_comparison(comparison_id: ComparisonPath, session: DB, _: AnyRole) -> ComparisonDetail:
    comp = _load(session, comparison_id)
    rows = sql.cells(session, comp.id)
    cells = [CellOut.model_validate(c, from_attributes=True) for c in rows]
    hyp = analysis.hypothesis_of(comp)
    checks = [] if hyp is None else [
        HypothesisCheck(
            workload=c.workload, params=c.params, threads=c.threads, measure=c.measure,
            expected_low_pct=hyp.low_pct, expected_high_pct=hyp.high_pct,
            diff_pct=c.diff_pct, ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct,
            outcome=hypothesis_outcome(hyp, analysis.cell_stats(c)))
        for c in rows if c.measure == hyp.measure
    ]
    rcells = [ReportCell(c.workload, c.params, c.measure, analysis.cell_stats(c)) for c in rows]
    extra = explain(rcells, sql.testbed_cpus(session, comp.testbed_fingerprint))
    return ComparisonDetail(
        **comparison_out(session, comp), cells=cells,
        counters=[c for c in cells if is_counter(c.measure)],
        peer_medians=[PeerOut(**p) for p in comp.peer_medians or []],
        hypothesis_checks=checks, joint=[JointOut(**j) for j in extra["joint"]],
        counters_moved=[MovedOut(**m) for m in extra["counters_moved"]],
        curves=[CurveOut(**c) for c in extra["curves"]],
        report=analysis.render_report(session, comp))


@router.get("/{comparison_id}/report", response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {}}}, 404: {"model": ErrorOut}})
def get_report(comparison_id: ComparisonPath, session: DB, _: AnyRole) -> PlainTextResponse:
    comp = _load(session, comparison_id)
    return PlainTextResponse(analysis.render_report(session, comp))
