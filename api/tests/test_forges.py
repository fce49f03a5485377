"""Forge commit statuses and pull-request comments through the outbox, against a local
HTTP receiver that checks each forge's documented path, payload shape and auth header;
the token is never returned by the API nor stored in the outbox."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from mallard_api import delivery, forges
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from mallard_api.models.forges import ProjectForge
from mallard_api.models.outbox import OutboxMessage
from sqlalchemy.orm import Session

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
    `state`) is a 422; the first `fail_first` writes get a 500."""

    LIST = re.compile(r"(?P<list>.*/(?:issues|merge_requests)/\d+/(?:comments|notes))$")
    ONE = re.compile(r"(?:.*/issues/comments|.*/merge_requests/\d+/notes)/(?P<id>\d+)$")

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        self.answers: dict[str, Any] = {}
        self.auth: tuple[str, str] | None = None
        self.fail_first = 0
        self.comments: dict[str, list[dict[str, Any]]] = {}
        self.next_id = 4242
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
                    self._send(401, {"message": "Bad credentials"})
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

    def write(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if "/statuses/" in path:
            return (201, {"id": 1}) if "state" in body else (422, {"message": "state"})
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

    def read(self, path: str) -> tuple[int, Any]:
        if path in self.answers:
            return 200, self.answers[path]
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


@pytest.fixture
def forge() -> Iterator[Forge]:
    f = Forge()
    yield f
    f.server.shutdown()


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


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_status_and_comment_create_then_update(
        kind: str, forge: Forge, client: TestClient, app: Any, settings: Settings,
        db_session: Session, make_project: Any, admin_headers: dict[str, str],
        user_headers: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    conf = settings.model_copy(update={"forge_url_allow": forge.url})
    forge.auth = AUTH[kind]
    app.dependency_overrides[get_settings] = lambda: conf
    try:
        project = make_project()
        body = {"kind": kind, "base_url": forge.url, "repo": "acme/mallard", "token": TOKEN}
        r = client.put(f"/api/v1/projects/{project['name']}/forge", json=body,
                       headers=admin_headers)
        assert r.status_code == 200 and TOKEN not in r.text and r.json()["token_set"]
        assert client.put(f"/api/v1/projects/{project['name']}/forge", json=body,
                          headers=user_headers).status_code == 403
        bad = client.put(f"/api/v1/projects/{project['name']}/forge",
                         json={**body, "base_url": "http://evil.example"},
                         headers=admin_headers)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body",
                                                                              "base_url"]
        got = client.get(f"/api/v1/projects/{project['name']}/forge", headers=user_headers)
        assert got.status_code == 200 and TOKEN not in got.text
    finally:
        app.dependency_overrides.pop(get_settings, None)
    sha = "c" * 40
    forges.enqueue_status(db_session, conf, project["id"], sha, "x86_64", "failure",
                          "1 regressed vs aaaaaaa: larson threads=1 instructions +10.0%", 12)
    forges.enqueue_comment(db_session, project["id"], 7, "first verdict")
    db_session.commit()
    stored = db_session.query(OutboxMessage).filter_by(project_id=project["id"]).all()
    assert stored and all(TOKEN not in json.dumps(m.payload) + m.url for m in stored)
    with caplog.at_level("DEBUG"):
        delivery.deliver_due(db_session)
        forges.enqueue_comment(db_session, project["id"], 7, "second verdict")
        db_session.commit()
        delivery.deliver_due(db_session)
    assert TOKEN not in caplog.text
    header, value = AUTH[kind]
    status = [c for c in forge.calls if "/statuses/" in c[1]]
    assert len(status) == 1
    method, path, headers, payload = status[0]
    assert method == "POST" and path == STATUS_PATH[kind].format(sha=sha)
    assert {k.lower(): v for k, v in headers.items()}[header.lower()] == value
    if kind == "gitlab":
        assert payload["state"] == "failed" and payload["name"] == "mallard/x86_64/verdict"
    else:
        assert payload["state"] == "failure" and payload["context"] == "mallard/x86_64/verdict"
    assert payload["target_url"].endswith("/ui/comparisons/12")
    assert payload["description"].startswith("1 regressed")
    comments = [c for c in forge.calls if "/statuses/" not in c[1]]
    create, update, verb = COMMENT_PATHS[kind]
    marker = forges.comment_marker(db_session.get(ProjectForge, project["id"]), 7)
    assert marker.startswith("<!-- mallard:request:7:") and marker.endswith(" -->")
    # no id recorded yet: the request's comments are listed first (none is ours)
    assert [(c[0], c[1].split("?")[0], c[3].get("body")) for c in comments] == [
        ("GET", create, None), ("POST", create, f"{marker}\nfirst verdict"),
        (verb, update, f"{marker}\nsecond verdict")]
    assert forge.bodies() == [f"{marker}\nsecond verdict"]


def test_an_older_status_never_lands_after_a_newer_one(
        forge: Forge, settings: Settings, db_session: Session, make_project: Any) -> None:
    """The forge is down for the `pending`; when it comes back the retried `pending` is
    due after the `failure` queued later: it is dropped, not sent over it."""
    project = make_project()
    db_session.add(ProjectForge(project_id=project["id"], kind="gitea", base_url=forge.url,
                                repo="acme/mallard", token=TOKEN))
    conf = settings.model_copy(update={"forge_url_allow": forge.url})
    sha = "f" * 40
    forge.fail_first = 1
    forges.enqueue_status(db_session, conf, project["id"], sha, "x86_64", "pending",
                          "running against aaaaaaa", 3)
    db_session.commit()
    assert delivery.deliver_due(db_session).retried == 1
    forges.enqueue_status(db_session, conf, project["id"], sha, "x86_64", "failure",
                          "1 regressed vs aaaaaaa", 3)
    db_session.commit()
    later = datetime.now(UTC) + timedelta(hours=2)  # both due: the retry sorts last
    delivery.deliver_due(db_session, now=later)
    sent = [c[3]["state"] for c in forge.calls if "/statuses/" in c[1]]
    assert sent == ["pending", "failure"]  # the first pending got the 500
    left = db_session.query(OutboxMessage).filter_by(project_id=project["id"]).all()
    assert {m.state for m in left} == {"delivered"}


class Crash(Exception):
    """The API process dies between the forge's answer and the outbox's commit."""


@pytest.mark.parametrize("kind", ["github", "gitea", "gitlab"])
def test_a_crash_after_the_forge_took_a_comment_never_posts_it_twice(
        kind: str, forge: Forge, db_session: Session, make_project: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack (a crash, or a kill -9): the forge creates the comment, then the process
    dies before the outbox row and the comment's id are committed. The message is sent
    again once its lease is over: the request's comments are listed, ours is found by
    its marker and updated; a comment that only copies a marker without the forge token
    is not taken for ours."""
    project = make_project()
    db_session.add(ProjectForge(project_id=project["id"], kind=kind, base_url=forge.url,
                                repo="acme/mallard", token=TOKEN))
    db_session.commit()
    forge.auth = AUTH[kind]
    create, update, verb = COMMENT_PATHS[kind]
    forge.comments[create] = [{"id": 17, "body": "<!-- mallard:request:7:0000 -->\nforged"}]
    forges.enqueue_comment(db_session, project["id"], 7, "the verdict")
    db_session.commit()
    sent = forges.send

    def send_then_crash(*args: Any) -> str | None:
        sent(*args)
        raise Crash

    monkeypatch.setattr(forges, "send", send_then_crash)
    with pytest.raises(Crash):
        delivery.deliver_due(db_session)
    db_session.rollback()
    monkeypatch.setattr(forges, "send", sent)
    later = datetime.now(UTC) + timedelta(minutes=5)  # past the message's lease
    assert delivery.deliver_due(db_session, now=later).delivered == 1
    marker = forges.comment_marker(db_session.get(ProjectForge, project["id"]), 7)
    assert forge.bodies() == ["<!-- mallard:request:7:0000 -->\nforged",
                              f"{marker}\nthe verdict"]  # one comment of ours, not two
    writes = [(c[0], c[1]) for c in forge.calls if c[0] != "GET"]
    assert writes == [("POST", create), (verb, update)]
    # the id is recorded now: the next verdict updates it without listing again
    forges.enqueue_comment(db_session, project["id"], 7, "a newer verdict")
    db_session.commit()
    reads = sum(c[0] == "GET" for c in forge.calls)
    assert delivery.deliver_due(db_session, now=later).delivered == 1
    assert sum(c[0] == "GET" for c in forge.calls) == reads
    assert forge.bodies()[1] == f"{marker}\na newer verdict"


@pytest.mark.parametrize(("kind", "repo"), [
    ("github", "../../admin/x"), ("gitlab", "../../admin/x"), ("gitea", "acme/.."),
    ("github", "acme/mallard/extra"), ("github", "acme"), ("gitlab", "acme//mallard"),
    ("github", "acme/mallard/"), ("github", "-acme/mallard"), ("gitlab", "group/-x/y"),
    ("github", "acme/mallard.git"), ("gitlab", "group/mallard.GIT"), ("gitea", ".acme/x"),
    ("github", "acme/mallard."), ("gitlab", "a%2F..%2Fadmin/x"), ("github", "acme/ma llard"),
])
def test_a_forge_repository_is_owner_and_name(kind: str, repo: str, client: TestClient,
                                              app: Any, settings: Settings,
                                              make_project: Any,
                                              admin_headers: dict[str, str]) -> None:
    """The attack: a forge `repo` such as `../../admin/x`, which the forge host would
    normalise to another of its paths. Owner/name (GitLab: group[/subgroup...]/name),
    each part a plain name: 422 naming `repo`, nothing stored."""
    conf = settings.model_copy(update={"forge_url_allow": "http://forge.example"})
    app.dependency_overrides[get_settings] = lambda: conf
    try:
        project = make_project()
        url = f"/api/v1/projects/{project['name']}/forge"
        r = client.put(url, headers=admin_headers, json={
            "kind": kind, "base_url": "http://forge.example", "repo": repo, "token": TOKEN})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "repo"]
        assert client.get(url, headers=admin_headers).status_code == 404
        ok = "group/sub/mallard" if kind == "gitlab" else "acme/mal-lard_2.x"
        r = client.put(url, headers=admin_headers, json={
            "kind": kind, "base_url": "http://forge.example", "repo": ok, "token": TOKEN})
        assert r.status_code == 200 and r.json()["repo"] == ok, r.text
    finally:
        app.dependency_overrides.pop(get_settings, None)
