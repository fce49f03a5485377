"""Results ingest: idempotent by uid, normalised, completes the job, validates."""

from __future__ import annotations

import json
import secrets

import pytest
from helpers import claim_job as claim
from helpers import job_spec, results, trial
from sqlalchemy import text


def test_same_trial_posted_twice_is_stored_once(client, make_runner, engine):
    runner, headers = make_runner()
    body = results([trial(), trial()], runner_id=runner["id"])
    r1 = client.post("/api/v1/results", headers=headers, json=body)
    assert r1.status_code == 201, r1.text
    assert r1.json() == {"stored": 2, "duplicates": 0, "job_id": None}
    r2 = client.post("/api/v1/results", headers=headers, json=body)
    assert r2.json() == {"stored": 0, "duplicates": 2, "job_id": None}
    uids = [t["uid"] for t in body["trials"]]
    with engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM trials WHERE uid = ANY(:u)"),
                         {"u": uids}).scalar()
    assert n == 2


def test_repeated_results_share_the_normalised_rows(client, make_runner, engine):
    runner, headers = make_runner()
    a, b = trial(variant="transfer=ring"), trial(variant="transfer=ring")
    client.post("/api/v1/results", headers=headers, json=results([a], runner_id=runner["id"]))
    client.post("/api/v1/results", headers=headers, json=results([b], runner_id=runner["id"]))
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT allocator_id, workload_id, testbed_id FROM trials WHERE uid IN (:a, :b)"),
            {"a": a["uid"], "b": b["uid"]}).all()
    assert len(rows) == 2 and rows[0] == rows[1]


def test_params_equal_in_python_but_not_in_json_are_other_workloads(client, make_runner,
                                                                     engine):
    # a post's params digests are reused by value and type (sql/results.py)
    runner, headers = make_runner()
    posted = [trial() for _ in range(4)]
    for t, value in zip(posted, (1, True, 1.0, 1), strict=True):
        t["workload"]["params"] = {"threads": 2, "flag": value}
    r = client.post("/api/v1/results", headers=headers,
                    json=results(posted, runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        got = [conn.execute(text("SELECT w.params FROM trials t JOIN workloads w "
                                 "ON w.id = t.workload_id WHERE t.uid = :u"),
                            {"u": t["uid"]}).scalar_one()["flag"] for t in posted]
    assert got == [1, True, 1.0, 1] and [type(v) for v in got] == [int, bool, float, int]


def test_text_numbers_and_times_are_stored_as_posted(client, make_runner, engine):
    # the batch travels to PostgreSQL as one JSON array (sql/results.py)
    runner, headers = make_runner()
    t = trial(uid=f"uid-é-😀-{secrets.token_hex(4)}", ok=False)
    t.update(stderr_tail='line "1"\\ ü 😀\n\ttab', started_at="2026-11-21T12:00:00.123456+02:00",
             exit_code=-(2**31), signal=2**31 - 1, seq=7, warmup=True)
    t["measures"] = {"ops_per_sec": 1.2345678901234567e-300, "max_rss_bytes": 2.0**40}
    t["counters"] = {"big": 10**300, "s": "é😀", "nested": {"a": [1, 2.5, None, True]}}
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT uid, stderr_tail, started_at, exit_code, signal, seq, warmup, ok, measures, "
            "counters FROM trials WHERE uid = :u"), {"u": t["uid"]}).one()
    assert row.stderr_tail == t["stderr_tail"] and row.uid == t["uid"]
    assert row.started_at.isoformat() == "2026-11-21T10:00:00.123456+00:00"
    assert (row.exit_code, row.signal, row.seq, row.warmup, row.ok) == (-(2**31), 2**31 - 1, 7,
                                                                         True, False)
    assert row.measures == t["measures"] and row.counters == t["counters"]


def test_results_with_job_id_complete_the_job(client, make_runner, user_headers, make_project):
    project = make_project()
    runner, headers = make_runner()
    job = client.post("/api/v1/jobs", headers=user_headers, json={
        "kind": "commit", "arch": runner["arch"], "spec": job_spec()}).json()
    claimed = client.post("/api/v1/jobs/claim", headers=headers,
                          json={"runner_id": runner["id"]}).json()
    assert claimed["id"] == job["id"]
    body = results([trial(), trial(allocator="jemalloc", commit=None, label="peer")],
                   job_id=job["id"], runner_id=runner["id"], project=project["name"],
                   branch="main")
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 201 and r.json()["job_id"] == job["id"]
    detail = client.get(f"/api/v1/jobs/{job['id']}", headers=user_headers).json()
    assert detail["state"] == "done"
    assert [a["outcome"] for a in detail["attempts"]] == ["done"]


