"""Per-token quotas on queued work (quotas.py), written as the attack: one user token
queues comparisons, jobs and trials as fast as it can. Past a quota the request is a 429
with Retry-After and a body naming the quota, and nothing of it is stored; admins are
exempt, and a token gets its room back as its work finishes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from comparison_data import comparison_trials, larson_comparison, post_results, steady
from fastapi.testclient import TestClient
from helpers import claim_job, job_spec
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from sqlalchemy import text

SHA_BASE, SHA_HEAD = "1" * 40, "2" * 40


@pytest.fixture
def conf(app: Any, settings: Settings) -> Iterator[Settings]:
    """Small quotas for the routes of this test."""
    small = settings.model_copy(update={
        "quota_queued_jobs": 3, "quota_queued_comparisons": 2, "quota_queued_trials": 600,
        "quota_retry_after_seconds": 17})
    app.dependency_overrides[get_settings] = lambda: small
    yield small
    app.dependency_overrides.pop(get_settings, None)


def refused(r: Any, quota: str) -> None:
    assert r.status_code == 429, r.text
    assert r.headers["retry-after"] == "17"
    (item,) = r.json()["detail"]
    assert item["loc"] == ["quota", quota] and item["type"] == "quota_exceeded"
    assert f"MALLARD_QUOTA_{quota.upper()}" in item["msg"]


def count(engine: Any, sql: str, **args: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql), args).scalar_one())


def test_jobs_and_trials_past_the_quota_are_429_and_store_nothing(
        client: TestClient, conf: Settings, make_token: Any, bearer: Any,
        admin_headers: dict[str, str], make_runner: Any, engine: Any) -> None:
    runner, rheaders = make_runner()
    user = bearer(make_token("user"))

    def queue(headers: dict[str, str], **spec: Any) -> Any:
        return client.post("/api/v1/jobs", headers=headers, json={
            "kind": "commit", "arch": runner["arch"], "spec": job_spec(**spec)})

    # one job of 1,000 trials x 64 thread counts (x 2 allocators): past the trials quota
    r = queue(user, trials=1000, threads=list(range(1, 65)))
    refused(r, "queued_trials")
    assert "128000 more" in r.json()["detail"][0]["msg"]
    for _ in range(3):  # 3 trials x 1 cell x 2 allocators each
        assert queue(user).status_code == 201
    refused(queue(user), "queued_jobs")
    jobs = "SELECT count(*) FROM jobs WHERE arch = :a"
    assert count(engine, jobs, a=runner["arch"]) == 3
    # an admin is exempt
    assert queue(admin_headers, trials=1000, threads=list(range(1, 65))).status_code == 201
    # a job that ends gives its room back
    job = claim_job(client, rheaders, runner)
    assert client.post(f"/api/v1/jobs/{job['id']}/fail", headers=rheaders, json={
        "runner_id": runner["id"], "attempt": job["attempt"], "log": "gone",
        "retryable": False}).status_code == 200
    assert queue(user).status_code == 201
    refused(queue(user), "queued_jobs")
    assert count(engine, jobs, a=runner["arch"]) == 5


def test_comparisons_past_the_quota_are_429_and_store_nothing(
        client: TestClient, conf: Settings, make_token: Any, bearer: Any,
        make_project: Any, make_runner: Any, engine: Any) -> None:
    project = make_project()
    runner, _ = make_runner()
    user = bearer(make_token("user"))

    def compare(n: int, **fields: Any) -> Any:
        return client.post("/api/v1/comparisons", headers=user, json={
            "project": project["name"], "base": {"commit": SHA_BASE},
            "head": {"commit": f"{n}".rjust(40, "3")}, "workloads": ["larson"],
            "threads": [1], "trials": 5, "arch": runner["arch"], **fields})

    refused(compare(0, trials=1000, threads=list(range(1, 65))), "queued_trials")
    assert compare(1).status_code == 201 and compare(2).status_code == 201
    refused(compare(3), "queued_comparisons")
    comps = "SELECT count(*) FROM comparisons WHERE project = :p"
    assert count(engine, comps, p=project["name"]) == 2
    assert count(engine, "SELECT count(*) FROM jobs WHERE arch = :a", a=runner["arch"]) == 2
    # a calibration is its comparisons: 3 A/A comparisons on top of 2 are past the quota
    r = client.post("/api/v1/calibrations", headers=user, json={
        "project": project["name"], "commit": SHA_BASE, "arch": runner["arch"],
        "workloads": ["larson"], "trials": 5, "aa_comparisons": 3, "canary_comparisons": 0})
    refused(r, "queued_comparisons")
    assert count(engine, comps, p=project["name"]) == 2
    assert count(engine, "SELECT count(*) FROM calibrations WHERE project = :p",
                 p=project["name"]) == 0


def test_work_the_api_queues_for_a_token_counts_against_it(
        client: TestClient, conf: Settings, make_token: Any, bearer: Any,
        make_project: Any, make_runner: Any, engine: Any, fast_analysis: Any) -> None:
    """A comparison's follow-up round and the profiles of its moved cases are the token's
    work too; a profile asked for over REST past the quota is a 429 and stores nothing."""
    project = make_project()
    runner, rheaders = make_runner()
    token = make_token("user")
    user = bearer(token)
    tid = count(engine, "SELECT id FROM api_tokens WHERE token_sha256 = :h",
                h=hashlib.sha256(token.encode()).hexdigest())
    # threads=2 decided (regressed) in the first round, threads=1 unknown: a follow-up
    cid = larson_comparison(client, user, project, runner, threads=[1, 2], max_follow_ups=1)
    job = claim_job(client, rheaders, runner)
    post_results(client, rheaders, runner, project["name"], job["id"],
                 comparison_trials(5, seed=5, shifts={1: 1.0, 2: 0.8}, drift=steady))
    mine = "SELECT count(*) FROM jobs WHERE requested_by = :t AND kind = :k AND state = 'queued'"
    assert count(engine, mine, t=tid, k="comparison") == 1  # the follow-up, 5 x 1 cell x 2
    assert count(engine, "SELECT sum(trials_requested) FROM jobs WHERE requested_by = :t "
                 "AND state = 'queued'", t=tid) == 10
    url = f"/api/v1/comparisons/{cid}/profiles"
    for params in ({}, {"ops": 20000}):  # 3 queued jobs: at the quota, not past it
        r = client.post(url, headers=user, json={"workload": "larson", "threads": 1,
                                                 "params": params})
        assert r.status_code == 202, r.text
    refused(client.post(url, headers=user, json={"workload": "larson", "threads": 1,
                                                 "params": {"ops": 30000}}), "queued_jobs")
    profiles = "SELECT count(*) FROM comparison_profiles WHERE comparison_id = :c"
    assert count(engine, profiles, c=cid) == 2
    # the follow-up answered: the comparison settles, its moved case (threads=2) profiled
    follow = claim_job(client, rheaders, runner)
    post_results(client, rheaders, runner, project["name"], follow["id"],
                 comparison_trials(5, seed=4, shifts={1: 1.0}, drift=steady))
    assert client.get(f"/api/v1/comparisons/{cid}", headers=user).json()["state"] == "done"
    assert count(engine, profiles, c=cid) == 3
    assert count(engine, mine, t=tid, k="profile") == 3


def test_a_push_with_a_token_is_charged_its_commit_jobs(
        client: TestClient, app: Any, conf: Settings, make_token: Any, bearer: Any,
        make_project: Any, make_runner: Any, engine: Any) -> None:
    """The post-receive hook's form (POST /webhooks/push) queues a commit job per new
    commit and live architecture, charged to the token: past its jobs quota a push queues
    none, and is still recorded, its commit deferred (backfilled when runners are idle)
    and the quota named."""
    project = make_project()["name"]
    make_runner()
    user = bearer(make_token("user"))
    shas = [hashlib.sha1(f"{project}-{i}".encode()).hexdigest() for i in range(4)]

    def push(before: str | None, sha: str) -> Any:
        r = client.post("/api/v1/webhooks/push", headers=user, json={
            "project": project, "ref": "refs/heads/main", "before": before, "after": sha,
            "commits": [{"sha": sha, "parent": before, "message": "m", "author": "a"}]})
        assert r.status_code == 200, r.text
        return r.json()

    def quotas(jobs: int) -> None:
        app.dependency_overrides[get_settings] = lambda: conf.model_copy(update={
            "quota_queued_jobs": jobs, "quota_queued_trials": 0,
            "quota_queued_comparisons": 0})

    quotas(0)
    per_push = len(push(None, shas[0])["jobs"])  # one per live architecture
    assert per_push >= 1
    quotas(2 * per_push)
    assert len(push(shas[0], shas[1])["jobs"]) == per_push
    third = push(shas[1], shas[2])
    assert (third["commits"], third["jobs"], third["deferred"]) == (1, [], 1), third
    assert "MALLARD_QUOTA_QUEUED_JOBS" in third["note"] and "deferred" in third["note"]
    queued = "SELECT count(*) FROM jobs j JOIN api_tokens t ON t.id = j.requested_by " \
             "WHERE t.token_sha256 = :h"
    assert count(engine, queued, h=hashlib.sha256(user["Authorization"][7:].encode()
                                                   ).hexdigest()) == 2 * per_push
    assert count(engine, "SELECT count(*) FROM branches b JOIN projects p ON p.id = "
                 "b.project_id WHERE p.name = :p AND b.head_sha = :h", p=project,
                 h=shas[2]) == 1
