"""Pull/merge request events of GitHub, GitLab and Gitea/Forgejo, delivered as each forge
delivers them (its headers, its signature or token, its documented payload shape), on the
deployment's address and on the project's own: authenticated before parsing, the head
compared with the merge base (read from the forge's REST API where the event lacks it,
from a real local receiver that checks the auth header), a pending then failure status per
head, and one comment created then updated, never duplicated; replays, label changes and
a reopen queue nothing new."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import GITEA_SECRET, GITHUB_SECRET, GITLAB_TOKEN
from fake_forge import AUTH, COMMENT_PATHS, STATUS_PATH, TOKEN, Forge
from fastapi.testclient import TestClient
from helpers import results, run_analysis, trial
from mallard_api import delivery
from mallard_api.config import Settings
from mallard_api.deps import get_settings


@pytest.fixture
def receiver() -> Iterator[Forge]:
    f = Forge()
    yield f
    f.server.shutdown()


MB, TIP = "a1" * 20, "b2" * 20  # the merge base, and the base branch's tip (moved on)
HEADS = ["c3" * 20, "d4" * 20]


def event(kind: str, project: dict[str, Any], action: str, head: str,
          before: str | None = None) -> dict[str, Any]:
    """A pull/merge request event as the forge's documentation shows it (trimmed)."""
    repo = {"id": 1, "name": "mallard", "full_name": "acme/mallard", "owner": {"login": "acme"},
            "clone_url": project["repo_url"], "html_url": "https://forge.example/acme/mallard"}
    if kind == "gitlab":
        attrs: dict[str, Any] = {
            "id": 99, "iid": 7, "target_branch": "main", "source_branch": "feature",
            "state": "opened", "action": action, "title": "faster free",
            "last_commit": {"id": head, "message": "free: faster", "title": "free: faster",
                            "timestamp": "2026-11-24T01:00:00+00:00",
                            "author": {"name": "Ada", "email": "ada@example.invalid"}},
            "url": "https://gitlab.example/acme/mallard/-/merge_requests/7"}
        if before:
            attrs["oldrev"] = before
        return {"object_kind": "merge_request", "event_type": "merge_request",
                "user": {"id": 1, "name": "Ada", "username": "ada"},
                "project": {"id": 15, "name": "Mallard", "path_with_namespace": "acme/mallard",
                            "web_url": "https://gitlab.example/acme/mallard",
                            "git_http_url": project["repo_url"], "default_branch": "main"},
                "repository": {"name": "Mallard", "homepage": "https://gitlab.example/acme"},
                "object_attributes": attrs, "labels": [], "changes": {}}
    pr: dict[str, Any] = {
        "id": 1001, "number": 7, "state": "open", "title": "faster free",
        "user": {"login": "ada"},
        "head": {"label": "acme:feature", "ref": "feature", "sha": head, "repo": repo},
        "base": {"label": "acme:main", "ref": "main", "sha": TIP, "repo": repo},
        "merged": False}
    if kind == "gitea":
        pr["merge_base"] = MB  # Gitea/Forgejo send it; GitHub does not
    body = {"action": action, "number": 7, "pull_request": pr, "repository": repo,
            "sender": {"login": "ada"}}
    if before:
        body.update(before=before, after=head)
    return body


def headers(kind: str, body: bytes, event_type: str | None = None) -> dict[str, str]:
    """The headers the forge sends with a pull/merge request event."""
    delivery_id = str(uuid.uuid4())
    if kind == "github":
        sig = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
        return {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery_id,
                "X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"}
    if kind == "gitlab":
        return {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": GITLAB_TOKEN,
                "X-Gitlab-Event-UUID": delivery_id, "Content-Type": "application/json"}
    sig = hmac.new(GITEA_SECRET.encode(), body, hashlib.sha256).hexdigest()
    kind_of = event_type or "pull_request"
    return {"X-Gitea-Event": "pull_request", "X-Gitea-Event-Type": kind_of,
            "X-Gitea-Delivery": delivery_id, "X-Gitea-Signature": sig,
            "X-Forgejo-Event": "pull_request", "X-Forgejo-Event-Type": kind_of,
            "X-Forgejo-Signature": sig, "Content-Type": "application/json"}


ACTIONS = {"github": ("opened", "synchronize", "labeled", "reopened"),
           "gitlab": ("open", "update", "update", "reopen"),
           "gitea": ("opened", "synchronized", "label_updated", "reopened")}


