"""The agent against a real HTTP server (tests/mini_api.py, state on disk).

The server dies right after handing out the job, comes back, and loses the
answer to the first results post after storing it: every trial still arrives
exactly once (by uid) and the job is done. A failing build is reported with
its log. SIGTERM mid-job reports a retryable failure and exits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from mallard_api.harness import free_port, wait_for

from .conftest import first_cpu, gate_workload, write_suite

MINI_API = Path(__file__).resolve().parent / "mini_api.py"
AGENT = Path(sys.executable).parent / "mallard-runner"
TOKEN = "test-token-0123456789abcdef"


class Server:
    def __init__(self, tmp: Path, jobs: list[dict[str, Any]]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tmp / "api-state.json"
        self.jobs = tmp / "jobs.json"
        self.jobs.write_text(json.dumps(jobs))
        self.proc: subprocess.Popen[str] | None = None

    def start(self, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(MINI_API), "--port", str(self.port), "--state", str(self.state),
             "--token", TOKEN, "--jobs", str(self.jobs), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait(10)

    def data(self) -> dict[str, Any]:
        if self.proc is not None and self.proc.poll() is None:
            return dict(httpx.get(f"{self.url}/_state", timeout=10).json())
        return dict(json.loads(self.state.read_text()))


@pytest.fixture
def agent_env(make_settings, tmp_path, toy_repo):
    settings = make_settings(cache_dir=tmp_path / "cache")
    write_suite(settings, "t", {"trials": 3, "warmup": 1, "threads": [1, 2],
                                "allocators": ["glibc"],
                                "workloads": {"tiny": {"params": {"ops": 20000}}}})
    env = {**os.environ, "MALLARD_RUNNER_WORKLOADS_DIR": str(settings.workloads_dir),
           "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
           "MALLARD_RUNNER_STATE_DIR": str(settings.state_dir),
           "MALLARD_RUNNER_CACHE_DIR": str(settings.cache()),
           "MALLARD_RUNNER_POLL_SECONDS": "0.2", "MALLARD_RUNNER_RETRY_MAX_SECONDS": "0.5",
           "MALLARD_RUNNER_LEASE_SECONDS": "3", "MALLARD_RUNNER_HEARTBEAT_SECONDS": "0.5",
           "MALLARD_RUNNER_FLUSH_TIMEOUT_SECONDS": "120",
           "MALLARD_RUNNER_REPO_ALLOW": f"file://{toy_repo}"}
    return settings, env


def start_agent(server: Server, env: dict[str, str], spool: Path, *extra: str,
                cwd: Path | None = None):
    log = open(spool.parent / "agent.log", "ab")  # noqa: SIM115
    return subprocess.Popen([str(AGENT), "agent", "--api", server.url, "--token", TOKEN,
                             "--cpus", str(first_cpu()), "--name", "node-1", "--spool",
                             str(spool), *extra], env=env, stdout=log, stderr=log, cwd=cwd)


def job_spec(repo: Path, commit: str = "main") -> dict[str, Any]:
    return {"project": "mallard", "repo_url": str(repo), "allocator_dir": "allocator",
            "suite": "t", "workloads": ["tiny"], "threads": [1, 2], "trials": 3, "warmup": 1,
            "branch": "main", "allocators": [
                {"label": "head", "name": "mallard", "commit": commit, "variant": "transfer=ring"},
                {"label": "peer", "name": "glibc"}]}


def one_job(tmp_path: Path, env: dict[str, str], specs: list[dict[str, Any]], *flags: str
            ) -> tuple[dict[str, Any], Path]:
    """The mini API started with `flags`, an agent run with --once to its end: (state, spool)."""
    server = Server(tmp_path, specs)
    server.start(*flags)
    spool = tmp_path / "spool"
    agent = start_agent(server, env, spool, "--once")
    try:
        assert agent.wait(120) == 0, agent_log(spool)
        return server.data(), spool
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        server.stop()


def agent_log(spool: Path) -> str:
    """The agent's log, lines unwrapped (Rich wraps at the console's width)."""
    return " ".join((spool.parent / "agent.log").read_text(errors="replace").split())


def test_results_survive_an_api_restart_exactly_once(agent_env, toy_repo, tmp_path):
    _, env = agent_env
    server = Server(tmp_path, [job_spec(toy_repo)])
    spool = tmp_path / "spool"
    server.start("--exit-after-claim")  # the API dies right after handing out the job
    agent = start_agent(server, env, spool, "--once")
    try:
        assert server.proc is not None
        server.proc.wait(60)  # it exited after the claim
        job = server.data()["jobs"][0]
        assert job["state"] == "running" and job["attempt"] == 1
        # the agent runs the job with the API down, spools the results, and cannot post them
        wait_for("a failed post in the spool",
                 lambda: any(json.loads(p.read_text())["attempts"] >= 1
                             for p in spool.glob("*.json")), 120)
        (pending,) = [json.loads(p.read_text()) for p in spool.glob("*.json")]
        assert pending["url"] == "/results" and pending["body"]["job_id"] == 1
        uids = [t["uid"] for t in pending["body"]["trials"]]
        assert len(uids) == 2 * 2 * 4 and len(set(uids)) == len(uids)
        # the API comes back, stores the post, and the answer is lost on the way
        server.start("--drop-first-results-response")
        assert agent.wait(120) == 0, agent_log(spool)
        data = server.data()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        server.stop()
    assert sorted(data["trials"]) == sorted(uids)  # every trial, each stored once
    assert [(p["stored"], p["duplicates"]) for p in data["posts"]] == [(16, 0), (0, 16)]
    assert data["jobs"][0]["state"] == "done"
    assert data["runners"][0]["name"] == "node-1"
    assert data["runners"][0]["testbed"]["cpus"] == str(first_cpu())
    assert data["posts"][0]["testbed"]["arch"] == os.uname().machine
    mallard = [t for t in data["trials"].values() if t["allocator"]["name"] == "mallard"]
    assert len(mallard) == 8 and all(len(t["allocator"]["commit"]) == 40 for t in mallard)
    assert not list(spool.glob("*.json"))  # the spool is empty once delivered
    assert "delivered" in agent_log(spool)


def test_build_failure_is_reported_with_its_log(agent_env, toy_repo, tmp_path):
    _, env = agent_env
    data, _ = one_job(tmp_path, env, [job_spec(toy_repo, commit="broken")])
    (fail,) = data["fails"]
    assert fail["job_id"] == 1 and fail["retryable"] is False and fail["runner_id"] == 1
    assert "build failed" in fail["log"] and "toy.c" in fail["log"] and "error" in fail["log"]
    assert data["jobs"][0]["state"] == "failed" and data["trials"] == {}


def gated_job(settings, env, toy_repo, tmp_path):
    """A job whose first trial waits for the test: (spec, env, gate, started)."""
    wl = tmp_path / "wl"
    gate, started = tmp_path / "gate.open", tmp_path / "gate.started"
    gate_workload(wl, gate, started)
    write_suite(settings, "t", {"trials": 3, "warmup": 0, "threads": [1],
                                "allocators": ["glibc"], "workloads": {"gate": {}}})
    spec = {**job_spec(toy_repo), "allocators": [{"label": "peer", "name": "glibc"}],
            "workloads": ["gate"], "threads": [1], "trials": 3, "warmup": 0}
    return spec, {**env, "MALLARD_RUNNER_WORKLOADS_DIR": str(wl)}, gate, started


def test_sigterm_mid_job_reports_a_retryable_failure(agent_env, toy_repo, tmp_path):
    settings, env = agent_env
    spec, env, gate, started = gated_job(settings, env, toy_repo, tmp_path)
    server = Server(tmp_path, [spec])
    server.start()
    spool = tmp_path / "spool"
    agent = start_agent(server, env, spool)
    try:
        wait_for("the first trial to start", started.exists, 60)
        agent.send_signal(signal.SIGTERM)  # mid-job: the first trial is still running
        wait_for("the agent to take the signal",
                 lambda: "stopping: after the current trial" in agent_log(spool), 60)
        gate.touch()
        assert agent.wait(60) == 0, agent_log(spool)
        data = server.data()
    finally:
        gate.touch()
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        server.stop()
    (fail,) = data["fails"]
    assert fail["retryable"] is True and "shutting down" in fail["log"]
    assert data["jobs"][0]["state"] == "queued"  # back in the queue for another attempt
    assert data["trials"] == {}


def test_lost_lease_cancels_the_run_and_posts_nothing(agent_env, toy_repo, tmp_path):
    settings, env = agent_env
    spec, env, gate, started = gated_job(settings, env, toy_repo, tmp_path)
    server = Server(tmp_path, [spec])
    server.start("--lose-lease")  # every renewal answers 409
    spool = tmp_path / "spool"
    agent = start_agent(server, env, spool, "--once")
    try:
        wait_for("the first trial to start", started.exists, 60)
        wait_for("a lease renewal (refused)", lambda: server.data()["leases"] >= 1, 60)
        wait_for("the agent to notice", lambda: "lease on job 1 lost" in agent_log(spool), 60)
        gate.touch()  # the trial ends; the run is cancelled before the next one
        assert agent.wait(120) == 0, agent_log(spool)
        data = server.data()
    finally:
        gate.touch()
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        server.stop()
    assert data["trials"] == {} and data["posts"] == [] and data["fails"] == []
    assert "abandoned (lease lost); results not posted" in agent_log(spool)


def test_a_runner_killed_with_results_in_its_spool_delivers_them_on_restart(
        agent_env, toy_repo, tmp_path):
    _, env = agent_env
    server = Server(tmp_path, [job_spec(toy_repo)])
    spool = tmp_path / "spool"
    server.start("--exit-after-claim")
    agent = start_agent(server, env, spool, "--once")
    try:
        assert server.proc is not None
        server.proc.wait(60)
        wait_for("a failed post in the spool",
                 lambda: any(json.loads(p.read_text())["attempts"] >= 1
                             for p in spool.glob("*.json")), 120)
        agent.kill()  # the runner dies with its results undelivered
        agent.wait()
        (pending,) = [json.loads(p.read_text()) for p in spool.glob("*.json")]
        server.start()
        again = start_agent(server, env, spool, "--once", "--max-idle", "1")
        assert again.wait(120) == 3, agent_log(spool)  # delivered, then no job: exit 3
        data = server.data()
    finally:
        for p in (agent, locals().get("again")):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        server.stop()
    assert sorted(data["trials"]) == sorted(t["uid"] for t in pending["body"]["trials"])
    assert data["jobs"][0]["state"] == "done"
    assert not list(spool.glob("*.json"))


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


def test_hostile_job_specs_fail_cleanly_and_run_nothing(agent_env, toy_repo, tmp_path):
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
        {**base, "allocator_dir": "../../../../tmp/evil"},
        {**base, "suite": str(secret)},
        {**base, "suite": str(secret.with_suffix(""))},
        {**base, "allocators": "not a list"},  # malformed: cannot even be read
    ]
    server = Server(tmp_path, specs)
    server.start()
    spool = tmp_path / "spool"
    agent = start_agent(server, env, spool, cwd=tmp_path)
    try:
        wait_for(f"{len(specs)} failure reports",
                 lambda: len(server.data()["fails"]) == len(specs), 120)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(60) == 0, agent_log(spool)
        data = server.data()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        server.stop()
        internal.close()
    fails = {f["job_id"]: f for f in data["fails"]}
    assert sorted(fails) == list(range(1, len(specs) + 1))
    assert all(f["retryable"] is False for f in fails.values())
    assert all(j["state"] == "failed" for j in data["jobs"])
    # refused on claim by the wire model (mallard_wire.jobs.JobSpec), naming the field, or
    # by the runner's own guard (guard.py) for what only the runner can judge (its allow-list)
    expect = {1: "spec.allocators.0.commit", 2: "not on this runner's allow-list",
              3: "not on this runner's allow-list", 4: "remote-helper",
              5: "spec.allocator_dir", 6: "spec.suite", 7: "spec.suite",
              8: "malformed"}
    for jid, words in expect.items():
        assert words in fails[jid]["log"], (jid, fails[jid]["log"])
    assert internal.requests == []  # refused before any fetch
    assert not [p for p in tmp_path.rglob("marker")] and not list(toy_repo.rglob("marker"))
    assert not (settings.cache() / "builds").exists()  # nothing was configured or built
    assert "hunter2" not in json.dumps(data) and "hunter2" not in agent_log(spool)
    assert data["trials"] == {} and data["posts"] == []


def test_results_carry_the_claimed_attempt(agent_env, toy_repo, tmp_path):
    _, env = agent_env
    data, _ = one_job(tmp_path, env, [job_spec(toy_repo)])
    (post,) = data["posts"]
    assert post["job_id"] == 1 and post["attempt"] == data["jobs"][0]["attempt"] == 1
    assert data["jobs"][0]["state"] == "done"


def test_results_of_a_lost_lease_are_dropped_not_retried(agent_env, toy_repo, tmp_path):
    _, env = agent_env
    # another runner holds the job when the results arrive
    data, spool = one_job(tmp_path, env, [job_spec(toy_repo)], "--requeue-on-results")
    assert data["stale_results"] == 1  # one post, answered 409 lease_lost, never again
    assert data["trials"] == {} and data["fails"] == []
    assert not list(spool.glob("*.json")) and not list(spool.glob("rejected/*"))
    assert "no longer holds the job's lease; not retried" in agent_log(spool)


@pytest.mark.parametrize("status,retryable", [(422, False), (500, True)])
def test_results_the_api_never_takes_fail_the_job_and_are_kept(agent_env, toy_repo, tmp_path,
                                                               status, retryable):
    _, env = agent_env
    data, spool = one_job(tmp_path, {**env, "MALLARD_RUNNER_POST_MAX_ATTEMPTS": "3"},
                          [job_spec(toy_repo)], "--results-status", str(status))
    assert data["refused_results"] == (1 if status == 422 else 3)
    (fail,) = data["fails"]
    assert fail["job_id"] == 1 and fail["retryable"] is retryable
    assert f"HTTP {status}" in fail["log"] and "rejected" in fail["log"]
    assert data["jobs"][0]["state"] == ("queued" if retryable else "failed")
    (kept,) = spool.glob("rejected/*results-1-*.json")  # kept for inspection, not deleted
    entry = json.loads(kept.read_text())
    assert entry["body"]["job_id"] == 1 and len(entry["body"]["trials"]) == 16
    assert f"HTTP {status}" in entry["last_error"]
    assert not list(spool.glob("*.json"))
