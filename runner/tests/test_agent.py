"""The agent against the real API (a `mallard-api serve` process over an embedded
PostgreSQL), through a thin proxy where a scenario needs a misbehaving server (live.py).

The API dies right after handing out the job, comes back, and the answer to the first
results post is lost after the API stored it: every trial still arrives exactly once
(by uid) and the job is done. A failing build is reported with its log. SIGTERM mid-job
reports a retryable failure and exits. A lease that runs out while the agent cannot
renew it is lost: the run is cancelled, or its late results are dropped. Hostile specs
(written into the queue behind the API's back) fail cleanly and run nothing.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from mallard_api.harness import API_BIN, wait_for

from .conftest import TOY_RECIPE_TABLE, first_cpu, gate_workload, write_suite
from .live import DROP, Agent, Proxy, RealApi, Seen, started_api

pytestmark = pytest.mark.skipif(not API_BIN.exists(), reason="mallard-api is not installed")


@pytest.fixture(scope="module")
def api_server(toy_repo: Path) -> Iterator[RealApi]:
    with started_api(toy_repo) as server:
        yield server


@pytest.fixture
def api(api_server: RealApi) -> Iterator[RealApi]:
    """The module's API, running (a test may have stopped it); the jobs a test leaves
    queued or running are cancelled after it, so the next test's agent claims only its own."""
    if api_server.proc is None or api_server.proc.poll() is not None:
        api_server.start()
    yield api_server
    if api_server.proc is None or api_server.proc.poll() is not None:
        api_server.start()
    api_server.sql("UPDATE jobs SET state = 'cancelled', lease_expires_at = NULL "
                   "WHERE state IN ('queued', 'running')")


@pytest.fixture
def agent_env(make_settings, tmp_path, toy_repo, api):
    settings = make_settings(cache_dir=tmp_path / "cache")
    api.add_suite(write_suite(settings, "t", {
        "trials": 3, "warmup": 1, "threads": [1, 2], "allocators": ["glibc"],
        "workloads": {"tiny": {"params": {"ops": 20000}}}}))
    env = {**os.environ, "MALLARD_RUNNER_WORKLOADS_DIR": str(settings.workloads_dir),
           "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
           "MALLARD_RUNNER_CACHE_DIR": str(settings.cache()),
           "MALLARD_RUNNER_POLL_SECONDS": "0.2", "MALLARD_RUNNER_RETRY_MAX_SECONDS": "0.5",
           "MALLARD_RUNNER_HEARTBEAT_SECONDS": "0.5",
           "MALLARD_RUNNER_FLUSH_TIMEOUT_SECONDS": "120",
           "MALLARD_RUNNER_REPO_ALLOW": f"file://{toy_repo}"}
    return settings, env


def job_spec(repo: Path, commit: str = "main") -> dict[str, Any]:
    return {"project": "mallard", "repo_url": str(repo),
            "suite": "t", "workloads": ["tiny"], "threads": [1, 2], "trials": 3, "warmup": 1,
            "branch": "main", "allocators": [
                {"label": "head", "name": "mallard", "commit": commit, "variant": "transfer=ring",
                 "build": {"repo_url": str(repo), "recipe": TOY_RECIPE_TABLE}},
                {"label": "peer", "name": "glibc"}]}


def agent_for(api: RealApi, url: str, tmp_path: Path, env: dict[str, str],
              name: str = "node-1") -> Agent:
    return Agent(url, api.token("runner", name), tmp_path / "agent", env, name)


def stop_after_claim(api: RealApi) -> Any:
    """A proxy hook: the API stops right after it handed out a job."""

    def after(seen: Seen) -> None:
        if seen.path == "/jobs/claim" and seen.status == 200:
            api.stop()

    return after


def a_failed_post(agent: Agent) -> bool:
    return any(p["attempts"] >= 1 for p in agent.pending())


def results_answers(proxy: Proxy) -> list[tuple[int | None, int, int]]:
    """(status, stored, duplicates) of every results post the API answered (a dropped
    answer: status None)."""
    return [(s.status, s.answer["stored"], s.answer["duplicates"])
            for s in proxy.posts("/results") if isinstance(s.answer, dict)
            and "stored" in s.answer]


