"""`/mallard bench [suite]` comments on a pull/merge request, delivered as each forge
delivers them (GitHub and Gitea `issue_comment`, GitLab `Note Hook`, each signed its way):
the commenter's permission is asked of the forge (the fake forge answers as the real
APIs do), a writer's command queues exactly one comparison, answered in the one comment;
a reader's, a replayed delivery and the same comment delivered again queue none. A
regression of the request opens an alert; acknowledging it turns the status green.
Comment modes: what is written when."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from conftest import GITEA_SECRET, GITHUB_SECRET, GITLAB_TOKEN
from fake_forge import AUTH, STATUS_PATH, TOKEN, Forge
from fastapi.testclient import TestClient
from helpers import results, run_analysis, trial
from mallard_api import delivery
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.pull_requests import comment_due
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from mallard_api.models.comparisons import Comparison
from mallard_api.models.forges import ForgeComment
from mallard_api.models.outbox import OutboxMessage
from sqlalchemy.orm import Session

MB, TIP, HEAD = "a1" * 20, "b2" * 20, "c3" * 20
USERS: dict[str, tuple[str | int, str | int]] = {  # (a writer, a reader)
    "github": ("ada", "eve"), "gitea": ("ada", "eve"), "gitlab": (1, 2)}


@pytest.fixture
def forge() -> Iterator[Forge]:
    f = Forge()
    yield f
    f.server.shutdown()


def note(kind: str, project: dict[str, Any], text: str, who: str | int, comment_id: int
         ) -> dict[str, Any]:
    """A comment on pull/merge request 7 as the forge's documentation shows it (trimmed)."""
    repo = {"id": 1, "name": "mallard", "full_name": "acme/mallard",
            "clone_url": project["repo_url"], "html_url": "https://forge.example/acme/mallard"}
    if kind == "gitlab":
        return {"object_kind": "note", "event_type": "note",
                "user": {"id": who, "name": f"user {who}", "username": f"user{who}"},
                "project": {"id": 15, "path_with_namespace": "acme/mallard",
                            "git_http_url": project["repo_url"]},
                "object_attributes": {"id": comment_id, "note": text, "action": "create",
                                      "noteable_type": "MergeRequest"},
                "merge_request": {"iid": 7, "state": "opened", "target_branch": "main",
                                  "last_commit": {"id": HEAD, "title": "free: faster"}}}
    body: dict[str, Any] = {
        "action": "created", "repository": repo, "sender": {"login": who},
        "issue": {"number": 7, "title": "faster free", "user": {"login": "ada"},
                  "pull_request": {"url": "https://forge.example/pulls/7"}},
        "comment": {"id": comment_id, "body": text, "user": {"login": who}}}
    if kind == "gitea":
        body["pull_request"] = {"number": 7, "head": {"sha": HEAD}, "base": {"sha": TIP},
                                "merge_base": MB}
        body["is_pull"] = True
    return body


def headers(kind: str, raw: bytes) -> dict[str, str]:
    delivery_id = str(uuid.uuid4())
    if kind == "github":
        sig = hmac.new(GITHUB_SECRET.encode(), raw, hashlib.sha256).hexdigest()
        return {"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery_id,
                "X-Hub-Signature-256": f"sha256={sig}"}
    if kind == "gitlab":
        return {"X-Gitlab-Event": "Note Hook", "X-Gitlab-Token": GITLAB_TOKEN,
                "X-Gitlab-Event-UUID": delivery_id}
    sig = hmac.new(GITEA_SECRET.encode(), raw, hashlib.sha256).hexdigest()
    return {"X-Gitea-Event": "issue_comment", "X-Gitea-Event-Type": "pull_request_comment",
            "X-Gitea-Delivery": delivery_id, "X-Gitea-Signature": sig}


