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
  `PATCH {base}/repos/{owner}/{repo}/issues/comments/{id}` with `{body}`, listed by
  `GET .../issues/{n}/comments?per_page=100&page=N`;
  `Authorization: Bearer <token>`, `Accept: application/vnd.github+json`.
* Gitea/Forgejo: `POST {base}/api/v1/repos/{owner}/{repo}/statuses/{sha}` (same body;
  states pending|success|error|failure|warning); comments
  `POST {base}/api/v1/repos/{owner}/{repo}/issues/{n}/comments` then
  `PATCH {base}/api/v1/repos/{owner}/{repo}/issues/comments/{id}`, listed by
  `GET .../issues/{n}/comments?limit=50&page=N`;
  `Authorization: token <token>`.
* GitLab: `POST {base}/api/v4/projects/{id}/statuses/{sha}` with
  `{state: pending|running|success|failed|canceled, name, target_url, description}`;
  notes `POST {base}/api/v4/projects/{id}/merge_requests/{iid}/notes` then
  `PUT .../notes/{note_id}` with `{body}`, listed by `GET .../notes?sort=asc&
  order_by=created_at&per_page=100&page=N`; `PRIVATE-TOKEN: <token>`.

One comment per request, never two: its first line is a hidden marker,
`<!-- mallard:request:<n>:<tag> -->` (the tag an HMAC of the request under the forge
token). Its id is recorded when the forge answers the create; when no id is recorded (a
crash between the forge's answer and the commit), the request's comments are listed and
the oldest that starts with the marker is updated instead of creating another.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
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
# Answers that no retry changes: bad credentials, no access, a deleted repository, a body
# the forge refuses. The delivery ends with the forge's message (shown on the project
# page); anything else (5xx, 429, a timeout) is retried with backoff.
PERMANENT = frozenset({400, 401, 403, 404, 422})


@dataclass(frozen=True)
class Failure:
    """Why a forge message was not delivered: the forge's status and message (never the
    token); `permanent` ends the delivery (PERMANENT), else it is retried."""

    error: str
    permanent: bool = False


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
    url = f"{api_root(f)}/statuses/{sha}"
    payload = status_payload(f.kind, state, description, target, f"mallard/{arch}/{context}")
    if f.kind == "gitlab" and payload["state"] == "pending" and _gitlab_started(
            session, url, f"mallard/{arch}/{context}"):
        payload["state"] = "running"  # GitLab refuses pending -> pending (HTTP 400)
    msg = outbox.add(session, event="forge.status", alert_id=None, kind=f"{f.kind}-status",
                     url=url, payload=payload)
    msg.project_id = project_id
    return msg


def _gitlab_started(session: Session, url: str, name: str) -> bool:
    """Whether the commit's last status of that name (queued, not given up) is pending or
    running: GitLab moves pending -> running -> success|failed and refuses a second
    `pending` ("Cannot transition status via :enqueue from :pending"), so the next one
    is sent as `running`."""
    last = outbox.last_payload(session, url, "forge.status", lambda p: p.get("name") == name)
    return last is not None and last.get("state") in ("pending", "running")


def _comments_url(f: ProjectForge, number: int) -> str:
    path = "merge_requests" if f.kind == "gitlab" else "issues"
    return f"{api_root(f)}/{path}/{number}/" + ("notes" if f.kind == "gitlab" else "comments")


def enqueue_comment(session: Session, project_id: int, number: int, body: str
                    ) -> OutboxMessage | None:
    """Queue the pull/merge request's comment: created the first time, then updated."""
    f = session.get(ProjectForge, project_id)
    if f is None:
        return None
    msg = outbox.add(session, event="forge.comment", alert_id=None, kind=f"{f.kind}-comment",
                     url=_comments_url(f, number), payload={"number": number, "body": body})
    msg.project_id = project_id
    return msg


def last_comment(session: Session, project_id: int, number: int) -> str | None:
    """What the request's comment was last queued to say (None: nothing yet)."""
    f = session.get(ProjectForge, project_id)
    last = None if f is None else outbox.last_payload(
        session, _comments_url(f, number), "forge.comment", lambda p: True)
    body = None if last is None else last.get("body")
    return body if isinstance(body, str) else None


class ForgeError(RuntimeError):
    """The forge did not answer a read (its status or why; never the token); `permanent`
    when its answer was one of PERMANENT."""

    def __init__(self, msg: str, permanent: bool = False) -> None:
        super().__init__(msg)
        self.permanent = permanent


MAX_ANSWER_BYTES = 4 << 20
MERGE_BASE = {"github": ("merge_base_commit", "sha"), "gitlab": ("diff_refs", "base_sha")}


def read_json(http: httpx.Client, url: str, headers: dict[str, str]) -> Any:
    """A forge's JSON answer to a GET (at most MAX_ANSWER_BYTES); ForgeError otherwise."""
    body = bytearray()
    try:
        with http.stream("GET", url, headers=headers) as resp:
            if resp.status_code != 200:
                head = httpx.Response(resp.status_code,
                                      content=next(resp.iter_bytes(4096), b""))
                raise ForgeError(f"HTTP {resp.status_code}: {forge_message(head)}",
                                 resp.status_code in PERMANENT)
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise ForgeError(f"answer over {MAX_ANSWER_BYTES} bytes")
        return json.loads(body)
    except httpx.HTTPError as exc:
        raise ForgeError(type(exc).__name__) from exc
    except ValueError as exc:
        raise ForgeError("answer is not JSON") from exc


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
    with httpx.Client(timeout=settings.webhook_timeout_seconds) as http:
        data = read_json(http, url, auth_headers(f))
    for key in MERGE_BASE[kind]:
        data = data.get(key) if isinstance(data, dict) else None
    if not isinstance(data, str) or not FULL_SHA.match(data):
        raise ForgeError(f"answer has no {'.'.join(MERGE_BASE[kind])}")
    return data.lower()


def _read(session: Session, settings: Settings, project_id: int, kind: str, path: str
          ) -> tuple[ProjectForge, Any] | None:
    """GET `path` under the project's forge API root; None when its forge is not `kind`."""
    f = session.get(ProjectForge, project_id)
    if f is None or f.kind != kind:
        return None
    with httpx.Client(timeout=settings.webhook_timeout_seconds) as http:
        return f, read_json(http, f"{api_root(f)}/{path}", auth_headers(f))


WRITE_PERMISSIONS = {"admin", "maintain", "write", "owner"}
GITLAB_DEVELOPER = 30  # GitLab's access level that may push (Developer and above)


def may_write(session: Session, settings: Settings, project_id: int, kind: str,
              who: str | int) -> bool:
    """Whether the commenter may push to the project's repository, asked of the forge:
    GitHub's and Gitea's `GET .../collaborators/{login}/permission` (`permission` admin or
    write; GitHub's `role_name` maintain), GitLab's `GET .../members/all/{user id}`
    (`access_level` >= 30, Developer; a 404 for a non-member). False without a forge of
    that kind; ForgeError when the forge does not answer."""
    path = (f"members/all/{int(who)}" if kind == "gitlab"
            else f"collaborators/{quote(str(who), safe='')}/permission")
    try:
        got = _read(session, settings, project_id, kind, path)
    except ForgeError as exc:
        if kind == "gitlab" and str(exc).startswith("HTTP 404"):
            return False  # not a member
        raise
    if got is None or not isinstance(got[1], dict):
        return False
    data = got[1]
    if kind == "gitlab":
        level = data.get("access_level")
        return isinstance(level, int) and level >= GITLAB_DEVELOPER
    return bool({data.get("permission"), data.get("role_name")} & WRITE_PERMISSIONS)


def pull_request_shas(session: Session, settings: Settings, project_id: int, number: int
                      ) -> tuple[str, str] | None:
    """A GitHub pull request's head and base tip (`GET .../pulls/{n}`: `head.sha`,
    `base.sha`): what an `issue_comment` event does not carry. None without a GitHub
    forge; ForgeError when the answer lacks them."""
    got = _read(session, settings, project_id, "github", f"pulls/{number}")
    if got is None:
        return None
    shas = []
    for side in ("head", "base"):
        part = got[1].get(side) if isinstance(got[1], dict) else None
        sha = part.get("sha") if isinstance(part, dict) else None
        if not isinstance(sha, str) or not FULL_SHA.match(sha):
            raise ForgeError(f"the pull request's answer has no {side}.sha")
        shas.append(sha.lower())
    return shas[0], shas[1]


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


def forge_message(resp: httpx.Response) -> str:
    """The forge's own words for a refusal: GitHub's and Gitea's `message`, GitLab's
    `message` or `error` (a string, a list or a field map), at most 300 characters."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300]
    said = data.get("message", data.get("error")) if isinstance(data, dict) else data
    text = said if isinstance(said, str) else json.dumps(said)
    return "".join(ch if ch.isprintable() else " " for ch in text)[:300]


def _already(msg: OutboxMessage, resp: httpx.Response, said: str) -> bool:
    """GitLab's 400 for a `running` sent again: the status reads running already."""
    return (msg.event == "forge.status" and msg.kind == "gitlab-status"
            and resp.status_code == 400 and msg.payload.get("state") == "running"
            and "from :running" in said)


def send(session: Session, http: httpx.Client, msg: OutboxMessage) -> Failure | None:
    """Deliver one forge message; None on success (or when a newer message supersedes
    it), else the Failure (never the token): permanent for PERMANENT answers."""
    f = session.get(ProjectForge, msg.project_id) if msg.project_id is not None else None
    if f is None:
        return Failure("the project has no forge any more", permanent=True)
    if superseded(session, msg):
        return None
    headers = auth_headers(f)
    try:
        if msg.event == "forge.status":
            resp = http.post(msg.url, json=msg.payload, headers=headers)
        else:
            resp = _comment(session, http, f, msg, headers)
    except httpx.HTTPError as exc:
        return Failure(f"{type(exc).__name__}"[:500])
    except ForgeError as exc:
        return Failure(f"listing the request's comments: {exc}", exc.permanent)
    if 200 <= resp.status_code < 300:
        return None
    said = forge_message(resp)
    if _already(msg, resp, said):
        return None
    return Failure(f"HTTP {resp.status_code}: {said}", resp.status_code in PERMANENT)


def comment_marker(f: ProjectForge, number: int) -> str:
    """The hidden first line of Mallard's comment on request `number`: how the comment is
    found again when its id was never recorded (a crash between the forge's answer and the
    commit). Keyed with the forge token, so nobody without it can plant one before ours."""
    tag = hmac.new(f.token.encode(), f"mallard-comment:{f.project_id}:{number}".encode(),
                   hashlib.sha256).hexdigest()[:20]
    return f"<!-- mallard:request:{number}:{tag} -->"


LIST_PAGES = 20  # comments listed at most: 20 pages (2,000 on GitHub and GitLab)


def _pages(f: ProjectForge, number: int) -> tuple[str, str]:
    """The list URL of the request's comments (oldest first) and its page parameter."""
    if f.kind == "gitlab":
        return (f"{api_root(f)}/merge_requests/{number}/notes?sort=asc&order_by=created_at"
                "&per_page=100", "page")
    size = "per_page=100" if f.kind == "github" else "limit=50"
    return f"{api_root(f)}/issues/{number}/comments?{size}", "page"


def find_comment(http: httpx.Client, f: ProjectForge, number: int,
                 headers: dict[str, str]) -> str | None:
    """The id of the oldest comment on the request that starts with our marker, read
    through the forge's list-comments API; None when there is none."""
    marker = comment_marker(f, number)
    url, page = _pages(f, number)
    seen: set[str] = set()
    for n in range(1, LIST_PAGES + 1):
        items = read_json(http, f"{url}&{page}={n}", headers)
        if not isinstance(items, list):
            raise ForgeError("the comments are not a list")
        ids = [str(c.get("id")) for c in items if isinstance(c, dict)]
        for c in items:
            body = c.get("body") if isinstance(c, dict) else None
            if isinstance(body, str) and body.startswith(marker):
                return str(c.get("id"))
        if not items or seen.issuperset(ids):  # the last page (or paging ignored)
            return None
        seen.update(ids)
    return None


def _comment(session: Session, http: httpx.Client, f: ProjectForge, msg: OutboxMessage,
             headers: dict[str, str]) -> httpx.Response:
    """Create the request's comment, or update it: by the id recorded, else by the one
    found with our marker (posted before a crash let us record it). ForgeError when the
    comments cannot be listed."""
    number = msg.payload["number"]
    if not isinstance(number, int):
        raise TypeError(f"outbox message {msg.id}: a comment without a request number")
    body = {"body": f"{comment_marker(f, number)}\n{msg.payload['body']}"}
    row = session.get(ForgeComment, (f.project_id, number))
    cid = (row.comment_id if row is not None else None) or find_comment(http, f, number,
                                                                         headers)
    if cid:
        if f.kind == "gitlab":
            resp = http.put(f"{api_root(f)}/merge_requests/{number}/notes/{cid}", json=body,
                            headers=headers)
        else:
            resp = http.patch(f"{api_root(f)}/issues/comments/{cid}", json=body,
                              headers=headers)
    else:
        path = "merge_requests" if f.kind == "gitlab" else "issues"
        notes = "notes" if f.kind == "gitlab" else "comments"
        resp = http.post(f"{api_root(f)}/{path}/{number}/{notes}", json=body, headers=headers)
        if 200 <= resp.status_code < 300:
            cid = str(resp.json().get("id"))
    if cid and 200 <= resp.status_code < 300:
        if row is None:
            session.add(ForgeComment(project_id=f.project_id, number=number, comment_id=cid))
        else:
            row.comment_id = cid
    return resp
