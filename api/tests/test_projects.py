"""Projects, branches and commits."""

from __future__ import annotations

import pytest
from helpers import MALLARD_RECIPE
from mallard_wire.recipes import Recipe


def test_put_project_is_idempotent_and_hides_the_secret(client, user_headers, admin_headers,
                                                        unique):
    name = "p-" + unique
    body = {"repo_url": "/srv/git/x.git", "default_branch": "trunk",
            "tracked_branches": ["release"], "webhook_secret": "s3cret-value-of-16+"}
    a = client.put(f"/api/v1/projects/{name}", headers=user_headers, json=body).json()
    again = client.put(f"/api/v1/projects/{name}", headers=user_headers, json=body)
    assert again.status_code == 200 and again.json()["id"] == a["id"]
    b = client.put(f"/api/v1/projects/{name}", headers=admin_headers,
                   json={**body, "recipe": {**MALLARD_RECIPE, "source": "src/alloc"}}).json()
    assert a["id"] == b["id"] and b["recipe"]["source"] == "src/alloc"
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


# -- attacks (issue 15) -------------------------------------------------------------------
def test_a_user_cannot_change_an_existing_projects_source(client, user_headers, admin_headers,
                                                          make_token, unique):
    name = "own-" + unique
    body = {"repo_url": "/srv/git/x.git", "recipe": MALLARD_RECIPE,
            "webhook_secret": "the-owners-secret-1234"}
    assert client.put(f"/api/v1/projects/{name}", headers=admin_headers,
                      json=body).status_code == 200
    other_user = {"Authorization": f"Bearer {make_token('user')}"}
    for field, value in (("repo_url", "/srv/git/evil.git"),
                         ("recipe", {**MALLARD_RECIPE, "source": "evil"}),
                         ("webhook_secret", "an-attackers-secret-99")):
        r = client.put(f"/api/v1/projects/{name}", headers=other_user,
                       json={**body, field: value})
        assert r.status_code == 403, r.text
        assert r.json()["detail"][0]["loc"] == ["body", field]
    got = client.get(f"/api/v1/projects/{name}", headers=user_headers).json()
    assert got["repo_url"] == "/srv/git/x.git"
    assert Recipe.model_validate(got["recipe"]) == Recipe.model_validate(MALLARD_RECIPE)
    assert client.put(f"/api/v1/projects/{name}", headers=other_user,  # the same: fine
                      json=body).status_code == 200
    # the owner's secret still signs; the attacker's does not
    import hashlib
    import hmac
    payload = b'{"ref": "refs/heads/main", "after": "' + b"c" * 40 + b'"}'
    for secret, status in (("an-attackers-secret-99", 401), ("the-owners-secret-1234", 200)):
        sig = hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
        r = client.post(f"/api/v1/webhooks/github/{name}", content=payload,
                        headers={"X-Hub-Signature-256": "sha256=" + sig})
        assert r.status_code == status, r.text
    # an admin may
    r = client.put(f"/api/v1/projects/{name}", headers=admin_headers,
                   json={**body, "repo_url": "/srv/git/moved.git"})
    assert r.status_code == 200 and r.json()["repo_url"] == "/srv/git/moved.git"


@pytest.mark.parametrize("field,value", [
    ("allocator_dir", "allocator"),  # gone: the recipe's source says it (admins only)
    ("repo_url", "http://127.0.0.1:8401/internal-only/secret.git"),
    ("repo_url", "ext::sh -c touch% /tmp/pwned"), ("repo_url", "--upload-pack=x"),
    ("repo_url", "/srv/git/../../etc"), ("default_branch", "--orphan"),
    ("tracked_branches", ["ok", "-x"]), ("webhook_secret", "CHANGE-ME-CHANGE-ME"),
    ("webhook_secret", "short"), ("repo_urll", "/srv/git/x.git"),
])
def test_bad_project_fields_are_422_and_create_nothing(client, user_headers, unique, field,
                                                       value):
    name = "bad-" + unique
    body = {"repo_url": "/srv/git/x.git", field: value}
    r = client.put(f"/api/v1/projects/{name}", headers=user_headers, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", field]
    assert client.get(f"/api/v1/projects/{name}", headers=user_headers).status_code == 404


def test_repo_urls_outside_the_allow_list_are_refused(client, app, user_headers, unique):
    saved = app.state.settings
    app.state.settings = saved.model_copy(update={"repo_url_allow": "https://github.com/acme"})
    try:
        for url, status in (("/srv/git/x.git", 422), ("file:///srv/git/x.git", 422),
                            ("https://github.com/other/x.git", 422),
                            ("https://github.com/acme/x.git", 200)):
            r = client.put(f"/api/v1/projects/allow-{unique}", headers=user_headers,
                           json={"repo_url": url})
            assert (url, r.status_code) == (url, status), r.text
            if status == 422:
                assert r.json()["detail"][0]["loc"] == ["body", "repo_url"]
    finally:
        app.state.settings = saved
