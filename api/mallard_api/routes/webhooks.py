"""Forge webhooks: GitHub (X-Hub-Signature-256), GitLab (X-Gitlab-Token), Gitea/Forgejo
(X-Gitea-Signature), pushes and pull/merge request events; and the plain JSON form the
post-receive hook posts (bearer token).

Forge webhooks carry no bearer token: the signature (HMAC-SHA256 of the raw body) or
GitLab's token authenticates them (forge_hooks.py), and it is checked over the raw bytes
before the body is parsed. A push records its commits and queues their verdicts; a pull
or merge request event (GitHub and Gitea `pull_request`, GitLab `Merge Request Hook`)
queues its head against its merge base (analysis/pull_requests.py), and so does a
`/mallard bench [suite]` comment on one (GitHub and Gitea `issue_comment`, GitLab `Note
Hook`) from a user the forge lets push. Two addresses per
forge, for both kinds of event:

- `/webhooks/{forge}/{project}`: the project is named by the URL; its own
  `webhook_secret` (else the deployment's secret for that forge) must sign the body.
  An unknown project, a project without any secret and a wrong signature get the same
  401, so the answer never tells whether a project exists.
- `/webhooks/{forge}` (the old address): only the deployment's secret
  (`MALLARD_GITHUB_WEBHOOK_SECRET`, ...) signs; the project is then found from the
  payload's repository. A project with a secret of its own is refused there (401): its
  deliveries must go to its own address.

Replays: a delivery id seen before (X-GitHub-Delivery, X-Gitea-Delivery, GitLab's
X-Gitlab-Event-UUID or Idempotency-Key) is answered `ignored` and does nothing; a branch
head never moves back to an older commit of the branch (pushes.py), and a request whose
head and base were compared already queues nothing new, whatever the delivery id says.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Path, Request
from mallard_wire.fields import FullSha, GitRef, JsonDict, Name, Sha, Text
from pydantic import BaseModel, JsonValue, ValidationError
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import pull_requests
from mallard_api.analysis.specs import SpecError
from mallard_api.auth import UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute, printable, strict_json
from mallard_api.forge_hooks import GITEA, GITHUB, GITLAB, Forge, authentic
from mallard_api.known import Catalog
from mallard_api.models.projects import Project
from mallard_api.pushes import chain, handle_push
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.commits import PlainPush, PushOut
from mallard_api.sql import projects as project_sql
from mallard_api.sql import webhooks as webhook_sql

router = APIRouter(prefix="/webhooks", tags=["webhooks"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut},
                              413: {"model": ErrorOut}, 422: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
Conf = Annotated[Settings, Depends(get_settings)]
ProjectName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00/]+$")]


async def raw_body(request: Request) -> bytes:
    return await request.body()


Raw = Annotated[bytes, Depends(raw_body)]
PAYLOAD_DOC = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "description": "the forge's push event payload"}}}}}


class ForgeAuthor(BaseModel):
    name: Text | None = None


class ForgeCommit(BaseModel):
    id: Sha
    message: Text | None = None
    timestamp: datetime | None = None
    author: ForgeAuthor | None = None


class ForgeRepo(BaseModel):
    name: Name | None = None
    full_name: Name | None = None
    path_with_namespace: Name | None = None
    clone_url: Text | None = None
    ssh_url: Text | None = None
    html_url: Text | None = None
    git_http_url: Text | None = None
    git_ssh_url: Text | None = None
    web_url: Text | None = None


class ForgePush(BaseModel):
    """The fields of a forge's push event that are used (the rest is ignored)."""

    ref: GitRef
    before: FullSha | None = None
    after: FullSha
    repository: ForgeRepo | None = None
    project: ForgeRepo | None = None  # GitLab names it project
    commits: list[ForgeCommit] = []


def json_object(raw: bytes) -> JsonDict:
    """The body as a JSON object, or a 422 naming `body`."""
    try:
        data = strict_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise field_error(422, ["body"], printable(f"not valid JSON: {exc}"),
                          "json_invalid") from exc
    if not isinstance(data, dict):
        raise field_error(422, ["body"], "must be a JSON object", "type_error")
    return data


M = TypeVar("M", bound=BaseModel)