def setup(kind: str, forge: Forge, client: TestClient, app: Any, settings: Settings,
          make_project: Any, admin_headers: dict[str, str], **conf: Any) -> dict[str, Any]:
    app.dependency_overrides[get_settings] = lambda: settings.model_copy(update={
        "forge_url_allow": forge.url, "peers": "", "comparison_max_follow_ups": 0, **conf})
    project: dict[str, Any] = make_project()
    forge.auth = AUTH[kind]
    writer, reader = USERS[kind]
    forge.members = ({str(writer): 30, str(reader): 20} if kind == "gitlab"
                     else {str(writer): "write", str(reader): "read"})
    forge.answers = {
        "/repos/acme/mallard/pulls/7": {"number": 7, "head": {"sha": HEAD},
                                        "base": {"sha": TIP}},
        f"/repos/acme/mallard/compare/{TIP}...{HEAD}?per_page=1": {
            "merge_base_commit": {"sha": MB}},
        "/api/v4/projects/acme%2Fmallard/merge_requests/7": {
            "iid": 7, "diff_refs": {"base_sha": MB, "head_sha": HEAD}}}
    client.put(f"/api/v1/projects/{project['name']}/forge", headers=admin_headers,
               json={"kind": kind, "base_url": forge.url, "repo": "acme/mallard",
                     "token": TOKEN}).raise_for_status()
    return project


def comparisons(db_session: Session, project: dict[str, Any]) -> int:
    db_session.expire_all()
    return db_session.query(Comparison).filter_by(project_id=project["id"]).count()


@pytest.mark.parametrize("kind", ["github", "gitlab", "gitea"])
def test_a_writers_command_queues_one_comparison_and_nobody_elses_does(
        kind: str, forge: Forge, client: TestClient, app: Any, settings: Settings,
        db_session: Session, make_project: Any, admin_headers: dict[str, str]) -> None:
    try:
        project = setup(kind, forge, client, app, settings, make_project, admin_headers)
        url = f"/api/v1/webhooks/{kind}/{project['name']}"
        writer, reader = USERS[kind]

        def post(body: dict[str, Any], replay: dict[str, str] | None = None
                 ) -> tuple[dict[str, Any], dict[str, str]]:
            raw = json.dumps(body).encode()
            h = replay or headers(kind, raw)
            r = client.post(url, content=raw, headers=h)
            assert r.status_code == 200, r.text
            return r.json(), h

        out, _ = post(note(kind, project, "looks faster?", writer, 500))
        assert out["ignored"] == "a comment without a /mallard command"
        out, _ = post(note(kind, project, "please\n/mallard bench\n", reader, 501))
        assert "may not ask for a benchmark" in out["ignored"] and not out["jobs"], out
        out, _ = post(note(kind, project, "/mallard bench no-such-suite", writer, 502))
        assert "unknown suite" in out["ignored"], out
        assert comparisons(db_session, project) == 0
        body = note(kind, project, "LGTM, but\n/mallard bench quick", writer, 503)
        out, sent = post(body)
        assert len(out["jobs"]) == 1 and f"{HEAD[:7]} compared with {MB[:7]}" in out["note"]
        assert comparisons(db_session, project) == 1
        again, _ = post(body, replay=sent)  # the same delivery
        assert again["ignored"] and not again["jobs"]
        again, _ = post(body)  # the same comment, delivered anew
        assert again["ignored"] == "comment 503 was answered before"
        assert comparisons(db_session, project) == 1
        with app.state.background_sessionmaker() as fresh:
            delivery.deliver_due(fresh)
    finally:
        app.dependency_overrides.pop(get_settings, None)
    who = f"user{writer}" if kind == "gitlab" else writer
    assert len(forge.bodies()) == 1  # the one comment: the unknown suite, then queued
    assert f"@{who} asked for {HEAD[:7]} vs {MB[:7]} (quick)" in forge.bodies()[0]
    asked = [c[1] for c in forge.calls if "/permission" in c[1] or "/members/" in c[1]]
    assert len(asked) == 3  # the reader, the unknown suite, the command
    header, value = AUTH[kind]
    assert all({k.lower(): v for k, v in c[2].items()}[header.lower()] == value
               for c in forge.calls)


