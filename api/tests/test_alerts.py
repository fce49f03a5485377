"""Regression alerts end to end: branch history through POST /results, change detection,
alert rows and v_alerts, webhook events through the outbox to a real local receiver,
and the alert routes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from helpers import patch_analysis_settings, run_analysis
from mallard_api import delivery
from mallard_api.deps import get_settings
from mallard_api.sql import projects as project_sql
from mallard_api.sql.projects import CommitInfo
from sqlalchemy import text
from webhook_receiver import Receiver


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def alert_settings(monkeypatch, app, settings, receiver):
    s = settings.model_copy(update={
        "stats_bootstrap_resamples": 2000,
        "alert_webhooks": f"generic:{receiver.url('/generic')},slack:{receiver.url('/slack')}",
    })
    patch_analysis_settings(monkeypatch, s)
    monkeypatch.setitem(app.dependency_overrides, get_settings, lambda: s)  # the routes too
    return s


def shas(n: int) -> list[str]:
    return [uuid.uuid4().hex + uuid.uuid4().hex[:8] for _ in range(n)]


def record_branch(app, project: str, commits: list[str]) -> None:
    with app.state.sessionmaker() as s:
        p = project_sql.get(s, project)
        assert p is not None
        infos = [CommitInfo(sha=c, parent=commits[i - 1] if i else None)
                 for i, c in enumerate(commits)]
        project_sql.record_push(s, p, "main", commits[-1], infos)
        s.commit()


def head_trials(commit: str, workload: str, value: float, rng, n: int = 3) -> list[dict]:
    return [{
        "uid": str(uuid.uuid4()), "label": "head",
        "allocator": {"name": "mallard", "commit": commit, "variant": None},
        "workload": {"name": workload, "params": {"threads": 2, "seed": 42}},
        "seq": i, "ok": True, "exit_code": 0,
        "measures": {"ops_per_sec": value * (1 + 0.003 * rng.standard_normal())},
    } for i in range(n)]


def post(client, headers, runner, project, trials):
    r = client.post("/api/v1/results", headers=headers, json={
        "runner_id": runner["id"], "project": project, "branch": "main",
        "testbed": {"arch": runner["arch"], "cpu_model": "Test CPU"}, "trials": trials})
    assert r.status_code == 201, r.text
    run_analysis(client.app)


def alerts_of(client, headers, project, **params) -> list[dict]:
    r = client.get("/api/v1/alerts", headers=headers, params={"project": project, **params})
    assert r.status_code == 200, r.text
    return list(r.json())


def test_step_opens_one_alert_and_notifies(client, app, user_headers, make_project,
                                           make_runner, alert_settings, receiver):
    project = make_project()["name"]
    runner, rh = make_runner()
    commits = shas(30)
    record_branch(app, project, commits)
    rng = np.random.default_rng(11)
    # larson: -8% from commit 20 on (1% noise per commit); rpc: noise and one wild outlier
    level = 1e6 * (1 + 0.01 * rng.standard_normal(30))
    larson = [v * (0.92 if i >= 20 else 1.0) for i, v in enumerate(level)]
    rpc = list(2e6 * (1 + 0.01 * rng.standard_normal(30)))
    rpc[25] *= 0.6

    def batch(i: int) -> list[dict]:
        return (head_trials(commits[i], "larson", larson[i], rng)
                + head_trials(commits[i], "rpc", rpc[i], rng))

    post(client, rh, runner, project, [t for i in range(20) for t in batch(i)])
    assert alerts_of(client, user_headers, project) == []
    for i in range(20, 30):
        post(client, rh, runner, project, batch(i))
        opened = alerts_of(client, user_headers, project)
        if i < 22:
            assert opened == [], f"alert before {3} commits confirmed the step (at {i})"
    assert len(opened) == 1, opened
    alert = opened[0]
    assert alert["workload"] == "larson" and alert["measure"] == "ops_per_sec"
    assert alert["first_bad_commit"] == commits[20]
    assert alert["last_good_commit"] == commits[19]
    assert alert["change_pct"] == pytest.approx(-8, abs=1.5)
    assert alert["ci_low_pct"] < alert["change_pct"] < alert["ci_high_pct"] < 0
    assert alert["state"] == "open" and alert["label"] is None
    assert f"from {commits[20][:7]} (last good {commits[19][:7]})" in alert["text"]

    with app.state.sessionmaker() as s:
        row = s.execute(text("SELECT state, workload, threads, measure, allocator, "
                             "first_bad_commit, branch FROM v_alerts WHERE alert_id = :i"),
                        {"i": alert["alert_id"]}).one()
        assert tuple(row) == ("open", "larson", 2, "ops_per_sec", "mallard", commits[20], "main")
        cps = s.execute(text("SELECT count(*) FROM change_points WHERE alert_id = :i"),
                        {"i": alert["alert_id"]}).scalar_one()
        assert cps == 1
        # the opened event went through the outbox to both targets, once each
        for _ in range(2):
            delivery.deliver_due(s, now=datetime.now(UTC) + timedelta(hours=1))
            s.commit()
    mine = [(p, b) for p, b in receiver.bodies if f"#{alert['alert_id']}:" in b["text"]]
    assert sorted(p for p, _ in mine) == ["/generic", "/slack"]
    generic = next(b for p, b in mine if p == "/generic")
    assert generic["event"] == "alert.opened"
    assert generic["alert"]["first_bad_commit"] == commits[20]
    slack = next(b for p, b in mine if p == "/slack")
    assert set(slack) == {"text", "blocks"}

    # the routes: read, acknowledge, label, resolve (sends alert.resolved)
    aid = alert["alert_id"]
    assert client.get(f"/api/v1/alerts/{aid}", headers=user_headers).json() == alert
    r = client.post(f"/api/v1/alerts/{aid}/acknowledge", headers=user_headers)
    assert r.status_code == 200 and r.json()["state"] == "acknowledged"
    assert alerts_of(client, user_headers, project, state="open") == []
    r = client.post(f"/api/v1/alerts/{aid}/label", headers=user_headers,
                    json={"label": "bogus"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "label"]
    r = client.post(f"/api/v1/alerts/{aid}/label", headers=user_headers, json={})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "label"]
    r = client.post(f"/api/v1/alerts/{aid}/label", headers=user_headers,
                    json={"label": "true_positive"})
    assert r.status_code == 200 and r.json()["label"] == "true_positive"
    r = client.post(f"/api/v1/alerts/{aid}/resolve", headers=user_headers)
    assert r.status_code == 200 and r.json()["state"] == "resolved"
    assert r.json()["resolved_at"] is not None
    r = client.post(f"/api/v1/alerts/{aid}/acknowledge", headers=user_headers)
    assert r.status_code == 409
    with app.state.sessionmaker() as s:
        delivery.deliver_due(s, now=datetime.now(UTC) + timedelta(hours=2))
        s.commit()
    resolved = [b for p, b in receiver.bodies
                if p == "/generic" and b.get("event") == "alert.resolved"
                and b["alert"]["alert_id"] == aid]
    assert len(resolved) == 1 and resolved[0]["alert"]["label"] == "true_positive"
    assert [a["alert_id"] for a in alerts_of(client, user_headers, project,
                                             state="resolved", workload="larson")] == [aid]
    assert alerts_of(client, user_headers, project, workload="rpc") == []


def test_alert_routes_errors(client, user_headers):
    assert client.get("/api/v1/alerts/999999", headers=user_headers).status_code == 404
    r = client.get("/api/v1/alerts", headers=user_headers, params={"state": "closed"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "state"]
    assert client.get("/api/v1/alerts").status_code == 401
    r = client.post("/api/v1/alerts/999999/resolve", headers=user_headers)
    assert r.status_code == 404


def test_runner_token_cannot_resolve(client, make_runner):
    _, rh = make_runner()
    r = client.post("/api/v1/alerts/1/resolve", headers=rh)
    assert r.status_code == 403
