"""Badges and series images for a README, under /ui (`badges.py` draws them):

- `/ui/projects/{p}/badge.svg`: the latest commit verdict of the default branch (the
  worst over its arches: regressed, improved, unknown, same);
- `/ui/projects/{p}/branches/{b}/badge.svg?workload=W&measure=M[&params=JSON]`: the
  latest median of that series (the project's own allocator);
- `/ui/projects/{p}/branches/{b}/series.svg` and `series.png` (same query, and
  `commits`, the last N): the branch page's plot of the series, per-commit medians with
  their spread, change points, alerts, baselines and broken ranges.

A public project's are served to anyone (cached five minutes); a private one's need a
read token (bearer header or session cookie) and are a 404 without one, as its pages.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from mallard_api.auth import Principal, field_error
from mallard_api.deps import get_session
from mallard_api.models.commits import Branch
from mallard_api.models.projects import Project
from mallard_api.params import params_key
from mallard_api.query import params_object
from mallard_api.sql import pages as pages_sql
from mallard_api.sql import projects as project_sql
from mallard_api.ui import badges, history, links, public
from mallard_api.ui.public import Visitor
from mallard_api.ui.render import PageRoute, public_url

router = APIRouter(prefix=links.PREFIX, route_class=PageRoute, include_in_schema=False)
DB = Annotated[Session, Depends(get_session)]
Name = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
Workload = Annotated[str, Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.+=,:/@-]+$")]
Measure = Annotated[str, Query(min_length=1, max_length=100,
                               pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")]
Params = Annotated[str | None, Query(max_length=4000, description="workload params (JSON)")]
Commits = Annotated[int, Query(ge=2, le=500)]
ORDER = ("regressed", "improved", "unknown", "same")


def _headers(project: Project, who: Principal | None) -> dict[str, str]:
    cache = "public, max-age=300" if project.public and who is None else "private, no-store"
    return {"Cache-Control": cache, "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}


def _svg(body: str, project: Project, who: Principal | None) -> Response:
    return Response(body, media_type="image/svg+xml; charset=utf-8",
                    headers=_headers(project, who))


def _branch(session: Session, who: Principal | None, project: str, branch: str | None
            ) -> tuple[Project, Branch]:
    proj = public.visible(who, project_sql.get(session, project), project)
    b = project_sql.get_branch(session, proj, branch or proj.default_branch)
    if b is None:
        raise field_error(404, ["path", "branch"],
                          f"There is no branch '{branch}' in '{proj.name}'.", "not_found")
    return proj, b


def _params(text: str | None) -> str | None:
    parsed = params_object(text)
    return None if parsed is None else params_key(parsed)


@router.get("/projects/{project}/badge.svg")
def verdict_badge(project: Name, session: DB, who: Visitor) -> Response:
    proj = public.visible(who, project_sql.get(session, project), project)
    found = {v.verdict for v in pages_sql.latest_verdicts(session, proj.id,
                                                         proj.default_branch)}
    worst = next((v for v in ORDER if v in found), None)
    colour = badges.VERDICT_COLOURS.get(worst or "", badges.GREY)
    return _svg(badges.badge(proj.name, worst or "no verdict", colour), proj, who)


def _plot(request: Request, session: DB, who: Principal | None, project: str, branch: str,
          workload: str, measure: str, params: str | None, commits: int
          ) -> tuple[Project, history.WorkloadTrends, history.Plot]:
    proj, b = _branch(session, who, project, branch)
    found = history.branch_plot(session, proj, b, public_url(request), workload=workload,
                                params=_params(params), measure=measure, last_n=commits)
    if found is None:
        raise field_error(404, ["query", "workload"], f"{proj.name}/{b.name} has no measured "
                          f"{workload} {measure} in its last {commits} commits.", "not_found")
    return proj, found[0], found[1]


@router.get("/projects/{project}/branches/{branch}/badge.svg")
def series_badge(request: Request, project: Name, branch: Name, session: DB, who: Visitor,
                 workload: Workload, measure: Measure = "ops_per_sec", params: Params = None
                 ) -> Response:
    proj, w, p = _plot(request, session, who, project, branch, workload, measure, params, 60)
    return _svg(badges.badge(f"{w.title} {p.measure}", p.latest or "–", "#1f5fa8"), proj,
                who)


def _image(request: Request, session: DB, who: Principal | None, project: str, branch: str,
           workload: str, measure: str, params: str | None, commits: int
           ) -> tuple[Project, str]:
    proj, w, p = _plot(request, session, who, project, branch, workload, measure, params,
                       commits)
    title = f"{proj.name}/{branch}: {w.title} {p.measure}" + (f" ({p.unit})" if p.unit else "")
    return proj, badges.standalone(p.svg, title)


@router.get("/projects/{project}/branches/{branch}/series.svg")
def series_svg(request: Request, project: Name, branch: Name, session: DB, who: Visitor,
               workload: Workload, measure: Measure = "ops_per_sec", params: Params = None,
               commits: Commits = 60) -> Response:
    proj, body = _image(request, session, who, project, branch, workload, measure, params,
                        commits)
    return _svg(body, proj, who)


@router.get("/projects/{project}/branches/{branch}/series.png")
def series_png(request: Request, project: Name, branch: Name, session: DB, who: Visitor,
               workload: Workload, measure: Measure = "ops_per_sec", params: Params = None,
               commits: Commits = 60) -> Response:
    proj, body = _image(request, session, who, project, branch, workload, measure, params,
                        commits)
    return Response(badges.png(body), media_type="image/png", headers=_headers(proj, who))
