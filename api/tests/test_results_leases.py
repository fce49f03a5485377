"""Results of a job: only the lease holder's attempt posts them; a re-post adds nothing."""

from __future__ import annotations

from helpers import claim_job as claim
from helpers import queue_job, results, stored, trial
from sqlalchemy import text


def job_state(client, user_headers, job_id: int) -> tuple[str, int | None, int]:
    j = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()
    return j["state"], j["runner_id"], j["attempt"]


def assert_lease_lost(r) -> None:
    assert r.status_code == 409, r.text
    assert r.json()["detail"][0]["type"] == "lease_lost"


def test_a_runner_without_the_lease_cannot_post_a_jobs_trials(client, user_headers, engine,
                                                               make_runner, unique):
    arch = f"lease-{unique}"
    holder, holder_h = make_runner(arch=arch)
    other, other_h = make_runner(arch=arch)
    job_id = queue_job(client, user_headers, arch)
    # a queued job nobody claimed
    ts = [trial()]
    r = client.post("/api/v1/results", headers=other_h,
                    json=results(ts, job_id=job_id, runner_id=other["id"]))
    assert_lease_lost(r)
    job = claim(client, holder_h, holder)
    # another runner's token, naming itself or the holder
    for runner_id, headers in ((other["id"], other_h), (holder["id"], other_h)):
        r = client.post("/api/v1/results", headers=headers,
                        json=results(ts, job_id=job_id, runner_id=runner_id))
        assert r.status_code in (403, 409), r.text
    r = client.post("/api/v1/results", headers=other_h, json=results(ts, job_id=job_id))
    assert_lease_lost(r)
    # the holder with a wrong attempt
    r = client.post("/api/v1/results", headers=holder_h,
                    json=results(ts, job_id=job_id, runner_id=holder["id"], attempt=2))
    assert_lease_lost(r)
    assert stored(engine, [t["uid"] for t in ts]) == 0
    assert job_state(client, user_headers, job_id) == ("running", holder["id"], 1)
    # the holder, right attempt: stored, done
    r = client.post("/api/v1/results", headers=holder_h,
                    json=results(ts, job_id=job_id, runner_id=holder["id"],
                                 attempt=job["attempt"]))
    assert r.status_code == 201 and r.json()["stored"] == 1
    assert job_state(client, user_headers, job_id)[0] == "done"


def test_a_late_post_from_an_expired_lease_is_refused(client, app, user_headers, engine,
                                                      make_runner, unique):
    arch = f"late-{unique}"
    first, first_h = make_runner(arch=arch)
    second, second_h = make_runner(arch=arch)
    job_id = queue_job(client, user_headers, arch)
    claim(client, first_h, first)
    with engine.begin() as conn:  # the lease runs out (no waiting: set it in the past)
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                          "WHERE id = :i"), {"i": job_id})
    late = [trial()]
    r = client.post("/api/v1/results", headers=first_h,
                    json=results(late, job_id=job_id, runner_id=first["id"], attempt=1))
    assert_lease_lost(r)
    assert "expired" in r.json()["detail"][0]["msg"]
    again = claim(client, second_h, second)  # re-queued on claim, taken by the second runner
    assert (again["id"], again["attempt"]) == (job_id, 2)
    r = client.post("/api/v1/results", headers=first_h,
                    json=results(late, job_id=job_id, runner_id=first["id"], attempt=1))
    assert_lease_lost(r)
    assert stored(engine, [t["uid"] for t in late]) == 0
    mine = [trial(), trial()]
    r = client.post("/api/v1/results", headers=second_h,
                    json=results(mine, job_id=job_id, runner_id=second["id"], attempt=2))
    assert r.status_code == 201 and r.json()["stored"] == 2
    with engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM trials WHERE job_id = :j"),
                         {"j": job_id}).scalar_one()
    assert n == 2  # nothing of the expired attempt is counted beside the holder's


def test_results_for_a_failed_job_are_refused(client, user_headers, engine, make_runner):
    runner, headers = make_runner()
    job_id = queue_job(client, user_headers, runner["arch"])
    claim(client, headers, runner)
    r = client.post(f"/api/v1/jobs/{job_id}/fail", headers=headers,
                    json={"runner_id": runner["id"], "attempt": 1, "log": "boom",
                          "retryable": False})
    assert r.status_code == 200 and r.json()["state"] == "failed"
    ts = [trial()]
    r = client.post("/api/v1/results", headers=headers,
                    json=results(ts, job_id=job_id, runner_id=runner["id"]))
    assert_lease_lost(r)
    assert stored(engine, [t["uid"] for t in ts]) == 0


def test_a_job_needs_trials_and_an_attempt(client, user_headers, make_runner):
    runner, headers = make_runner()
    job_id = queue_job(client, user_headers, runner["arch"])
    claim(client, headers, runner)
    r = client.post("/api/v1/results", headers=headers,
                    json=results([], job_id=job_id, runner_id=runner["id"]))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trials"]
    body = results([trial()], job_id=job_id, runner_id=runner["id"])
    del body["attempt"]
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "attempt"]
    assert r.json()["detail"][0]["type"] == "missing"
    assert job_state(client, user_headers, job_id)[0] == "running"


def test_a_re_post_of_a_done_job_is_recognised_and_adds_nothing(client, user_headers, engine,
                                                                make_runner):
    runner, headers = make_runner()
    job_id = queue_job(client, user_headers, runner["arch"])
    claim(client, headers, runner)
    body = results([trial(), trial()], job_id=job_id, runner_id=runner["id"])
    assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    again = client.post("/api/v1/results", headers=headers, json=body)  # the spool re-posts
    assert again.status_code == 201
    assert (again.json()["stored"], again.json()["duplicates"]) == (0, 2)
    extra = trial()
    r = client.post("/api/v1/results", headers=headers,
                    json={**body, "trials": body["trials"] + [extra]})
    assert_lease_lost(r)
    assert stored(engine, [extra["uid"]]) == 0
