"""The analysis runs outside requests, from its queue, once per new data."""

from __future__ import annotations

import uuid

from helpers import results, run_analysis, trial
from sqlalchemy import text


def queued(engine, **where) -> list[tuple]:
    clause = " AND ".join(f"{k} = :{k}" for k in where) or "true"
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            f"SELECT kind, comparison_id FROM analysis_queue WHERE {clause} "
            "AND failed_at IS NULL"), where)]


def test_a_comparison_is_analysed_by_the_worker_once_per_new_data(
        client, app, user_headers, make_project, make_runner, engine, settings):
    fast = settings.model_copy(update={"stats_bootstrap_resamples": 500})
    run_analysis(app, fast)  # whatever other tests left
    project = make_project()
    runner, headers = make_runner()
    comp = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": "1" * 40}, "head": {"commit": "2" * 40},
        "workloads": ["larson"], "threads": [1], "trials": 3, "arch": runner["arch"],
        "max_follow_ups": 0}).json()
    job = client.post("/api/v1/jobs/claim", headers=headers,
                      json={"runner_id": runner["id"]}).json()
    trials = [trial("1" * 40, label="base", value=1e6 + i, threads=1) for i in range(3)] + \
             [trial("2" * 40, label="head", value=1e6 + i, threads=1) for i in range(3)]
    body = results(trials, job_id=job["id"], runner_id=runner["id"], project=project["name"])
    assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    # the request stored the trials and queued the analysis; it did not run it
    d = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user_headers).json()
    assert d["cells"] == [] and d["state"] == "running"  # claimed, not yet analysed
    assert queued(engine, comparison_id=comp["id"]) == [("comparison", comp["id"])]
    assert run_analysis(app, fast) == 1
    d = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user_headers).json()
    assert d["state"] == "done" and d["cells"]
    # the same post again: nothing new stored, nothing queued, nothing redone
    again = client.post("/api/v1/results", headers=headers, json=body)
    assert again.status_code == 201 and again.json()["stored"] == 0
    assert queued(engine, comparison_id=comp["id"]) == []
    assert run_analysis(app, fast) == 0


def test_history_uploads_queue_change_detection_once(client, app, make_project, make_runner,
                                                    engine, settings):
    run_analysis(app, settings)
    project = make_project()
    runner, headers = make_runner()
    commit = uuid.uuid4().hex + "0" * 8
    body = results([trial(commit), trial(commit)], runner_id=runner["id"],
                   project=project["name"], branch="main")
    assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    assert queued(engine, kind="changes") == [("changes", None)]
    assert client.post("/api/v1/results", headers=headers, json=body).json()["stored"] == 0
    assert queued(engine, kind="changes") == [("changes", None)]
    assert run_analysis(app, settings) == 1
    assert queued(engine, kind="changes") == []
