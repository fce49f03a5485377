"""The pages under /ui: index, login, comparison, project, branch, commit, alert, bisection,
static.

Every page needs a read token (the bearer header, or the session cookie the login form
sets: `login.py`) but a public project's project, branch, commit and alert pages, which
a visitor reads without one (`public.py`; a private one's are a 404 to it). The forms
that change something (triage, baselines, broken ranges) are `forms.py`'s; badges and
images `images.py`'s; SQL lives in `mallard_api/sql/`.
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api.auth import Principal, field_error, may_read_job
from mallard_api.deps import get_session
from mallard_api.models.projects import Project
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import baselines as baseline_sql
from mallard_api.sql import bisections as bisection_sql
from mallard_api.sql import comparisons as cmp_sql
from mallard_api.sql import outbox as outbox_sql
from mallard_api.sql import pages as pages_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import triage as triage_sql
from mallard_api.sql import verdicts as verdict_sql
from mallard_api.ui import bisection as bisection_page
from mallard_api.ui import commit as commit_page
from mallard_api.ui import comparison, csrf, forms, history, links, login, public
from mallard_api.ui import profiles as profile_views
from mallard_api.ui.public import Visitor
from mallard_api.ui.render import HEADERS, PageRoute, error_page, page, public_url

router = APIRouter(prefix=links.PREFIX, route_class=PageRoute, include_in_schema=False)
DB = Annotated[Session, Depends(get_session)]
Id = Annotated[int, Path(ge=1, le=INT32_MAX)]
Name = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
LOGIN_FORM_MAX = 4096


def viewer(request: Request, session: DB) -> Principal:
    return login.page_principal(request, session)


Viewer = Annotated[Principal, Depends(viewer)]

_STATIC = {
    name: ((FilePath(__file__).parent / "static" / name).read_bytes(), media)
    for name, media in (("mallard.css", "text/css; charset=utf-8"),
                        ("favicon.svg", "image/svg+xml"))
}


@router.get("/static/{name}")
def static(name: str) -> Response:
    found = _STATIC.get(name)
    if found is None:
        raise field_error(404, ["path", "name"], f"no file {name}", "not_found")
    body, media = found
    return Response(body, media_type=media, headers={
        "Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"})


# -- login ----------------------------------------------------------------------------------
@router.get("/login")
def login_form(request: Request, next: Annotated[str | None, Query(max_length=1000)] = None
               ) -> HTMLResponse:
    return page(request, "login.html", next=login.safe_next(next), error=None)


async def _form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > LOGIN_FORM_MAX:
            raise field_error(413, ["body"], "the form is too large", "too_large")
    try:
        parsed = parse_qs(body.decode("utf-8"), max_num_fields=10)
    except (UnicodeDecodeError, ValueError) as exc:
        raise field_error(400, ["body"], "the form could not be read", "bad_form") from exc
    return {k: v[0] for k, v in parsed.items() if v}


@router.post("/login")
async def login_submit(request: Request) -> Response:
    form = await _form(request)
    csrf.check(request, form)  # a post from another site logs nobody in
    target = login.safe_next(form.get("next"))

    def check() -> tuple[str, int] | None:
        with request.app.state.sessionmaker() as session:
            return login.login(request, session, form.get("token", ""))

    made = await run_in_threadpool(check)
    if made is None:
        return page(request, "login.html", 401, next=target,
                    error="That token is unknown or revoked.")
    value, max_age = made
    settings = request.app.state.settings
    resp = RedirectResponse(links.path(public_url(request), target), status_code=303,
                            headers=HEADERS)
    resp.set_cookie(login.COOKIE, value, max_age=max_age,
                    path=links.path(settings.public_url, links.PREFIX), httponly=True,
                    samesite="strict", secure=login.cookie_secure(settings))
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    csrf.check(request, await _form(request))  # nor out
    resp = RedirectResponse(links.path(public_url(request), "/ui/login"), status_code=303,
                            headers=HEADERS)
    resp.delete_cookie(login.COOKIE, path=links.path(public_url(request), links.PREFIX),
                       httponly=True, samesite="strict")
    return resp


# -- pages ----------------------------------------------------------------------------------
@router.get("/")
def index(request: Request, session: DB, who: Viewer) -> HTMLResponse:
    projects = [(p, project_sql.branches(session, p)) for p in project_sql.list_all(session)]
    recent = cmp_sql.list_all(session, project=None, state=None, limit=20, offset=0)
    return page(request, "index.html", viewer=who, projects=projects,
                comparisons=[(c, cmp_sql.counts(session, c.id)) for c in recent],
                alerts=alert_sql.list_alerts(session, state="open", project=None, workload=None,
                                             limit=20, offset=0))


@router.get("/comparisons/{comparison_id}")
def comparison_page(request: Request, comparison_id: Id, session: DB, who: Viewer
                    ) -> HTMLResponse:
    comp = cmp_sql.get(session, comparison_id)
    if comp is None:
        raise field_error(404, ["path", "comparison_id"], f"There is no comparison "
                          f"#{comparison_id}.", "not_found")
    context = comparison.build(session, request.app.state.settings, comp)
    return page(request, "comparison.html", viewer=who, context=context,
                bisections=bisection_sql.of_comparison(session, comp.id),
                profiles=profile_views.views(session, [comp.id]))


Measures = Annotated[list[str], Query(max_length=20)]
Commits = Annotated[int, Query(ge=2, le=500, description="how many recent commits")]


def _project(session: Session, name: str, who: Principal | None) -> Project:
    return public.visible(who, project_sql.get(session, name), name)


def _measures(asked: list[str]) -> list[str]:
    for m in asked:
        if not (0 < len(m) <= 100 and m.replace("_", "").replace(".", "").isalnum()):
            raise field_error(422, ["query", "measure"], f"not a measure name: {m[:100]!r}")
    return asked


@router.get("/projects/{project}")
def project_page(request: Request, project: Name, session: DB, who: Visitor,
                 measure: Measures = [], commits: Commits = 60  # noqa: B006
                 ) -> HTMLResponse:
    proj = _project(session, project, who)
    branch = project_sql.get_branch(session, proj, proj.default_branch)
    trends = history.branch_trends(session, proj, branch, public_url(request),
                                   measures=_measures(measure), last_n=commits) \
        if branch is not None else None
    return page(request, "project.html", viewer=who, project=proj, branch=branch,
                branches=project_sql.branches(session, proj), trends=trends,
                comparisons=[(c, cmp_sql.counts(session, c.id)) for c in cmp_sql.list_all(
                    session, project=proj.name, state=None, limit=10, offset=0)] if who else [],
                alerts=alert_sql.list_alerts(session, state="open", project=proj.name,
                                             workload=None, limit=20, offset=0),
                bisections=verdict_sql.list_bisections(session, proj.name, 10) if who else [],
                forge_failures=outbox_sql.forge_failures(session, proj.id) if who else [])


@router.get("/projects/{project}/branches/{branch}")
def branch_page(request: Request, project: Name, branch: Name, session: DB, who: Visitor,
                measure: Measures = [], commits: Commits = 60  # noqa: B006
                ) -> HTMLResponse:
    proj = _project(session, project, who)
    b = project_sql.get_branch(session, proj, branch)
    if b is None:
        raise field_error(404, ["path", "branch"],
                          f"There is no branch '{branch}' in '{proj.name}'.", "not_found")
    trends = history.branch_trends(session, proj, b, public_url(request),
                                   measures=_measures(measure), last_n=commits)
    return page(request, "branch.html", viewer=who, project=proj, branch=b, trends=trends,
                marks=baseline_sql.marks(session, b.id),
                may_change=public.may_change(who, proj.name))


@router.get("/commits/{sha}")
def commit_view(request: Request, session: DB, who: Visitor,
                sha: Annotated[str, Path(pattern=r"^[0-9a-fA-F]{4,64}$")]) -> HTMLResponse:
    found = [(c, p) for c, p in pages_sql.commits_by_prefix(session, sha.lower())
             if public.may_see(who, p)]
    if not found:
        raise field_error(404, ["path", "sha"], f"No project has a commit {sha}.", "not_found")
    shas = {c.sha for c, _ in found}
    if len(shas) > 1:  # an ambiguous prefix: list the candidates
        return page(request, "commits.html", viewer=who, prefix=sha, found=found)
    skip = () if who else public.HIDDEN_SECTIONS
    sections = [(proj, commit_page.build(session, c, proj, public_url(request), skip))
                for c, proj in found]
    return page(request, "commit.html", viewer=who, sha=found[0][0].sha, projects=sections,
                changeable={p.name for _, p in found if public.may_change(who, p.name)})


@router.get("/alerts/{alert_id}")
def alert_page(request: Request, alert_id: Id, session: DB, who: Visitor) -> HTMLResponse:
    alert = history.alert_of(session, alert_id)
    proj = project_sql.get(session, alert.project) if alert is not None else None
    if alert is None or (proj is not None and not public.may_see(who, proj)) or (
            proj is None and who is None):
        raise field_error(404, ["path", "alert_id"], f"There is no alert #{alert_id}.",
                          "not_found")
    branch = project_sql.get_branch(session, proj, alert.branch) if proj else None
    return page(request, "alert.html", viewer=who, alert=alert,
                may_triage=public.may_change(who, alert.project),
                bisection=bisection_sql.of_alert(session, alert.id, alert.bisection_id)
                if who else None,
                notes=triage_sql.notes(session, alert.id),
                audit=triage_sql.audit_of(session, alert.id),
                context=history.alert_series(session, alert, branch, public_url(request)))


async def _post(request: Request, act: forms.Act) -> Response:
    body = await forms.read(request)
    target = await run_in_threadpool(forms.handle, request, body, act)
    return RedirectResponse(links.path(public_url(request), target), status_code=303,
                            headers=HEADERS)


@router.post("/alerts/{alert_id}/triage")
async def alert_triage(request: Request, alert_id: Id) -> Response:
    return await _post(request, forms.alert_triage(request, alert_id))


@router.post("/projects/{project}/branches/{branch}/baselines")
async def accept_baseline(request: Request, project: Name, branch: Name) -> Response:
    return await _post(request, forms.branch_mark(request, project, branch, "baseline"))


@router.post("/projects/{project}/branches/{branch}/broken")
async def mark_broken(request: Request, project: Name, branch: Name) -> Response:
    return await _post(request, forms.branch_mark(request, project, branch, "broken"))


@router.get("/bisections/{bisection_id}")
def bisection_view(request: Request, bisection_id: Id, session: DB, who: Viewer
                   ) -> HTMLResponse:
    b = verdict_sql.get_bisection(session, bisection_id)
    # its steps show why their jobs failed (a line of a build log): who may read the
    # project's jobs (auth.may_read_job)
    project = session.get(Project, b.project_id) if b is not None else None
    if b is None or not may_read_job(who, project.name if project else None, set()):
        raise field_error(404, ["path", "bisection_id"],
                          f"There is no bisection #{bisection_id}.", "not_found")
    return page(request, "bisection.html", viewer=who,
                context=bisection_page.build(session, b, public_url(request)),
                profiles=profile_views.views(
                    session, [cid for st in b.steps for cid in st.comparisons]))


@router.get("/{rest:path}")
def not_found(request: Request, rest: str) -> HTMLResponse:
    return error_page(request, 404, "Not found", f"There is no page at {request.url.path}.")
