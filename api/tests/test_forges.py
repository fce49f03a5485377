"""Forge commit statuses and pull-request comments through the outbox, against a local
HTTP receiver that checks each forge's documented path, payload shape and auth header;
the token is never returned by the API nor stored in the outbox."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mallard_api import delivery, forges
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from mallard_api.models.outbox import OutboxMessage
from sqlalchemy.orm import Session

TOKEN = "s3cr3t-forge-token"


class Forge:
    """Records (method, path, headers, body); answers comments with an id, GETs from
    `answers` (path -> JSON) when the request carries `auth` (header, value), and the
    first `fail_first` writes with a 500."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        self.answers: dict[str, Any] = {}
        self.auth: tuple[str, str] | None = None
        self.fail_first = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, data: Any) -> None:
                out = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def _any(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append((self.command, self.path, dict(self.headers), body))
                if outer.fail_first > 0:
                    outer.fail_first -= 1
                    self._send(500, {"message": "down"})
                    return
                self._send(201 if self.command == "POST" else 200, {"id": 4242})

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.calls.append(("GET", self.path, dict(self.headers), {}))
                header, value = outer.auth or ("", "")
                if self.headers.get(header) != value:
                    self._send(401, {"message": "Bad credentials"})
                elif self.path in outer.answers:
                    self._send(200, outer.answers[self.path])
                else:
                    self._send(404, {"message": "Not Found"})

            do_POST = do_PATCH = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


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
    assert [(c[0], c[1], c[3]["body"]) for c in comments] == [
        ("POST", create, "first verdict"), (verb, update, "second verdict")]


def test_an_older_status_never_lands_after_a_newer_one(
        forge: Forge, settings: Settings, db_session: Session, make_project: Any) -> None:
    """The forge is down for the `pending`; when it comes back the retried `pending` is
    due after the `failure` queued later: it is dropped, not sent over it."""
    from mallard_api.models.forges import ProjectForge

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
