"""An allocator that is not Mallard's, end to end through the real API and agent: a
comparison, a push through the real post-receive hook and the bisection it starts.

`fixalloc` is a Make project made by the test (no `.mallard.toml`: its recipe is
registered over REST by an admin, as a user would); its `free` forwards to glibc, and one
commit in the middle of a push makes `free` spin, which multiplies the instructions the
`tiny` workload runs (counted by cachegrind: deterministic, so the bisection cannot be
fooled by a noisy machine). The report, the bisection's culprit line and the pages name
`fixalloc`, never `mallard`.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mallard_api.harness import API_BIN, wait_for

from .conftest import git, write_suite
from .live import Agent, RealApi, real_api

pytestmark = pytest.mark.skipif(not API_BIN.exists(), reason="mallard-api is not installed")

HOOK = Path(__file__).resolve().parents[2] / "api" / "hooks" / "post-receive"
RECIPE = {"kind": "make", "target": "libfix.so", "library": "libfix.so",
          "options": {"prefix": "FIXALLOC_"}}
MAKEFILE = "libfix.so: fix.c\n\t$(CC) -O2 -fPIC -shared -o libfix.so fix.c\n"
FIX_C = """\
/* fixalloc: forwards to glibc; SPINS busy iterations per free */
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
#define SPINS {spins}
__attribute__((visibility("default"))) void *malloc(size_t n) {{ return __libc_malloc(n); }}
__attribute__((visibility("default"))) void free(void *p) {{
    for (volatile int i = 0; i < SPINS; i++) {{}}
    __libc_free(p);
}}
"""


def commit(work: Path, message: str, spins: int) -> str:
    (work / "fix.c").write_text(FIX_C.format(spins=spins))
    (work / "NOTES").write_text(message + "\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", message)
    return git(work, "rev-parse", "HEAD")


@pytest.fixture
def forge(tmp_path: Path) -> tuple[Path, Path]:
    """A bare repository `fixalloc.git` and a clone of it to commit in."""
    bare, work = tmp_path / "fixalloc.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp_path, "clone", "-q", str(bare), str(work))
    (work / "Makefile").write_text(MAKEFILE)
    return bare, work


@pytest.fixture
def api(tmp_path: Path, make_settings: Any) -> Iterator[RealApi]:
    server = real_api(MALLARD_SUITE="fix", MALLARD_TRIALS="3", MALLARD_PEERS="",
                      MALLARD_PUSH_MAX_QUEUED="1", MALLARD_PUSH_BACKFILL="false",
                      MALLARD_COMPARISON_MAX_FOLLOW_UPS="0",
                      MALLARD_BISECT_MEASURES="instructions")
    settings = make_settings(cache_dir=tmp_path / "cache")
    server.add_suite(write_suite(settings, "fix", {
        "trials": 3, "warmup": 0, "threads": [1], "allocators": ["glibc"], "baseline": None,
        "workloads": {"tiny": {"params": {"ops": 4000},
                               "deterministic": {"params": {"ops": 2000}, "threads": [1]}}}}))
    try:
        server.start()
        yield server
    finally:
        server.close()


def agent_for(api: RealApi, tmp_path: Path, tiny_dir: Path, bare: Path) -> Agent:
    return Agent(api.url, api.token("runner", "node-fix"), tmp_path / "agent", {
        **os.environ, "MALLARD_RUNNER_WORKLOADS_DIR": str(tiny_dir),
        "MALLARD_RUNNER_SUITES_DIR": str(api.suites_dir),
        "MALLARD_RUNNER_CACHE_DIR": str(tmp_path / "agent-cache"),
        "MALLARD_RUNNER_POLL_SECONDS": "0.2", "MALLARD_RUNNER_HEARTBEAT_SECONDS": "1",
        "MALLARD_RUNNER_REPO_ALLOW": f"file://{bare}"}, name="node-fix")


def settled(client: httpx.Client, path: str, timeout: float, agent: Agent) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(path).raise_for_status().json()
        return body if body["state"] in ("done", "failed") else None
    return wait_for(path, done, timeout, interval=1, on_timeout=agent.log)


def test_a_non_mallard_allocator_is_compared_pushed_and_bisected(api, forge, tmp_path,
                                                                  tiny_dir):
    bare, work = forge
    api.admin.put("/projects/fixalloc", json={
        "repo_url": f"file://{bare}", "default_branch": "main",
        "recipe": RECIPE}).raise_for_status()
    user = httpx.Client(base_url=api.url, timeout=60,
                        headers={"Authorization": f"Bearer {api.token('user')}"})
    install_hook(bare, user)
    agent = agent_for(api, tmp_path, tiny_dir, bare)
    agent.start()
    try:
        base = commit(work, "fixalloc: start", 0)
        git(work, "push", "-q", "origin", "main")  # the branch's history starts
        wait_for("the first commit measured", lambda: idle(user), 600, interval=1,
                 on_timeout=agent.log)
        report, page = compare(user, agent, base, work)
        bisection_page = push_and_bisect(user, agent, work)
    finally:
        agent.kill()
    assert "fixalloc@" in report and "mallard" not in report, report
    assert "fixalloc@" in page and "mallard@" not in page
    assert "fixalloc" in bisection_page and "mallard@" not in bisection_page


def install_hook(bare: Path, user: httpx.Client) -> None:
    """Mallard's post-receive hook in the bare repository, told the API and project."""
    hook = bare / "hooks" / "post-receive"
    shutil.copy(HOOK, hook)
    hook.chmod(0o755)
    for key, value in (("mallard.url", str(user.base_url).rstrip("/")),
                       ("mallard.token", user.headers["Authorization"].split()[1]),
                       ("mallard.project", "fixalloc")):
        git(bare, "config", key, value)


