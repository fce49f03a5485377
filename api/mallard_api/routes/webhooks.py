"""Push webhooks: GitHub (X-Hub-Signature-256), GitLab (X-Gitlab-Token), Gitea
(X-Gitea-Signature), and the plain JSON form the post-receive hook posts (bearer token).

Forge webhooks carry no bearer token: the signature (HMAC-SHA256 of the raw body with
the project's secret, or the settings' secret) authenticates them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from mallard_api.auth import UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.models.core import Project
from mallard_api.pushes import chain, handle_push
from mallard_api.schemas import ErrorOut, Name, PlainPush, PushOut, Sha, Text
from mallard_api.sql import projects as project_sql

router = APIRouter(prefix="/webhooks", tags=["webhooks"],
                   responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut},
                              422: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
Conf = Annotated[Settings, Depends(get_settings)]


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
    ref: Text
    before: Text | None = None
    after: Text
    repository: ForgeRepo | None = None
    project: ForgeRepo | None = None  # GitLab names it project
    commits: list[ForgeCommit] = []


def parse(raw: bytes) -> ForgePush:
    try:
        data: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise field_error(422, ["body"], f"not valid JSON: {exc}", "json_invalid") from exc
    if not isinstance(data, dict):
        raise field_error(422, ["body"], "must be a JSON object", "type_error")
    try:
        return ForgePush.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise field_error(422, ["body", *[str(x) for x in err["loc"]]], err["msg"],
                          err["type"]) from exc


def find_project(session: Session, push: ForgePush) -> Project:
    repo = push.repository or push.project or ForgeRepo()
    names = [n for n in (repo.name, repo.full_name, repo.path_with_namespace) if n]
    urls = [u for u in (repo.clone_url, repo.ssh_url, repo.html_url, repo.git_http_url,
                        repo.git_ssh_url, repo.web_url) if u]
    project = project_sql.find_by_repo(session, names, urls)
    if project is None:
        raise field_error(404, ["body", "repository"],
                          f"no project for repository {names or urls}", "not_found")
    return project


def secret_for(project: Project, fallback: str | None, header: str) -> bytes:
    secret = project.webhook_secret or fallback
    if not secret:
        raise field_error(401, ["header", header],
                          f"no webhook secret configured for project '{project.name}'",
                          "unauthorized")
    return secret.encode()


def check_hmac(secret: bytes, raw: bytes, given: str | None, header: str, prefix: str) -> None:
    expected = prefix + hmac.new(secret, raw, hashlib.sha256).hexdigest()
    if not given or not hmac.compare_digest(expected.encode(), given.strip().encode()):
        raise field_error(401, ["header", header], "signature does not match the body",
                          "unauthorized")


def run_push(session: Session, settings: Settings, project: Project, push: ForgePush
             ) -> PushOut:
    raw = [(c.id, c.message, c.author.name if c.author else None, c.timestamp)
           for c in push.commits]
    return handle_push(session, settings, project, ref=push.ref, after=push.after,
                       commits=chain(push.before, raw))


def ignored(event: str | None) -> PushOut:
    return PushOut(project=None, branch=None, commits=0, jobs=[],
                   ignored=f"event {event!r} is not a push")


@router.post("/github", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def github(raw: Raw, session: DB, settings: Conf,
           x_hub_signature_256: Annotated[str | None, Header(max_length=200)] = None,
           x_github_event: Annotated[str | None, Header(max_length=100)] = None) -> PushOut:
    """GitHub push events; X-Hub-Signature-256 is `sha256=` + HMAC-SHA256(secret, body)."""
    if x_github_event == "ping":
        return ignored("ping")
    push = parse(raw)
    project = find_project(session, push)
    check_hmac(secret_for(project, settings.github_webhook_secret, "x-hub-signature-256"),
               raw, x_hub_signature_256, "x-hub-signature-256", "sha256=")
    if x_github_event not in (None, "push"):
        return ignored(x_github_event)
    return run_push(session, settings, project, push)


@router.post("/gitlab", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def gitlab(raw: Raw, session: DB, settings: Conf,
           x_gitlab_token: Annotated[str | None, Header(max_length=500)] = None,
           x_gitlab_event: Annotated[str | None, Header(max_length=100)] = None) -> PushOut:
    """GitLab push hooks; X-Gitlab-Token must equal the secret."""
    push = parse(raw)
    project = find_project(session, push)
    secret = secret_for(project, settings.gitlab_webhook_token, "x-gitlab-token")
    if not x_gitlab_token or not hmac.compare_digest(secret, x_gitlab_token.encode()):
        raise field_error(401, ["header", "x-gitlab-token"], "token does not match",
                          "unauthorized")
    if x_gitlab_event not in (None, "Push Hook"):
        return ignored(x_gitlab_event)
    return run_push(session, settings, project, push)


@router.post("/gitea", response_model=PushOut, openapi_extra=PAYLOAD_DOC)
def gitea(raw: Raw, session: DB, settings: Conf,
          x_gitea_signature: Annotated[str | None, Header(max_length=200)] = None,
          x_gitea_event: Annotated[str | None, Header(max_length=100)] = None) -> PushOut:
    """Gitea (and Forgejo) pushes; X-Gitea-Signature is hex HMAC-SHA256(secret, body)."""
    push = parse(raw)
    project = find_project(session, push)
    check_hmac(secret_for(project, settings.gitea_webhook_secret, "x-gitea-signature"),
               raw, x_gitea_signature, "x-gitea-signature", "")
    if x_gitea_event not in (None, "push"):
        return ignored(x_gitea_event)
    return run_push(session, settings, project, push)


@router.post("/push", response_model=PushOut, responses={403: {"model": ErrorOut}})
def plain_push(body: PlainPush, session: DB, settings: Conf, _: UserOrAdmin) -> PushOut:
    """The plain form posted by `api/hooks/post-receive` (bearer token, role user/admin)."""
    project = project_sql.get(session, body.project)
    if project is None:
        raise field_error(404, ["body", "project"], f"no project named '{body.project}'",
                          "not_found")
    raw = [(c.sha, c.message, c.author, c.time) for c in body.commits]
    infos = chain(body.before, raw)
    for info, c in zip(infos, body.commits, strict=True):
        if c.parent:
            info.parent = c.parent.lower()
    return handle_push(session, settings, project, ref=body.ref, after=body.after,
                       commits=infos)
