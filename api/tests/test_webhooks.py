"""Push webhooks: signatures checked; a push records commits and queues commit jobs."""

from __future__ import annotations

import json

from conftest import GITEA_SECRET, GITHUB_SECRET, GITLAB_TOKEN
from helpers import github_payload, shas, sign
from mallard_api.pushes import ZERO


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
    assert "allocator_dir" not in spec and spec["suite"] == "quick"
    assert spec["branch"] == "main"
    # a commit verdict: the newest commit against the one measured before it, each side
    # the project's own allocator (named after it) built by its recipe
    build = {"repo_url": project["repo_url"], "recipe": project["recipe"]}
    assert spec["allocators"][:2] == [
        {"label": "base", "name": project["name"], "commit": commits[-2], "variant": None,
         "build": build},
        {"label": "head", "name": project["name"], "commit": commits[-1], "variant": None,
         "build": build}]
    assert spec["allocators"][2] == {"label": "peer", "name": "glibc", "commit": None,
                                     "variant": None, "build": None}
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
