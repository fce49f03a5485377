"""Forge commit statuses and pull-request comments through the outbox, against a local
HTTP receiver that checks each forge's documented path, payload shape and auth header;
the token is never returned by the API nor stored in the outbox."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import GITHUB_SECRET
from fastapi.testclient import TestClient
from helpers import results, run_analysis, trial
from mallard_api import delivery, forges
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from mallard_api.models.analysis import OutboxMessage
from sqlalchemy.orm import Session

TOKEN = "s3cr3t-forge-token"


class Forge:
    """Records (method, path, headers, body); answers comments with an id."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append((self.command, self.path, dict(self.headers), body))
                out = json.dumps({"id": 4242}).encode()
                self.send_response(201 if self.command == "POST" else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

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


def test_pull_request_status_and_one_comment_updated(
        forge: Forge, client: TestClient, app: Any, settings: Settings, db_session: Session,
        make_project: Any, make_runner: Any, admin_headers: dict[str, str]) -> None:
    runner, rheaders = make_runner()
    conf = settings.model_copy(update={"forge_url_allow": forge.url, "peers": "",
                                       "default_arch": runner["arch"],
                                       "comparison_max_follow_ups": 0})
    app.dependency_overrides[get_settings] = lambda: conf
    try:
        project = make_project()
        client.put(f"/api/v1/projects/{project['name']}/forge", headers=admin_headers,
                   json={"kind": "github", "base_url": forge.url, "repo": "acme/mallard",
                         "token": TOKEN}).raise_for_status()
        base, heads = "b" * 40, ["d" * 40, "e" * 40]
        for i, head in enumerate(heads):
            event = {"action": "opened" if i == 0 else "synchronize",
                     "pull_request": {"number": 7, "head": {"sha": head},
                                      "base": {"sha": base}}}
            body = json.dumps(event).encode()
            sig = "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
            r = client.post(f"/api/v1/webhooks/github/{project['name']}", content=body,
                            headers={"X-GitHub-Event": "pull_request",
                                     "X-Hub-Signature-256": sig,
                                     "Content-Type": "application/json"})
            assert r.status_code == 200 and "pull request #7" in r.json()["note"], r.text
            job = client.post("/api/v1/jobs/claim", headers=rheaders, json={
                "runner_id": runner["id"], "lease_seconds": 600}).json()
            trials = [trial(a["commit"], threads=1, label=a["label"],
                            measures={"instructions": 100.0 if a["label"] == "base"
                                      else 150.0})
                      for a in job["spec"]["allocators"]]
            client.post("/api/v1/results", headers=rheaders, json=results(
                trials, job_id=job["id"], runner_id=runner["id"],
                project=project["name"])).raise_for_status()
            run_analysis(app, conf)
            with app.state.background_sessionmaker() as fresh:  # now() moves on
                delivery.deliver_due(fresh)
        bad = json.dumps({"action": "opened", "pull_request": {
            "number": 7, "head": {"sha": "nope"}, "base": {"sha": base}}}).encode()
        sig = "sha256=" + hmac.new(GITHUB_SECRET.encode(), bad, hashlib.sha256).hexdigest()
        r = client.post(f"/api/v1/webhooks/github/{project['name']}", content=bad, headers={
            "X-GitHub-Event": "pull_request", "X-Hub-Signature-256": sig,
            "Content-Type": "application/json"})
        assert r.status_code == 422
        assert r.json()["detail"][0]["loc"] == ["body", "pull_request", "head"]
    finally:
        app.dependency_overrides.pop(get_settings, None)
    statuses = [(c[1].rsplit("/", 1)[-1], c[3]["state"]) for c in forge.calls
                if "/statuses/" in c[1]]
    assert statuses == [(heads[0], "pending"), (heads[0], "failure"),
                        (heads[1], "pending"), (heads[1], "failure")]
    comments = [(c[0], c[1]) for c in forge.calls if "/statuses/" not in c[1]]
    assert comments == [("POST", "/repos/acme/mallard/issues/7/comments"),
                        ("PATCH", "/repos/acme/mallard/issues/comments/4242")]
    last = [c for c in forge.calls if "/statuses/" not in c[1]][-1]
    assert "1 regressed" in last[3]["body"] and "mallard@eeeeeee" in last[3]["body"]
