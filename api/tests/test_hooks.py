"""api/hooks/post-receive: a real bare repository, a real push, a real server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / "hooks" / "post-receive"


def git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def tmp_dir():  # type: ignore[no-untyped-def]
    # not tmp_path: other pytest sessions of the same user prune those concurrently
    path = Path(tempfile.mkdtemp(prefix="mallard-hook-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the hook needs curl")
def test_push_to_a_bare_repo_records_commits_and_queues_a_job(
        client, live_server, make_project, user_token, user_headers, tmp_dir):
    tmp_path = tmp_dir
    project = make_project()
    name = project["name"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com",
           "MALLARD_API_URL": live_server, "MALLARD_TOKEN": user_token}
    bare = tmp_path / f"{name}.git"
    git("init", "--bare", "-q", "-b", "main", str(bare), cwd=tmp_path, env=env)
    shutil.copy(HOOK, bare / "hooks" / "post-receive")
    work = tmp_path / "work"
    git("clone", "-q", str(bare), str(work), cwd=tmp_path, env=env)
    git("checkout", "-q", "-b", "main", cwd=work, env=env)
    for i in range(2):
        (work / "f.txt").write_text(f"{i}\n")
        git("add", "f.txt", cwd=work, env=env)
        git("commit", "-q", "-m", f'change "{i}"\n\nbody\tline', cwd=work, env=env)
    first = subprocess.run(["git", "push", "-q", "origin", "main"], cwd=work, env=env,
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "could not notify" not in first.stderr, first.stderr
    shas = git("rev-list", "--reverse", "main", cwd=work, env=env).split()
    commits = client.get(f"/api/v1/projects/{name}/branches/main/commits",
                         headers=user_headers).json()
    assert [c["sha"] for c in commits] == shas[::-1]
    assert commits[0]["message"].startswith('change "1"') and commits[0]["parent_sha"] == shas[0]
    jobs = client.get("/api/v1/jobs", headers=user_headers,
                      params={"kind": "commit", "limit": 1000}).json()
    assert any(j["spec"].get("commit") == shas[-1] and j["spec"]["project"] == name
               for j in jobs)
    # an incremental push lists only the new commit
    (work / "f.txt").write_text("2\n")
    git("commit", "-q", "-am", "third", cwd=work, env=env)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=work, env=env, check=True,
                   capture_output=True)
    commits = client.get(f"/api/v1/projects/{name}/branches/main/commits",
                         headers=user_headers).json()
    assert len(commits) == 3 and commits[0]["message"].strip() == "third"
    assert commits[0]["branches"][0]["position"] == 3
