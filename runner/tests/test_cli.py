"""`mallard-runner bench`: a real run, written as ResultsIn JSON, markdown and CSV."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mallard_runner.cli import app
from mallard_wire.results import ResultsIn
from typer.testing import CliRunner

from .conftest import first_cpu, git, write_suite

runner = CliRunner()


def env_for(settings) -> dict[str, str]:
    return {"MALLARD_RUNNER_WORKLOADS_DIR": str(settings.workloads_dir),
            "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
            "MALLARD_RUNNER_STATE_DIR": str(settings.state_dir),
            "COLUMNS": "200"}


def test_bench_writes_results_in_the_api_schema(make_settings, tmp_path):
    settings = make_settings()
    write_suite(settings, "t", {"trials": 3, "warmup": 1, "threads": [1, 2],
                                "allocators": ["glibc", "jemalloc"],
                                "workloads": {"tiny": {"params": {"ops": 20000}}}})
    out = tmp_path / "out"
    r = runner.invoke(app, ["bench", "--suite", "t", "--cpus", str(first_cpu()), "--json",
                            str(out / "r.json"), "--markdown", str(out / "r.md"), "--csv",
                            str(out / "r.csv")], env=env_for(settings))
    assert r.exit_code == 0, r.output
    res = ResultsIn.model_validate_json((out / "r.json").read_text())
    found = {t.allocator.name for t in res.trials}
    n_alloc = len(found)
    assert "glibc" in found
    assert len(res.trials) == n_alloc * 2 * (3 + 1)
    assert len({t.uid for t in res.trials}) == len(res.trials)
    assert res.testbed.cpus == str(first_cpu())
    assert all(len(v["runs"]) == 4 for v in res.artifacts["hyperfine"].values())
    assert len(res.artifacts["hyperfine"]) == n_alloc * 2
    raw = json.loads((out / "r.json").read_text())
    assert set(raw) == {"job_id", "runner_id", "attempt", "project", "branch", "testbed",
                        "trials", "artifacts", "profiles"}
    md = (out / "r.md").read_text()
    assert "| tiny threads=1 ops=20000 | glibc | peer |" in md and "vs glibc" in md
    rows = list(csv.DictReader((out / "r.csv").open()))
    assert len(rows) == len(res.trials) and float(rows[0]["ops_per_sec"]) > 0
    assert "tiny  (ops/s; ratio = median / glibc median)" in r.stdout


def test_bench_builds_mallard_at_a_commit_with_variants(make_settings, toy_repo, tmp_path):
    settings = make_settings()
    write_suite(settings, "t", {"trials": 2, "warmup": 0, "threads": [1],
                                "workloads": {"tiny": {"params": {"ops": 20000}}}})
    r = runner.invoke(app, ["bench", "--suite", "t", "--allocator-source", str(toy_repo),
                            "--commit", "main", "--allocators",
                            "mallard:transfer=mutex,mallard:transfer=ring,glibc",
                            "--baseline", "mallard:transfer=mutex",
                            "--json", str(tmp_path / "r.json")], env=env_for(settings))
    assert r.exit_code == 0, r.output
    res = ResultsIn.model_validate_json((tmp_path / "r.json").read_text())
    sha = git(toy_repo, "rev-parse", "main")
    mallard = [t for t in res.trials if t.allocator.name == "mallard"]
    assert len(mallard) == 4
    assert {t.allocator.variant for t in mallard} == {"transfer=mutex", "transfer=ring"}
    for t in mallard:
        assert t.allocator.commit == sha and t.label == "head"
        assert t.allocator.library_sha256 and t.allocator.build_flags
        assert t.counters is not None and t.counters["transfer"] == t.allocator.variant[9:]
    assert all(t.counters is None for t in res.trials if t.allocator.name == "glibc")
    assert "1.000" in r.stdout  # the baseline's own ratio


def test_bench_reports_a_build_failure_with_its_log(make_settings, toy_repo):
    settings = make_settings()
    write_suite(settings, "t", {"workloads": {"tiny": {}}})
    r = runner.invoke(app, ["bench", "--suite", "t", "--allocator-source", str(toy_repo),
                            "--commit", "broken", "--allocators", "mallard,glibc"],
                      env=env_for(settings))
    assert r.exit_code == 1
    assert "build failed" in r.output and "toy.c" in r.output and "error" in r.output


def test_bench_says_which_workload_program_is_missing(make_settings):
    settings = make_settings()
    write_suite(settings, "t", {"workloads": {"nothere": {}}})
    r = runner.invoke(app, ["bench", "--suite", "t", "--allocators", "glibc"],
                      env=env_for(settings))
    assert r.exit_code == 2 and "nothere" in r.output and "make workloads" in r.output


def test_a_missing_peer_is_reported_and_skipped(make_settings, tmp_path, monkeypatch):
    import mallard_runner.peers as peers

    monkeypatch.setitem(peers.PEER_LIBRARIES, "jemalloc", ("libjemalloc-not-here.so.9",))
    settings = make_settings()
    write_suite(settings, "t", {"trials": 1, "warmup": 0, "threads": [1],
                                "workloads": {"tiny": {"params": {"ops": 20000}}}})
    r = runner.invoke(app, ["bench", "--suite", "t", "--allocators", "glibc,jemalloc",
                            "--json", str(tmp_path / "r.json")], env=env_for(settings))
    assert r.exit_code == 0, r.output
    assert "peer jemalloc skipped" in r.output and "libjemalloc-not-here.so.9" in r.output
    res = ResultsIn.model_validate_json((tmp_path / "r.json").read_text())
    assert {t.allocator.name for t in res.trials} == {"glibc"}
    assert "jemalloc" in res.artifacts["missing_peers"]


def agent_cmd(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "mallard-runner"), "agent", "--api",
            "http://127.0.0.1:9", "--cpus", str(first_cpu()), *args]


def token_file(tmp_path: Path, token: str, mode: int = 0o600) -> Path:
    path = tmp_path / "runner.token"
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("how", ["option", "env"])
@pytest.mark.parametrize("token,why", [("CHANGE-ME", "CHANGE-ME placeholder"),
                                       ("change-me-0123456789abcdef", "CHANGE-ME placeholder"),
                                       ("short-token", "shorter than 16 bytes")])
def test_agent_refuses_placeholder_and_short_tokens(tmp_path, how, token, why):
    env = {**os.environ, "MALLARD_RUNNER_STATE_DIR": str(tmp_path)}
    path = token_file(tmp_path, token)
    args = agent_cmd()
    if how == "option":
        args += ["--token-file", str(path)]
    else:
        env["MALLARD_RUNNER_TOKEN_FILE"] = str(path)
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert why in " ".join(out.stderr.split()) and "Traceback" not in out.stderr
    if token != "CHANGE-ME":  # the message names the problem, not the value
        assert token not in out.stderr


def test_agent_without_hyperfine_does_not_start(tmp_path):
    """A node missing a tool every trial needs says which at start, not as a traceback in
    each job it would claim and fail."""
    env = {**os.environ, "MALLARD_RUNNER_STATE_DIR": str(tmp_path),
           "MALLARD_RUNNER_HYPERFINE": "hyperfine-not-here"}
    args = agent_cmd("--token-file", str(token_file(tmp_path, "a-real-looking-token-0123")))
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    said = " ".join(out.stderr.split())
    assert "hyperfine-not-here not found" in said and "Traceback" not in said


def test_agent_refuses_a_token_in_its_environment(tmp_path):
    """A process's environment is readable by what it starts: the token has no place there."""
    token = "a-real-looking-token-0123456789"
    env = {**os.environ, "MALLARD_RUNNER_STATE_DIR": str(tmp_path),
           "MALLARD_RUNNER_TOKEN": token}
    out = subprocess.run(agent_cmd("--token-file", str(token_file(tmp_path, token))), env=env,
                         capture_output=True, text=True, timeout=60)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "MALLARD_RUNNER_TOKEN is not read" in said
    assert "MALLARD_RUNNER_TOKEN_FILE" in said and token not in out.stderr


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_agent_refuses_a_token_file_others_may_read(tmp_path, mode):
    token = "a-real-looking-token-0123456789"
    env = {**os.environ, "MALLARD_RUNNER_STATE_DIR": str(tmp_path)}
    out = subprocess.run(agent_cmd("--token-file", str(token_file(tmp_path, token, mode))),
                         env=env, capture_output=True, text=True, timeout=60)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and f"is mode {mode:04o}" in said and "chmod 600" in said
    assert token not in out.stderr


def test_agent_needs_a_token_file(tmp_path):
    env = {**os.environ, "MALLARD_RUNNER_STATE_DIR": str(tmp_path)}
    env.pop("MALLARD_RUNNER_TOKEN_FILE", None)
    out = subprocess.run(agent_cmd(), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--token-file" in out.stderr
    out = subprocess.run(agent_cmd("--token-file", str(tmp_path / "missing")), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cannot read the runner token file" in out.stderr


def test_agent_refuses_a_bad_repo_allow_list(tmp_path):
    env = {**os.environ, "MALLARD_RUNNER_STATE_DIR": str(tmp_path),
           "MALLARD_RUNNER_REPO_ALLOW": "github.com"}
    out = subprocess.run(agent_cmd("--token-file", str(token_file(tmp_path, "t" * 32))),
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "repo allow-list entry 'github.com'" in out.stderr
