"""Bisections (POST one, read one, list), a project's forge (PUT/GET, token never
returned) and triage label counts per series. The logic is in bisections.py,
verdicts.py and forges.py."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Depends, Path, Query, Request
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import bisections, culprits
from mallard_api.auth import Admin, AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.bisections import Bisection
from mallard_api.models.forges import ProjectForge
from mallard_api.routes.checks import buildable_project
from mallard_api.schemas.alerts import TriageOut
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.bisections import BisectionIn, BisectionOut
from mallard_api.schemas.forges import CommentMode, ForgeIn, ForgeOut
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import verdicts as sql
from mallard_api.urls import check_repo_url, parse_allow_list

router = APIRouter(tags=["bisections"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
Conf = Annotated[Settings, Depends(get_settings)]
ProjectName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00/]+$")]


def bisection_out(session: Session, b: Bisection) -> BisectionOut:
    return BisectionOut(
        id=b.id, project=b.project, branch=b.branch, arch=b.arch, workload=b.workload,
        measure=b.measure, threads=b.threads, good=b.good, bad=b.bad, commits=b.commits,
        state=b.state, culprit=b.culprit, culprit_candidates=b.culprit_candidates,
        culprit_line=culprits.culprit_line(session, b), builds=b.builds, steps=b.steps,
        alert_id=b.alert_id, origin=b.origin, created_at=b.created_at,
        finished_at=b.finished_at)


@router.post("/bisections", response_model=BisectionOut, status_code=201,
             responses={422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
def create_bisection(body: BisectionIn, request: Request, session: DB, settings: Conf,
                     p: UserOrAdmin) -> BisectionOut:
    project = buildable_project(session, body.project, settings)
    reason = request.app.state.catalog.check_workloads(settings.suite, [body.workload])
    if reason:
        raise field_error(422, ["body", "workload"], reason)
    ends = {}
    for field in ("good", "bad"):
        c = project_sql.get_commit(session, project, getattr(body, field).lower())
        if c is None:
            raise field_error(422, ["body", field], f"unknown commit '{getattr(body, field)}' "
                              f"in '{project.name}' (or a prefix of several)")
        ends[field] = c.sha
    chain = sql.ancestry(session, project.id, ends["bad"], settings.bisect_max_commits)
    if ends["good"] == ends["bad"] or ends["good"] not in chain:
        raise field_error(422, ["body", "good"], f"{ends['good'][:12]} is not an ancestor of "
                          f"{ends['bad'][:12]} (first parents known to the API)")
    commits = list(reversed(chain[:chain.index(ends["good"]) + 1]))
    branches = project_sql.memberships(session, project_sql.get_commit(session, project,
                                                                        ends["bad"]))  # type: ignore[arg-type]
    b = bisections.start(session, settings, project, branch=branches[0][0] if branches else None,
                         arch=body.arch or settings.default_arch, workload=body.workload,
                         measure=body.measure, threads=body.threads, commits=commits,
                         origin="request")
    quotas.charge(session, settings, request.app.state.catalog, p,
                  comparisons=[c for step in b.steps for c in step.comparisons])
    session.commit()
    return bisection_out(session, b)


@router.get("/bisections", response_model=list[BisectionOut])
def list_bisections(session: DB, _: AnyRole,
                    project: Annotated[str | None, Query(max_length=200,
                                                         pattern=r"^[^\x00]*$")] = None,
                    limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[BisectionOut]:
    return [bisection_out(session, b) for b in sql.list_bisections(session, project, limit)]


@router.get("/bisections/{bisection_id}", response_model=BisectionOut,
            responses={404: {"model": ErrorOut}})
def get_bisection(bisection_id: Annotated[int, Path(ge=1, le=INT32_MAX)], session: DB,
                  _: AnyRole) -> BisectionOut:
    b = sql.get_bisection(session, bisection_id)
    if b is None:
        raise field_error(404, ["path", "bisection_id"], f"no bisection {bisection_id}",
                          "not_found")
    return bisection_out(session, b)


def _forge_out(f: ProjectForge) -> ForgeOut:
    return ForgeOut(kind=f.kind, base_url=f.base_url, repo=f.repo, token_set=bool(f.token),
                    comment_mode=cast(CommentMode, f.comment_mode))


@router.put("/projects/{name}/forge", response_model=ForgeOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def put_forge(name: ProjectName, body: ForgeIn, session: DB, settings: Conf,
              _: Admin) -> ForgeOut:
    """Where the project's commit statuses and pull-request comments go (admin only); the
    token is stored and never returned."""
    project = project_sql.get(session, name)
    if project is None:
        raise field_error(404, ["path", "name"], f"no project named '{name}'", "not_found")
    reason = check_repo_url(body.base_url, parse_allow_list(settings.forge_url_allow))
    if reason or not body.base_url.startswith(("http://", "https://")):
        raise field_error(422, ["body", "base_url"],
                          reason or "must be an http(s) URL allowed by MALLARD_FORGE_URL_ALLOW")
    f = session.get(ProjectForge, project.id)
    if f is None:
        f = ProjectForge(project_id=project.id, kind=body.kind, base_url=body.base_url,
                         repo=body.repo, token=body.token, comment_mode=body.comment_mode)
        session.add(f)
    else:
        f.kind, f.base_url, f.repo, f.token = body.kind, body.base_url, body.repo, body.token
        f.comment_mode = body.comment_mode
    session.commit()
    return _forge_out(f)


@router.get("/projects/{name}/forge", response_model=ForgeOut,
            responses={404: {"model": ErrorOut}})
def get_forge(name: ProjectName, session: DB, _: AnyRole) -> ForgeOut:
    project = project_sql.get(session, name)
    f = session.get(ProjectForge, project.id) if project is not None else None
    if f is None:
        raise field_error(404, ["path", "name"], f"no forge set for '{name}'", "not_found")
    return _forge_out(f)


@router.get("/alerts/triage", response_model=list[TriageOut])
def triage(session: DB, _: AnyRole,
           project: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None
           ) -> list[TriageOut]:
    """Triage labels (true/false positive) counted per series; a verdict alert counts for
    every series it groups."""
    return [TriageOut(**r._mapping) for r in alert_sql.triage_counts(session, project)]
