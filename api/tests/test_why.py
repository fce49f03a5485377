"""The `why:` follows the verdict (analysis/why.py), through the real API, PostgreSQL, the
outbox and real local receivers: a regressed commit verdict's alert webhook gets one
`alert.explained` with the profile's why once its profile is stored (never a second, for
a profile asked for later), and a regressed pull request's one comment is updated in place
with the profile's line (the fake forge keeps one comment)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import claim_job, patch_analysis_settings, results, run_analysis, trial
from mallard_api import delivery
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from profile_data import profile_body
from sqlalchemy.orm import Session
from test_forges import AUTH, TOKEN, Forge
from test_pull_requests import HEADS, MB, TIP, event, headers
from test_verdicts import answer, hexsha, push
from webhook_receiver import Receiver

WHY = "mld_free +312 instructions per call (+540%)"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def forge() -> Iterator[Forge]:
    f = Forge()
    yield f
    f.server.shutdown()


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch, app: Any,
              settings: Settings) -> Iterator[Callable[..., Settings]]:
    """Settings for the worker, the routes and the results post (the app's own)."""
    before = app.state.settings

    def make(**update: Any) -> Settings:
        conf = settings.model_copy(update={"comparison_max_follow_ups": 0,
                                           "bisect_auto": False, "push_backfill": False,
                                           **update})
        patch_analysis_settings(monkeypatch, conf)
        monkeypatch.setitem(app.dependency_overrides, get_settings, lambda: conf)
        app.state.settings = conf
        return conf

    yield make
    app.state.settings = before


def post_profile(client: TestClient, rheaders: dict[str, str], runner: dict[str, Any],
                 project: str, job: dict[str, Any], **case: Any) -> None:
    assert job["kind"] == "profile", job
    body = {"job_id": job["id"], "attempt": job["attempt"], "runner_id": runner["id"],
            "project": project, "testbed": {"arch": runner["arch"], "cpu_model": "Test CPU",
                                            "cpus": "1"},
            "trials": [], "profiles": [{**profile_body(), "case": {
                "workload": "larson", "threads": 1, "params": {}, **case}}]}
    r = client.post("/api/v1/results", headers=rheaders, json=body)
    assert r.status_code == 201, r.text


def deliver(app: Any) -> None:
    with app.state.background_sessionmaker() as s:
        delivery.deliver_due(s, now=datetime.now(UTC) + timedelta(hours=1))


def test_the_alert_webhook_is_told_the_why_once(
        configure: Callable[..., Settings], client: TestClient, app: Any,
        db_session: Session, make_project: Any, make_runner: Any,
        user_headers: dict[str, str], unique: str, receiver: Receiver) -> None:
    runner, rheaders = make_runner()
    conf = configure(push_max_queued=1,
                     default_arch=runner["arch"], alert_webhooks=(
                         f"generic:{receiver.url('/generic')},slack:{receiver.url('/slack')}"))
    project = make_project()["name"]
    c0, c1 = hexsha(f"{unique}0"), hexsha(f"{unique}1")
    cost = {c0: 1_000_000.0, c1: 1_312_000.0}
    push(db_session, conf, project, None, [c0], ["start"])
    answer(client, rheaders, runner, claim_job(client, rheaders, runner), cost)
    push(db_session, conf, project, c0, [c1], ["free: extra work"])
    answer(client, rheaders, runner, claim_job(client, rheaders, runner), cost)
    run_analysis(app, conf)
    deliver(app)
    got = client.get(f"/api/v1/projects/{project}/commits/{c1}", headers=user_headers).json()
    (v,) = [x for x in got["verdicts"] if x["arch"] == runner["arch"]]
    assert v["verdict"] == "regressed" and v["alert_id"]
    events = [b.get("event") for _, b in receiver.bodies if _ == "/generic"]
    assert events == ["alert.opened"]  # the verdict did not wait for the profile
    post_profile(client, rheaders, runner, project, claim_job(client, rheaders, runner))
    deliver(app)
    generic = [b for path, b in receiver.bodies if path == "/generic"]
    assert [b["event"] for b in generic] == ["alert.opened", "alert.explained"]
    told = generic[1]
    assert told["alert"]["alert_id"] == v["alert_id"] and told["why"] == WHY
    assert told["text"] == f"Explained alert #{v['alert_id']}: {generic[0]['alert']['text']}" \
                           f"; why: {WHY}"
    assert told["profile_url"].endswith(f"/ui/comparisons/{v['comparison_id']}#profiles")
    slack = [b for path, b in receiver.bodies if path == "/slack"]
    assert len(slack) == 2 and slack[1]["text"] == told["text"]
    assert any(f"why: {WHY}" in f["text"] for f in slack[1]["blocks"][1]["fields"])
    # a profile asked for later (another case's params) is stored, the alert not told again
    r = client.post(f"/api/v1/comparisons/{v['comparison_id']}/profiles", headers=user_headers,
                    json={"workload": "larson", "threads": 1, "params": {"ops": 5000}})
    assert r.status_code == 202, r.text
    post_profile(client, rheaders, runner, project, claim_job(client, rheaders, runner),
                 params={"ops": 5000})
    deliver(app)
    assert [b["event"] for path, b in receiver.bodies if path == "/generic"] == [
        "alert.opened", "alert.explained"]
    assert len([p for p, _ in receiver.bodies if p == "/slack"]) == 2


def test_the_pull_request_comment_is_updated_with_the_why(
        configure: Callable[..., Settings], client: TestClient, app: Any,
        make_project: Any, make_runner: Any, admin_headers: dict[str, str],
        user_headers: dict[str, str], forge: Forge) -> None:
    runner, rheaders = make_runner()
    configure(forge_url_allow=forge.url, peers="", default_arch=runner["arch"])
    project = make_project()
    forge.auth = AUTH["github"]
    forge.answers[f"/repos/acme/mallard/compare/{TIP}...{HEADS[0]}?per_page=1"] = {
        "status": "diverged", "merge_base_commit": {"sha": MB}}
    client.put(f"/api/v1/projects/{project['name']}/forge", headers=admin_headers,
               json={"kind": "github", "base_url": forge.url, "repo": "acme/mallard",
                     "token": TOKEN}).raise_for_status()
    raw = json.dumps(event("github", project, "opened", HEADS[0])).encode()
    r = client.post("/api/v1/webhooks/github", content=raw, headers=headers("github", raw))
    assert r.status_code == 200, r.text
    job = claim_job(client, rheaders, runner)
    trials = [trial(a["commit"], threads=1, label=a["label"], measures={
        "instructions": 1_000_000.0 if a["label"] == "base" else 1_312_000.0})
        for a in job["spec"]["allocators"] for _ in "12"]
    client.post("/api/v1/results", headers=rheaders, json=results(
        trials, job_id=job["id"], runner_id=runner["id"],
        project=project["name"])).raise_for_status()
    run_analysis(app)
    deliver(app)
    (thread,) = forge.comments.values()
    assert len(thread) == 1 and "1 regressed cell(s)" in thread[0]["body"]
    assert "why:" not in thread[0]["body"]
    post_profile(client, rheaders, runner, project["name"], claim_job(client, rheaders, runner))
    deliver(app)
    (thread,) = forge.comments.values()
    assert len(thread) == 1, thread  # the one comment, updated in place
    assert f"profile larson threads=1: 1,000,000 -> 1,312,000 instructions (+31.2%); " \
           f"why: {WHY}" in thread[0]["body"]
    writes = [(c[0], c[1]) for c in forge.calls if c[0] != "GET" and "/statuses/" not in c[1]]
    assert [m for m, _ in writes] == ["POST", "PATCH"]