def test_acknowledging_a_pull_requests_regression_turns_it_green(
        forge: Forge, client: TestClient, app: Any, settings: Settings, db_session: Session,
        make_project: Any, make_runner: Any, admin_headers: dict[str, str],
        user_headers: dict[str, str]) -> None:
    runner, rheaders = make_runner()
    conf = {"default_arch": runner["arch"]}
    try:
        project = setup("github", forge, client, app, settings, make_project, admin_headers,
                        **conf)
        raw = json.dumps(note("github", project, "/mallard bench", "ada", 900)).encode()
        r = client.post(f"/api/v1/webhooks/github/{project['name']}", content=raw,
                        headers=headers("github", raw))
        (job_id,) = r.json()["jobs"]
        job = client.post("/api/v1/jobs/claim", headers=rheaders, json={
            "runner_id": runner["id"], "lease_seconds": 600}).json()
        assert job["id"] == job_id
        trials = [trial(a["commit"], threads=1, label=a["label"], measures={
            "instructions": 100.0 if a["label"] == "base" else 150.0})
            for a in job["spec"]["allocators"] for _ in "12"]
        client.post("/api/v1/results", headers=rheaders, json=results(
            trials, job_id=job_id, runner_id=runner["id"],
            project=project["name"])).raise_for_status()
        run_analysis(app, app.dependency_overrides[get_settings]())
        with app.state.background_sessionmaker() as fresh:
            delivery.deliver_due(fresh)
        alerts = client.get(f"/api/v1/alerts?project={project['name']}",
                            headers=user_headers).json()
        (alert,) = [a for a in alerts if a["branch"] == "pull-request/7"]
        assert alert["first_bad_commit"] == HEAD and alert["state"] == "open"
        page = client.get(f"/ui/alerts/{alert['alert_id']}", headers=user_headers)
        assert page.status_code == 200 and "pull request #7" in page.text, page.text[:300]
        r = client.post(f"/api/v1/alerts/{alert['alert_id']}/acknowledge", headers=user_headers)
        assert r.status_code == 200 and r.json()["state"] == "acknowledged", r.text
        with app.state.background_sessionmaker() as fresh:
            delivery.deliver_due(fresh)
    finally:
        app.dependency_overrides.pop(get_settings, None)
    statuses = [(c[3]["state"], c[3]["description"]) for c in forge.calls
                if c[1] == STATUS_PATH["github"].format(sha=HEAD)]
    assert [s for s, _ in statuses] == ["failure", "success"]  # the pending superseded
    assert statuses[-1][1].startswith("acknowledged: ")
    (body,) = forge.bodies()
    assert "regression acknowledged by user #" in body and "1 regressed" in body
    left = db_session.query(OutboxMessage).filter_by(project_id=project["id"]).all()
    assert {m.state for m in left} == {"delivered"}


def _row(summary: str | None, asked: bool = False) -> ForgeComment:
    return ForgeComment(project_id=1, number=7, head_sha=HEAD, summary=summary,
                        asked_head=HEAD if asked else None)


def test_comment_modes() -> None:
    moved = cast(list[CellRow], [SimpleNamespace(verdict="regressed")])
    still = cast(list[CellRow], [SimpleNamespace(verdict="same")])
    assert comment_due("always", _row(None), still, "no regression")
    assert not comment_due("never", _row(None), moved, "1 regressed")
    assert comment_due("never", _row(None, asked=True), still, "no regression")
    assert comment_due("on-change", _row(None), moved, "1 regressed")
    assert not comment_due("on-change", _row(None), still, "no regression")
    assert not comment_due("on-change", _row("no regression"), still, "no regression")
    assert comment_due("on-change", _row("1 regressed"), still, "no regression")
