"""The pages' forms that change something: an alert's triage, accepting a change as the
new baseline (alert and commit pages), marking a broken range (branch page).

Each post is read whole (capped), then authenticated (the session cookie, or a bearer
header) before its fields are parsed, then checked against cross-site forgery
(csrf.check_signed_in: Origin, and a token tied to the session), then the role (a reader
or a runner cannot triage: 403). Fields go through the REST API's own bodies
(schemas/alerts.py, schemas/baselines.py), so a bad one is a 422 page naming it, and the
change through analysis/triage.py, as over REST. The answer is a 303 back to the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from urllib.parse import parse_qs

from fastapi import HTTPException, Request
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from mallard_api.analysis import triage
from mallard_api.auth import Principal, actor_name, field_error, may_triage
from mallard_api.models.commits import Branch
from mallard_api.schemas.alerts import AcceptIn, TriageIn
from mallard_api.schemas.baselines import BaselineIn, BrokenIn
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import projects as project_sql
from mallard_api.ui import csrf, links, login

FORM_MAX = 16_384
M = TypeVar("M", bound=BaseModel)
Act = Callable[[Session, Principal, dict[str, str]], str]


async def read(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX:
            raise field_error(413, ["body"], "the form is too large", "too_large")
    return body


def parse(body: bytes) -> dict[str, str]:
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as exc:
        raise field_error(400, ["body"], "the form could not be read", "bad_form") from exc
    return {k: v[0] for k, v in parsed.items() if v}


def _body(model: type[M], form: dict[str, str], names: tuple[str, ...]) -> M:
    """The REST body `model` from the form's fields `names` (an empty optional one is left
    out); a bad field is a 422 naming it."""
    data = {n: form[n] for n in names if n in form}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        raise field_error(422, ["body", where], f"{where}: {err.get('msg', 'invalid')}") \
            from exc


def _refused(exc: triage.Refused) -> HTTPException:
    return field_error(exc.status, ["body", exc.field], exc.msg, "conflict")


def _allowed(who: Principal, project: str) -> str:
    if not may_triage(who, project):
        raise field_error(403, ["header", "authorization"],
                          f"A {who.role} token cannot triage alerts or move baselines of "
                          f"{project}.", "forbidden")
    return actor_name(who)


def handle(request: Request, body: bytes, act: Act) -> str:
    """Authenticate, parse, check the post's origin and token, then `act` and commit."""
    with request.app.state.sessionmaker() as session:
        who = login.page_principal(request, session)
        form = parse(body)
        csrf.check_signed_in(request, form, request.cookies.get(login.COOKIE))
        done = act(session, who, form)
        session.commit()
        return done


def alert_triage(request: Request, alert_id: int
                 ) -> Act:
    def act(session: Session, who: Principal, form: dict[str, str]) -> str:
        alert = alert_sql.get(session, alert_id, lock=True)
        if alert is None:
            raise field_error(404, ["path", "alert_id"], f"There is no alert #{alert_id}.",
                              "not_found")
        actor = _allowed(who, alert.project)
        if not form.get("note", "").strip():
            form.pop("note", None)
        try:
            if form.get("action") == "accept":
                accept = _body(AcceptIn, form, ("note",))
                proj = project_sql.get(session, alert.project)
                branch = None if proj is None else project_sql.get_branch(session, proj,
                                                                          alert.branch)
                if branch is None:
                    raise field_error(404, ["path", "alert_id"], "its branch is gone",
                                      "not_found")
                triage.accept_baseline(session, request.app.state.settings, branch,
                                       alert.first_bad_commit, actor, note=accept.note or "",
                                       alert=alert)
            else:
                change = _body(TriageIn, form,
                               ("triage", "assignee", "bug_url", "label", "note"))
                triage.apply(session, request.app.state.settings, alert, actor, change)
        except triage.Refused as exc:
            raise _refused(exc) from exc
        return links.alert(alert_id)

    return act


def _branch(session: Session, project: str, branch: str) -> Branch:
    proj = project_sql.get(session, project)
    b = None if proj is None else project_sql.get_branch(session, proj, branch)
    if b is None:
        raise field_error(404, ["path", "branch"],
                          f"There is no branch '{branch}' in '{project}'.", "not_found")
    return b


def branch_mark(request: Request, project: str, branch: str, kind: str
                ) -> Callable[[Session, Principal, dict[str, str]], str]:
    """Accept a commit as the baseline (`kind` baseline) or mark a range broken."""
    def act(session: Session, who: Principal, form: dict[str, str]) -> str:
        b = _branch(session, project, branch)
        actor = _allowed(who, project)
        back = form.get("back", "")
        try:
            if kind == "baseline":
                body = _body(BaselineIn, form, ("commit", "note"))
                triage.accept_baseline(session, request.app.state.settings, b, body.commit,
                                       actor, note=body.note)
            else:
                broken = _body(BrokenIn, form, ("first", "last", "reason"))
                triage.mark_broken(session, b, broken.first, broken.last, actor,
                                   broken.reason)
        except triage.Refused as exc:
            raise _refused(exc) from exc
        return back if back.startswith("/ui/commits/") and len(back) < 100 else \
            links.branch(project, branch)

    return act
