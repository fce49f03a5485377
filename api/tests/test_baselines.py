"""Baselines and broken ranges through the real API and database: a baseline accepted at a
commit changes the next commit verdict's reference (sql/verdicts.py), a broken range is
left out of the reference and of change detection (analysis/alerts.py), readers may not
move them, and bad input is a 4xx naming the field."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from helpers import results, run_analysis, shas, trial
from mallard_api.analysis import verdicts
from mallard_api.config import Settings
from mallard_api.models.projects import Project
from mallard_api.sql import projects as project_sql
from mallard_api.sql import verdicts as verdict_sql
from sqlalchemy.orm import Session


def _branch(db_session: Session, name: str, commits: list[str]) -> tuple[Project, int]:
    proj = db_session.query(Project).filter_by(name=name).one()
    project_sql.record_push(db_session, proj, "main", commits[-1], [
        project_sql.CommitInfo(sha=c, parent=commits[i - 1] if i else None, message=f"c{i}",
                               author="Ada") for i, c in enumerate(commits)])
    db_session.commit()
    branch = project_sql.get_branch(db_session, proj, "main")
    assert branch is not None
    return proj, branch.id


def _queue(db_session: Session, settings: Settings, proj: Project, branch_id: int,
           sha: str, arch: str) -> str:
    """Queue `sha`'s commit verdict; the reference it is judged against ('' for none)."""
    verdicts.queue_commit(db_session, settings, proj, branch="main", branch_id=branch_id,
                          sha=sha, arch=arch)
    db_session.commit()
    v = [v for v in verdict_sql.of_commit(db_session, proj.id, sha) if v.arch == arch]
    return v[0].base_sha if v else ""


def test_a_baseline_changes_the_next_verdicts_reference(
        client: TestClient, db_session: Session, settings: Settings, make_project: Any,
        user_headers: dict[str, str], unique: str) -> None:
    arch = f"arch-{unique}"
    refs: dict[str, str] = {}
    for case in ("plain", "baseline", "broken"):
        name = make_project(name=f"bl-{case}-{unique}")["name"]
        c = shas(5, f"{case}{unique}")
        proj, branch_id = _branch(db_session, name, c)
        for sha in c[:3]:
            _queue(db_session, settings, proj, branch_id, sha, arch)
        if case == "baseline":  # c3 is accepted (not measured yet: the verdict measures it)
            r = client.post(f"/api/v1/projects/{name}/branches/main/baselines",
                            headers=user_headers, json={"commit": c[3][:10], "note": "trade"})
            assert r.status_code == 200, r.text
            assert [(m["kind"], m["first_sha"]) for m in r.json()] == [("baseline", c[3])]
        if case == "broken":  # c1..c2 built with a broken toolchain
            r = client.post(f"/api/v1/projects/{name}/branches/main/broken",
                            headers=user_headers,
                            json={"first": c[1], "last": c[2], "reason": "bad compiler"})
            assert r.status_code == 200, r.text
        refs[case] = _queue(db_session, settings, proj, branch_id, c[4], arch)
        refs[case + "-expected"] = {"plain": c[2], "baseline": c[3], "broken": c[0]}[case]
    assert refs["plain"] == refs["plain-expected"]
    assert refs["baseline"] == refs["baseline-expected"]
    assert refs["broken"] == refs["broken-expected"]


def test_a_verdict_at_the_baseline_itself_starts_a_new_history(
        client: TestClient, db_session: Session, settings: Settings, make_project: Any,
        user_headers: dict[str, str], unique: str) -> None:
    name = make_project(name=f"bl-self-{unique}")["name"]
    c = shas(3, f"self{unique}")
    proj, branch_id = _branch(db_session, name, c)
    _queue(db_session, settings, proj, branch_id, c[0], f"arch-{unique}")
    client.post(f"/api/v1/projects/{name}/branches/main/baselines", headers=user_headers,
                json={"commit": c[1]}).raise_for_status()
    assert _queue(db_session, settings, proj, branch_id, c[1], f"arch-{unique}") == ""
    assert verdict_sql.of_commit(db_session, proj.id, c[1]) == []  # a plain commit job


def _history(client: TestClient, runner: dict[str, Any], headers: dict[str, str],
             project: str, commits: list[str]) -> None:
    """30 commits of larson at 1e7 ops/s, 30% slower on commits 10..19 (a broken build)."""
    for i, c in enumerate(commits):
        level = 0.7e7 if 10 <= i < 20 else 1e7
        body = results([trial(c, allocator=project, value=level * (1 + 0.002 * k))
                        for k in range(3)], runner_id=runner["id"], project=project,
                       branch="main")
        r = client.post("/api/v1/results", headers=headers, json=body)
        assert r.status_code == 201, r.text


def test_a_broken_range_is_left_out_of_change_detection(
        client: TestClient, app: Any, db_session: Session, make_project: Any,
        make_runner: Any, user_headers: dict[str, str], unique: str) -> None:
    runner, runner_headers = make_runner()
    opened = {}
    for case in ("control", "broken"):
        name = make_project(name=f"cd-{case}-{unique}")["name"]
        c = shas(30, f"cd{case}{unique}")
        _branch(db_session, name, c)
        if case == "broken":
            r = client.post(f"/api/v1/projects/{name}/branches/main/broken",
                            headers=user_headers, json={"first": c[10], "last": c[19]})
            assert r.status_code == 200, r.text
        _history(client, runner, runner_headers, name, c)
        run_analysis(app)
        opened[case] = client.get("/api/v1/alerts", headers=user_headers,
                                  params={"project": name}).json()
    assert [a["first_bad_commit"] for a in opened["control"]] != []  # the dip is seen
    assert opened["broken"] == []


def test_readers_may_not_move_baselines_and_bad_input_names_the_field(
        client: TestClient, db_session: Session, make_project: Any, make_token: Any,
        user_headers: dict[str, str], unique: str) -> None:
    name = make_project(name=f"bl-bad-{unique}")["name"]
    c = shas(3, f"bad{unique}")
    _branch(db_session, name, c)
    url = f"/api/v1/projects/{name}/branches/main"
    reader = {"Authorization": f"Bearer {make_token('reader')}"}
    r = client.post(f"{url}/baselines", headers=reader, json={"commit": c[1]})
    assert r.status_code == 403, r.text
    assert client.get(f"{url}/baselines", headers=reader).json() == []  # it may read
    other = {"Authorization": f"Bearer {make_token('user', projects=['elsewhere'])}"}
    assert client.post(f"{url}/baselines", headers=other,
                       json={"commit": c[1]}).status_code == 403
    for body, field in (({"commit": "zz"}, "commit"), ({"commit": c[1], "x": 1}, "x"),
                        ({"first": c[0]}, "last")):
        path = "broken" if "first" in body else "baselines"
        r = client.post(f"{url}/{path}", headers=user_headers, json=body)
        assert r.status_code == 422 and field in str(r.json()["detail"]), r.text
    r = client.post(f"{url}/baselines", headers=user_headers, json={"commit": "abcd" * 10})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["body", "commit"]
    assert client.post(f"/api/v1/projects/{name}/branches/nope/baselines",
                       headers=user_headers, json={"commit": c[1]}).status_code == 404
