"""Push webhooks: signatures checked; a push records commits and queues commit jobs."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from conftest import GITEA_SECRET, GITHUB_SECRET, GITLAB_TOKEN
from mallard_api.pushes import ZERO


def shas(n: int, seed: str) -> list[str]:
    return [hashlib.sha1(f"{seed}{i}".encode()).hexdigest() for i in range(n)]


def github_payload(project: dict, commits: list[str], ref: str = "refs/heads/main") -> bytes:
    return json.dumps({
        "ref": ref, "before": ZERO, "after": commits[-1],
        "repository": {"name": project["name"], "full_name": f"org/{project['name']}",
                       "clone_url": project["repo_url"]},
        "commits": [{"id": c, "message": f"commit {i}", "timestamp": "2026-11-21T12:00:00Z",
                     "author": {"name": "Ada"}} for i, c in enumerate(commits)],
    }).encode()


def sign(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_github_push_with_valid_signature_records_and_queues(
        client, make_project, user_headers, unique):
    project = make_project()
    commits = shas(3, unique)
    body = github_payload(project, commits)
    r = client.post("/api/v1/webhooks/github", content=body, headers={
        "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body),
        "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["branch"] == "main" and out["commits"] == 3 and out["queued"] == 3
    jobs = [client.get(f"/api/v1/jobs/{j}", headers=user_headers).json() for j in out["jobs"]]
    # every new commit gets its jobs, the oldest first
    assert [j["spec"]["commit"] for j in jobs] == sorted(
        [j["spec"]["commit"] for j in jobs], key=commits.index)
    assert {j["spec"]["commit"] for j in jobs} == set(commits)
    job = jobs[-1]
    spec = job["spec"]
    assert job["kind"] == "commit" and job["state"] == "queued"
    assert spec["project"] == project["name"] and spec["repo_url"] == project["repo_url"]
    assert spec["allocator_dir"] == "allocator" and spec["suite"] == "quick"
    assert spec["branch"] == "main"
    # a commit verdict: the newest commit against the one measured before it
    assert spec["allocators"][:2] == [
        {"label": "base", "name": "mallard", "commit": commits[-2], "variant": None},
        {"label": "head", "name": "mallard", "commit": commits[-1], "variant": None}]
    assert jobs[0]["spec"]["allocators"][0]["label"] == "head"  # nothing measured before it
    listed = client.get(f"/api/v1/projects/{project['name']}/branches/main/commits",
                        headers=user_headers).json()
    assert [c["sha"] for c in listed] == commits[::-1]
    assert [c["branches"][0]["position"] for c in listed] == [3, 2, 1]
    one = client.get(f"/api/v1/projects/{project['name']}/commits/{commits[1]}",
                     headers=user_headers).json()
    assert one["parent_sha"] == commits[0] and one["author"] == "Ada"
    # a re-delivery records nothing new and queues no second job
    again = client.post("/api/v1/webhooks/github", content=body, headers={
        "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body),
        "Content-Type": "application/json"}).json()
    assert again["commits"] == 0 and again["jobs"] == []


def test_push_queues_one_job_per_runner_arch(client, make_project, make_runner, unique,
                                             user_headers):
    make_runner(arch="aarch64")
    make_runner(arch="x86_64")
    make_runner(arch="x86_64")
    in_service = {r["arch"] for r in client.get("/api/v1/runners", headers=user_headers).json()
                  if r["retired_at"] is None}  # retired runners get no push jobs
    project = make_project()
    body = github_payload(project, shas(1, unique))
    out = client.post("/api/v1/webhooks/github", content=body, headers={
        "X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body)}).json()
    arches = [client.get(f"/api/v1/jobs/{j}", headers=user_headers).json()["arch"]
              for j in out["jobs"]]
    # one job per arch with a live runner (seen within MALLARD_RUNNER_LIVE_SECONDS): the
    # two just registered at least, never a retired one's, no duplicates
    assert len(arches) == len(set(arches))
    assert {"aarch64", "x86_64"} <= set(arches) <= in_service


def test_github_bad_signature_is_rejected(client, make_project, unique, engine):
    project = make_project()
    body = github_payload(project, shas(1, unique))
    r = client.post("/api/v1/webhooks/github", content=body, headers={
        "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign("wrong", body)})
    assert r.status_code == 401
    assert r.json()["detail"][0]["loc"] == ["header", "x-hub-signature-256"]
    r = client.post("/api/v1/webhooks/github", content=body, headers={"X-GitHub-Event": "push"})
    assert r.status_code == 401


def test_project_secret_takes_precedence(client, make_project, unique):
    project = make_project(webhook_secret="project-own-secret")
    body = github_payload(project, shas(1, unique))
    own = f"/api/v1/webhooks/github/{project['name']}"
    bad = client.post(own, content=body, headers={
        "X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body)})
    assert bad.status_code == 401
    # the old address takes the deployment's secret only, and not for this project
    old = client.post("/api/v1/webhooks/github", content=body, headers={
        "X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body)})
    assert old.status_code == 401 and own in old.json()["detail"][0]["msg"]
    for url in ("/api/v1/webhooks/github", own):
        r = client.post(url, content=body, headers={
            "X-Hub-Signature-256": "sha256=" + sign("project-own-secret", body)})
        assert (url, r.status_code) == (url, 200 if url == own else 401)
    assert r.json()["jobs"]


def test_gitlab_push_queues_jobs(client, make_project, unique):
    project = make_project()
    commits = shas(2, unique)
    body = json.dumps({
        "object_kind": "push", "ref": "refs/heads/main", "before": ZERO, "after": commits[-1],
        "project": {"name": project["name"], "git_http_url": project["repo_url"]},
        "commits": [{"id": c, "message": "m", "author": {"name": "Bo"}} for c in commits],
    }).encode()
    bad = client.post("/api/v1/webhooks/gitlab", content=body,
                      headers={"X-Gitlab-Token": "nope", "X-Gitlab-Event": "Push Hook"})
    assert bad.status_code == 401
    r = client.post("/api/v1/webhooks/gitlab", content=body,
                    headers={"X-Gitlab-Token": GITLAB_TOKEN, "X-Gitlab-Event": "Push Hook"})
    assert r.status_code == 200, r.text
    assert r.json()["commits"] == 2 and r.json()["jobs"]


def test_gitea_push_queues_jobs(client, make_project, unique):
    project = make_project()
    body = github_payload(project, shas(2, unique))
    bad = client.post("/api/v1/webhooks/gitea", content=body,
                      headers={"X-Gitea-Signature": sign("wrong", body)})
    assert bad.status_code == 401
    r = client.post("/api/v1/webhooks/gitea", content=body, headers={
        "X-Gitea-Signature": sign(GITEA_SECRET, body), "X-Gitea-Event": "push"})
    assert r.status_code == 200, r.text
    assert r.json()["commits"] == 2 and r.json()["jobs"]


def test_plain_push_from_the_hook_script_queues_jobs(client, make_project, user_headers,
                                                     make_token, unique):
    project = make_project()
    commits = shas(2, unique)
    body = {"project": project["name"], "ref": "refs/heads/main", "before": ZERO,
            "after": commits[-1],
            "commits": [{"sha": c, "message": "m", "author": "Cy"} for c in commits]}
    assert client.post("/api/v1/webhooks/push", json=body).status_code == 401
    runner_headers = {"Authorization": f"Bearer {make_token('runner', 'r-' + unique)}"}
    assert client.post("/api/v1/webhooks/push", json=body,
                       headers=runner_headers).status_code == 403
    r = client.post("/api/v1/webhooks/push", json=body, headers=user_headers)
    assert r.status_code == 200, r.text
    assert r.json()["commits"] == 2 and r.json()["jobs"]


def test_untracked_branches_and_tags_queue_nothing(client, make_project, user_headers, unique):
    project = make_project()
    c = shas(1, unique)[0]
    for ref in ("refs/heads/feature", "refs/tags/v1"):
        r = client.post("/api/v1/webhooks/push", headers=user_headers, json={
            "project": project["name"], "ref": ref, "after": c, "commits": []})
        assert r.status_code == 200 and r.json()["jobs"] == [] and r.json()["ignored"]


def test_bad_push_body_names_the_field(client, user_headers, make_project):
    project = make_project()
    r = client.post("/api/v1/webhooks/push", headers=user_headers, json={
        "project": project["name"], "ref": "refs/heads/main", "after": "not-a-sha"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "after"]
    body = b'{"ref": "refs/heads/main", "after": 5}'
    r = client.post("/api/v1/webhooks/github", content=body)  # unsigned: never parsed
    assert r.status_code == 401
    r = client.post("/api/v1/webhooks/github", content=body,
                    headers={"X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body)})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "after"]


# -- attacks (issue 15) -------------------------------------------------------------------
def github_post(client, url: str, body: bytes, secret: str | None, **headers: str):
    if secret is not None:
        headers["X-Hub-Signature-256"] = "sha256=" + sign(secret, body)
    return client.post(url, content=body, headers={"X-GitHub-Event": "push", **headers})


def branch_state(client, headers, project: str) -> tuple[list, list]:
    branches = client.get(f"/api/v1/projects/{project}/branches", headers=headers).json()
    listed = client.get(f"/api/v1/projects/{project}/branches/main/commits",
                        headers=headers)
    return branches, listed.json() if listed.status_code == 200 else []


def test_unknown_project_and_bad_signature_answer_alike(client, make_project, unique):
    """The per-project address never tells whether a project exists."""
    real = make_project(webhook_secret="project-own-secret")
    nosecret = make_project()
    body = github_payload(real, shas(1, unique))
    answers = []
    for name, secret in ((real["name"], "wrong-secret-0123456789"),
                         (f"ghost-{unique}", "project-own-secret"),
                         (f"ghost-{unique}", GITHUB_SECRET),
                         (nosecret["name"], "wrong-secret-0123456789")):
        r = github_post(client, f"/api/v1/webhooks/github/{name}", body, secret)
        answers.append((r.status_code, r.json(), r.headers.get("www-authenticate")))
    assert answers[0][0] == 401 and all(a == answers[0] for a in answers), answers
    for forge, header in (("gitea", "X-Gitea-Signature"), ("gitlab", "X-Gitlab-Token")):
        a = client.post(f"/api/v1/webhooks/{forge}/{real['name']}", content=body,
                        headers={header: "nope-nope-nope-nope"})
        b = client.post(f"/api/v1/webhooks/{forge}/ghost-{unique}", content=body,
                        headers={header: "nope-nope-nope-nope"})
        assert a.status_code == b.status_code == 401 and a.json() == b.json()


def test_signature_is_checked_before_the_body_is_parsed(client, make_project, engine):
    """An unsigned body nested 100,000 levels is refused without parsing (401); a signed
    one is a 422, never a RecursionError."""
    deep = b'{"ref": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for url in ("/api/v1/webhooks/github", "/api/v1/webhooks/gitea",
                "/api/v1/webhooks/gitlab", "/api/v1/webhooks/github/whatever"):
        r = client.post(url, content=deep)
        assert r.status_code == 401, (url, r.text)
    r = github_post(client, "/api/v1/webhooks/github", deep, GITHUB_SECRET)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"]
    assert "deep" in r.json()["detail"][0]["msg"]
    for nonjson in (b"\xff\xfe", b'{"ref": NaN}', b"[1, 2]"):
        r = github_post(client, "/api/v1/webhooks/github", nonjson, GITHUB_SECRET)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"], r.text


@pytest.mark.parametrize("field,value", [
    ("after", "--upload-pack=touch${IFS}marker;git-upload-pack"),
    ("after", "main"),
    ("before", "-oProxyCommand=touch marker"),
    ("ref", "refs/heads/--upload-pack=x"),
    ("ref", "-refs/heads/main"),
])
def test_a_push_ref_that_is_not_a_sha_or_ref_is_refused(client, make_project, user_headers,
                                                         unique, field, value):
    project = make_project()
    data = json.loads(github_payload(project, shas(1, unique)))
    data[field] = value
    body = json.dumps(data).encode()
    r = github_post(client, f"/api/v1/webhooks/github/{project['name']}", body, GITHUB_SECRET)
    assert r.status_code == 422, r.text
    loc = r.json()["detail"][0]["loc"]
    assert loc[:2] == ["body", field]
    assert branch_state(client, user_headers, project["name"]) == ([], [])  # nothing stored


def test_a_replayed_delivery_does_nothing(client, make_project, user_headers, unique):
    project = make_project()
    old, new = shas(2, unique)
    url = f"/api/v1/webhooks/github/{project['name']}"
    first = github_payload(project, [old])
    r = github_post(client, url, first, GITHUB_SECRET, **{"X-GitHub-Delivery": f"d1-{unique}"})
    assert r.status_code == 200 and r.json()["jobs"]
    second = json.loads(github_payload(project, [new]))
    second["before"] = old
    second = json.dumps(second).encode()
    r = github_post(client, url, second, GITHUB_SECRET, **{"X-GitHub-Delivery": f"d2-{unique}"})
    assert r.status_code == 200 and r.json()["commits"] == 1
    jobs_before = client.get("/api/v1/jobs", headers=user_headers,
                             params={"limit": 1000}).json()
    # the same delivery id again: ignored
    r = github_post(client, url, first, GITHUB_SECRET, **{"X-GitHub-Delivery": f"d1-{unique}"})
    assert r.status_code == 200 and "received before" in r.json()["ignored"]
    # the captured first delivery under a new id: the head does not move back
    r = github_post(client, url, first, GITHUB_SECRET, **{"X-GitHub-Delivery": f"d3-{unique}"})
    assert r.status_code == 200 and "never moves back" in r.json()["ignored"]
    assert r.json()["jobs"] == []
    branches, listed = branch_state(client, user_headers, project["name"])
    assert [b["head_sha"] for b in branches] == [new]
    assert [c["sha"] for c in listed] == [new, old]
    jobs_after = client.get("/api/v1/jobs", headers=user_headers, params={"limit": 1000}).json()
    assert [j["id"] for j in jobs_after] == [j["id"] for j in jobs_before]


@pytest.fixture
def queue_at_most_3(app):
    saved = app.state.settings
    app.state.settings = saved.model_copy(update={"push_max_queued": 3})
    yield
    app.state.settings = saved


def test_a_big_push_is_recorded_whole_and_queues_a_bounded_number(
        client, make_project, user_headers, unique, queue_at_most_3):
    project = make_project()
    commits = shas(2000, unique)
    body = github_payload(project, commits)
    r = github_post(client, f"/api/v1/webhooks/github/{project['name']}", body, GITHUB_SECRET)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["commits"] == 2000 and out["queued"] == 3
    specs = [client.get(f"/api/v1/jobs/{j}", headers=user_headers).json()["spec"]["commit"]
             for j in out["jobs"]]
    assert set(specs) == set(commits[-3:])
    listed = client.get(f"/api/v1/projects/{project['name']}/branches/main/commits",
                        headers=user_headers, params={"limit": 1000}).json()
    assert [c["branches"][0]["position"] for c in listed] == list(range(2000, 1000, -1))
    assert [c["sha"] for c in listed] == commits[:999:-1]
    one = client.get(f"/api/v1/projects/{project['name']}/commits/{commits[1500]}",
                     headers=user_headers).json()
    assert one["parent_sha"] == commits[1499] and one["message"] == "commit 1500"
