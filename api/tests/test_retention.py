"""Retention on a database with old and new trials: a project's policy (admins set it),
a dry run that counts and deletes nothing, then the run: old pull-request trials and old
raw trials deleted, new ones kept, the default branch's series and history page
unchanged (their values live on in series_points); the analysis worker applies it."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from helpers import push, results, trial
from mallard_api.analysis.worker import AnalysisWorker
from mallard_api.cli import app as cli
from mallard_api.config import Settings
from sqlalchemy import text
from sqlalchemy.orm import Session
from typer.testing import CliRunner

SERIES = {"workload": "larson", "threads": 2, "measure": "ops_per_sec", "arch": "x86_64"}


def _age(db_session: Session, project_id: int, shas: list[str], days: int) -> None:
    """Make the project's trials of these commits `days` old (as if ingested then)."""
    db_session.execute(text(
        "UPDATE trials t SET ingested_at = now() - make_interval(days => :d) FROM commits c "
        "WHERE c.id = t.commit_id AND t.project_id = :p AND c.sha = ANY(:s)"),
        {"d": days, "p": project_id, "s": shas})
    db_session.commit()


def _trials(db_session: Session, project_id: int) -> dict[str, int]:
    rows = db_session.execute(text(
        "SELECT c.sha, count(*) FROM trials t JOIN commits c ON c.id = t.commit_id "
        "WHERE t.project_id = :p GROUP BY c.sha"), {"p": project_id}).all()
    return {str(sha): int(n) for sha, n in rows}


def _load(client: TestClient, make_project: Any, make_runner: Any,
          user_headers: dict[str, str], unique: str) -> tuple[dict[str, Any], list[str]]:
    """Four commits on main, measured; two pull-request heads (on no branch), measured."""
    project: dict[str, Any] = make_project()
    main = [f"{unique}{i}".ljust(40, "b") for i in range(4)]
    heads = [f"{unique}{i}".ljust(40, "e") for i in range(2)]
    push(client, user_headers, project["name"], main)
    runner, headers = make_runner()
    for i, c in enumerate(main + heads):
        ts = [trial(c, value=10.0 * (i + 1) + v, allocator=project["name"]) for v in range(3)]
        ts.append(trial(c, value=1e9, allocator=project["name"], warmup=True))
        body = results(ts, runner_id=runner["id"], project=project["name"],
                       branch="main" if c in main else None)
        assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    return project, main + heads


def test_retention_deletes_old_trials_and_keeps_the_default_branch_history(
        client: TestClient, app: Any, settings: Settings, db_session: Session,
        make_project: Any, make_runner: Any, user_headers: dict[str, str],
        admin_headers: dict[str, str], unique: str, database_url: str,
        monkeypatch: Any) -> None:
    project, shas = _load(client, make_project, make_runner, user_headers, unique)
    main, heads = shas[:4], shas[4:]
    _age(db_session, project["id"], main[:2] + heads[:1], 100)  # old; the rest is new
    url = f"/api/v1/projects/{project['name']}/retention"
    policy = {"keep_pr_days": 30, "keep_raw_days": 60}
    assert client.put(url, json=policy, headers=user_headers).status_code == 403
    bad = client.put(url, json={"keep_pr_days": 0}, headers=admin_headers)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body",
                                                                       "keep_pr_days"]
    r = client.put(url, json=policy, headers=admin_headers)
    assert r.status_code == 200 and r.json() == {"project": project["name"], **policy}
    series = {**SERIES, "project": project["name"], "branch": "main",
              "allocator": project["name"]}
    before = client.get("/api/v1/series", headers=user_headers, params=series).json()
    assert [p["commit_sha"] for p in before["points"]] == main
    page = f"/ui/projects/{project['name']}/branches/main"
    page_before = client.get(page, headers=user_headers).text
    everything = _trials(db_session, project["id"])
    assert everything == dict.fromkeys(shas, 4)

    monkeypatch.setenv("DATABASE_URL", database_url)
    dry = CliRunner().invoke(cli, ["retention", "run", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("dry run: nothing deleted")
    (line,) = [x for x in dry.output.splitlines() if x.startswith(project["name"] + " ")]
    assert line.split()[1:] == ["4", "8", "12"]  # one old head; two old main commits
    assert _trials(db_session, project["id"]) == everything

    worker = AnalysisWorker(app.state.background_sessionmaker,
                            settings.model_copy(update={"retention_interval_seconds": 3600}))
    worker.poll()  # the worker's first poll applies the policies
    left = _trials(db_session, project["id"])
    assert left == {main[2]: 4, main[3]: 4, heads[1]: 4}  # new trials kept
    after = client.get("/api/v1/series", headers=user_headers, params=series).json()
    assert after == before  # the history reads series_points, which are kept
    assert client.get(page, headers=user_headers).text == page_before
    worker.poll()  # within the interval: not again
    again = CliRunner().invoke(cli, ["retention", "run"])
    assert again.exit_code == 0, again.output
    (line,) = [x for x in again.output.splitlines() if x.startswith(project["name"] + " ")]
    assert line.split()[1:] == ["0", "0", "12"]
