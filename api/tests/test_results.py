"""Results ingest: idempotent by uid, normalised, completes the job, validates."""

from __future__ import annotations

import secrets

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


def test_concurrent_posts_creating_the_same_rows_all_succeed(live_server, make_runner, unique):
    import random
    import threading

    import httpx

    runner, headers = make_runner()
    names = [f"wl-{unique}-{i}" for i in range(6)]
    statuses: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        picked = rng.sample(names, 4)
        body = results([trial(f"{unique}{seed}".ljust(40, "e"), workload=w,
                              allocator=f"alloc-{unique}-{rng.randint(0, 2)}") for w in picked],
                       runner_id=runner["id"])
        with httpx.Client(base_url=live_server, headers=headers, timeout=60) as http:
            barrier.wait()
            r = http.post("/api/v1/results", json=body)
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert statuses == [201] * 8
