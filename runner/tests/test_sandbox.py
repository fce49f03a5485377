"""Code under test never sees a secret (sandbox.py, and the scrubbing of what it prints).

The attack: a commit whose CMakeLists.txt reads every /proc/*/environ and /proc/*/cmdline,
the agent's token file and its spool, prints them all and fails, run by the real agent
for the real API. The log the API stores holds no token, and a user of another project
cannot read it at all.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mallard_api.harness import API_BIN
from mallard_runner.sandbox import Sandbox
from mallard_runner.settings import RUNNER_DIR
from mallard_runner.tools import run

from .conftest import TOY_RECIPE_TABLE, git, reachable, write_suite
from .live import Agent, real_api

AS_ROOT = os.geteuid() == 0
BOOTSTRAP = "bootstrap-admin-" + "7" * 24


def evil_repo(path: Path, token_file: Path, spool: Path) -> Path:
    """A repository whose allocator's build prints everything it can read, then fails."""
    (path / "allocator").mkdir(parents=True)
    script = (f"id; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo \"== $f\"; "
              f"tr '\\000' ' ' < \"$f\"; echo; done; echo '== token file'; cat '{token_file}';"
              f" echo '== spool'; ls -la '{spool}'; cat '{spool}'/* '{spool}'/*/*; "
              f"echo '== agent memory'; head -c 64 /proc/$PPID/mem | od -c | head -2; true")
    (path / "allocator" / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.13)
project(evil C)
execute_process(COMMAND sh -c [=[{script}]=] OUTPUT_VARIABLE loot ERROR_VARIABLE loot_err)
message(STATUS "loot:\\n${{loot}}\\n${{loot_err}}")
message(FATAL_ERROR "evil build: failing on purpose")
""")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "read every secret there is")
    return path


@pytest.mark.skipif(not API_BIN.exists(), reason="mallard-api is not installed")
def test_a_build_that_reads_every_secret_stores_none(make_settings, tmp_path):
    api = real_api(MALLARD_BOOTSTRAP_ADMIN_TOKEN=BOOTSTRAP)
    state = tmp_path / "agent"
    state.mkdir()
    repo = evil_repo(tmp_path / "evil", state / "runner.token", state / "spool")
    settings = make_settings(cache_dir=tmp_path / "cache")
    try:
        api.start()
        api.add_suite(write_suite(settings, "t", {
            "trials": 1, "warmup": 0, "threads": [1], "allocators": ["glibc"],
            "workloads": {"tiny": {"params": {"ops": 2000}}}}))
        api.project("victim", repo)
        build = {"repo_url": str(repo), "recipe": TOY_RECIPE_TABLE}
        job_id = api.job({"project": "victim", "repo_url": str(repo),
                          "suite": "t", "workloads": ["tiny"], "threads": [1], "trials": 1,
                          "warmup": 0, "branch": "main", "allocators": [
                              {"label": "head", "name": "mallard", "commit": "main",
                               "build": build}]},
                         max_attempts=1)
        runner_token = api.token("runner", "node-evil")
        user_token = api.token("user")
        agent = Agent(api.url, runner_token, state, {
            **os.environ, "MALLARD_RUNNER_WORKLOADS_DIR": str(settings.workloads_dir),
            "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
            "MALLARD_RUNNER_CACHE_DIR": str(settings.cache()),
            "MALLARD_RUNNER_POLL_SECONDS": "0.2", "MALLARD_RUNNER_REPO_ALLOW": f"file://{repo}"},
            name="node-evil")
        try:
            assert agent.start("--once").wait(180) == 0, agent.log()
        finally:
            agent.kill()
        job = api.get_job(job_id)  # as an admin
        outsider = api.token("user", projects=("another",))
        member = api.token("user", projects=("victim",))
        seen = {t: api_get(api.url, t, f"/api/v1/jobs/{job_id}") for t in (outsider, member)}
    finally:
        api.close()
        shutil.rmtree(api.base, ignore_errors=True)
    (attempt,) = job["attempts"]
    log = attempt["log"]
    # the attack ran: it walked /proc, tried the token file and the spool, then failed
    assert "evil build: failing on purpose" in log and "== /proc/" in log
    assert "== token file" in log and "== spool" in log
    secrets = {"runner": runner_token, "user": user_token, "bootstrap admin": BOOTSTRAP,
               "outsider": outsider, "member": member}
    for who, token in secrets.items():
        assert token not in log, f"the {who} token is in the stored log"
        assert token not in agent.log(), f"the {who} token is in the agent's log"
    if AS_ROOT:  # the build ran as the work user: the agent's files and memory were closed
        assert "uid=" in log and "(mallard-work)" in log
        assert "Permission denied" in log
    assert seen[outsider][0] == 404 and "loot" not in seen[outsider][1]
    assert seen[member][0] == 200 and "evil build" in seen[member][1]


def api_get(url: str, token: str, path: str) -> tuple[int, str]:
    import httpx

    r = httpx.get(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return r.status_code, r.text


def test_the_environment_is_an_allow_list(tmp_path, monkeypatch):
    monkeypatch.setenv("MALLARD_RUNNER_TOKEN", "secret-token-0123456789")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-0123456789")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    box = Sandbox.create(reachable(tmp_path) / "work")
    env = box.env({"LD_PRELOAD": "/lib/x.so"})
    assert set(env) == {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LD_PRELOAD"}
    assert env["LD_PRELOAD"] == "/lib/x.so" and env["HOME"] == str(box.home)
    log: list[str] = []
    run(["env"], log, env=box.env(), identity=box.identity())
    assert "secret-token" not in "\n".join(log) and "aws-secret" not in "\n".join(log)


@pytest.mark.skipif(not AS_ROOT, reason="the work user needs root to switch to")
def test_taking_a_folder_back_follows_no_link(tmp_path):
    box = Sandbox.create(reachable(tmp_path) / "work")
    assert box.separate and box.uid != 0
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    victim.chmod(0o600)
    build = box.give(tmp_path / "build")
    log: list[str] = []
    # as the work user: a link to the agent's file, a world-writable folder, a set-uid file
    out = run(["sh", "-c", f"ln -s {victim} link; mkdir open; chmod 777 open; "
                           "touch open/suid; chmod 4755 open/suid; id -u"],
              log, env=box.env(), cwd=build, identity=box.identity())
    assert out.returncode == 0 and out.stdout.strip() == str(box.uid), log
    box.take(build)
    assert (build / "link").is_symlink() and victim.stat().st_mode & 0o777 == 0o600
    assert victim.stat().st_uid == os.geteuid()
    for p in (build, build / "open", build / "open" / "suid"):
        st = p.lstat()
        assert st.st_uid == os.geteuid() and not st.st_mode & 0o6022, (p, oct(st.st_mode))


@pytest.mark.skipif(not AS_ROOT, reason="needs a second, unprivileged user to run as")
@pytest.mark.parametrize("dumpable", [True, False])
def test_a_non_dumpable_agent_hides_its_environment_from_its_own_user(tmp_path, dumpable):
    """The weaker mode (an agent that is not root): a child of the same user cannot read
    the agent's /proc/<pid>/environ once the agent is non-dumpable (and could before)."""
    python = shutil.which("python3", path="/usr/bin:/bin")  # one the other user may run
    if python is None:
        pytest.skip("no system python3 for the unprivileged user")
    probe = (f"import os, subprocess, sys; sys.path[:0] = [{str(RUNNER_DIR)!r}]\n"
             "from mallard_runner.sandbox import set_non_dumpable\n"
             f"if not {dumpable}: assert set_non_dumpable()\n"
             "r = subprocess.run(['cat', f'/proc/{os.getpid()}/environ'], capture_output=True)\n"
             "print('read' if b'SECRET_MARK=' in r.stdout else 'denied')\n")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "SECRET_MARK": "x"}, user=65534,
                         group=65534, extra_groups=[], cwd="/", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("read" if dumpable else "denied")