def _validated(model: type[M], data: JsonValue, loc: list[str]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise field_error(422, [*loc, *[printable(str(x)) for x in err["loc"]]],
                          printable(err["msg"]), err["type"]) from exc


def find_project(session: Session, data: JsonDict) -> Project:
    """The project of an event from its `repository` (GitHub, Gitea, GitLab) and `project`
    (GitLab): by clone or web URL first, then by name."""
    repos = [_validated(ForgeRepo, v, ["body", k]) for k in ("repository", "project")
             if isinstance(v := data.get(k), dict)]
    names = [n for r in repos for n in (r.name, r.full_name, r.path_with_namespace) if n]
    urls = [u for r in repos for u in (r.clone_url, r.ssh_url, r.html_url, r.git_http_url,
                                       r.git_ssh_url, r.web_url) if u]
    project = project_sql.find_by_repo(session, names, urls)
    if project is None:
        raise field_error(404, ["body", "repository"],
                          f"no project for repository {names or urls}", "not_found")
    return project


def denied(forge: Forge) -> Exception:
    return field_error(401, ["header", forge.signature_header],
                       "signature or token does not match (or no secret is configured)",
                       "unauthorized")


def run_push(session: Session, settings: Settings, project: Project, push: ForgePush
             ) -> PushOut:
    raw = [(c.id, c.message, c.author.name if c.author else None, c.timestamp)
           for c in push.commits]
    return handle_push(session, settings, project, ref=push.ref, after=push.after,
                       commits=chain(push.before, raw), before=push.before)


def pull_request(forge: Forge, data: JsonDict, session: Session, settings: Settings,
                 project: Project) -> PushOut:
    """A pull/merge request event: its head against its merge base
    (analysis/pull_requests.py); a 422 names the field a bad event lacks, a 502 says the
    forge did not answer the merge base."""
    try:
        pr = pull_requests.parse(forge.name, data)
        if pr is None:
            return ignored("a pull request action that changes no code")
        out = pull_requests.handle(session, settings, project, forge.name, pr)
    except pull_requests.BadEvent as exc:
        raise field_error(exc.status, exc.field, str(exc)) from exc
    except SpecError as exc:  # no recipe yet: nothing is measured, the forge is told why
        return ignored(exc.msg)
    session.commit()
    return PushOut(project=project.name, branch=None, commits=0,
                   jobs=[] if out.job_id is None else [out.job_id], note=out.note)


def comment(forge: Forge, data: JsonDict, session: Session, settings: Settings,
            project: Project, catalog: Catalog) -> PushOut:
    """A comment on a pull/merge request: a `/mallard bench [suite]` command from someone
    the forge lets push queues the request's comparison (analysis/pull_requests.py); a
    comment answered before (by its id, whatever the delivery id) queues nothing."""
    try:
        cmd = pull_requests.parse_command(forge.name, data)
        if cmd is None:
            return ignored("a comment without a /mallard command")
        if not webhook_sql.first_time(session, forge.name,
                                      f"comment:{project.id}:{cmd.comment_id}"):
            session.commit()
            return ignored(f"comment {cmd.comment_id} was answered before")
        out = pull_requests.run_command(session, settings, project, forge.name, cmd,
                                        catalog.check_suite)
    except pull_requests.BadEvent as exc:
        raise field_error(exc.status, exc.field, str(exc)) from exc
    except SpecError as exc:  # no recipe yet: nothing is kept, a later delivery may do
        return ignored(exc.msg)
    session.commit()
    if isinstance(out, str):
        return ignored(out)
    return PushOut(project=project.name, branch=None, commits=0,
                   jobs=[] if out.job_id is None else [out.job_id], note=out.note)


def ignored(reason: str) -> PushOut:
    return PushOut(project=None, branch=None, commits=0, jobs=[], ignored=reason)


def deliver(forge: Forge, request: Request, raw: bytes, session: Session, settings: Settings,
            project_name: str | None) -> PushOut:
    """Authenticate, then parse, then act (module doc)."""
    fallback = forge.deployment_secret(settings)
    project = None
    if project_name is None:
        secret = fallback
    else:
        project = project_sql.get(session, project_name)
        secret = (project.webhook_secret or fallback) if project is not None else None
    if not authentic(forge, secret, raw, request.headers.get(forge.signature_header)):
        raise denied(forge)
    event = request.headers.get(forge.event_header)
    is_pr = event is not None and event == forge.pull_request_event
    is_comment = event is not None and event == forge.comment_event
    if not (is_pr or is_comment) and event not in forge.push_events:
        return ignored(f"event {printable(event or '', 100)!r} is neither a push nor a "
                       "pull/merge request nor a comment")
    data = json_object(raw)
    push = None if is_pr or is_comment else _validated(ForgePush, data, ["body"])
    if project is None:
        project = find_project(session, data)
        if project.webhook_secret:
            raise field_error(401, ["header", forge.signature_header],
                              f"project '{project.name}' has a secret of its own: deliver "
                              f"its pushes to /api/v1/webhooks/{forge.name}/{project.name}",
                              "unauthorized")
    delivery = next((request.headers[h] for h in forge.delivery_headers
                     if request.headers.get(h)), None)
    if delivery and not webhook_sql.first_time(session, forge.name, delivery[:200]):
        session.commit()
        return ignored(f"delivery {printable(delivery, 100)} was received before")
    if is_comment:
        return comment(forge, data, session, settings, project, request.app.state.catalog)
    if push is None:  # a pull/merge request event
        return pull_request(forge, data, session, settings, project)
    return run_push(session, settings, project, push)


@router.post("/github", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def github(request: Request, raw: Raw, session: DB, settings: Conf) -> PushOut:
    """GitHub pushes signed with the deployment's secret; X-Hub-Signature-256 is
    `sha256=` + HMAC-SHA256(secret, body)."""
    return deliver(GITHUB, request, raw, session, settings, None)


@router.post("/github/{project}", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def github_project(project: ProjectName, request: Request, raw: Raw, session: DB,
                   settings: Conf) -> PushOut:
    """GitHub pushes for one project, signed with its own secret (or the deployment's)."""
    return deliver(GITHUB, request, raw, session, settings, project)


@router.post("/gitlab", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def gitlab(request: Request, raw: Raw, session: DB, settings: Conf) -> PushOut:
    """GitLab push hooks; X-Gitlab-Token must equal the deployment's token."""
    return deliver(GITLAB, request, raw, session, settings, None)


@router.post("/gitlab/{project}", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def gitlab_project(project: ProjectName, request: Request, raw: Raw, session: DB,
                   settings: Conf) -> PushOut:
    """GitLab push hooks for one project; X-Gitlab-Token is its own secret (or the
    deployment's token)."""
    return deliver(GITLAB, request, raw, session, settings, project)


@router.post("/gitea", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def gitea(request: Request, raw: Raw, session: DB, settings: Conf) -> PushOut:
    """Gitea (and Forgejo) pushes; X-Gitea-Signature is hex HMAC-SHA256(secret, body)."""
    return deliver(GITEA, request, raw, session, settings, None)


@router.post("/gitea/{project}", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def gitea_project(project: ProjectName, request: Request, raw: Raw, session: DB,
                  settings: Conf) -> PushOut:
    """Gitea (and Forgejo) pushes for one project, signed with its own secret."""
    return deliver(GITEA, request, raw, session, settings, project)


@router.post("/push", response_model=PushOut, responses={403: {"model": ErrorOut}})
def plain_push(body: PlainPush, request: Request, session: DB, settings: Conf,
               p: UserOrAdmin) -> PushOut:
    """The plain form posted by `api/hooks/post-receive` (bearer token, role user/admin);
    the commit jobs it queues count against the token's quotas (quotas.py)."""
    project = project_sql.get(session, body.project)
    if project is None:
        raise field_error(404, ["body", "project"], f"no project named '{body.project}'",
                          "not_found")
    raw = [(c.sha, c.message, c.author, c.time) for c in body.commits]
    infos = chain(body.before, raw)
    for info, c in zip(infos, body.commits, strict=True):
        if c.parent:
            info.parent = c.parent.lower()
    catalog = request.app.state.catalog
    return handle_push(session, settings, project, ref=body.ref, after=body.after,
                       commits=infos, before=body.before, charge=lambda jobs: quotas.charge_jobs(
                           session, settings, catalog, p, jobs))
