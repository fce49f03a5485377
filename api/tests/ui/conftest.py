"""Fixtures of the page tests: real data stored through the API, and a headless Chromium.

- `pages_data` (module) a project with a 30-commit `main` whose larson throughput drops
  8% at commit 20 (an alert opens), peers measured beside the last commit, and a finished
  comparison (larson at 1 and 2 threads, 12 trials a side, head 6% slower at 2 threads,
  glibc and jemalloc as peers, a hypothesis; at 2 threads base and head recorded memory
  timelines and latency histograms: `recorded`); returns a dict of their ids, shas,
  tokens.
- `bisect_data` (session) a push whose commit verdict regresses, its alert and the
  bisection it starts, run to its culprit with one probe's build failing
  (`bisect_data.py`); returns the project, shas, verdict, bisection and alert.
- `browser` (module) a Chromium context (Debian's /usr/bin/chromium driven by Playwright,
  a fresh user data directory, no network but the API) signed in through the login form.
- `public_url` (session) the public URL reports and webhooks link with here.
- `shots` (session) where screenshots go: $MALLARD_UI_SCREENSHOT_DIR, or a temporary
  directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import patch_analysis_settings, register_recipe, run_analysis
from mallard_api import notify
from mallard_api.deps import get_settings
from mallard_api.sql import projects as project_sql

CHROMIUM = os.environ.get("MALLARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"]
PUBLIC_URL = "https://mallard.example.test"


def _sha() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex[:8]


def _trial(label: str, name: str, commit: str | None, variant: str | None, workload: str,
           threads: int, measures: dict[str, float], seq: int) -> dict[str, Any]:
    return {"uid": str(uuid.uuid4()), "label": label,
            "allocator": {"name": name, "commit": commit, "variant": variant},
            "workload": {"name": workload, "params": {"threads": threads, "seed": 42}},
            "seq": seq, "warmup": False, "ok": True, "exit_code": 0, "measures": measures}


def recorded(label: str) -> dict[str, Any]:
    """What a trial that recorded memory and latency posts (mallard_wire/timelines.py): RSS
    that grows to 10 MiB and is purged (head: 80 ms later), malloc/free latency around
    20 ns with a tail (head's: ten times as many calls at ~10 us)."""
    purge = 30 if label == "base" else 38
    rss = [min(k, 20) * 512 * 1024 if k < purge else 2 * 1024 * 1024 for k in range(40)]
    tail = 10 if label == "base" else 100
    return {"memory": {"interval_ms": 10.0, "rss_bytes": rss},
            "latency": {"sample_every": 64, "malloc": [[20, 5000], [24, 3000], [64, 40],
                                                       [106, tail]],
                        "free": [[16, 6000], [60, 20], [100, tail // 2]]}}


def _post(client: Any, headers: dict[str, str], runner: dict[str, Any], project: str,
          trials: list[dict[str, Any]], job_id: int | None = None) -> None:
    r = client.post("/api/v1/results", headers=headers, json={
        "job_id": job_id, "attempt": 1 if job_id is not None else None,
        "runner_id": runner["id"], "project": project, "branch": "main",
        "testbed": {"arch": runner["arch"], "cpu_model": "Test CPU", "cpus": "1"},
        "trials": trials})
    assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def pages_data(app, client, settings, make_token, user_token) -> Iterator[dict[str, Any]]:
    s = settings.model_copy(update={"stats_bootstrap_resamples": 2000,
                                    "public_url": PUBLIC_URL})
    with pytest.MonkeyPatch.context() as mp:
        patch_analysis_settings(mp, s)
        mp.setitem(app.dependency_overrides, get_settings, lambda: s)  # the routes see it too
        mp.setattr(notify, "get_settings", lambda: s)
        yield _build(client, make_token, user_token)


def _build(client: Any, make_token: Any, user_token: str) -> dict[str, Any]:
    user = {"Authorization": f"Bearer {user_token}"}
    project = f"pages-{uuid.uuid4().hex[:8]}"
    r = client.put(f"/api/v1/projects/{project}", headers=user, json={
        "repo_url": f"/srv/git/{project}.git", "default_branch": "main"})
    assert r.status_code == 200, r.text
    register_recipe(client, {"Authorization": f"Bearer {make_token('admin')}"}, project)
    name, arch = f"runner-{uuid.uuid4().hex[:8]}", f"arch-{uuid.uuid4().hex[:8]}"
    runner_headers = {"Authorization": f"Bearer {make_token('runner', name)}"}
    r = client.post("/api/v1/runners/register", headers=runner_headers, json={
        "name": name, "arch": arch, "cpus": "1",
        "testbed": {"arch": arch, "cpu_model": "Test CPU"}})
    assert r.status_code == 200, r.text
    runner = r.json()
    admin = {"Authorization": f"Bearer {make_token('admin')}"}  # it may write the project
    client.put(f"/api/v1/runners/{runner['id']}/projects", headers=admin,
               json={"projects": [project]}).raise_for_status()
    rng = np.random.default_rng(16)

    # The branch: 30 commits, larson -8% from commit 20 on; rpc flat.
    commits = [_sha() for _ in range(30)]
    with client.app.state.sessionmaker() as session:
        proj = project_sql.get(session, project)
        assert proj is not None
        project_sql.record_push(session, proj, "main", commits[-1], [
            project_sql.CommitInfo(sha=c, parent=commits[i - 1] if i else None,
                                   message=f"commit {i}: tune the transfer cache",
                                   author="Ada <ada@example.test>")
            for i, c in enumerate(commits)])
        session.commit()
    for i, c in enumerate(commits):
        trials = []
        for workload, level in (("larson", 1e6 * (0.92 if i >= 20 else 1.0)), ("rpc", 2e6)):
            for k in range(3):
                trials.append(_trial("head", project, c, None, workload, 2, {
                    "ops_per_sec": level * (1 + 0.004 * rng.standard_normal()),
                    "max_rss_bytes": 12_582_912.0 + 4096 * k, "wall_seconds": 0.4}, k))
        if i == len(commits) - 1:
            for peer, level in (("glibc", 0.7e6), ("jemalloc", 0.95e6)):
                trials += [_trial("peer", peer, None, None, "larson", 2, {
                    "ops_per_sec": level * (1 + 0.004 * rng.standard_normal()),
                    "max_rss_bytes": 14e6}, 10 + k) for k in range(3)]
        _post(client, runner_headers, runner, project, trials)
    run_analysis(client.app)
    alerts = client.get("/api/v1/alerts", headers=user, params={"project": project}).json()
    assert len(alerts) == 1, alerts

    # The comparison: threads=2 head 6% slower; transfer_insert_hit_ratio 0.90 -> 0.60.
    base_sha, head_sha = commits[18], commits[22]
    r = client.post("/api/v1/comparisons", headers=user, json={
        "project": project, "base": {"commit": base_sha, "variant": "transfer=mutex"},
        "head": {"commit": head_sha, "variant": "transfer=ring"}, "workloads": ["larson"],
        "threads": [1, 2], "trials": 12, "arch": arch, "hypothesis": "expected +15%",
        "peers": ["glibc", "jemalloc"]})
    assert r.status_code == 201, r.text
    comp = r.json()
    job = client.post("/api/v1/jobs/claim", headers=runner_headers,
                      json={"runner_id": runner["id"], "lease_seconds": 60}).json()
    assert job["id"] == comp["jobs"][0]["job_id"]
    trials, seq = [], 0
    for threads, shift in ((1, 1.0), (2, 0.94)):
        for _ in range(12):
            for label, commit, variant, level, hit in (
                    ("base", base_sha, "transfer=mutex", 1.0, 0.90),
                    ("head", head_sha, "transfer=ring", shift, 0.60)):
                trials.append(_trial(label, project, commit, variant, "larson", threads, {
                    "ops_per_sec": 1e6 * level * (1 + 0.01 * rng.standard_normal()),
                    "max_rss_bytes": 10_485_760.0 * (1 + 0.001 * rng.standard_normal()),
                    "wall_seconds": 0.4 / level * (1 + 0.01 * rng.standard_normal()),
                    "transfer_insert_hit_ratio": hit,
                    "transfer_remove_hit_ratio": 0.988}, seq))
                seq += 1
        for peer, level in (("glibc", 0.8), ("jemalloc", 1.05)):
            for _ in range(3):
                trials.append(_trial("peer", peer, None, None, "larson", threads,
                                     {"ops_per_sec": 1e6 * level}, seq))
                seq += 1
    for t in trials:  # threads=2 recorded memory and latency (ui/timelines.py)
        if t["label"] in ("base", "head") and t["workload"]["params"]["threads"] == 2:
            t.update(recorded(t["label"]))
    # one wild trial, marked as an outlier on the page
    trials[5]["measures"]["ops_per_sec"] *= 0.5
    _post(client, runner_headers, runner, project, trials, job_id=job["id"])
    run_analysis(client.app)
    detail = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user).json()
    assert detail["state"] == "done", detail["report"]
    return dict(project=project, commits=commits, comparison=comp["id"],
                alert=alerts[0]["alert_id"], base_sha=base_sha, head_sha=head_sha,
                runner=runner, user_token=user_token, user=user, detail=detail)


@pytest.fixture(scope="session")
def bisect_data(client, app, settings, make_token, admin_headers, user_headers
                ) -> dict[str, Any]:
    from ui import bisect_data as flow

    arch = f"arch-{uuid.uuid4().hex[:8]}"
    conf = settings.model_copy(update={
        "stats_bootstrap_resamples": 2000, "public_url": PUBLIC_URL, "push_max_queued": 1,
        "default_arch": arch, "push_backfill": False, "comparison_max_follow_ups": 0,
        "forge_url_allow": "http://127.0.0.1:9", "alert_webhooks": "http://127.0.0.1:9/hook"})
    app.dependency_overrides[get_settings] = lambda: conf  # the routes see it too
    try:
        with pytest.MonkeyPatch.context() as mp:
            patch_analysis_settings(mp, conf)
            mp.setattr(notify, "get_settings", lambda: conf)
            return flow.build(client, app, conf, make_token, admin_headers,
                              user_headers)
    finally:
        app.dependency_overrides.pop(get_settings, None)


@pytest.fixture(scope="session")
def public_url() -> str:
    """The MALLARD_PUBLIC_URL the analysis and notifications see in these tests."""
    return PUBLIC_URL


@pytest.fixture(scope="session")
def shots() -> Iterator[Path]:
    wanted = os.environ.get("MALLARD_UI_SCREENSHOT_DIR")
    if wanted:
        path = Path(wanted)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="mallard-ui-shots-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(live_server: str, pages_data: dict[str, Any]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make deps` installs Debian's chromium")
    profile = Path(tempfile.mkdtemp(prefix="mallard-ui-chromium-"))
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900}, java_script_enabled=True)
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)