def test_set_non_dumpable_works_here():
    probe = ("from mallard_runner.sandbox import set_non_dumpable\n"
             "import ctypes; assert set_non_dumpable()\n"
             "assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0\n")  # PR_GET_DUMPABLE
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert platform.system() == "Linux"


@pytest.mark.skipif(not AS_ROOT, reason="the work user needs root to switch to")
def test_the_work_user_cannot_plant_a_tree_for_a_later_build(toy_repo, tmp_path):
    """A cache folder others may write (an emptyDir starts 0777) is closed before any
    build, and a tree the agent did not extract is never built from."""
    from mallard_runner.build import Builder

    cache = reachable(tmp_path) / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    builder = Builder(cache)
    assert not cache.stat().st_mode & 0o022
    for d in ("repos", "trees", "builds"):
        assert (cache / d).stat().st_uid == os.geteuid()
        assert not (cache / d).stat().st_mode & 0o022
    sha = git(toy_repo, "rev-parse", "main")
    planted = cache / "trees" / sha / "allocator"
    planted.mkdir(parents=True)
    (planted / "CMakeLists.txt").write_text('message(FATAL_ERROR "planted tree built")\n')
    os.chown(cache / "trees" / sha, builder.sandbox.uid or 0, builder.sandbox.gid or 0)
    built = builder.build(str(toy_repo), "main")
    assert built.commit == sha and "planted" not in (planted / "CMakeLists.txt").read_text()
