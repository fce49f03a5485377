"""Forge commit statuses and pull-request comments through the outbox, against a local
HTTP receiver that checks each forge's documented path, payload shape and auth header;
the token is never returned by the API nor stored in the outbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fake_forge import AUTH, COMMENT_PATHS, STATUS_PATH, TOKEN, Forge
from fastapi.testclient import TestClient
from mallard_api import delivery, forges
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from mallard_api.models.forges import ProjectForge
from mallard_api.models.outbox import OutboxMessage
from sqlalchemy.orm import Session


@pytest.fixture
def forge() -> Iterator[Forge]:
    f = Forge()
    yield f
    f.server.shutdown()


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


def _gitlab_project(db_session: Session, make_project: Any, forge: Forge) -> dict[str, Any]:
    project: dict[str, Any] = make_project()
    db_session.add(ProjectForge(project_id=project["id"], kind="gitlab", base_url=forge.url,
                                repo="acme/mallard", token=TOKEN))
    db_session.commit()
    forge.auth = AUTH["gitlab"]
    return project


def test_the_fake_gitlab_refuses_a_second_pending_as_gitlab_does(forge: Forge) -> None:
    url = f"{forge.url}{STATUS_PATH['gitlab'].format(sha='e' * 40)}"
    forge.auth = AUTH["gitlab"]
    post = lambda state: httpx.post(url, json={"state": state, "name": "mallard/x/verdict"},  # noqa: E731
                                    headers=dict([AUTH["gitlab"]]))
    assert post("pending").status_code == 201
    again = post("pending")
    assert again.status_code == 400
    assert again.json() == {"message": "Cannot transition status via :enqueue from :pending"}
    assert post("running").status_code == 201
    assert post("running").json()["message"] == "Cannot transition status via :run from :running"
    assert post("success").status_code == 201 and post("pending").status_code == 201
    forge.deleted = True
    gone = post("failed")
    assert gone.status_code == 404 and gone.json() == {"message": "404 Project Not Found"}


def test_gitlab_gets_running_for_the_second_pending(
        forge: Forge, settings: Settings, db_session: Session, make_project: Any) -> None:
    """`measuring against ...` then `running against ...`: the second is sent as
    `running` (GitLab refuses pending -> pending), a third as `running` too, whose 400
    (`from :running`) means the status already says so; then the verdict."""
    project = _gitlab_project(db_session, make_project, forge)
    sha = "d" * 40
    for state, text in [("pending", "measuring against aaaaaaa"),
                        ("pending", "running against aaaaaaa"),
                        ("pending", "running against aaaaaaa again"),
                        ("failure", "1 regressed vs aaaaaaa")]:
        forges.enqueue_status(db_session, settings, project["id"], sha, "x86_64", state,
                              text, 3)
        db_session.commit()
        assert delivery.deliver_due(db_session).delivered == 1
    sent = [c[3]["state"] for c in forge.calls if "/statuses/" in c[1]]
    assert sent == ["pending", "running", "running", "failed"]
    left = db_session.query(OutboxMessage).filter_by(project_id=project["id"]).all()
    assert [m.state for m in left] == ["delivered"] * 4 and not any(m.last_error for m in left)
    assert forge.gitlab_states == {}  # finished


@pytest.mark.parametrize(("why", "code", "said"), [
    ("deleted", 404, "404 Project Not Found"), ("token", 401, "401 Unauthorized")])
def test_a_permanent_refusal_ends_the_delivery_with_the_forges_words(
        why: str, code: int, said: str, forge: Forge, client: TestClient, settings: Settings,
        db_session: Session, make_project: Any, user_headers: dict[str, str]) -> None:
    """A deleted repository (404) or a revoked token (401) is not retried 25 times: one
    attempt, `failed`, the forge's message kept and shown on the project page; a 500
    (transient) is retried with backoff."""
    project = _gitlab_project(db_session, make_project, forge)
    if why == "deleted":
        forge.deleted = True
    else:
        forge.auth = ("Private-Token", "another-token")
    forges.enqueue_status(db_session, settings, project["id"], "b" * 40, "x86_64",
                          "pending", "measuring against aaaaaaa", 3)
    forges.enqueue_comment(db_session, project["id"], 7, "the verdict")
    db_session.commit()
    result = delivery.deliver_due(db_session)
    assert (result.failed, result.retried, result.delivered) == (2, 0, 0)
    rows = db_session.query(OutboxMessage).filter_by(project_id=project["id"]).all()
    assert {(m.state, m.attempts) for m in rows} == {("failed", 1)}
    assert all(f"HTTP {code}: {said}" in (m.last_error or "") for m in rows), rows
    page = client.get(f"/ui/projects/{project['name']}", headers=user_headers)
    assert page.status_code == 200 and 'id="forge-failures"' in page.text
    assert page.text.count(f"HTTP {code}: {said}") == 2
    forge.deleted, forge.auth, forge.fail_first = False, AUTH["gitlab"], 1
    forges.enqueue_status(db_session, settings, project["id"], "c" * 40, "x86_64",
                          "pending", "measuring against aaaaaaa", 3)
    db_session.commit()
    assert delivery.deliver_due(db_session).retried == 1  # a 500: tried again later
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert delivery.deliver_due(db_session, now=later).delivered == 1
