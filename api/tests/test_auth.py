"""Tokens and roles: a runner token acts only for its own runner."""

from __future__ import annotations

from helpers import job_spec, results, trial
from sqlalchemy import text


def test_requests_without_a_valid_token_are_401(client):
    r = client.get("/api/v1/jobs")
    assert r.status_code == 401
    assert r.json()["detail"][0]["loc"] == ["header", "authorization"]
    r = client.get("/api/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401


def test_results_are_authenticated_before_the_body_is_parsed(client, user_headers):
    # the results route reads its raw body only after the token (rawbody.py)
    for headers in ({}, {"Authorization": "Bearer nope"}):
        r = client.post("/api/v1/results", content=b"{not json",
                        headers={**headers, "Content-Type": "application/json"})
        assert r.status_code == 401, r.text
    r = client.post("/api/v1/results", content=b"{not json",
                    headers={**user_headers, "Content-Type": "application/json"})
    assert r.status_code == 403, r.text  # a user token may not post results
    r = client.post("/api/v1/results", content=b"",
                    headers={**user_headers, "Content-Type": "application/json"})
    assert r.status_code == 403, r.text


def test_tokens_are_stored_hashed(engine, make_token):
    token = make_token("user")
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT token_sha256 FROM api_tokens")).scalars().all()
    assert token not in stored and all(len(s) == 64 for s in stored)


def test_runner_token_cannot_register_another_runner(client, make_token, unique):
    headers = {"Authorization": f"Bearer {make_token('runner', 'alpha-' + unique)}"}
    r = client.post("/api/v1/runners/register", headers=headers,
                    json={"name": "beta-" + unique, "arch": "x86_64"})
    assert r.status_code == 403
    assert r.json()["detail"][0]["loc"] == ["body", "name"]


def test_runner_token_cannot_act_for_another_runner(client, make_runner, user_headers):
    mine, my_headers = make_runner()
    theirs, _ = make_runner(arch=mine["arch"])
    job = client.post("/api/v1/jobs", headers=user_headers,
                      json={"kind": "commit", "arch": mine["arch"], "spec": job_spec()}).json()
    calls = [
        ("post", f"/api/v1/runners/{theirs['id']}/heartbeat", {"testbed": None},
         ["path", "runner_id"]),
        ("post", "/api/v1/jobs/claim", {"runner_id": theirs["id"]}, ["body", "runner_id"]),
        ("post", f"/api/v1/jobs/{job['id']}/lease", {"runner_id": theirs["id"],
                                                      "attempt": 1}, ["body", "runner_id"]),
        ("post", f"/api/v1/jobs/{job['id']}/fail", {"runner_id": theirs["id"], "attempt": 1,
                                                     "log": ""},
         ["body", "runner_id"]),
        ("post", "/api/v1/results", results([trial()], runner_id=theirs["id"]),
         ["body", "runner_id"]),
    ]
    for method, url, body, loc in calls:
        r = client.request(method, url, headers=my_headers, json=body)
        assert r.status_code == 403, (url, r.text)
        assert r.json()["detail"][0]["loc"] == loc
    # the job is still queued: nobody claimed it for the other runner
    assert client.get(f"/api/v1/jobs/{job['id']}", headers=user_headers).json()["state"] == \
        "queued"
    # and the runner can act for itself
    r = client.post(f"/api/v1/runners/{mine['id']}/heartbeat", headers=my_headers, json={})
    assert r.status_code == 200


def test_user_token_cannot_claim(client, make_runner, user_headers):
    runner, _ = make_runner()
    r = client.post("/api/v1/jobs/claim", headers=user_headers, json={"runner_id": runner["id"]})
    assert r.status_code == 403


def test_runner_token_cannot_create_projects(client, make_runner):
    _, headers = make_runner()
    r = client.put("/api/v1/projects/x", headers=headers, json={"repo_url": "/x.git"})
    assert r.status_code == 403


def test_register_is_idempotent_by_name(client, make_token, unique, user_headers):
    name = "idem-" + unique
    headers = {"Authorization": f"Bearer {make_token('runner', name)}"}
    a = client.post("/api/v1/runners/register", headers=headers,
                    json={"name": name, "arch": "x86_64", "cpus": "1"}).json()
    b = client.post("/api/v1/runners/register", headers=headers,
                    json={"name": name, "arch": "x86_64", "cpus": "2",
                          "testbed": {"cpu_model": "X"}}).json()
    assert a["id"] == b["id"] and b["cpus"] == "2" and b["testbed_fingerprint"]
    listed = [r for r in client.get("/api/v1/runners", headers=user_headers).json()
              if r["name"] == name]
    assert len(listed) == 1 and listed[0]["last_seen_at"]


def test_token_cache_keeps_found_tokens_for_its_ttl(monkeypatch):
    from mallard_api import auth

    now = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: now[0])
    cache = auth.TokenCache(5)
    p = auth.Principal(role="user", token_id=1)
    assert cache.get("h") is None
    cache.put("h", p)
    now[0] += 5
    assert cache.get("h") is p
    now[0] += 0.1  # a revoked token stops working at most 5 s after it was last looked up
    assert cache.get("h") is None
    off = auth.TokenCache(0)
    off.put("h", p)
    assert off.get("h") is None