@pytest.mark.parametrize("kind", ["github", "gitlab", "gitea"])
def test_pull_request_events_of_each_forge(
        kind: str, receiver: Forge, client: TestClient, app: Any, settings: Settings,
        make_project: Any, make_runner: Any, admin_headers: dict[str, str],
        user_headers: dict[str, str]) -> None:
    runner, rheaders = make_runner()
    conf = settings.model_copy(update={"forge_url_allow": receiver.url, "peers": "",
                                       "profile_max_cases": 0,  # each claim below takes a PR job
                                       "default_arch": runner["arch"],
                                       "comparison_max_follow_ups": 0})
    app.dependency_overrides[get_settings] = lambda: conf
    project = make_project()
    receiver.auth = AUTH[kind]
    receiver.answers = {  # what the forge's REST API says the merge base is
        f"/repos/acme/mallard/compare/{TIP}...{h}?per_page=1": {
            "status": "diverged", "merge_base_commit": {"sha": MB}} for h in HEADS}
    receiver.answers["/api/v4/projects/acme%2Fmallard/merge_requests/7"] = {
        "iid": 7, "diff_refs": {"base_sha": MB, "head_sha": HEADS[0], "start_sha": TIP}}
    opened, sync, label, reopened = ACTIONS[kind]
    deployment, own = f"/api/v1/webhooks/{kind}", f"/api/v1/webhooks/{kind}/{project['name']}"

    def post(url: str, body: dict[str, Any], event_type: str | None = None,
             replay: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
        raw = json.dumps(body).encode()
        h = replay or headers(kind, raw, event_type)
        return client.post(url, content=raw, headers=h), h

    try:
        # authenticated before parsing: a wrong signature on a body that is not JSON
        bad = dict(headers(kind, b"{not json"))
        bad[AUTH_HEADER[kind]] = "sha256=00" if kind == "github" else "00"
        r = client.post(deployment, content=b"{not json", headers=bad)
        assert r.status_code == 401, r.text
        client.put(f"/api/v1/projects/{project['name']}/forge", headers=admin_headers,
                   json={"kind": kind, "base_url": receiver.url, "repo": "acme/mallard",
                         "token": TOKEN}).raise_for_status()
        jobs = []
        for i, head in enumerate(HEADS):
            body = event(kind, project, opened if i == 0 else sync, head,
                         None if i == 0 else HEADS[0])
            # the first on the deployment's address (project found from the repository),
            # the new push on the project's own address
            r, sent = post(deployment if i == 0 else own, body,
                           None if i == 0 else "pull_request_sync")
            assert r.status_code == 200, r.text
            assert r.json()["note"].startswith(
                f"pull request #7: {head[:7]} compared with {MB[:7]}"), r.json()
            (job_id,) = r.json()["jobs"]
            jobs.append(job_id)
            again, _ = post(own, body, replay=sent)  # the same delivery again
            assert again.json()["ignored"] and not again.json()["jobs"], again.text
            with app.state.background_sessionmaker() as fresh:  # the pending status
                delivery.deliver_due(fresh)
            job = client.post("/api/v1/jobs/claim", headers=rheaders, json={
                "runner_id": runner["id"], "lease_seconds": 600}).json()
            assert job["id"] == job_id
            assert [a["commit"] for a in job["spec"]["allocators"]] == [MB, head]
            trials = [trial(a["commit"], threads=1, label=a["label"],
                            measures={"instructions": 100.0 if a["label"] == "base"
                                      else 150.0})
                      for a in job["spec"]["allocators"] for _ in "12"]  # two cachegrind runs
            client.post("/api/v1/results", headers=rheaders, json=results(
                trials, job_id=job["id"], runner_id=runner["id"],
                project=project["name"])).raise_for_status()
            run_analysis(app, conf)
            with app.state.background_sessionmaker() as fresh:
                delivery.deliver_due(fresh)
        # a label change (GitLab: an update without oldrev) changes no code
        r, _ = post(own, event(kind, project, label, HEADS[1]))
        assert r.status_code == 200 and r.json()["ignored"], r.text
        # a reopen of the same head: nothing queued, the comment updated (not duplicated)
        r, _ = post(own, event(kind, project, reopened, HEADS[1]))
        assert r.status_code == 200 and r.json()["jobs"] == [], r.text
        assert "queued before" in r.json()["note"]
        with app.state.background_sessionmaker() as fresh:
            delivery.deliver_due(fresh)
        # a bad head sha names its field
        broken = event(kind, project, opened, HEADS[0])
        if kind == "gitlab":
            broken["object_attributes"]["last_commit"]["id"] = "nope"
            where = ["body", "object_attributes", "last_commit", "id"]
        else:
            broken["pull_request"]["head"]["sha"] = "nope"
            where = ["body", "pull_request", "head", "sha"]
        r, _ = post(own, broken)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == where, r.text
    finally:
        app.dependency_overrides.pop(get_settings, None)
    header, value = AUTH[kind]
    statuses = [(c[1], c[3]["state"]) for c in receiver.calls if "/statuses/" in c[1]]
    failed = "failed" if kind == "gitlab" else "failure"
    path = STATUS_PATH[kind]
    assert statuses == [(path.format(sha=HEADS[0]), "pending"),
                        (path.format(sha=HEADS[0]), failed),
                        (path.format(sha=HEADS[1]), "pending"),
                        (path.format(sha=HEADS[1]), failed),
                        (path.format(sha=HEADS[1]), failed)]  # the reopen, told again
    create, update, verb = COMMENT_PATHS[kind]
    comments = [(c[0], c[1]) for c in receiver.calls
                if c[0] != "GET" and "/statuses/" not in c[1]]
    assert comments == [("POST", create), (verb, update), (verb, update)]
    assert all({k.lower(): v for k, v in c[2].items()}[header.lower()] == value
               for c in receiver.calls)
    lists = [c[1] for c in receiver.calls if c[0] == "GET" and c[1].startswith(f"{create}?")]
    assert len(lists) == 1  # once, before the comment was created (none of ours yet)
    reads = [c[1] for c in receiver.calls if c[0] == "GET" and c[1] not in lists]
    assert len(reads) == {"github": 3, "gitlab": 3, "gitea": 0}[kind]  # Gitea sends it
    assert len(receiver.bodies()) == 1


AUTH_HEADER = {"github": "X-Hub-Signature-256", "gitlab": "X-Gitlab-Token",
               "gitea": "X-Gitea-Signature"}


def test_a_gitlab_merge_request_without_a_forge_names_what_is_missing(
        client: TestClient, make_project: Any) -> None:
    project = make_project()
    raw = json.dumps(event("gitlab", project, "open", HEADS[0])).encode()
    r = client.post("/api/v1/webhooks/gitlab", content=raw, headers=headers("gitlab", raw))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "object_attributes", "diff_refs"]
    assert "forge" in r.json()["detail"][0]["msg"]
