"""The agent against the real API (api/, mallard_api) over a real embedded PostgreSQL,
no proxy between them.

The API is stopped while the job runs and started again: the results the agent
spooled arrive once, the job is done, and re-posting the same trials stores
nothing new (the API keeps each uid once).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator

import pytest
from mallard_api.harness import API_BIN, wait_for
from mallard_runner.client import ApiClient, LeaseLost
from mallard_runner.delivery import Delivery
from mallard_runner.spool import Spool
from mallard_wire import results as wire

from .conftest import gate_workload, write_suite
from .live import Agent, RealApi, started_api
from .test_agent import job_spec, repost

pytestmark = pytest.mark.skipif(not API_BIN.exists(), reason="mallard-api is not installed")


@pytest.fixture
def api(toy_repo) -> Iterator[RealApi]:
    with started_api(toy_repo) as server:
        yield server


def test_agent_survives_a_real_api_restart(api, make_settings, toy_repo, tmp_path):
    settings = make_settings(cache_dir=tmp_path / "cache")
    wl = tmp_path / "wl"
    gate, started = tmp_path / "signals" / "gate.open", tmp_path / "signals" / "gate.started"
    gate_workload(wl, gate, started)  # the first trial waits until the API is down
    api.add_suite(write_suite(settings, "t", {"trials": 3, "warmup": 0, "threads": [1],
                                              "allocators": ["glibc"],
                                              "workloads": {"gate": {}}}))
    job_id = api.job({**job_spec(toy_repo), "workloads": ["gate"], "threads": [1],
                      "trials": 3, "warmup": 0})
    runner_token = api.token("runner", "node-real")
    agent = Agent(api.url, runner_token, tmp_path / "agent", {
        **os.environ, "MALLARD_RUNNER_WORKLOADS_DIR": str(wl),
        "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
        "MALLARD_RUNNER_CACHE_DIR": str(settings.cache()),
        "MALLARD_RUNNER_POLL_SECONDS": "0.2", "MALLARD_RUNNER_RETRY_MAX_SECONDS": "1",
        "MALLARD_RUNNER_HEARTBEAT_SECONDS": "1", "MALLARD_RUNNER_FLUSH_TIMEOUT_SECONDS": "300",
        "MALLARD_RUNNER_REPO_ALLOW": f"file://{toy_repo}"}, name="node-real")
    try:
        agent.start("--once")
        wait_for("the job's first trial", started.exists, 120, on_timeout=agent.log)
        assert api.get_job(job_id)["state"] == "running"
        api.stop()  # the API goes away while the job runs
        gate.touch()
        wait_for("a failed post in the spool",
                 lambda: any(p["attempts"] >= 1 for p in agent.pending()), 180)
        (pending,) = agent.pending()
        assert pending["url"] == "/results"
        assert pending["body"]["attempt"] == 1  # the claimed attempt travels with the results
        api.start()
        assert agent.wait(300) == 0, agent.log()
    finally:
        gate.touch()
        agent.kill()
    assert "stored 6, duplicates 0" in agent.log()
    assert api.get_job(job_id)["state"] == "done"
    # the same trials again: the API recognises every uid
    again = repost(api, runner_token, pending["body"])
    assert again["stored"] == 0 and again["duplicates"] == 6
    assert not agent.pending()


def test_a_stale_attempts_lease_and_fail_are_refused_by_the_real_api(api, toy_repo, tmp_path):
    """The attack, through the agent's own client and spool: attempt 1 of a job outlives
    its lease and the same runner claims the job again (attempt 2). Attempt 1's renewal
    is a lost lease and its failure report is dropped (409), so attempt 2 runs on; the
    report of attempt 2 is taken."""
    arch = f"stale-{platform.machine()}"
    spec = {**job_spec(toy_repo), "suite": "quick", "workloads": ["larson"]}
    r = api.admin.post("/jobs", json={"kind": "commit", "arch": arch, "project": "mallard",
                                      "spec": spec})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    client = ApiClient(api.url, api.token("runner", "node-stale"))
    runner_id = client.register("node-stale", arch, "0", wire.TestbedIn(arch=arch))
    first = client.claim(runner_id, lease_seconds=1)
    assert first is not None and (first.id, first.attempt) == (job_id, 1)
    time.sleep(1.5)  # attempt 1 stalls past its lease
    second = client.claim(runner_id, lease_seconds=600)
    assert second is not None and (second.id, second.attempt) == (job_id, 2)
    with pytest.raises(LeaseLost):
        client.renew(job_id, runner_id, first.attempt, 600)
    client.renew(job_id, runner_id, second.attempt, 600)
    logs: list[str] = []
    delivery = Delivery(Spool(tmp_path / "spool"), "node-stale", logs.append)
    delivery.fail(job_id, runner_id, first.attempt, "attempt 1 gave up", retryable=False)
    assert delivery.flush(client) == 0
    assert any("dropped" in line for line in logs), logs
    job = api.get_job(job_id)
    assert (job["state"], job["attempt"]) == ("running", 2)
    assert [a["log"] for a in job["attempts"]][1] is None
    delivery.fail(job_id, runner_id, second.attempt, "build failed", retryable=False)
    assert delivery.flush(client) == 0
    job = api.get_job(job_id)
    assert job["state"] == "failed" and job["attempts"][1]["log"] == "build failed"
    client.close()
