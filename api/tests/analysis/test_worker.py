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


def test_a_post_queues_one_trial_per_series_it_touched(client, app, make_project, make_runner,
                                                       engine, settings):
    """The queue row carries a trial per touched series, not every trial, and finds the
    same series as all the post's trials would (measures that differ between the trials
    of one cell included; warm-ups, failures and peers touch none)."""
    from mallard_api.sql import alerts as alert_sql

    run_analysis(app, settings)
    project = make_project()
    runner, headers = make_runner()
    commit = uuid.uuid4().hex + "0" * 8
    trials = [trial(commit, measures={"ops_per_sec": 1e6 + i, "wall_seconds": 0.4})
              for i in range(3)]
    trials += [trial(commit, measures={"ops_per_sec": 2e6, "max_rss_bytes": 1e7}),
               trial(commit, workload="rpc", threads=4),
               trial(commit, warmup=True, measures={"warm_only": 1.0}),
               trial(commit, ok=False, measures={"failed_only": 1.0}),
               trial(None, label="peer", allocator="glibc"),
               trial(commit, variant="transfer=ring", measures={"ops_per_sec": 3e6})]
    body = results(trials, runner_id=runner["id"], project=project["name"], branch="main")
    assert client.post("/api/v1/results", headers=headers, json=body).json()["stored"] == 9
    with engine.connect() as conn:
        queued_ids = conn.execute(text(
            "SELECT trial_ids FROM analysis_queue WHERE kind = 'changes' "
            "AND failed_at IS NULL")).scalar_one()
        all_ids = list(conn.execute(text("SELECT id FROM trials WHERE uid = ANY(:u)"),
                                    {"u": [t["uid"] for t in trials]}).scalars())
    assert len(queued_ids) == 4  # larson (two measure sets), rpc, the other variant
    with app.state.sessionmaker() as s:
        from_queue = alert_sql.touched_series(s, queued_ids)
        from_all = alert_sql.touched_series(s, all_ids)
    def key(x: alert_sql.TouchedSeries) -> tuple:
        return (x.branch_id, x.workload, x.params_sha, x.allocator, x.variant,
                x.testbed_fingerprint, x.measure)

    assert sorted(map(key, from_queue)) == sorted(map(key, from_all))
    assert sorted((x.workload, x.variant, x.measure) for x in from_queue) == [
        ("larson", "", "max_rss_bytes"), ("larson", "", "ops_per_sec"),
        ("larson", "", "wall_seconds"), ("larson", "transfer=ring", "ops_per_sec"),
        ("rpc", "", "ops_per_sec"), ("rpc", "", "wall_seconds")]
    assert run_analysis(app, settings) == 1

    # peers only (no head trial of a branch commit): nothing to detect, nothing queued
    body = results([trial(None, label="peer", allocator="glibc")], runner_id=runner["id"],
                   project=project["name"], branch="main")
    assert client.post("/api/v1/results", headers=headers, json=body).json()["stored"] == 1
    assert queued(engine, kind="changes") == []


def test_a_poll_runs_change_detection_once(client, app, make_project, make_runner, engine,
                                           settings, monkeypatch):
    """What is queued for change detection while it runs waits for the next poll (one
    pass per poll while results stream in); `drain` (and so the tests) runs it all."""
    from mallard_api.analysis import alerts
    from mallard_api.analysis.worker import AnalysisWorker

    run_analysis(app, settings)
    project = make_project()
    runner, headers = make_runner()

    def post() -> None:
        body = results([trial(uuid.uuid4().hex + "0" * 8)], runner_id=runner["id"],
                       project=project["name"], branch="main")
        assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201

    passes: list[list[int]] = []
    detect = alerts.detect_changes

    def detect_and_post_meanwhile(session, trial_ids, settings=None):  # type: ignore[no-untyped-def]
        passes.append(trial_ids)
        if len(passes) == 1:
            post()  # committed while the first pass runs
        return detect(session, trial_ids, settings)

    monkeypatch.setattr(alerts, "detect_changes", detect_and_post_meanwhile)
    worker = AnalysisWorker(app.state.background_sessionmaker, settings)
    post()
    assert worker.poll() is False
    assert len(passes) == 1 and queued(engine, kind="changes") == [("changes", None)]
    assert worker.poll() is False
    assert len(passes) == 2 and queued(engine, kind="changes") == []
