"""The job queue: claim exactly once under concurrency, leases, attempts, logs."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from helpers import job_spec, run_analysis
from mallard_api import db
from mallard_api.sql import jobs as job_sql
from sqlalchemy import text


def enqueue(client, headers, arch, n=1, max_attempts=3):
    ids = []
    for i in range(n):
        r = client.post("/api/v1/jobs", headers=headers, json={
            "kind": "commit", "arch": arch, "spec": job_spec(trials=i + 1),
            "max_attempts": max_attempts})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def test_claim_gives_oldest_job_with_a_lease(client, user_headers, make_runner):
    runner, headers = make_runner()
    ids = enqueue(client, user_headers, runner["arch"], 2)
    r = client.post("/api/v1/jobs/claim", headers=headers,
                    json={"runner_id": runner["id"], "lease_seconds": 60})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["id"] == ids[0]
    assert job["state"] == "running" and job["attempt"] == 1
    assert job["runner_id"] == runner["id"] and job["lease_expires_at"]


def test_claim_answers_204_when_nothing_is_queued(client, make_runner):
    runner, headers = make_runner()
    r = client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    assert r.status_code == 204
    assert r.content == b""


def test_claim_only_takes_jobs_of_the_runners_arch(client, user_headers, make_runner):
    runner, headers = make_runner()
    other, _ = make_runner()
    enqueue(client, user_headers, other["arch"], 1)
    r = client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    assert r.status_code == 204


def test_eight_concurrent_claimers_receive_each_job_exactly_once(
        client, user_headers, make_runner, engine, unique):
    arch = f"conc-{unique}"
    runners = [make_runner(arch=arch)[0] for _ in range(8)]
    n_jobs = 40
    ids = enqueue(client, user_headers, arch, n_jobs)
    factory = db.make_sessionmaker(engine)
    claimed: list[tuple[int, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(runner_id: int) -> None:
        try:
            barrier.wait()
            while True:
                with factory() as session:  # its own connection
                    job = job_sql.claim(session, runner_id=runner_id, arch=arch,
                                        lease_seconds=300)
                    session.commit()
                if job is None:
                    return
                with lock:
                    claimed.append((job.id, runner_id))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(r["id"],)) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    counts = Counter(job_id for job_id, _ in claimed)
    assert sorted(counts) == sorted(ids)
    assert set(counts.values()) == {1}


def test_expired_lease_is_requeued_on_claim(client, user_headers, make_runner, engine):
    runner, headers = make_runner()
    other, other_headers = make_runner(arch=runner["arch"])
    [job_id] = enqueue(client, user_headers, runner["arch"])
    r = client.post("/api/v1/jobs/claim", headers=headers,
                    json={"runner_id": runner["id"], "lease_seconds": 60})
    assert r.json()["id"] == job_id
    with engine.begin() as conn:  # the runner died: its lease ran out
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                          "WHERE id = :id"), {"id": job_id})
    r = client.post("/api/v1/jobs/claim", headers=other_headers,
                    json={"runner_id": other["id"], "lease_seconds": 60})
    assert r.status_code == 200
    assert r.json()["id"] == job_id and r.json()["attempt"] == 2
    assert r.json()["runner_id"] == other["id"]
    # the first runner lost its lease
    r = client.post(f"/api/v1/jobs/{job_id}/lease", headers=headers,
                    json={"runner_id": runner["id"], "attempt": 1, "lease_seconds": 60})
    assert r.status_code == 409
    assert r.json()["detail"][0]["loc"] == ["path", "job_id"]
    detail = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()
    assert [a["outcome"] for a in detail["attempts"]] == ["expired", None]


def test_lease_renewal_extends_the_lease(client, user_headers, make_runner):
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"])
    first = client.post("/api/v1/jobs/claim", headers=headers,
                        json={"runner_id": runner["id"], "lease_seconds": 10}).json()
    r = client.post(f"/api/v1/jobs/{job_id}/lease", headers=headers,
                    json={"runner_id": runner["id"], "attempt": first["attempt"],
                          "lease_seconds": 600})
    assert r.status_code == 200
    assert r.json()["lease_expires_at"] > first["lease_expires_at"]


def test_attempts_cap_then_failed_with_logs(client, user_headers, make_runner):
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"], max_attempts=2)
    for attempt in (1, 2):
        r = client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
        assert r.json()["id"] == job_id and r.json()["attempt"] == attempt
        r = client.post(f"/api/v1/jobs/{job_id}/fail", headers=headers, json={
            "runner_id": runner["id"], "attempt": attempt, "log": f"build failed #{attempt}",
            "retryable": True})
        assert r.status_code == 200
        assert r.json()["state"] == ("queued" if attempt == 1 else "failed")
    r = client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    assert r.status_code == 204
    detail = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()
    assert detail["state"] == "failed" and detail["finished_at"]
    assert [(a["outcome"], a["log"]) for a in detail["attempts"]] == [
        ("failed", "build failed #1"), ("failed", "build failed #2")]


def test_non_retryable_failure_fails_at_once(client, user_headers, make_runner):
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"], max_attempts=3)
    client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    r = client.post(f"/api/v1/jobs/{job_id}/fail", headers=headers, json={
        "runner_id": runner["id"], "attempt": 1, "log": "bad spec", "retryable": False})
    assert r.json()["state"] == "failed" and r.json()["attempt"] == 1


def test_fail_of_a_job_not_held_is_409(client, user_headers, make_runner):
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"])
    r = client.post(f"/api/v1/jobs/{job_id}/fail", headers=headers,
                    json={"runner_id": runner["id"], "attempt": 1, "log": "x"})
    assert r.status_code == 409


def test_list_and_get_jobs(client, user_headers, make_runner):
    runner, _ = make_runner()
    ids = enqueue(client, user_headers, runner["arch"], 2)
    r = client.get("/api/v1/jobs", headers=user_headers,
                   params={"arch": runner["arch"], "state": "queued"})
    assert sorted(j["id"] for j in r.json()) == sorted(ids)
    assert client.get("/api/v1/jobs/999999999", headers=user_headers).status_code == 404


def test_bad_lease_seconds_names_the_field(client, make_runner):
    runner, headers = make_runner()
    r = client.post("/api/v1/jobs/claim", headers=headers,
                    json={"runner_id": runner["id"], "lease_seconds": 0})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "lease_seconds"]


def test_expired_lease_at_the_attempt_cap_fails_the_job(client, user_headers, make_runner,
                                                        engine):
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"], max_attempts=1)
    client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                          "WHERE id = :id"), {"id": job_id})
    r = client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    assert r.status_code == 204
    detail = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()
    assert detail["state"] == "failed" and detail["finished_at"]
    assert [(a["outcome"], a["log"]) for a in detail["attempts"]] == [
        ("expired", "lease expired: the runner stopped renewing")]


def test_periodic_sweep_requeues_expired_leases_of_any_arch(app, client, user_headers,
                                                            make_runner, engine):
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"])
    client.post("/api/v1/jobs/claim", headers=headers, json={"runner_id": runner["id"]})
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                          "WHERE id = :id"), {"id": job_id})
    app.state.sweep()  # (the app's own periodic sweep may have been first: same result)
    job = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()
    assert job["state"] == "queued" and job["runner_id"] is None


def test_eight_runners_claiming_over_http_get_each_job_once(
        live_server, client, user_headers, make_runner, unique):
    import httpx

    arch = f"http-{unique}"
    runners = [make_runner(arch=arch) for _ in range(8)]
    ids = enqueue(client, user_headers, arch, 24)
    got: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(runner: dict, headers: dict) -> None:
        with httpx.Client(base_url=live_server, headers=headers, timeout=60) as http:
            barrier.wait()
            while True:
                r = http.post("/api/v1/jobs/claim", json={"runner_id": runner["id"]})
                if r.status_code == 204:
                    return
                assert r.status_code == 200, r.text
                with lock:
                    got.append(r.json()["id"])

    threads = [threading.Thread(target=worker, args=rh) for rh in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(got) == sorted(ids)


# -- a job spec names only what is allowed (issue 15) ---------------------------------------
@pytest.mark.parametrize("path,value", [
    (("suite",), "/etc/passwd"), (("suite",), "../../etc/passwd"), (("suite",), "nosuch"),
    (("allocator_dir",), "../../../../tmp/evil"), (("allocator_dir",), "/tmp/evil"),
    (("repo_url",), "http://127.0.0.1:8401/internal-only/secret.git"),
    (("repo_url",), "file:///srv/../etc"), (("workloads",), ["larson", "nosuch"]),
    (("commit",), "--upload-pack=touch${IFS}marker;git-upload-pack"),
    (("branch",), "-b"), (("allocators", 0, "commit"), "--output=/tmp/x"),
    (("allocators", 0, "variant"), "transfer=ring;touch /tmp/x"),
    (("allocators", 0, "variant"), "stats_file=/etc/x"),
    (("allocators", 0, "variant"), "nokey=1"), (("allocators", 0, "name"), "nosuch"),
    (("allocators", 1, "name"), "/tmp/evil.so"), (("allocators", 1, "name"), "$(id)"),
    (("allocators", 0, "label"), "other"), (("extra",), 1),
])
def test_bad_job_specs_are_422_and_queue_nothing(client, user_headers, unique, path, value):
    arch = f"spec-{unique}"
    spec = job_spec()
    target = spec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    r = client.post("/api/v1/jobs", headers=user_headers,
                    json={"kind": "commit", "arch": arch, "spec": spec})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2 + len(path)] == ["body", "spec", *path]
    assert client.get("/api/v1/jobs", headers=user_headers,
                      params={"arch": arch}).json() == []


def test_expired_lease_queues_the_comparison_for_the_analysis(client, app, user_headers,
                                                              make_runner, make_project,
                                                              engine):
    """A comparison job whose lease expires tells the analysis (a queue entry): the
    comparison does not stay `running` unnoticed."""
    project = make_project()
    runner, headers = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": "main"}, "head": {"commit": "topic"},
        "arch": runner["arch"], "trials": 5})
    cid = r.json()["id"]
    job = client.post("/api/v1/jobs/claim", headers=headers,
                      json={"runner_id": runner["id"], "lease_seconds": 60}).json()
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM analysis_queue WHERE comparison_id = :c"), {"c": cid})
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second', "
                          "max_attempts = 1 WHERE id = :i"), {"i": job["id"]})
    app.state.sweep()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM analysis_queue WHERE comparison_id = :c"),
                            {"c": cid}).scalar_one() == 1
    run_analysis(app)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert d["state"] == "failed" and d["jobs"][0]["state"] == "failed"


def test_a_job_of_another_project_with_another_repository_is_refused(
        client, user_headers, make_project, unique):
    """The attack: a user queues a job naming the victim's project but building another
    allowed repository, so its measurements would land in the victim's series. Whether
    the body or the spec names the project, the job of a project builds the project's
    repository: 422 naming the field, nothing queued."""
    victim = make_project()
    arch = f"foreign-{unique}"
    theirs = job_spec(repo_url="/srv/git/attacker.git")
    attempts = [
        ({"project": victim["name"], "spec": theirs}, ["body", "spec", "repo_url"]),
        ({"spec": {**theirs, "project": victim["name"]}}, ["body", "spec", "repo_url"]),
        ({"project": victim["name"], "spec": {**job_spec(repo_url=victim["repo_url"]),
                                              "project": "elsewhere"}},
         ["body", "spec", "project"]),
        ({"spec": {**theirs, "project": f"no-such-{unique}"}}, ["body", "spec", "project"]),
    ]
    for fields, loc in attempts:
        r = client.post("/api/v1/jobs", headers=user_headers,
                        json={"kind": "commit", "arch": arch, **fields})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == loc, r.text
    assert client.get("/api/v1/jobs", headers=user_headers,
                      params={"arch": arch}).json() == []
    # the project's own repository (its file:// form too) is a job of the project
    for url in (victim["repo_url"], "file://" + victim["repo_url"] + "/"):
        r = client.post("/api/v1/jobs", headers=user_headers, json={
            "kind": "commit", "arch": arch, "spec": {**job_spec(repo_url=url),
                                                     "project": victim["name"]}})
        assert r.status_code == 201, r.text
        assert r.json()["project_id"] == victim["id"]
        assert r.json()["spec"]["project"] == victim["name"]


def test_a_stale_attempts_lease_and_fail_are_refused(client, user_headers, make_runner,
                                                     engine):
    """The attack: a runner's attempt 1 outlives its lease, the job is re-queued and the
    same runner claims it again (attempt 2); the stale attempt's renewal and failure
    report still arrive. Each is a 409 naming `attempt`, and attempt 2 runs on untouched;
    a report without the attempt is a 422 naming it."""
    runner, headers = make_runner()
    [job_id] = enqueue(client, user_headers, runner["arch"])
    first = client.post("/api/v1/jobs/claim", headers=headers,
                        json={"runner_id": runner["id"], "lease_seconds": 60}).json()
    with engine.begin() as conn:  # attempt 1 stalled: its lease ran out
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                          "WHERE id = :id"), {"id": job_id})
    second = client.post("/api/v1/jobs/claim", headers=headers,
                         json={"runner_id": runner["id"], "lease_seconds": 60}).json()
    assert (first["attempt"], second["id"], second["attempt"]) == (1, job_id, 2)
    stale = [("lease", {"lease_seconds": 600}),
             ("fail", {"log": "attempt 1 gave up", "retryable": False})]
    for call, fields in stale:
        r = client.post(f"/api/v1/jobs/{job_id}/{call}", headers=headers,
                        json={"runner_id": runner["id"], "attempt": 1, **fields})
        assert r.status_code == 409, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "attempt"]
        assert r.json()["detail"][0]["type"] == "lease_lost"
        r = client.post(f"/api/v1/jobs/{job_id}/{call}", headers=headers,
                        json={"runner_id": runner["id"], **fields})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "attempt"]
    detail = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()
    assert detail["state"] == "running" and detail["attempt"] == 2
    assert detail["lease_expires_at"] == second["lease_expires_at"]  # not renewed
    assert [(a["outcome"], a["log"]) for a in detail["attempts"]] == [
        ("expired", "lease expired: the runner stopped renewing"), (None, None)]
    r = client.post(f"/api/v1/jobs/{job_id}/lease", headers=headers,
                    json={"runner_id": runner["id"], "attempt": 2, "lease_seconds": 600})
    assert r.status_code == 200 and r.json()["lease_expires_at"] > second["lease_expires_at"]


# -- a job's log is written by the code under test: scrubbed, and only for its project ------
def failed_job_with_log(client, user_headers, make_runner, make_project, log):
    """A job of a new project, claimed and failed by a runner with `log`:
    (job id, project name, the runner's headers)."""
    made = make_project()
    project = made["name"]
    runner, headers = make_runner()
    r = client.post("/api/v1/jobs", headers=user_headers, json={
        "kind": "commit", "arch": runner["arch"], "project": project,
        "spec": job_spec(project=project, repo_url=made["repo_url"]), "max_attempts": 1})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert client.post("/api/v1/jobs/claim", headers=headers,
                       json={"runner_id": runner["id"]}).json()["id"] == job_id
    r = client.post(f"/api/v1/jobs/{job_id}/fail", headers=headers,
                    json={"runner_id": runner["id"], "attempt": 1, "log": log,
                          "retryable": False})
    assert r.status_code == 200, r.text
    return job_id, project, headers


def test_a_failure_log_is_stored_without_the_tokens_it_holds(client, user_headers,
                                                              admin_headers, make_runner,
                                                              make_project, make_token):
    stolen = make_token("runner", "victim")
    log = (f"-- reading /proc/1/environ\nMALLARD_RUNNER_TOKEN={stolen}\n"
           f"Authorization: Bearer {stolen}\n{stolen}\nCMake Error: configure failed")
    job_id, _, _ = failed_job_with_log(client, user_headers, make_runner, make_project, log)
    (attempt,) = client.get(f"/api/v1/jobs/{job_id}", headers=admin_headers).json()["attempts"]
    assert stolen not in attempt["log"] and "[redacted]" in attempt["log"]
    assert attempt["log"].endswith("CMake Error: configure failed")


def test_a_jobs_log_is_only_for_its_project_its_runner_and_admins(
        client, user_headers, admin_headers, make_runner, make_project, make_token):
    job_id, project, runner_headers = failed_job_with_log(
        client, user_headers, make_runner, make_project, "build failed: secret-ish output")
    other = make_project()["name"]
    _, other_runner = make_runner()

    def bearer(token):
        return {"Authorization": f"Bearer {token}"}

    readers = {"admin": admin_headers, "user of every project": user_headers,
               "user of the project": bearer(make_token("user", projects=[other, project])),
               "its runner": runner_headers}
    for who, headers in readers.items():
        r = client.get(f"/api/v1/jobs/{job_id}", headers=headers)
        assert r.status_code == 200, (who, r.text)
        assert r.json()["attempts"][0]["log"] == "build failed: secret-ish output"
    outsiders = {"user of another project": bearer(make_token("user", projects=[other])),
                 "another runner": other_runner}
    for who, headers in outsiders.items():
        r = client.get(f"/api/v1/jobs/{job_id}", headers=headers)
        assert r.status_code == 404, (who, r.text)
        assert r.json()["detail"][0]["loc"] == ["path", "job_id"]
        assert "secret-ish" not in r.text