def test_measurements_view_has_the_contract_columns(client, make_runner, make_project, engine):
    project = make_project()
    runner, headers = make_runner()
    t = trial(variant="transfer=ring", value=123.0)
    client.post("/api/v1/results", headers=headers,
                json=results([t], runner_id=runner["id"], project=project["name"],
                             branch="main"))
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT * FROM v_measurements WHERE trial_id = (SELECT id FROM trials WHERE uid = :u)"
            " AND measure = 'ops_per_sec'"), {"u": t["uid"]}).mappings().one()
    assert row["value"] == 123.0 and row["unit"] == "ops/s" and row["higher_is_better"]
    assert row["allocator_label"] == "mallard@aaaaaaa transfer=ring"
    assert row["variant"] == "transfer=ring" and row["threads"] == 2
    assert row["project"] == project["name"] and row["branch"] == "main"
    assert row["commit_sha"] == "a" * 40 and row["commit_short"] == "aaaaaaa"


def test_unknown_job_names_the_field(client, make_runner):
    runner, headers = make_runner()
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial()], job_id=987654321, runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "job_id"]


def test_bad_measure_value_names_the_field(client, make_runner):
    runner, headers = make_runner()
    body = results([trial(measures={"ops_per_sec": "fast"})], runner_id=runner["id"])  # type: ignore[dict-item]
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 422
    loc = r.json()["detail"][0]["loc"]
    assert loc[:3] == ["body", "trials", 0] and "measures" in loc


def test_nul_characters_are_rejected_with_the_field(client, make_runner):
    runner, headers = make_runner()
    t = trial()
    t["workload"]["params"]["note"] = "bad\x00byte"
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:4] == ["body", "trials", 0, "workload"]


def test_stderr_with_nul_characters_is_kept_cleaned(client, make_runner, engine):
    runner, headers = make_runner()
    t = trial(ok=False)
    t["stderr_tail"] = "Segmentation fault\x00\x00 core dumped"
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        tail = conn.execute(text("SELECT stderr_tail FROM trials WHERE uid = :u"),
                            {"u": t["uid"]}).scalar()
    assert tail == "Segmentation fault\ufffd\ufffd core dumped"


def test_unknown_project_names_the_field(client, make_runner):
    runner, headers = make_runner()
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial()], runner_id=runner["id"], project="no-such-project"))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "project"]


def test_largest_measures_object_is_stored(client, make_runner):
    runner, headers = make_runner()
    # incompressible names of the longest length, the most of them: the index entry fits
    measures = {f"m{i:02d}_" + secrets.token_hex(30): -1.2345678901234567e-300
                for i in range(24)}
    t = trial(measures=measures)
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    measures["one_too_many"] = 1.0
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial(measures=measures)], runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, "measures"]


def test_artifacts_are_kept_once(client, make_runner, engine):
    runner, headers = make_runner()
    body = results([trial()], runner_id=runner["id"])
    body["artifacts"] = {"hyperfine": {"larson threads=2": {"mean": 0.4}}}
    for _ in range(2):
        assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT artifacts FROM result_artifacts WHERE runner_id = :r"),
                            {"r": runner["id"]}).scalars().all()
    assert rows == [body["artifacts"]]


def post_at_once(base_url: str, headers: dict[str, str], bodies: list[dict]) -> list[int]:
    """POST every body to /results from a thread of its own, all released together; the
    statuses."""
    import threading

    import httpx

    statuses: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(bodies))

    def worker(body: dict) -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
            barrier.wait()
            r = http.post("/api/v1/results", json=body)
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=worker, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return statuses


def test_concurrent_posts_creating_the_same_rows_all_succeed(live_server, make_runner, unique):
    import random

    runner, headers = make_runner()
    names = [f"wl-{unique}-{i}" for i in range(6)]

    def body(seed: int) -> dict:
        rng = random.Random(seed)
        picked = rng.sample(names, 4)
        return results([trial(f"{unique}{seed}".ljust(40, "e"), workload=w,
                              allocator=f"alloc-{unique}-{rng.randint(0, 2)}") for w in picked],
                       runner_id=runner["id"])

    assert post_at_once(live_server, headers, [body(i) for i in range(8)]) == [201] * 8


def test_rows_that_exist_but_are_not_remembered_are_reused(client, make_runner, make_project,
                                                           engine, unique):
    """A commit and allocators stored before (by a push, another process, or before a
    restart) are found by the insert that would add them: no second row."""
    from mallard_api.sql import ids

    project = make_project()["name"]
    runner, headers = make_runner()
    commit = f"{unique}".ljust(40, "c")
    peer = f"peer-{unique}"

    def post() -> dict[str, int]:
        trials = [trial(commit), trial(commit, variant="transfer=ring"),
                  trial(None, label="peer", allocator=peer)]
        body = results(trials, runner_id=runner["id"], project=project, branch="main")
        assert client.post("/api/v1/results", headers=headers, json=body).json()["stored"] == 3
        with engine.connect() as conn:
            return {f"{r.name}/{r.variant}": (r.allocator_id, r.commit_id) for r in conn.execute(
                text("SELECT a.name, a.variant, t.allocator_id, t.commit_id FROM trials t "
                     "JOIN allocators a ON a.id = t.allocator_id WHERE t.uid = ANY(:u)"),
                {"u": [t["uid"] for t in trials]})}

    first = post()
    ids._known.clear()  # as a new process
    assert post() == first
    assert len({c for _, c in first.values()}) == 1  # the peer ran beside the head's commit
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM allocators WHERE commit_sha = :c "
                                 "OR name = :p"), {"c": commit, "p": peer}).scalar_one() == 3
        assert conn.execute(text("SELECT count(*) FROM commits WHERE sha = :c"),
                            {"c": commit}).scalar_one() == 1


