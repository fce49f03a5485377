"""A forge's REST API as the tests need it (GitHub, GitLab, Gitea/Forgejo), on a local
HTTP server: it answers and refuses the way the real ones do."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "s3cr3t-forge-token"


class Forge:
    """A forge's REST API as the tests need it, refusing what the real ones refuse.

    Records (method, path, headers, body). Keeps the comments of each request
    (`comments[list path]`, ids from 4242 up): a POST to a request's comments or notes
    creates one (201 `{id, body}`), a PATCH/PUT of a comment updates it (404 for an id
    it never gave), a GET of the list answers it a page at a time (GitHub's `per_page`,
    Gitea's `limit`, GitLab's `per_page`, with `page`), oldest first. Other GETs are
    answered from `answers` (path -> JSON). When `auth` (header, value) is set, every
    request must carry it (401); a write without its field (`body`, or a status's
    `state`) is a 422; the first `fail_first` writes get a 500.

    As the real ones: GitLab keeps each commit status (sha, name) and refuses a `pending`
    over a pending or running one (400 `Cannot transition status via :enqueue from
    :pending`) and a `running` over a running one (`... via :run from :running`); a
    finished status is replaced by a new one. With `deleted` every request gets the
    forge's 404 for a repository that is gone. `members` answers the permission of a
    commenter: GitHub's and Gitea's `collaborators/{login}/permission` (login ->
    admin|write|read; anyone else `none`), GitLab's `members/all/{user id}` (id ->
    access level; anyone else a 404)."""

    LIST = re.compile(r"(?P<list>.*/(?:issues|merge_requests)/\d+/(?:comments|notes))$")
    ONE = re.compile(r"(?:.*/issues/comments|.*/merge_requests/\d+/notes)/(?P<id>\d+)$")

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        self.answers: dict[str, Any] = {}
        self.auth: tuple[str, str] | None = None
        self.fail_first = 0
        self.comments: dict[str, list[dict[str, Any]]] = {}
        self.next_id = 4242
        self.deleted = False
        self.members: dict[str, Any] = {}
        self.gitlab_states: dict[tuple[str, str], str] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, data: Any) -> None:
                out = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def _authorized(self) -> bool:
                header, value = outer.auth or ("", "")
                if outer.auth is not None and self.headers.get(header) != value:
                    self._send(401, {"message": "401 Unauthorized"
                                     if "/api/v4/" in self.path else "Bad credentials"})
                    return False
                if outer.deleted:
                    self._send(404, {"message": "404 Project Not Found"}
                               if "/api/v4/" in self.path else {"message": "Not Found"})
                    return False
                return True

            def _any(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append((self.command, self.path, dict(self.headers), body))
                if not self._authorized():
                    return
                if outer.fail_first > 0:
                    outer.fail_first -= 1
                    self._send(500, {"message": "down"})
                    return
                self._send(*outer.write(self.command, self.path, body))

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.calls.append(("GET", self.path, dict(self.headers), {}))
                if outer.auth is None:  # reads are always authenticated here
                    self._send(401, {"message": "Bad credentials"})
                elif self._authorized():
                    self._send(*outer.read(self.path))

            do_POST = do_PATCH = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    GITLAB_STATUS = re.compile(r"/api/v4/projects/[^/]+/statuses/(?P<sha>[0-9a-f]+)$")
    VERB = {"pending": "enqueue", "running": "run"}

    def gitlab_status(self, sha: str, body: dict[str, Any]) -> tuple[int, Any]:
        key, state = (sha, str(body.get("name", "default"))), str(body["state"])
        now = self.gitlab_states.get(key)  # pending or running; else a new status
        if state in self.VERB and (now == "running" or (now == "pending"
                                                        and state == "pending")):
            return 400, {"message": f"Cannot transition status via :{self.VERB[state]} "
                                    f"from :{now}"}
        self.gitlab_states[key] = state
        if state not in self.VERB:
            del self.gitlab_states[key]
        return 201, {"id": 1, "sha": sha, "status": state}

    def write(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if "/statuses/" in path:
            if "state" not in body:
                return 422, {"message": "state"}
            gitlab = self.GITLAB_STATUS.match(path)
            return self.gitlab_status(gitlab["sha"], body) if gitlab else (201, {"id": 1})
        if not isinstance(body.get("body"), str) or not body["body"]:
            return 422, {"message": "body is missing"}
        listed, one = self.LIST.match(path), self.ONE.match(path)
        if method == "POST" and listed:
            comment = {"id": self.next_id, "body": body["body"]}
            self.next_id += 1
            self.comments.setdefault(listed["list"], []).append(comment)
            return 201, comment
        if method in ("PATCH", "PUT") and one:
            for comment in (c for cs in self.comments.values() for c in cs):
                if comment["id"] == int(one["id"]):
                    comment["body"] = body["body"]
                    return 200, comment
            return 404, {"message": "Not Found"}
        return 404, {"message": "Not Found"}

    PERMISSION = re.compile(r".*/collaborators/(?P<login>[^/]+)/permission$")
    MEMBER = re.compile(r"/api/v4/projects/[^/]+/members/all/(?P<id>\d+)$")

    def permission(self, path: str) -> tuple[int, Any] | None:
        if (m := self.MEMBER.match(path)) is not None:
            level = self.members.get(m["id"])
            return ((404, {"message": "404 Not found"}) if level is None else
                    (200, {"id": int(m["id"]), "access_level": level, "state": "active"}))
        if (m := self.PERMISSION.match(path)) is not None:
            perm = self.members.get(m["login"], "none")
            return 200, {"permission": perm, "role_name": perm, "user": {"login": m["login"]}}
        return None

    def read(self, path: str) -> tuple[int, Any]:
        if path in self.answers:
            return 200, self.answers[path]
        if (answer := self.permission(path)) is not None:
            return answer
        where = urlsplit(path)
        listed = self.LIST.match(where.path)
        if listed is None:
            return 404, {"message": "Not Found"}
        query = parse_qs(where.query)
        size = int((query.get("per_page") or query.get("limit") or ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        items = self.comments.get(listed["list"], [])
        return 200, items[(page - 1) * size:page * size]

    def bodies(self) -> list[str]:
        """Every comment's body, on every request."""
        return [c["body"] for cs in self.comments.values() for c in cs]


AUTH = {"github": ("Authorization", f"Bearer {TOKEN}"),
        "gitea": ("Authorization", f"token {TOKEN}"),
        "gitlab": ("Private-Token", TOKEN)}
STATUS_PATH = {"github": "/repos/acme/mallard/statuses/{sha}",
               "gitea": "/api/v1/repos/acme/mallard/statuses/{sha}",
               "gitlab": "/api/v4/projects/acme%2Fmallard/statuses/{sha}"}
COMMENT_PATHS = {
    "github": ("/repos/acme/mallard/issues/7/comments",
               "/repos/acme/mallard/issues/comments/4242", "PATCH"),
    "gitea": ("/api/v1/repos/acme/mallard/issues/7/comments",
              "/api/v1/repos/acme/mallard/issues/comments/4242", "PATCH"),
    "gitlab": ("/api/v4/projects/acme%2Fmallard/merge_requests/7/notes",
               "/api/v4/projects/acme%2Fmallard/merge_requests/7/notes/4242", "PUT")}


