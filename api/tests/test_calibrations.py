"""Calibrations through the API (real PostgreSQL): bad input answered 4xx naming the field,
the two phases end to end with a runner that dies mid-job, results stored once, the
testbed's noise and the SAME bands it gives later comparisons."""

import uuid

import numpy as np
import pytest
from helpers import claim_job as claim
from helpers import run_analysis
from sqlalchemy import text

SHA = "3" * 40


def body(project, **fields):
    return {"project": project, "commit": SHA, "workloads": ["larson"], "threads": [1],
            "trials": 8, "aa_comparisons": 2, "canary_comparisons": 1,
            "sizes_pct": [3, 10], **fields}


@pytest.mark.parametrize("fields,loc", [
    ({"testbed_id": 987654}, ["body", "testbed_id"]),
    ({"sizes_pct": [-3]}, ["body", "sizes_pct", 0]),
    ({"sizes_pct": [1, 500]}, ["body", "sizes_pct", 1]),
    ({"sizes_pct": [0]}, ["body", "sizes_pct", 0]),
    ({"aa_comparisons": 10000}, ["body", "aa_comparisons"]),
    ({"aa_comparisons": -1}, ["body", "aa_comparisons"]),
    ({"canary_comparisons": 100, "sizes_pct": [1, 2, 3, 4, 5]}, ["body", "canary_comparisons"]),
    ({"aa_comparisons": 0}, ["body", "aa_comparisons"]),
    ({"trials": "many"}, ["body", "trials"]),
    ({"trials": 10**9}, ["body", "trials"]),
    ({"sizes_pct": "big"}, ["body", "sizes_pct"]),
    ({"workloads": ["nope"]}, ["body", "workloads"]),
    ({"commit": "--upload-pack=x"}, ["body", "commit"]),
    ({"threads": [0]}, ["body", "threads", 0]),
    ({"size": 3}, ["body", "size"]),
])
def test_bad_input_is_a_4xx_naming_the_field(client, user_headers, make_project, fields, loc):
    project = make_project()
    r = client.post("/api/v1/calibrations", headers=user_headers,
                    json=body(project["name"], **fields))
    assert r.status_code == 422, r.text
    assert loc in [d["loc"] for d in r.json()["detail"]], r.text


def test_unknown_ids_are_404(client, user_headers):
    for url, loc in (("/api/v1/calibrations/999999", ["path", "calibration_id"]),
                     ("/api/v1/testbeds/999999/noise", ["path", "testbed_id"])):
        r = client.get(url, headers=user_headers)
        assert r.status_code == 404 and r.json()["detail"][0]["loc"] == loc, r.text
    r = client.get("/api/v1/calibrations/abc", headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "calibration_id"]


def trials(rng, *, head_level=1.0, n=8, noise=0.005):
    out = []
    for _ in range(n):
        for label, level in (("base", 1.0), ("head", head_level)):
            ops = 1e6 * level * (1 + noise * rng.standard_normal())
            out.append({
                "uid": str(uuid.uuid4()), "label": label,
                "allocator": {"name": "mallard", "commit": SHA, "variant": None},
                "workload": {"name": "larson", "params": {"threads": 1, "ops": 1000}},
                "seq": len(out), "warmup": False, "ok": True, "exit_code": 0,
                # the CPU did twice the wall clock's work: neighbours took half of it
                "measures": {"ops_per_sec": ops, "ops_per_cpu_sec": 2 * ops,
                             "wall_seconds": 0.2,
                             "instructions": 5e8 / level}})
    return out


def post(client, headers, runner, job, body_trials, attempt=1):
    return client.post("/api/v1/results", headers=headers, json={
        "job_id": job["id"], "attempt": attempt, "runner_id": runner["id"],
        "project": job["spec"]["project"],
        "testbed": {"arch": runner["arch"], "cpu_model": "Calibration CPU", "cpus": "1"},
        "trials": body_trials})


