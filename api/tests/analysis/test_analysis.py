"""The analysis seams: after_ingest never loses an ingest, alerts resolve themselves when
the series comes back, a failed comparison job fails the comparison, labels and keys."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from helpers import patch_analysis_settings, run_analysis
from mallard_api.analysis import alerts, comparisons
from mallard_api.models.records import Side
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql.projects import CommitInfo
from sqlalchemy import text


@pytest.fixture
def fast(monkeypatch, settings):
    s = settings.model_copy(update={"stats_bootstrap_resamples": 2000, "alert_webhooks": ""})
    patch_analysis_settings(monkeypatch, s)
    return s


def test_allocator_label():
    assert comparisons.allocator_label(Side(commit="a" * 40, variant="transfer=ring"),
                                       "mallard") == "mallard@aaaaaaa transfer=ring"
    assert comparisons.allocator_label(Side(commit="main", variant=None), "mimalloc") == (
        "mimalloc@main")
    assert comparisons.allocator_label(Side(commit="v1.2"), "jemalloc") == "jemalloc@v1.2"


def test_series_key_identity():
    base = alert_sql.TouchedSeries(1, "p", 1, "main", "larson", {"threads": 2}, "x", 2,
                                   "mallard", "", "x86_64", "f", "ops_per_sec")
    same = alert_sql.TouchedSeries(9, "p", 7, "main", "larson", {"threads": 2}, "y", 2,
                                   "mallard", "", "x86_64", "f", "ops_per_sec")
    other = alert_sql.TouchedSeries(1, "p", 1, "main", "larson", {"threads": 2}, "x", 2,
                                    "mallard", "", "x86_64", "f", "wall_seconds")
    assert alerts.series_key(base) == alerts.series_key(same)
    assert alerts.series_key(base) != alerts.series_key(other)


def _trials(commit, value, rng, n=3):
    return [{"uid": str(uuid.uuid4()), "label": "head",
             "allocator": {"name": "mallard", "commit": commit},
             "workload": {"name": "larson", "params": {"threads": 1}}, "seq": i,
             "measures": {"ops_per_sec": value * (1 + 0.003 * rng.standard_normal())}}
            for i in range(n)]


def _post(client, headers, runner, project, trials):
    r = client.post("/api/v1/results", headers=headers, json={
        "runner_id": runner["id"], "project": project, "branch": "main",
        "testbed": {"arch": runner["arch"]}, "trials": trials})
    assert r.status_code == 201, r.text
    run_analysis(client.app)
    return r.json()


def _branch(app, project, n):
    commits = [uuid.uuid4().hex + "abcd1234" for _ in range(n)]
    with app.state.sessionmaker() as s:
        p = project_sql.get(s, project)
        project_sql.record_push(s, p, "main", commits[-1],
                                [CommitInfo(sha=c) for c in commits])
        s.commit()
    return commits


def test_alert_resolves_when_the_series_comes_back(client, app, user_headers, make_project,
                                                   make_runner, fast):
    project = make_project()["name"]
    runner, rh = make_runner()
    commits = _branch(app, project, 30)
    rng = np.random.default_rng(5)
    level = 1e6 * (1 + 0.01 * rng.standard_normal(30))
    values = [v * (0.9 if 10 <= i < 20 else 1.0) for i, v in enumerate(level)]
    _post(client, rh, runner, project,
          [t for i in range(14) for t in _trials(commits[i], values[i], rng)])
    alerts = client.get("/api/v1/alerts", headers=user_headers,
                        params={"project": project}).json()
    assert [(a["state"], a["first_bad_commit"]) for a in alerts] == [("open", commits[10])]
    _post(client, rh, runner, project,
          [t for i in range(14, 30) for t in _trials(commits[i], values[i], rng)])
    alerts = client.get("/api/v1/alerts", headers=user_headers,
                        params={"project": project}).json()
    assert [(a["state"], a["first_bad_commit"]) for a in alerts] == [("resolved", commits[10])]
    assert f"resolved: recovered at {commits[20][:7]}" in alerts[0]["text"]
    with app.state.sessionmaker() as s:
        events = s.execute(text("SELECT direction, commit_sha FROM change_points cp "
                                "WHERE project = :p"), {"p": project}).all()
        assert sorted(tuple(e) for e in events) == sorted(
            [("regression", commits[10]), ("improvement", commits[20])])


def test_analysis_failure_never_loses_the_ingest(client, app, make_project, make_runner,
                                                 monkeypatch, fast):
    project = make_project()["name"]
    runner, rh = make_runner()
    commits = _branch(app, project, 1)

    def boom(*args, **kwargs):
        raise RuntimeError("analysis bug")

    monkeypatch.setattr(alerts, "detect_changes", boom)
    out = _post(client, rh, runner, project, _trials(commits[0], 1e6, np.random.default_rng(1)))
    assert out["stored"] == 3
    with app.state.sessionmaker() as s:
        n = s.execute(text("SELECT count(*) FROM v_measurements WHERE project = :p"),
                      {"p": project}).scalar_one()
        assert n == 3
        # the queue item stays, with its error, to be retried later
        failed = s.execute(text(
            "SELECT id, attempts, last_error FROM analysis_queue WHERE kind = 'changes' "
            "AND last_error LIKE '%analysis bug%'")).all()
        assert [(a, "analysis bug" in e) for _, a, e in failed] == [(1, True)]
        s.execute(text("DELETE FROM analysis_queue WHERE id = :i"), {"i": failed[0][0]})
        s.commit()


def test_failed_job_fails_the_comparison(client, user_headers, make_project, make_runner,
                                         fast):
    project = make_project()["name"]
    runner, rh = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project, "base": {"commit": "main"}, "head": {"commit": "topic"},
        "arch": runner["arch"], "trials": 5})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    job = client.post("/api/v1/jobs/claim", headers=rh,
                      json={"runner_id": runner["id"], "lease_seconds": 60}).json()
    assert job["spec"]["comparison_id"] == cid
    assert job["spec"]["workloads"] is None  # the whole suite
    assert [a["label"] for a in job["spec"]["allocators"]] == ["base", "head"]
    r = client.post(f"/api/v1/jobs/{job['id']}/fail", headers=rh,
                    json={"runner_id": runner["id"], "attempt": job["attempt"],
                          "log": "build failed", "retryable": False})
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text
    # a read never writes: the state is settled by the analysis worker, which the
    # failure queued
    before = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert before["state"] == "running"  # since the claim
    assert client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json() == before
    with client.app.state.sessionmaker() as s:
        assert s.execute(text("SELECT count(*) FROM analysis_queue WHERE comparison_id = :c"),
                         {"c": cid}).scalar_one() == 1
    run_analysis(client.app)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert d["state"] == "failed"
    assert "no results" in d["report"]


CONTRACT_COLUMNS = {  # docs/contracts.md §7: the dashboards' interface
    "v_comparisons": "comparison_id, created_at, state, project, arch, base_label, head_label, "
                     "hypothesis, cells, improved, regressed, same, unknown",
    "v_comparison_cells": "comparison_id, workload, params, threads, measure, base_median, "
                          "head_median, ratio, diff_pct, ci_low_pct, ci_high_pct, p_value, "
                          "p_adjusted, n_base, n_head, robust_base, robust_head, verdict, line, "
                          "mde_pct, unjudged_reason",
    "v_comparison_jobs": "comparison_id, job_id, round, trials",
    "v_alerts": "alert_id, opened_at, updated_at, resolved_at, state, label, project, branch, "
                "workload, params, threads, arch, measure, allocator, first_bad_commit, "
                "last_good_commit, change_pct, ci_low_pct, ci_high_pct, text",
}


@pytest.mark.parametrize("view", sorted(CONTRACT_COLUMNS))
def test_view_columns_are_the_contract(engine, view):
    with engine.connect() as conn:
        cols = conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = :v "
            "ORDER BY ordinal_position"), {"v": view}).scalars().all()
    assert ", ".join(cols) == CONTRACT_COLUMNS[view]


def test_migration_0002_downgrades_and_upgrades(pg_server):
    from conftest import MIGRATIONS, create_database
    from mallard_api import db

    url = create_database(pg_server, "mallard_migrate_0002")
    db.migrate(url, MIGRATIONS)
    db.downgrade(url, MIGRATIONS, "0001_core")
    eng = db.make_engine(url, 1)
    try:
        with eng.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('v_alerts')")).scalar() is None
            assert conn.execute(text("SELECT to_regclass('v_series')")).scalar() is not None
        db.migrate(url, MIGRATIONS)
        with eng.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('webhook_outbox')")).scalar() \
                is not None
    finally:
        eng.dispose()