def idle(user: httpx.Client) -> bool:
    jobs = user.get("/api/v1/jobs", params={"limit": 500}).raise_for_status().json()
    return bool(jobs) and all(j["state"] in ("done", "failed") for j in jobs)


def compare(user: httpx.Client, agent: Agent, base: str, work: Path) -> tuple[str, str]:
    """A comparison of fixalloc at two commits with a variant: the report and page."""
    head = commit(work, "fixalloc: same speed, other notes", 0)
    git(work, "push", "-q", "origin", "main")
    comp = user.post("/api/v1/comparisons", json={
        "project": "fixalloc", "arch": platform.machine(), "suite": "fix", "trials": 3,
        "base": {"commit": base}, "head": {"commit": head, "variant": "verbose=1"},
    })
    assert comp.status_code == 201, comp.text
    final = settled(user, f"/api/v1/comparisons/{comp.json()['id']}", 600, agent)
    assert final["state"] == "done", agent.log()
    report = user.get(f"/api/v1/comparisons/{final['id']}/report").raise_for_status().text
    page = user.get(f"/ui/comparisons/{final['id']}").raise_for_status().text
    return report, page


def push_and_bisect(user: httpx.Client, agent: Agent, work: Path) -> str:
    """Pushes 4 commits at once through the real hook, the 2nd making free spin; the
    newest is judged against the branch's last measured commit, regresses, and the
    bisection names the spinning commit. Returns the bisection's page."""
    shas = [commit(work, "fixalloc: notes 1", 0), commit(work, "fixalloc: free spins", 400),
            commit(work, "fixalloc: notes 3", 400), commit(work, "fixalloc: notes 4", 400)]
    git(work, "push", "-q", "origin", "main")

    def bisection() -> dict[str, Any] | None:
        found = user.get("/api/v1/bisections", params={"project": "fixalloc"})
        done = [b for b in found.raise_for_status().json() if b["state"] == "done"]
        return done[0] if done else None
    b = wait_for("the bisection", bisection, 900, interval=1, on_timeout=agent.log)
    assert b["culprit"] == shas[1], (b, shas)
    assert b["culprit_line"].startswith(f"culprit: {shas[1][:7]} fixalloc: free spins")
    verdict = user.get(f"/api/v1/projects/fixalloc/commits/{shas[-1]}").raise_for_status()
    assert any(v["verdict"] == "regressed" for v in verdict.json()["verdicts"]), verdict.text
    return user.get(f"/ui/bisections/{b['id']}").raise_for_status().text