def test_calibration_survives_a_runner_restart_and_stores_once(
        client, user_headers, make_project, make_runner, engine, fast_analysis):
    project = make_project()
    runner, rheaders = make_runner()
    other, oheaders = make_runner(arch=runner["arch"])
    r = client.post("/api/v1/calibrations", headers=user_headers,
                    json=body(project["name"], arch=runner["arch"]))
    assert r.status_code == 201, r.text
    cal = r.json()
    assert cal["state"] == "aa" and len(cal["comparisons"]) == 2
    rng = np.random.default_rng(11)

    # A/A 1: the runner claims it and dies; its lease runs out; another runner takes it
    job = claim(client, rheaders, runner)
    assert job["kind"] == "calibrate"
    assert [a["label"] for a in job["spec"]["allocators"]] == ["base", "head"]
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                          "WHERE id = :id"), {"id": job["id"]})
    again = claim(client, oheaders, other)
    assert again["id"] == job["id"] and again["attempt"] == 2
    first = trials(rng)
    assert post(client, oheaders, other, again, first, attempt=2).status_code == 201
    # the dead runner's late post is refused; the same trials posted twice count once
    assert post(client, rheaders, runner, job, trials(rng)).status_code == 409
    assert post(client, oheaders, other, again, first, attempt=2).status_code in (200, 201)
    run_analysis(client.app)
    aa2 = claim(client, oheaders, other)
    assert post(client, oheaders, other, aa2, trials(rng)).status_code == 201
    run_analysis(client.app)

    cal = client.get(f"/api/v1/calibrations/{cal['id']}", headers=user_headers).json()
    assert cal["state"] == "canary", cal
    # first the probes, at the nominal 1% and 20%: 2e6 ops per CPU-second (1e6 by the wall
    # clock) is 500 ns of CPU per operation, larson frees 1.002 blocks per operation
    probes = [c for c in cal["comparisons"] if c["probe"]]
    assert len(probes) == 2 and cal["canary_ns"] == {}
    # the canary really costs 1.5% + 0.1% per ns (not the nominal 0.2% per ns)
    real = {5: 2.0, 100: 11.5}
    for _ in range(2):
        job = claim(client, oheaders, other)
        ns = int(job["spec"]["allocators"][1]["variant"].split("=")[1])
        assert ns in real
        assert post(client, oheaders, other, job,
                    trials(rng, head_level=1 - real[ns] / 100, noise=0.0005)).status_code == 201
        run_analysis(client.app)
    cal = client.get(f"/api/v1/calibrations/{cal['id']}", headers=user_headers).json()
    assert cal["state"] == "canary", cal
    # then the canaries, sized by the probes' line: (3 - 1.5) / 0.1 = 15, (10 - 1.5) / 0.1 = 85
    sized = cal["canary_ns"]["larson"]
    assert abs(sized["3"] - 15) <= 1 and abs(sized["10"] - 85) <= 2, cal["canary_ns"]
    assert cal["note"].startswith("canaries sized from probes (slowdown at ns per free): "
                                  "larson: 5 ns +2."), cal["note"]
    canaries = {c["canary_pct"]: c for c in cal["comparisons"] if c["canary_pct"]}
    assert sorted(canaries) == [3.0, 10.0]
    for _ in range(2):
        job = claim(client, oheaders, other)
        head = job["spec"]["allocators"][1]
        size = 3.0 if head["variant"] == f"canary_ns={sized['3']}" else 10.0
        assert head["variant"] == f"canary_ns={sized[f'{size:g}']}"
        assert post(client, oheaders, other, job,
                    trials(rng, head_level=1 - size / 100)).status_code == 201
        run_analysis(client.app)

    cal = client.get(f"/api/v1/calibrations/{cal['id']}", headers=user_headers).json()
    assert cal["state"] == "done", cal
    rows = {r["measure"]: r for r in cal["results"]}
    ops = rows["ops_per_sec"]
    assert (ops["aa_comparisons"], ops["false_alarms"]) == (2, 0)
    assert [(d["size_pct"], d["detected"], d["comparisons"]) for d in ops["detection"]] == [
        (3.0, 1, 1), (10.0, 1, 1)]
    assert 0 < ops["cv_pct"] < 2 and ops["band_pct"] == pytest.approx(1.0)
    assert rows["instructions"]["band_pct"] is None
    assert "| larson | 1 | ops_per_sec |" in cal["table"]

    # analysing a settled comparison again stores nothing twice
    with engine.begin() as conn:
        for c in cal["comparisons"]:
            conn.execute(text("INSERT INTO analysis_queue (kind, comparison_id) "
                              "VALUES ('comparison', :c)"), {"c": c["id"]})
    run_analysis(client.app)
    with engine.begin() as conn:
        n = conn.execute(text("SELECT count(*) FROM calibration_results "
                              "WHERE calibration_id = :c"), {"c": cal["id"]}).scalar_one()
        trial_count = conn.execute(text(
            "SELECT count(*) FROM trials t JOIN comparison_jobs cj ON cj.job_id = t.job_id "
            "JOIN comparisons c ON c.id = cj.comparison_id WHERE c.calibration_id = :c"),
            {"c": cal["id"]}).scalar_one()
    assert n == len(cal["results"]) and trial_count == 6 * 16  # 2 A/A, 2 probes, 2 canaries

    testbed_id = cal["testbed_id"]
    noise = client.get(f"/api/v1/testbeds/{testbed_id}/noise", headers=user_headers).json()
    series = {s["measure"]: s for s in noise["series"]}
    assert series["ops_per_sec"]["calibration_id"] == cal["id"]
    assert series["ops_per_sec"]["band_pct"] == pytest.approx(1.0)

    # a later comparison on that testbed is judged with the calibrated band
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": SHA}, "head": {"commit": SHA},
        "workloads": ["larson"], "threads": [1], "trials": 8, "arch": runner["arch"],
        "max_follow_ups": 0})
    job = claim(client, oheaders, other)
    assert post(client, oheaders, other, job, trials(rng)).status_code == 201
    run_analysis(client.app)
    d = client.get(f"/api/v1/comparisons/{r.json()['id']}", headers=user_headers).json()
    assert f"SAME bands from calibration #{cal['id']}" in d["report"]


def test_calibration_whose_jobs_all_fail_fails_cleanly(
        client, user_headers, make_project, make_runner, fast_analysis):
    project = make_project()
    runner, rheaders = make_runner()
    r = client.post("/api/v1/calibrations", headers=user_headers, json=body(
        project["name"], arch=runner["arch"], aa_comparisons=1, canary_comparisons=0))
    cal = r.json()
    for _ in range(3):  # every attempt fails
        job = claim(client, rheaders, runner)
        r = client.post(f"/api/v1/jobs/{job['id']}/fail", headers=rheaders, json={
            "runner_id": runner["id"], "attempt": job["attempt"], "log": "build failed",
            "retryable": True})
        assert r.status_code == 200, r.text
    run_analysis(client.app)
    cal = client.get(f"/api/v1/calibrations/{cal['id']}", headers=user_headers).json()
    assert cal["state"] == "failed" and cal["results"] == []
    assert cal["note"] == "no results: 1 of 1 comparisons failed"