def repost(api: RealApi, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """The same trials posted again as history without a job (which an admin lets the
    runner post to the project): what the API already holds of them."""
    (runner,) = [r for r in api.admin.get("/runners").json() if r["id"] == body["runner_id"]]
    api.admin.put(f"/runners/{runner['id']}/projects",
                  json={"projects": [body["project"]]}).raise_for_status()
    with httpx.Client(base_url=api.url, timeout=60,
                      headers={"Authorization": f"Bearer {token}"}) as c:
        r = c.post("/api/v1/results", json={**body, "job_id": None, "attempt": None})
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_results_survive_an_api_restart_exactly_once(api, agent_env, toy_repo, tmp_path):
    _, env = agent_env
    job_id = api.job(job_spec(toy_repo))

    def answer(method: str, path: str, body: Any) -> str | None:
        # the first results post the API answers: stored, and its answer never arrives
        answered = [s for s in proxy.posts("/results") if s.answer is not None]
        return DROP if path == "/results" and not answered else None

    proxy = Proxy(api.url, answer, after=stop_after_claim(api))
    agent = agent_for(api, proxy.url, tmp_path, env)
    try:
        agent.start("--once")
        # the agent runs the job with the API down, spools the results, cannot post them
        wait_for("a failed post in the spool", lambda: a_failed_post(agent), 120,
                 on_timeout=agent.log)
        (pending,) = agent.pending()
        assert pending["url"] == "/results", pending
        assert pending["body"]["job_id"] == job_id
        uids = [t["uid"] for t in pending["body"]["trials"]]
        assert len(uids) == 2 * 2 * 4 and len(set(uids)) == len(uids)
        api.start()
        assert agent.wait(120) == 0, agent.log()
    finally:
        agent.kill()
        proxy.close()
    assert results_answers(proxy) == [(None, 16, 0), (201, 0, 16)]  # stored once, then known
    assert repost(api, api.token("runner", "node-1"), pending["body"])["duplicates"] == 16
    job = api.get_job(job_id)
    assert job["state"] == "done" and [a["outcome"] for a in job["attempts"]] == ["done"]
    (runner,) = [r for r in api.admin.get("/runners").json() if r["name"] == "node-1"]
    assert runner["testbed"]["cpus"] == str(first_cpu())
    assert pending["body"]["testbed"]["arch"] == os.uname().machine
    mallard = [t for t in pending["body"]["trials"] if t["allocator"]["name"] == "mallard"]
    assert len(mallard) == 8 and all(len(t["allocator"]["commit"]) == 40 for t in mallard)
    assert not agent.pending()  # the spool is empty once delivered
    assert "delivered" in agent.log()


def test_build_failure_is_reported_with_its_log(api, agent_env, toy_repo, tmp_path):
    _, env = agent_env
    job_id = api.job(job_spec(toy_repo, commit="broken"))
    proxy = Proxy(api.url)
    agent = agent_for(api, proxy.url, tmp_path, env)
    try:
        assert agent.start("--once").wait(120) == 0, agent.log()
    finally:
        agent.kill()
        proxy.close()
    job = api.get_job(job_id)
    assert job["state"] == "failed"  # not retryable: failed at its first attempt
    (attempt,) = job["attempts"]
    assert attempt["outcome"] == "failed"
    assert "build failed" in attempt["log"] and "toy.c" in attempt["log"]
    assert "error" in attempt["log"]
    assert proxy.posts("/results") == []


def gated_job(api, settings, env, toy_repo, tmp_path):
    """A job whose first trial waits for the test: (job id, env, gate, started)."""
    wl = tmp_path / "wl"
    gate, started = tmp_path / "signals" / "gate.open", tmp_path / "signals" / "gate.started"
    gate_workload(wl, gate, started)
    # its own suite name: the API reads a suite once
    api.add_suite(write_suite(settings, "gated", {"trials": 3, "warmup": 0, "threads": [1],
                                                  "allocators": ["glibc"],
                                                  "workloads": {"gate": {}}}))
    spec = {**job_spec(toy_repo), "suite": "gated", "threads": [1], "trials": 3, "warmup": 0,
            "allocators": [{"label": "peer", "name": "glibc"}], "workloads": ["gate"]}
    return api.job(spec), {**env, "MALLARD_RUNNER_WORKLOADS_DIR": str(wl)}, gate, started


def test_sigterm_mid_job_reports_a_retryable_failure(api, agent_env, toy_repo, tmp_path):
    settings, env = agent_env
    job_id, env, gate, started = gated_job(api, settings, env, toy_repo, tmp_path)
    proxy = Proxy(api.url)
    agent = agent_for(api, proxy.url, tmp_path, env)
    try:
        agent.start()
        wait_for("the first trial to start", started.exists, 60, on_timeout=agent.log)
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGTERM)  # mid-job: the first trial is still running
        wait_for("the agent to take the signal",
                 lambda: "stopping: after the current trial" in agent.log(), 60)
        gate.touch()
        assert agent.wait(60) == 0, agent.log()
    finally:
        gate.touch()
        agent.kill()
        proxy.close()
    job = api.get_job(job_id)
    assert job["state"] == "queued"  # back in the queue for another attempt
    (attempt,) = job["attempts"]
    assert attempt["outcome"] == "failed" and "shutting down" in attempt["log"]
    assert proxy.posts("/results") == []


