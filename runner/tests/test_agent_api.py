"""The agent against the real API (api/, mallard_api) over a real embedded PostgreSQL.

The API is stopped while the job runs and started again: the results the agent
spooled arrive once, the job is done, and re-posting the same trials stores
nothing new (the API keeps each uid once).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mallard_api.harness import API_BIN, ApiProcess, wait_for
from mallard_runner.settings import REPO_ROOT

from .conftest import first_cpu, gate_workload, write_suite
from .test_agent import agent_log, job_spec

pytestmark = pytest.mark.skipif(not API_BIN.exists(), reason="mallard-api is not installed")


class RealApi(ApiProcess):
    """The real API (embedded PostgreSQL in `base`), reading the suites the test writes."""

    def __init__(self, base: Path):
        # the API checks a job's suite by name: it reads the suites the test writes
        self.suites_dir = base / "suites"
        shutil.copytree(REPO_ROOT / "runner" / "suites", self.suites_dir)
        env = {**os.environ, "MALLARD_DATA_DIR": str(base / "pgdata"),
               "MALLARD_REPO_URL_ALLOW": "file:///", "MALLARD_SUITES_DIR": str(self.suites_dir)}
        env.pop("DATABASE_URL", None)
        super().__init__(env, log=base / "api.log", cwd=REPO_ROOT)


@pytest.fixture
def real_api() -> Iterator[RealApi]:
    base = Path(tempfile.mkdtemp(prefix="mallard-runner-api-"))
    api = RealApi(base)
    try:
        api.start()
        yield api
    finally:
        api.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_agent_survives_a_real_api_restart(real_api, make_settings, toy_repo, tmp_path):
    settings = make_settings(cache_dir=tmp_path / "cache")
    wl = tmp_path / "wl"
    gate, started = tmp_path / "signals" / "gate.open", tmp_path / "signals" / "gate.started"
    gate_workload(wl, gate, started)  # the first trial waits until the API is down
    suite = write_suite(settings, "t", {"trials": 3, "warmup": 0, "threads": [1],
                                        "allocators": ["glibc"], "workloads": {"gate": {}}})
    shutil.copy(suite, real_api.suites_dir / suite.name)
    user = real_api.token("user")
    runner_token = real_api.token("runner", "node-real")
    api = httpx.Client(base_url=real_api.url, timeout=30,
                       headers={"Authorization": f"Bearer {user}"})
    api.put("/api/v1/projects/mallard", json={"repo_url": str(toy_repo),
                                              "allocator_dir": "allocator",
                                              "default_branch": "main"}).raise_for_status()
    spec = {**job_spec(toy_repo), "workloads": ["gate"], "threads": [1], "trials": 3,
            "warmup": 0}
    job = api.post("/api/v1/jobs", json={"kind": "commit", "arch": platform.machine(),
                                         "project": "mallard", "spec": spec})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    env = {**os.environ, "MALLARD_RUNNER_WORKLOADS_DIR": str(wl),
           "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
           "MALLARD_RUNNER_STATE_DIR": str(settings.state_dir),
           "MALLARD_RUNNER_CACHE_DIR": str(settings.cache()),
           "MALLARD_RUNNER_POLL_SECONDS": "0.2", "MALLARD_RUNNER_RETRY_MAX_SECONDS": "1",
           "MALLARD_RUNNER_HEARTBEAT_SECONDS": "1",
           "MALLARD_RUNNER_FLUSH_TIMEOUT_SECONDS": "300",
           "MALLARD_RUNNER_REPO_ALLOW": f"file://{toy_repo}"}
    spool = tmp_path / "spool"

    agent = subprocess.Popen([str(Path(sys.executable).parent / "mallard-runner"), "agent",
                              "--api", real_api.url, "--token", runner_token, "--cpus",
                              str(first_cpu()), "--name", "node-real", "--spool", str(spool),
                              "--once"], env=env,
                             stdout=open(tmp_path / "agent.log", "ab"),  # noqa: SIM115
                             stderr=subprocess.STDOUT)
    try:
        wait_for("the job's first trial", started.exists, 120)
        assert api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "running"
        real_api.stop()  # the API goes away while the job runs
        gate.touch()
        wait_for("a failed post in the spool",
                 lambda: any(json.loads(p.read_text())["attempts"] >= 1
                             for p in spool.glob("*.json")), 180)
        (pending,) = [json.loads(p.read_text()) for p in spool.glob("*.json")]
        assert pending["url"] == "/results"
        assert pending["body"]["attempt"] == 1  # the claimed attempt travels with the results
        real_api.start()
        assert agent.wait(300) == 0, agent_log(spool)
    finally:
        gate.touch()
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert "stored 6, duplicates 0" in agent_log(spool)
    done = api.get(f"/api/v1/jobs/{job_id}").json()
    assert done["state"] == "done"
    # the same trials again: the API recognises every uid
    runner_api = httpx.Client(base_url=real_api.url, timeout=60,
                              headers={"Authorization": f"Bearer {runner_token}"})
    again = runner_api.post("/api/v1/results", json={**pending["body"], "job_id": None,
                                                      "attempt": None})
    assert again.status_code == 201, again.text
    assert again.json()["stored"] == 0 and again.json()["duplicates"] == 6
    assert not list(spool.glob("*.json"))
