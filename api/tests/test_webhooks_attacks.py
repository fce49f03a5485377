"""Push webhooks under attack: unknown projects and bad signatures answer alike, the
signature is checked before parsing, bad refs and replays do nothing, big pushes are bounded."""

from __future__ import annotations

import json

import pytest
from conftest import GITHUB_SECRET
from helpers import github_payload, shas, sign


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


def test_a_push_whose_commits_are_each_others_parents_is_refused(
        client, make_project, user_headers, engine, unique):
    """The attack: a push whose commits are each other's parents (or its own), in the
    push itself or through commits recorded before, so a walk of the ancestry never
    ends and a bisection walks it. 422 naming the commit; nothing recorded, queued or
    bisected."""
    from sqlalchemy import text

    project = make_project()
    a, b, c = shas(3, unique)

    def plain(commits: list[dict[str, str]], after: str) -> object:
        return client.post("/api/v1/webhooks/push", headers=user_headers, json={
            "project": project["name"], "ref": "refs/heads/main", "after": after,
            "commits": commits})

    def jobs() -> int:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs WHERE project_id = :p"),
                                    {"p": project["id"]}).scalar_one())

    for commits in ([{"sha": a, "parent": b}, {"sha": b, "parent": a}],  # each other's
                    [{"sha": c, "parent": c}],  # its own
                    [{"sha": a, "parent": c}, {"sha": b, "parent": a},
                     {"sha": c, "parent": b}]):
        r = plain(commits, commits[-1]["sha"])
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "commits", 0]
        assert "own ancestor" in r.json()["detail"][0]["msg"]
    assert branch_state(client, user_headers, project["name"]) == ([], [])
    assert jobs() == 0
    # through history: a then b (b's parent a) are recorded; then a push says a's parent
    # is b, once by the plain form and once by a GitHub push whose `before` is b
    assert plain([{"sha": a}, {"sha": b, "parent": a}], b).status_code == 200
    before = branch_state(client, user_headers, project["name"]), jobs()
    r = plain([{"sha": c, "parent": b}, {"sha": a, "parent": c}], a)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "commits", 0]
    body = json.loads(github_payload(project, [a]))
    raw = json.dumps({**body, "before": b}).encode()
    r = github_post(client, "/api/v1/webhooks/github", raw, GITHUB_SECRET)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "commits", 0]
    assert (branch_state(client, user_headers, project["name"]), jobs()) == before
    with engine.connect() as conn:
        parents = dict(conn.execute(text(
            "SELECT sha, parent_sha FROM commits WHERE project_id = :p"),
            {"p": project["id"]}).all())
    assert parents == {a: None, b: a}
    assert client.get("/api/v1/bisections", headers=user_headers,
                      params={"project": project["name"]}).json() == []