def another_runner_takes(api: RealApi, job_id: int) -> bool:
    """A second runner claims `job_id` (possible once its lease ran out)."""
    token = api.token("runner", "node-2")
    with httpx.Client(base_url=api.url + "/api/v1", timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as c:
        r = c.post("/runners/register", json={"name": "node-2", "arch": platform.machine(),
                                               "cpus": "0", "testbed": {
                                                   "arch": platform.machine(),
                                                   "cpu_model": "Test CPU"}})
        r.raise_for_status()
        claimed = c.post("/jobs/claim", json={"runner_id": r.json()["id"],
                                              "lease_seconds": 600})
    return claimed.status_code == 200 and claimed.json()["id"] == job_id


def renewals_blocked(blocked: threading.Event) -> Any:
    """A proxy rule: while `blocked`, every lease renewal is answered 503 (the API is
    unreachable for renewals), so the lease runs out."""

    def answer(method: str, path: str, body: Any) -> int | None:
        return 503 if blocked.is_set() and path.endswith("/lease") else None

    return answer


def test_lost_lease_cancels_the_run_and_posts_nothing(api, agent_env, toy_repo, tmp_path):
    settings, env = agent_env
    job_id, env, gate, started = gated_job(api, settings, env, toy_repo, tmp_path)
    blocked = threading.Event()
    blocked.set()
    proxy = Proxy(api.url, renewals_blocked(blocked))
    agent = agent_for(api, proxy.url, tmp_path, {**env, "MALLARD_RUNNER_LEASE_SECONDS": "3"})
    try:
        agent.start("--once")
        wait_for("the first trial to start", started.exists, 60, on_timeout=agent.log)
        wait_for("the lease to run out and another runner to claim the job",
                 lambda: another_runner_takes(api, job_id), 60)
        blocked.clear()  # the next renewal reaches the API: 409, the lease is lost
        wait_for("the agent to notice", lambda: f"lease on job {job_id} lost" in agent.log(), 60)
        gate.touch()  # the trial ends; the run is cancelled before the next one
        assert agent.wait(120) == 0, agent.log()
    finally:
        gate.touch()
        agent.kill()
        proxy.close()
    assert proxy.posts("/results") == [] and proxy.posts(f"/jobs/{job_id}/fail") == []
    assert "abandoned (lease lost); results not posted" in agent.log()
    job = api.get_job(job_id)
    assert job["state"] == "running" and job["attempt"] == 2  # the other runner's now


def test_a_runner_killed_with_results_in_its_spool_delivers_them_on_restart(
        api, agent_env, toy_repo, tmp_path):
    _, env = agent_env
    job_id = api.job(job_spec(toy_repo))
    proxy = Proxy(api.url, after=stop_after_claim(api))
    agent = agent_for(api, proxy.url, tmp_path, env)
    again = Agent(proxy.url, api.token("runner", "node-1"), tmp_path / "agent", env)
    try:
        agent.start("--once")
        wait_for("a failed post in the spool", lambda: a_failed_post(agent), 120,
                 on_timeout=agent.log)
        agent.kill()  # the runner dies with its results undelivered
        (pending,) = agent.pending()
        api.start()
        again.start("--once", "--max-idle", "1")
        assert again.wait(120) == 3, again.log()  # delivered, then no job: exit 3
    finally:
        agent.kill()
        again.kill()
        proxy.close()
    assert results_answers(proxy) == [(201, 16, 0)]
    assert api.get_job(job_id)["state"] == "done"
    assert not again.pending()


# -- hostile job specs, leases and results the API will not take ----------------------------
ATTACK = "--upload-pack=touch${IFS}marker;git-upload-pack"


class Recorder:
    """A real HTTP server that must never be asked anything (SSRF target)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        rec = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                rec.requests.append(f"GET {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "6")
                self.end_headers()
                self.wfile.write(b"secret")

            do_POST = do_GET  # noqa: N815

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_hostile_job_specs_fail_cleanly_and_run_nothing(api, agent_env, toy_repo, tmp_path):
    """Specs the API itself would refuse, written into its queue behind its back (a
    database restored from elsewhere, an older API): the runner checks them again."""
    settings, env = agent_env
    secret = tmp_path / "host-secret.yaml"
    secret.write_text("name: s\nworkloads: {tiny: {}}\npassword: hunter2-HOST-SECRET\n")
    internal = Recorder()
    base = job_spec(toy_repo)
    head = base["allocators"][0]
    specs = [
        {**base, "allocators": [{**head, "commit": ATTACK}]},
        {**base, "repo_url": f"{internal.url}/internal-only/secret.git"},
        {**base, "repo_url": "file:///etc"},
        {**base, "repo_url": "ext::sh -c touch${IFS}marker"},
        {**base, "allocators": [{**head, "build": {**head["build"], "repo_url": "file:///etc"}}]},
        {**base, "suite": str(secret)},
        {**base, "suite": str(secret.with_suffix(""))},
        {**base, "allocators": "not a list"},  # malformed: cannot even be read
    ]
    ids = []
    for spec in specs:
        job_id = api.job(base)
        api.sql("UPDATE jobs SET spec = CAST(%(s)s AS jsonb) WHERE id = %(id)s",
                {"s": json.dumps(spec), "id": job_id})
        ids.append(job_id)
    agent = agent_for(api, api.url, tmp_path, env)
    try:
        agent.start(cwd=tmp_path)
        wait_for(f"{len(specs)} failed jobs",
                 lambda: all(api.get_job(j)["state"] == "failed" for j in ids), 120,
                 on_timeout=agent.log)
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.wait(60) == 0, agent.log()
    finally:
        agent.kill()
        internal.close()
    jobs = [api.get_job(j) for j in ids]
    logs = [j["attempts"][0]["log"] for j in jobs]
    assert all(len(j["attempts"]) == 1 for j in jobs)  # not retryable: one attempt each
    # refused on claim by the wire model (mallard_wire.jobs.JobSpec), naming the field, or
    # by the runner's own guard (guard.py) for what only the runner can judge (its allow-list)
    expect = ["spec.allocators.0.commit", "not on this runner's allow-list",
              "not on this runner's allow-list", "remote-helper", "not on this runner's allow-list",
              "spec.suite", "spec.suite", "malformed"]
    for log, words in zip(logs, expect, strict=True):
        assert words in log, (words, log)
    assert internal.requests == []  # refused before any fetch
    assert not list(tmp_path.rglob("marker")) and not list(toy_repo.rglob("marker"))
    assert not (settings.cache() / "builds").exists()  # nothing was configured or built
    assert "hunter2" not in json.dumps(jobs) and "hunter2" not in agent.log()


def test_results_carry_the_claimed_attempt(api, agent_env, toy_repo, tmp_path):
    _, env = agent_env
    job_id = api.job(job_spec(toy_repo))
    proxy = Proxy(api.url)
    agent = agent_for(api, proxy.url, tmp_path, env)
    try:
        assert agent.start("--once").wait(120) == 0, agent.log()
    finally:
        agent.kill()
        proxy.close()
    (post,) = proxy.posts("/results")
    job = api.get_job(job_id)
    assert post.status == 201 and post.body["job_id"] == job_id
    assert post.body["attempt"] == job["attempt"] == 1 and job["state"] == "done"
    # a job's rounds run in blocks by case (its pairs back to back), seeded and recorded
    artifacts = post.body["artifacts"]
    assert artifacts["order_by_case"] is True and isinstance(artifacts["seed"], int)
    assert artifacts["order"]


def test_results_of_a_lost_lease_are_dropped_not_retried(api, agent_env, toy_repo, tmp_path):
    settings, env = agent_env
    job_id, env, gate, started = gated_job(api, settings, env, toy_repo, tmp_path)
    blocked = threading.Event()
    blocked.set()  # renewals never arrive: the agent does not learn the lease is gone
    proxy = Proxy(api.url, renewals_blocked(blocked))
    agent = agent_for(api, proxy.url, tmp_path, {**env, "MALLARD_RUNNER_LEASE_SECONDS": "3"})
    try:
        agent.start("--once")
        wait_for("the first trial to start", started.exists, 60, on_timeout=agent.log)
        wait_for("another runner to hold the job", lambda: another_runner_takes(api, job_id),
                 60)
        gate.touch()  # the run ends; its results arrive for a job someone else holds
        assert agent.wait(120) == 0, agent.log()
    finally:
        gate.touch()
        agent.kill()
        proxy.close()
    (post,) = proxy.posts("/results")  # one post, answered 409 lease_lost, never again
    assert post.status == 409 and post.answer["detail"][0]["type"] == "lease_lost"
    assert proxy.posts(f"/jobs/{job_id}/fail") == []
    assert not agent.pending() and not list(agent.spool.glob("rejected/*"))
    assert "no longer holds the job's lease; not retried" in agent.log()


@pytest.mark.parametrize("status,retryable", [(422, False), (500, True)])
def test_results_the_api_never_takes_fail_the_job_and_are_kept(api, agent_env, toy_repo,
                                                               tmp_path, status, retryable):
    """422: the real API refuses them (their project does not exist: the spec was changed
    in the queue); 500: the proxy answers every results post with a server error."""
    _, env = agent_env
    job_id = api.job(job_spec(toy_repo))
    if status == 422:
        api.sql("UPDATE jobs SET spec = jsonb_set(spec, '{project}', '\"ghost\"') "
                "WHERE id = %(id)s", {"id": job_id})
    proxy = Proxy(api.url, lambda method, path, body: status if status == 500
                  and path == "/results" else None)
    agent = agent_for(api, proxy.url, tmp_path, {**env, "MALLARD_RUNNER_POST_MAX_ATTEMPTS": "3"})
    try:
        assert agent.start("--once").wait(120) == 0, agent.log()
    finally:
        agent.kill()
        proxy.close()
    assert [s.status for s in proxy.posts("/results")] == [status] * (1 if status == 422 else 3)
    job = api.get_job(job_id)
    (attempt,) = job["attempts"]
    assert f"HTTP {status}" in attempt["log"] and "rejected" in attempt["log"]
    assert job["state"] == ("queued" if retryable else "failed")
    (kept,) = agent.spool.glob(f"rejected/*results-{job_id}-*.json")  # kept, not deleted
    entry = json.loads(kept.read_text())
    assert entry["body"]["job_id"] == job_id and len(entry["body"]["trials"]) == 16
    assert f"HTTP {status}" in entry["last_error"]
    assert not agent.pending()
