"""Builders for request bodies and rows shared by the API tests."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mallard_wire.recipes import RECIPE_FILE, read_recipe_file

if TYPE_CHECKING:
    from mallard_api.models.alerts import Alert

REPO = Path(__file__).resolve().parents[2]
# mallard's own recipe, as the repository's .mallard.toml says (JSON, as PUT .../recipe takes)
MALLARD_RECIPE: dict[str, Any] = read_recipe_file(  # type: ignore[union-attr]
    (REPO / RECIPE_FILE).read_text()).model_dump(mode="json", exclude_defaults=True)


def register_recipe(client: Any, admin_headers: dict[str, str], project: str,
                    recipe: dict[str, Any] | None = None) -> dict[str, Any]:
    """Give `project` a recipe (mallard's by default) as an admin does."""
    r = client.put(f"/api/v1/projects/{project}/recipe", headers=admin_headers,
                   json={"recipe": recipe or MALLARD_RECIPE})
    assert r.status_code == 200, r.text
    return dict(r.json())


TESTBED = {"arch": "x86_64", "cpu_model": "Test CPU", "cpus": "1", "kernel": "6.1.0",
           "governor": "performance", "smt": False, "thp": "madvise",
           "compiler": "gcc 12.2.0", "libc": "glibc 2.36", "page_size": 4096}


def sha(n: int | str) -> str:
    return f"{n}".rjust(40, "a")[-40:] if isinstance(n, int) else n


def push(client: Any, headers: dict[str, str], project: str, commits: list[str]) -> None:
    """Push `commits` (oldest first) to the project's `main` through the plain push hook."""
    r = client.post("/api/v1/webhooks/push", headers=headers, json={
        "project": project, "ref": "refs/heads/main", "after": commits[-1],
        "commits": [{"sha": c} for c in commits]})
    assert r.status_code == 200, r.text


def trial(commit: str | None = "a" * 40, *, value: float = 1.0e7, threads: int = 2,
          workload: str = "larson", allocator: str = "mallard", variant: str | None = None,
          label: str = "head", warmup: bool = False, ok: bool = True,
          uid: str | None = None, measures: dict[str, float] | None = None) -> dict[str, Any]:
    return {
        "uid": uid or str(uuid.uuid4()), "label": label,
        "allocator": {"name": allocator, "commit": commit, "variant": variant,
                      "build_flags": "-O2 -g", "compiler": "gcc 12.2.0",
                      "library_sha256": "0" * 64 if commit else None},
        "workload": {"name": workload, "params": {"threads": threads, "ops": 1000, "seed": 42}},
        "seq": 0, "warmup": warmup, "started_at": "2026-11-21T12:00:00Z", "ok": ok,
        "exit_code": 0 if ok else 1, "signal": None, "stderr_tail": "",
        "measures": measures if measures is not None else {"ops_per_sec": value,
                                                           "wall_seconds": 0.4},
        "counters": {"version": 1, "allocs": 10} if allocator == "mallard" else None,
    }


def job_spec(**fields: Any) -> dict[str, Any]:
    """A valid spec for POST /jobs (contracts §5) of a job of no project, with `fields`
    replacing its values (a job of a project builds the project's repo_url). Its head is
    project `mallard`'s build (the `client` fixture registers it), filled in by the API."""
    return {"project": None, "repo_url": "/srv/git/mallard.git", "suite": "quick",
            "workloads": ["larson"],
            "threads": [1], "trials": 3, "warmup": 1, "branch": "main", "commit": "main",
            "allocators": [{"label": "head", "name": "mallard", "commit": "main",
                            "variant": "transfer=ring"}, {"label": "peer", "name": "glibc"}],
            **fields}


def results(trials: list[dict[str, Any]], *, job_id: int | None = None,
            runner_id: int | None = None, project: str | None = None,
            branch: str | None = None, testbed: dict[str, Any] | None = None,
            attempt: int | None = None) -> dict[str, Any]:
    """A results body; with a job, `attempt` defaults to 1 (the first claim's)."""
    if job_id is not None and attempt is None:
        attempt = 1
    return {"job_id": job_id, "attempt": attempt, "runner_id": runner_id, "project": project,
            "branch": branch, "testbed": testbed or TESTBED, "trials": trials,
            "artifacts": None}


_ANALYSIS: dict[str, Any] = {}  # the settings `run_analysis` runs with by default


def patch_analysis_settings(monkeypatch: Any, settings: Any) -> None:
    """Make `run_analysis` (without settings of its own) run the analysis with `settings`:
    a leaner bootstrap, webhook targets, the public URL. The routes read the app's."""
    monkeypatch.setitem(_ANALYSIS, "settings", settings)


def run_analysis(app: Any, settings: Any = None) -> int:
    """Run the analysis that ingest queued, now, in this thread (the tests' apps run no
    background worker): with `settings`, else those `patch_analysis_settings` set, else
    the process settings (`get_settings`). Returns how many queue items ran."""
    from mallard_api.analysis.worker import AnalysisWorker
    from mallard_api.config import get_settings

    return AnalysisWorker(app.state.background_sessionmaker,
                          settings or _ANALYSIS.get("settings") or get_settings()).drain()


def claim(client: Any, headers: dict[str, str], runner: dict[str, Any],
          lease_seconds: int = 600) -> dict[str, Any] | None:
    """The runner claims its next job (None: the queue has none for it)."""
    r = client.post("/api/v1/jobs/claim", headers=headers,
                    json={"runner_id": runner["id"], "lease_seconds": lease_seconds})
    assert r.status_code in (200, 204), r.text
    return dict(r.json()) if r.status_code == 200 else None


def claim_job(client: Any, headers: dict[str, str], runner: dict[str, Any]) -> dict[str, Any]:
    """The runner claims its next job, which must be there."""
    job = claim(client, headers, runner)
    assert job is not None, "no job to claim"
    return job


def queue_job(client: Any, headers: dict[str, str], arch: str) -> int:
    """Queue a commit job (the default `job_spec`) for `arch`; its id."""
    r = client.post("/api/v1/jobs", headers=headers,
                    json={"kind": "commit", "arch": arch, "spec": job_spec()})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def stored(engine: Any, uids: list[str]) -> int:
    """How many of the trials `uids` are stored."""
    from sqlalchemy import text

    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM trials WHERE uid = ANY(:u)"),
                                {"u": uids}).scalar_one())


