"""Commit statuses and pull/merge-request comments on GitHub, GitLab and Gitea/Forgejo,
sent through the outbox (retries with backoff; nothing lost while the forge is down).

A project's forge (`project_forges`: kind, base URL, repository, token) is set by an
admin (PUT /api/v1/projects/{p}/forge); the base URL must match MALLARD_FORGE_URL_ALLOW.
The token is a secret: never returned by the API, never written to the outbox payload or
a log line; the delivery worker reads it when it sends.

Shapes (each forge's documented REST API):

* GitHub: `POST {base}/repos/{owner}/{repo}/statuses/{sha}` with
  `{state: pending|success|failure|error, target_url, description, context}`;
  comments `POST {base}/repos/{owner}/{repo}/issues/{n}/comments` then
  `PATCH {base}/repos/{owner}/{repo}/issues/comments/{id}` with `{body}`;
  `Authorization: Bearer <token>`, `Accept: application/vnd.github+json`.
* Gitea/Forgejo: `POST {base}/api/v1/repos/{owner}/{repo}/statuses/{sha}` (same body;
  states pending|success|error|failure|warning); comments
  `POST {base}/api/v1/repos/{owner}/{repo}/issues/{n}/comments` then
  `PATCH {base}/api/v1/repos/{owner}/{repo}/issues/comments/{id}`;
  `Authorization: token <token>`.
* GitLab: `POST {base}/api/v4/projects/{id}/statuses/{sha}` with
  `{state: pending|running|success|failed|canceled, name, target_url, description}`;
  notes `POST {base}/api/v4/projects/{id}/merge_requests/{iid}/notes` then
  `PUT .../notes/{note_id}` with `{body}`; `PRIVATE-TOKEN: <token>`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from mallard_wire.fields import JsonDict
from mallard_wire.refs import FULL_SHA
from pydantic import JsonValue
from sqlalchemy.orm import Session

from mallard_api.config import Settings
from mallard_api.models.forges import ForgeComment, ProjectForge
from mallard_api.models.outbox import OutboxMessage
from mallard_api.schemas.outbox import GitLabStatusPayload, StatusPayload
from mallard_api.sql import outbox
from mallard_api.ui import links

KINDS = ("github", "gitlab", "gitea")
GITLAB_STATE = {"pending": "pending", "success": "success", "failure": "failed",
                "error": "failed"}


def api_root(f: ProjectForge) -> str:
    base = f.base_url.rstrip("/")
    if f.kind == "github":
        return f"{base}/repos/{f.repo}"
    if f.kind == "gitea":
        return f"{base}/api/v1/repos/{f.repo}"
    return f"{base}/api/v4/projects/{quote(f.repo, safe='')}"


def auth_headers(f: ProjectForge) -> dict[str, str]:
    if f.kind == "github":
        return {"Authorization": f"Bearer {f.token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28"}
    if f.kind == "gitea":
        return {"Authorization": f"token {f.token}"}
    return {"PRIVATE-TOKEN": f.token}


def status_payload(kind: str, state: str, description: str, target_url: str,
                   context: str) -> StatusPayload | GitLabStatusPayload:
    if kind == "gitlab":
        return {"state": GITLAB_STATE[state], "name": context, "target_url": target_url,
                "description": description[:255]}
    return {"state": state, "target_url": target_url, "description": description[:140],
            "context": context}


def enqueue_status(session: Session, settings: Settings, project_id: int, sha: str,
                   arch: str, state: str, description: str, comparison_id: int | None,
                   context: str = "verdict", page: str | None = None) -> OutboxMessage | None:
    """Queue a commit status (state pending|success|failure|error) when the project has a
    forge; the link goes to `page` (a path under /ui, e.g. the bisection's) when given, else
    to the comparison's page."""
    f = session.get(ProjectForge, project_id)
    if f is None:
        return None
    if page is None:
        page = links.comparison(comparison_id) if comparison_id is not None else links.PREFIX
    target = links.absolute(settings.public_url, page)
    msg = outbox.add(session, event="forge.status", alert_id=None, kind=f"{f.kind}-status",
                     url=f"{api_root(f)}/statuses/{sha}",
                     payload=status_payload(f.kind, state, description, target,
                                            f"mallard/{arch}/{context}"))
    msg.project_id = project_id
    return msg


def enqueue_comment(session: Session, project_id: int, number: int, body: str
                    ) -> OutboxMessage | None:
    """Queue the pull/merge request's comment: created the first time, then updated."""
    f = session.get(ProjectForge, project_id)
    if f is None:
        return None
    path = "merge_requests" if f.kind == "gitlab" else "issues"
    msg = outbox.add(session, event="forge.comment", alert_id=None, kind=f"{f.kind}-comment",
                     url=f"{api_root(f)}/{path}/{number}/"
                     + ("notes" if f.kind == "gitlab" else "comments"),
                     payload={"number": number, "body": body})
    msg.project_id = project_id
    return msg


class ForgeError(RuntimeError):
    """The forge did not answer a read (its status or why; never the token)."""


MAX_ANSWER_BYTES = 4 << 20
MERGE_BASE = {"github": ("merge_base_commit", "sha"), "gitlab": ("diff_refs", "base_sha")}


def merge_base(session: Session, settings: Settings, project_id: int, kind: str, number: int,
               base: str | None, head: str) -> str | None:
    """A request's merge base read from the forge's REST API: GitHub's compare
    (`merge_base_commit.sha`), GitLab's merge request (`diff_refs.base_sha`). None when
    the project has no forge of that kind (or GitHub gave no base tip to compare with)."""
    f = session.get(ProjectForge, project_id)
    if f is None or f.kind != kind or kind not in MERGE_BASE:
        return None
    if kind == "github":
        if base is None:
            return None
        url = f"{api_root(f)}/compare/{base}...{head}?per_page=1"
    else:
        url = f"{api_root(f)}/merge_requests/{number}"
    body = bytearray()
    try:
        with httpx.Client(timeout=settings.webhook_timeout_seconds) as http, \
                http.stream("GET", url, headers=auth_headers(f)) as resp:
            if resp.status_code != 200:
                raise ForgeError(f"HTTP {resp.status_code}")
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise ForgeError(f"answer over {MAX_ANSWER_BYTES} bytes")
        data: Any = json.loads(body)
    except httpx.HTTPError as exc:
        raise ForgeError(type(exc).__name__) from exc
    except ValueError as exc:
        raise ForgeError("answer is not JSON") from exc
    for key in MERGE_BASE[kind]:
        data = data.get(key) if isinstance(data, dict) else None
    if not isinstance(data, str) or not FULL_SHA.match(data):
        raise ForgeError(f"answer has no {'.'.join(MERGE_BASE[kind])}")
    return data.lower()


def is_forge(msg: OutboxMessage) -> bool:
    return msg.event.startswith("forge.")


def superseded(session: Session, msg: OutboxMessage) -> bool:
    """Whether a newer message replaces this one: the request's comment, or the status of
    the same commit and context. A retried older message is then dropped, so it never
    overwrites what the newer one says (a late `pending` after `failure`)."""
    def context(p: JsonDict) -> JsonValue:
        return p.get("context", p.get("name"))

    return any(msg.event == "forge.comment" or context(p) == context(msg.payload)
               for p in outbox.newer_payloads(session, msg))


def send(session: Session, http: httpx.Client, msg: OutboxMessage) -> str | None:
    """Deliver one forge message; None on success (or when a newer message supersedes
    it), else the error (never the token)."""
    f = session.get(ProjectForge, msg.project_id) if msg.project_id is not None else None
    if f is None:
        return "the project has no forge any more"
    if superseded(session, msg):
        return None
    headers = auth_headers(f)
    try:
        if msg.event == "forge.status":
            resp = http.post(msg.url, json=msg.payload, headers=headers)
        else:
            resp = _comment(session, http, f, msg, headers)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}"[:500]
    if resp is None or 200 <= resp.status_code < 300:
        return None
    return f"HTTP {resp.status_code}"


def _comment(session: Session, http: httpx.Client, f: ProjectForge, msg: OutboxMessage,
             headers: dict[str, str]) -> httpx.Response:
    number = msg.payload["number"]
    if not isinstance(number, int):
        raise TypeError(f"outbox message {msg.id}: a comment without a request number")
    body = {"body": msg.payload["body"]}
    row = session.get(ForgeComment, (f.project_id, number))
    notes = "notes" if f.kind == "gitlab" else "comments"
    if row is not None and row.comment_id:
        if f.kind == "gitlab":
            url = f"{api_root(f)}/merge_requests/{number}/notes/{row.comment_id}"
            return http.put(url, json=body, headers=headers)
        return http.patch(f"{api_root(f)}/issues/comments/{row.comment_id}", json=body,
                          headers=headers)
    path = "merge_requests" if f.kind == "gitlab" else "issues"
    resp = http.post(f"{api_root(f)}/{path}/{number}/{notes}", json=body, headers=headers)
    if 200 <= resp.status_code < 300:
        cid = str(resp.json().get("id"))
        if row is None:
            session.add(ForgeComment(project_id=f.project_id, number=number, comment_id=cid))
        else:
            row.comment_id = cid
    return resp
