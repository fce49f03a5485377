"""`mallard-runner upload` against a real API (live.RealApi: `mallard-api serve` over an
embedded PostgreSQL): a hyperfine file made here, the runner registered with its
testbed, refused until an admin lets it write the project, stored once, a malformed file
refused before anything is sent, the token only from a file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import GIT_ENV
from .live import AGENT_BIN, RealApi, real_api

pytestmark = pytest.mark.skipif(not shutil.which("hyperfine"), reason="needs hyperfine")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealApi, Path]]:
    """The API with project `myalloc`, whose repository (one commit) is `repo`."""
    repo = tmp_path_factory.mktemp("myalloc")
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "README").write_text("an allocator\n")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "one"], check=True, env=env)
    api = real_api()
    try:
        api.start()
        api.admin.put("/projects/myalloc", json={
            "repo_url": str(repo), "default_branch": "main"}).raise_for_status()
        yield api, repo
    finally:
        api.close()
        shutil.rmtree(api.base, ignore_errors=True)


def token_file(api: RealApi, where: Path, runner: str) -> Path:
    path = where / "runner.token"
    path.write_text(api.token("runner", runner) + "\n")
    path.chmod(0o600)
    return path


def run(api: RealApi, state: Path, *args: str, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AGENT_BIN), "upload", *args, "--api", api.url, "--cpus", "0"],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env={
                              **os.environ, "MALLARD_RUNNER_STATE_DIR": str(state),
                              "COLUMNS": "300", **(env or {})})


def hyperfine_file(where: Path) -> Path:
    out = where / "hyperfine.json"
    subprocess.run(["hyperfine", "--runs", "3", "-N", "-P", "n", "1", "2", "-n", "true-{n}",
                    "--export-json", str(out), "true {n}"], check=True, capture_output=True,
                   timeout=120)
    return out


def test_upload_registers_is_refused_until_allowed_then_stores_once(server, tmp_path):
    api, repo = server
    tokens = token_file(api, tmp_path, "ci-box")
    file = hyperfine_file(tmp_path)
    args = [str(file), "--format", "hyperfine", "--project", "myalloc", "--commit", "HEAD",
            "--token-file", str(tokens), "--name", "ci-box"]
    first = run(api, tmp_path, *args, cwd=repo)
    assert first.returncode == 1, first.stderr
    assert "HTTP 403" in first.stderr and "may not post history" in first.stderr
    [runner] = [r for r in api.admin.get("/runners").json() if r["name"] == "ci-box"]
    assert runner["testbed"]["arch"] and runner["testbed"]["cpus"] == "0"
    api.admin.put(f"/runners/{runner['id']}/projects",
                  json={"projects": ["myalloc"]}).raise_for_status()

    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    stored = run(api, tmp_path, *args, cwd=repo)
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout.strip() == (f"upload: 6 trials of 2 cells stored in myalloc@{sha[:7]} "
                                     "on myalloc/main (hyperfine)")
    again = run(api, tmp_path, *[sha if a == "HEAD" else a for a in args])  # no repo here
    assert again.returncode == 0, again.stderr
    assert "upload: 0 trials of 2 cells" in again.stdout and "6 already stored" in again.stdout

    r = api.admin.get("/series", params={"project": "myalloc", "workload": "true-1",
                                         "measure": "run_seconds", "allocator": "myalloc"})
    assert r.status_code == 200, r.text
    [point] = r.json()["points"]
    assert point["commit_sha"] == sha and point["n"] == 3 and point["params"] == {"n": "1"}


def test_a_malformed_file_is_refused_before_anything_is_sent(server, tmp_path):
    api, repo = server
    tokens = token_file(api, tmp_path, "ci-box-2")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"benchmarks": [{"name": "BM_X", "real_time": "fast",
                                               "cpu_time": 1.0}]}))
    r = run(api, tmp_path, str(bad), "--format", "gbench", "--project", "myalloc",
            "--commit", "a" * 40, "--token-file", str(tokens), "--name", "ci-box-2")
    assert r.returncode == 2
    assert "not a gbench file: benchmarks[0].real_time: must be a finite number" in \
        " ".join(r.stderr.split())
    assert not [x for x in api.admin.get("/runners").json() if x["name"] == "ci-box-2"]


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--format", "csv"], {}, "--format must be one of"),
    (["--format", "bmf", "--commit", "no-such-ref"], {}, "neither a full sha"),
    (["--format", "bmf"], {"MALLARD_RUNNER_TOKEN": "mlrd_x"}, "is not read"),
])
def test_bad_arguments_exit_2_with_the_reason(server, tmp_path, args, env, words):
    api, repo = server
    file = tmp_path / "b.json"
    file.write_text(json.dumps({"b": {"latency": {"value": 1.0}}}))
    base = [str(file), "--project", "myalloc", "--commit", "HEAD",
            "--token-file", str(token_file(api, tmp_path, "ci-box-3"))]
    r = run(api, tmp_path, *base, *args, cwd=repo, env=env)
    assert r.returncode == 2, r.stderr
    assert words in " ".join(r.stderr.split())
