"""Projects, branches and commits."""

from __future__ import annotations


def test_put_project_is_idempotent_and_hides_the_secret(client, user_headers, admin_headers,
                                                        unique):
    name = "p-" + unique
    body = {"repo_url": "/srv/git/x.git", "default_branch": "trunk",
            "tracked_branches": ["release"], "webhook_secret": "s3cret-value-of-16+"}
    a = client.put(f"/api/v1/projects/{name}", headers=user_headers, json=body).json()
    again = client.put(f"/api/v1/projects/{name}", headers=user_headers, json=body)
    assert again.status_code == 200 and again.json()["id"] == a["id"]
    b = client.put(f"/api/v1/projects/{name}", headers=admin_headers,
                   json={**body, "allocator_dir": "src/alloc"}).json()
    assert a["id"] == b["id"] and b["allocator_dir"] == "src/alloc"
    assert b["has_webhook_secret"] is True and "webhook_secret" not in b
    got = client.get(f"/api/v1/projects/{name}", headers=user_headers).json()
    assert got["tracked_branches"] == ["release"] and got["default_branch"] == "trunk"
    assert name in [p["name"] for p in client.get("/api/v1/projects", headers=user_headers)
                    .json()]


def test_tracked_branch_push_queues(client, user_headers, make_project, unique):
    project = make_project(tracked_branches=["release"])
    r = client.post("/api/v1/webhooks/push", headers=user_headers, json={
        "project": project["name"], "ref": "refs/heads/release",
        "after": unique.ljust(40, "d"), "commits": []})
    assert r.json()["jobs"]
    branches = client.get(f"/api/v1/projects/{project['name']}/branches",
                          headers=user_headers).json()
    assert [(b["name"], b["head_sha"]) for b in branches] == [("release", unique.ljust(40, "d"))]


def test_project_errors_name_the_field(client, user_headers):
    r = client.put("/api/v1/projects/x", headers=user_headers, json={"repo_url": ""})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "repo_url"]
    r = client.get("/api/v1/projects/does-not-exist", headers=user_headers)
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["path", "name"]
    r = client.put("/api/v1/projects/x", headers=user_headers,
                   json={"repo_url": "/x", "tracked_branches": "main"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "tracked_branches"]