def make_alert(session: Any) -> Alert:
    """An open regression alert row (larson threads=2 on mallard/main, -8.1%) in `session`."""
    from mallard_api.sql import alerts as alert_sql
    from mallard_stats.changepoints import Change

    series = alert_sql.TouchedSeries(
        project_id=None, project="mallard", branch_id=0, branch="main", workload="larson",
        params={"threads": 2}, params_sha="", threads=2, allocator="mallard", variant="",
        arch="x86_64", testbed_fingerprint="f" * 64, measure="ops_per_sec")
    change = Change(index=5, first_bad_commit="a" * 40, last_good_commit="b" * 40,
                    change_pct=-8.1, ci_low_pct=-9.0, ci_high_pct=-7.2, p_value=0.0001,
                    before_median=1e6, after_median=9.19e5, direction="regression")
    alert = alert_sql.add_alert(
        session, series, uuid.uuid4().hex, change,
        "larson threads=2 ops_per_sec on mallard/main: -8.1% from aaaaaaa")
    assert alert is not None
    return alert



def shas(n: int, seed: str) -> list[str]:
    """`n` distinct commit shas derived from `seed`."""
    return [hashlib.sha1(f"{seed}{i}".encode()).hexdigest() for i in range(n)]


def github_payload(project: dict[str, Any], commits: list[str],
                   ref: str = "refs/heads/main") -> bytes:
    """A GitHub push event body for `project` pushing `commits` (oldest first) to `ref`."""
    from mallard_api.pushes import ZERO

    return json.dumps({
        "ref": ref, "before": ZERO, "after": commits[-1],
        "repository": {"name": project["name"], "full_name": f"org/{project['name']}",
                       "clone_url": project["repo_url"]},
        "commits": [{"id": c, "message": f"commit {i}", "timestamp": "2026-11-21T12:00:00Z",
                     "author": {"name": "Ada"}} for i, c in enumerate(commits)],
    }).encode()


def sign(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of `body` with `secret` (GitHub's and Gitea's signature)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