def test_concurrent_posts_of_one_new_commit_share_its_rows(live_server, make_runner, engine,
                                                           make_project, unique):
    """Eight runners post the same new commit and allocators at once: all stored, one
    commit row and one row per allocator configuration."""
    project = make_project()["name"]
    runner, headers = make_runner()
    commit = f"{unique}".ljust(40, "d")
    bodies = [results([trial(commit, variant=v) for v in (None, "a", "b")]
                      + [trial(None, label="peer", allocator=f"peer-{unique}")],
                      runner_id=runner["id"], project=project, branch="main")
              for _ in range(8)]
    assert post_at_once(live_server, headers, bodies) == [201] * 8
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM commits WHERE sha = :c"),
                            {"c": commit}).scalar_one() == 1
        assert conn.execute(text("SELECT count(*) FROM allocators WHERE commit_sha = :c"),
                            {"c": commit}).scalar_one() == 3
        assert conn.execute(text("SELECT count(*), count(DISTINCT commit_id) FROM trials t "
                                 "JOIN commits c ON c.id = t.commit_id WHERE c.sha = :c"),
                            {"c": commit}).one() == (32, 1)


# -- leases and attempts (issue 15) ---------------------------------------------------------
def queue_job(client, user_headers, arch: str) -> int:
    r = client.post("/api/v1/jobs", headers=user_headers,
                    json={"kind": "commit", "arch": arch, "spec": job_spec()})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def stored(engine, uids: list[str]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM trials WHERE uid = ANY(:u)"),
                                {"u": uids}).scalar_one())


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
                    json={"runner_id": runner["id"], "log": "boom", "retryable": False})
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


# -- bad values: 4xx naming the field, nothing stored (issue 15) ---------------------------
@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e309"])
@pytest.mark.parametrize("where", ["measures", "counters"])
def test_non_finite_numbers_are_422(client, make_runner, engine, raw, where):
    runner, headers = make_runner()
    t = trial()
    key = "ops_per_sec" if where == "measures" else "allocs"
    t[where][key] = 1.5
    text_body = json.dumps(results([t], runner_id=runner["id"])).replace(
        f'"{key}": 1.5', f'"{key}": {raw}')
    assert raw in text_body
    r = client.post("/api/v1/results", headers={**headers, "Content-Type": "application/json"},
                    content=text_body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][0] == "body"
    assert stored(engine, [t["uid"]]) == 0


def test_lone_surrogates_never_give_a_500(client, make_runner, engine, user_headers):
    runner, headers = make_runner()

    def post(t, artifacts=None):
        body = results([t], runner_id=runner["id"])
        body["artifacts"] = artifacts
        raw = json.dumps(body).replace("SURROGATE", "\\ud800")
        return client.post("/api/v1/results", content=raw,
                           headers={**headers, "Content-Type": "application/json"})

    t = trial(uid="uid-SURROGATE")
    r = post(t)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:4] == ["body", "trials", 0,
                                                                         "uid"]
    r = post(trial(), {"note": "SURROGATE"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "artifacts"]
    kept = trial(ok=False)
    kept["stderr_tail"] = "crash SURROGATE here"
    r = post(kept)
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        assert conn.execute(text("SELECT stderr_tail FROM trials WHERE uid = :u"),
                            {"u": kept["uid"]}).scalar() == "crash \ufffd here"
    # a key with a surrogate: the 422 names it without failing to encode it
    bad_key = trial()
    bad_key["measures"] = {"SURROGATE": 1.0}
    r = post(bad_key)
    assert r.status_code == 422 and "measures" in r.json()["detail"][0]["loc"]
    # a failure log with one is kept, cleaned
    job_id = queue_job(client, user_headers, runner["arch"])
    claim(client, headers, runner)
    raw = json.dumps({"runner_id": runner["id"], "log": "log SURROGATE", "retryable": False})
    r = client.post(f"/api/v1/jobs/{job_id}/fail", content=raw.replace("SURROGATE", "\\ud800"),
                    headers={**headers, "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    attempts = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()["attempts"]
    assert attempts[0]["log"] == "log \ufffd"


def test_a_misspelled_field_is_422_naming_it(client, make_runner, engine):
    runner, headers = make_runner()
    t = trial()
    t["measure"] = t.pop("measures")
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, "measure"]
    assert r.json()["detail"][0]["type"] == "extra_forbidden"
    body = results([trial()], runner_id=runner["id"])
    body["job"] = 1
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "job"]
    assert stored(engine, [t["uid"]]) == 0


def test_artifacts_are_capped(client, app, make_runner, engine):
    runner, headers = make_runner()
    body = results([trial()], runner_id=runner["id"])
    cap = app.state.settings.max_artifacts_bytes
    body["artifacts"] = {"blob": "x" * (cap + 1)}
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body", "artifacts"]
    assert stored(engine, [body["trials"][0]["uid"]]) == 0
