"""Real data for the bisection and commit-verdict pages, stored through the API.

A project whose `main` gets 8 commits in two pushes (cap 1 per push): commit 7 is judged
against commit 0 by a commit job, its throughput is 10% lower (the culprit is commit
5), so the verdict regresses, an alert opens and a bisection starts. A runner answers
every job with 8 trials per side (0.3% noise) whose level depends on the commit; the first
round's probe (commit 3) fails to build (its jobs fail with a build log), so that step is
skipped and the bisection goes on around it. The project has a forge, so the culprit's
commit status is queued; a generic webhook target, so the alert's message is queued.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import numpy as np
from helpers import claim, register_recipe, results, run_analysis, trial
from mallard_api import pushes
from mallard_api.config import Settings
from mallard_api.sql import projects as project_sql

FORGE_TOKEN = "forge-token-c0ffee-never-shown"
BUILD_ERROR = "make: *** [Makefile:12: libmallard.so] Error 1 (build failed)"
CULPRIT, SKIPPED = 5, 3


def hexsha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def fail_job(client: Any, headers: dict[str, str], runner: dict[str, Any],
             job: dict[str, Any]) -> None:
    """The runner reports that the job's build failed (not retryable)."""
    commits = [a["commit"] for a in job["spec"]["allocators"] if a.get("build")]
    r = client.post(f"/api/v1/jobs/{job['id']}/fail", headers=headers, json={
        "runner_id": runner["id"], "attempt": job["attempt"],
        "log": f"building {commits}\n{BUILD_ERROR}\n",
        "retryable": False})
    assert r.status_code == 200, r.text


def _answer(client: Any, headers: dict[str, str], runner: dict[str, Any],
            job: dict[str, Any], cost: dict[str, float], rng: Any) -> None:
    if any(a.get("commit") == cost["skip"] for a in job["spec"]["allocators"]):
        fail_job(client, headers, runner, job)
        return
    trials = [trial(a["commit"], threads=1, label=a["label"], allocator=a["name"], measures={
        "ops_per_sec": cost[a["commit"]] * (1 + 0.003 * rng.standard_normal())})
        for _ in range(8) for a in job["spec"]["allocators"] if a.get("build")]
    r = client.post("/api/v1/results", headers=headers, json=results(
        trials, job_id=job["id"], runner_id=runner["id"], project=job["spec"]["project"],
        branch=job["spec"].get("branch")))
    assert r.status_code in (200, 201), r.text


def build(client: Any, app: Any, conf: Settings, make_token: Any,
          admin: dict[str, str], user: dict[str, str]) -> dict[str, Any]:
    """Run the flow; `conf` must be what the routes and the analysis see."""
    project = f"bisect-{uuid.uuid4().hex[:8]}"
    r = client.put(f"/api/v1/projects/{project}", headers=user, json={
        "repo_url": f"/srv/git/{project}.git", "default_branch": "main"})
    assert r.status_code == 200, r.text
    register_recipe(client, admin, project)
    r = client.put(f"/api/v1/projects/{project}/forge", headers=admin, json={
        "kind": "github", "base_url": conf.forge_url_allow, "repo": "acme/mallard",
        "token": FORGE_TOKEN})
    assert r.status_code == 200, r.text
    runner_headers = {"Authorization": f"Bearer {make_token('runner', conf.default_arch)}"}
    r = client.post("/api/v1/runners/register", headers=runner_headers, json={
        "name": conf.default_arch, "arch": conf.default_arch, "cpus": "1",
        "testbed": {"arch": conf.default_arch, "cpu_model": "Test CPU"}})
    assert r.status_code == 200, r.text
    runner = r.json()
    commits = [hexsha(f"{project}{i:02d}") for i in range(8)]
    cost: dict[str, Any] = {c: 1_000_000.0 * (0.9 if i >= CULPRIT else 1.0)
                            for i, c in enumerate(commits)}
    cost["skip"] = commits[SKIPPED]
    rng = np.random.default_rng(1612)

    def push(before: str | None, shas: list[str], first: int) -> None:
        with app.state.sessionmaker() as session:
            p = project_sql.get(session, project)
            infos = pushes.chain(before, [(s, f"change {first + i}: tune the transfer cache",
                                           "Ada", None) for i, s in enumerate(shas)])
            pushes.handle_push(session, conf, p, ref="refs/heads/main", after=shas[-1],
                               commits=infos)

    push(None, commits[:1], 0)
    job = claim(client, runner_headers, runner)
    assert job is not None
    _answer(client, runner_headers, runner, job, cost, rng)
    push(commits[0], commits[1:], 1)  # cap 1: commit 7 is judged against commit 0
    rounds = 0
    while (job := claim(client, runner_headers, runner)) is not None:
        rounds += 1
        assert rounds <= 20
        _answer(client, runner_headers, runner, job, cost, rng)
        run_analysis(app, conf)
    detail = client.get(f"/api/v1/projects/{project}/commits/{commits[7]}", headers=user)
    (verdict,) = [v for v in detail.json()["verdicts"] if v["arch"] == conf.default_arch]
    assert verdict["verdict"] == "regressed" and verdict["bisection_id"], verdict
    b = client.get(f"/api/v1/bisections/{verdict['bisection_id']}", headers=user).json()
    assert b["state"] == "done" and b["culprit"] == commits[CULPRIT], b
    assert [st["outcome"] for st in b["steps"] if st["index"] == SKIPPED] == ["skip"], b
    return dict(project=project, commits=commits, verdict=verdict, bisection=b,
                alert=verdict["alert_id"], runner=runner, runner_headers=runner_headers,
                conf=conf)
