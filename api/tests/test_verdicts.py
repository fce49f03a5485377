"""Commit verdicts, alerts from verdicts and automatic bisection through the real API and
database: a push beyond the cap, a regressed verdict, its alert, the bisection's rounds
(each job answered with trials whose instructions depend on the commit) and the culprit
named on the bisection, the alert and the commit; bad input to POST /bisections."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import claim, results, run_analysis, trial
from mallard_api import db, pushes
from mallard_api.config import Settings
from mallard_api.deps import get_settings
from mallard_api.models.forges import ProjectForge
from mallard_api.models.outbox import OutboxMessage
from mallard_api.models.projects import Project
from mallard_api.sql import projects as project_sql
from mallard_api.sql import verdicts as verdict_sql
from mallard_api.sql.projects import CommitInfo
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session


def hexsha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def answer(client: TestClient, headers: dict[str, str], runner: dict[str, Any],
           job: dict[str, Any], cost: dict[str, float], timed: int = 0) -> None:
    """Post two instructions trials per built side of the job (the project's own
    allocator, named after it; the two cachegrind runs a verdict needs): `cost[commit]`;
    and `timed` trials of ops_per_sec (1e9 / cost, within 0.5%)."""
    sides = [a for a in job["spec"]["allocators"] if a.get("build")]
    trials = [trial(a["commit"], threads=1, label=a["label"], allocator=a["name"],
                    measures={"instructions": cost[a["commit"]]}) for a in sides for _ in "12"]
    trials += [trial(a["commit"], threads=1, label=a["label"], allocator=a["name"], measures={
        "ops_per_sec": 1e9 / cost[a["commit"]] * (1 + 0.001 * i)})
        for i in range(timed) for a in sides]
    r = client.post("/api/v1/results", headers=headers, json=results(
        trials, job_id=job["id"], runner_id=runner["id"], project=job["spec"]["project"],
        branch=job["spec"].get("branch")))
    assert r.status_code in (200, 201), r.text


def push(db_session: Session, settings: Settings, project: str, before: str | None,
         shas: list[str], messages: list[str]) -> Any:
    p = db_session.query(Project).filter_by(name=project).one()
    infos = pushes.chain(before, [(s, m, "Ada", None) for s, m in zip(shas, messages,
                                                                      strict=True)])
    return pushes.handle_push(db_session, settings, p, ref="refs/heads/main", after=shas[-1],
                              commits=infos)


@pytest.mark.parametrize("timed", [0, 6])
def test_push_verdict_alert_bisection(client: TestClient, app: Any, settings: Settings,
                                      db_session: Session, make_project: Any,
                                      make_runner: Any, user_headers: dict[str, str],
                                      unique: Any, timed: int) -> None:
    """The bisection follows `instructions`; its culprit line quotes ops_per_sec when
    a comparison across the culprit judged it REGRESSED (timed trials), else instructions.
    """
    runner, rheaders = make_runner()
    conf = settings.model_copy(update={"push_max_queued": 1, "default_arch": runner["arch"],
                                       "push_backfill": False, "comparison_max_follow_ups": 0})
    app.dependency_overrides[get_settings] = lambda: conf  # the routes see it too
    try:
        flow(client, app, conf, db_session, make_project, runner, rheaders, user_headers,
             unique, timed)
    finally:
        app.dependency_overrides.pop(get_settings, None)


def flow(client: TestClient, app: Any, conf: Settings, db_session: Session,
         make_project: Any, runner: dict[str, Any], rheaders: dict[str, str],
         user_headers: dict[str, str], unique: str, timed: int) -> None:
    made = make_project()
    project = made["name"]
    # a forge, so that the statuses are queued (the outbox is not delivered here)
    db_session.add(ProjectForge(project_id=made["id"], kind="gitea", repo="acme/mallard",
                                base_url="http://127.0.0.1:9", token="t"))
    db_session.commit()
    tag = unique
    commits = [hexsha(f"{tag}{i:02d}") for i in range(8)]
    culprit = 5
    cost = {c: (1_000_000.0 if i < culprit else 1_100_000.0) for i, c in enumerate(commits)}
    # the branch starts: c0 measured alone
    out = push(db_session, conf, project, None, commits[:1], ["start"])
    assert out.queued == 1
    job = claim(client, rheaders, runner)
    assert job is not None and [a["label"] for a in job["spec"]["allocators"]][0] == "head"
    answer(client, rheaders, runner, job, cost, timed)
    # seven commits at once, cap 1: the newest is judged against c0, the rest deferred
    out = push(db_session, conf, project, commits[0], commits[1:],
               [f"change {i}" for i in range(1, 8)])
    assert (out.commits, out.queued, out.deferred) == (7, 1, 6)
    assert out.note and "deferred" in out.note

    def state() -> str:
        got = client.get(f"/api/v1/projects/{project}/commits/{commits[7]}",
                         headers=user_headers).json()
        (v,) = [x for x in got["verdicts"] if x["arch"] == conf.default_arch]
        comp = client.get(f"/api/v1/comparisons/{v['comparison_id']}",
                          headers=user_headers).json()
        return f"{v['state']}/{comp['state']}"

    assert state() == "queued/queued"
    job = claim(client, rheaders, runner)
    assert job is not None and job["spec"]["allocators"][0]["commit"] == commits[0]
    assert state() == "running/running"  # the verdict follows its comparison
    answer(client, rheaders, runner, job, cost, timed)
    run_analysis(app, conf)
    assert state() == "done/done"
    statuses = [(m.payload["state"], m.payload["description"].split(" ")[0]) for m in
                db_session.query(OutboxMessage).filter_by(project_id=made["id"])
                .order_by(OutboxMessage.id) if m.url.endswith(f"/statuses/{commits[7]}")
                and m.payload["context"] == f"mallard/{conf.default_arch}/verdict"]
    assert statuses == [("pending", "measuring"), ("pending", "running"),
                        ("failure", "2" if timed else "1")]  # regressed cells
    got = client.get(f"/api/v1/projects/{project}/commits/{commits[7]}",
                     headers=user_headers).json()
    # other tests' runners may be live too: each live arch gets its own verdict
    (v,) = [x for x in got["verdicts"] if x["arch"] == conf.default_arch]
    assert v["verdict"] == "regressed" and v["base_sha"] == commits[0]
    assert v["moved"][0]["measure"] == "instructions" and v["report_url"]
    assert v["alert_id"] and v["bisection_id"]
    alert = client.get(f"/api/v1/alerts/{v['alert_id']}", headers=user_headers).json()
    assert alert["first_bad_commit"] == commits[7] and alert["measure"] == "instructions"
    # the gauge Alertmanager's rule reads counts it at once (no change point needed)
    metrics = client.get("/metrics").text
    assert (f'mallard_alerts_open{{arch="{conf.default_arch}",measure="instructions",'
            f'project="{alert["project"]}",workload="larson"}} 1.0') in metrics
    # the bisection's rounds: each job is answered from the synthetic history
    rounds = 0
    while (job := claim(client, rheaders, runner)) is not None:
        rounds += 1
        assert rounds <= 20
        answer(client, rheaders, runner, job, cost, timed)
        run_analysis(app, conf)
    b = client.get(f"/api/v1/bisections/{v['bisection_id']}", headers=user_headers).json()
    assert b["state"] == "done" and b["culprit"] == commits[culprit], b
    assert b["builds"] <= 3 + 2  # ceil(log2(7)) + 2
    cell = (r"ops_per_sec -9\.\d% ±\d+\.\d%" if timed
            else r"instructions \+10\.0% ±0\.0%")
    assert re.fullmatch(rf"culprit: {commits[culprit][:7]} change {culprit} "
                        rf"\(larson threads=1 {cell}, bisected in \d builds\)",
                        b["culprit_line"]), b["culprit_line"]
    assert b["measure"] == "instructions"
    assert all(st["evidence"]["good_vs_probe"] for st in b["steps"] if st["round"] > 0)
    assert_stored_shapes(db_session, b, v)
    alert = client.get(f"/api/v1/alerts/{v['alert_id']}", headers=user_headers).json()
    assert f"culprit: {commits[culprit][:7]}" in alert["text"]
    tri = client.get("/api/v1/alerts/triage", params={"project": project},
                     headers=user_headers)
    assert tri.status_code == 200 and tri.json()[0]["alerts"] == 1


STEP = {"round", "index", "sha", "good_end", "bad_end", "good_index", "bad_index",
        "comparisons", "outcome"}
EVIDENCE = {"comparison_id", "base", "head", "diff_pct", "ci_low_pct", "ci_high_pct",
            "verdict", "higher_is_better", "measure", "threads", "line"}
CELL = {"workload", "params", "threads", "measure", "diff_pct", "ci_low_pct", "ci_high_pct",
        "line"}


def assert_stored_shapes(db_session: Session, b: dict[str, Any], v: dict[str, Any]) -> None:
    """The typed records keep the JSON the columns held and the API answered: round 0 has
    a note and no evidence, a probe's round its evidence and no note; verdict cells and
    alert cells their keys."""
    steps = db_session.execute(text("SELECT steps FROM bisections WHERE id = :i"),
                               {"i": b["id"]}).scalar_one()
    assert steps == b["steps"]
    for st in steps:
        extra = {"note"} if st["round"] == 0 else {"evidence"}
        assert set(st) == STEP | extra, st
        for e in (st.get("evidence") or {}).values():
            assert e is None or set(e) == EVIDENCE, e
    moved, cells = db_session.execute(text(
        "SELECT v.moved, a.cells FROM commit_verdicts v JOIN alerts a ON a.id = v.alert_id "
        "WHERE v.alert_id = :a"), {"a": v["alert_id"]}).one()
    assert moved == v["moved"] and all(set(m) == CELL | {"verdict"} for m in moved)
    assert cells and all(set(c) == CELL | {"series_key"} for c in cells)


def test_bisection_bad_input(client: TestClient, settings: Settings, db_session: Session,
                             make_project: Any, user_headers: dict[str, str],
                             unique: Any) -> None:
    project = make_project()["name"]
    tag = unique
    commits = [hexsha(f"{tag}{i:02d}") for i in range(3)]
    push(db_session, settings.model_copy(update={"push_max_queued": 0}), project, None,
         commits, ["a", "b", "c"])
    body = {"project": project, "good": commits[0], "bad": commits[2], "workload": "larson",
            "measure": "instructions", "threads": 1}

    def post(**change: Any) -> Any:
        return client.post("/api/v1/bisections", headers=user_headers, json={**body, **change})

    r = post(good="f" * 40)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "good"]
    r = post(bad="e" * 40)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "bad"]
    r = post(good=commits[2], bad=commits[0])  # good is not an ancestor of bad
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "good"]
    r = post(workload="nosuch")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "workload"]
    r = post(project="nosuch-project")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "project"]
    r = post()
    assert r.status_code == 201, r.text
    assert r.json()["commits"] == commits and r.json()["state"] == "running"


def test_push_of_1000_commits_queues_the_cap_and_force_push_marks_unreachable(
        client: TestClient, settings: Settings, db_session: Session, make_project: Any,
        user_headers: dict[str, str], unique: Any) -> None:
    project = make_project()["name"]
    tag = unique
    commits = [hexsha(f"{tag}{i:04d}") for i in range(1000)]
    conf = settings.model_copy(update={"push_max_queued": 20})
    out = push(db_session, conf, project, None, commits, [f"c{i}" for i in range(1000)])
    assert (out.commits, out.queued, out.deferred) == (1000, 20, 980)
    assert "980 deferred" in (out.note or "")
    # rewrite the last two commits: they stay, marked unreachable
    p = db_session.query(Project).filter_by(name=project).one()
    new = [hexsha(f"{tag}x{i}") for i in range(2)]
    infos = [CommitInfo(sha=new[0], parent=commits[997], message="redo"),
             CommitInfo(sha=new[1], parent=new[0], message="redo 2")]
    out = pushes.handle_push(db_session, conf, p, ref="refs/heads/main", after=new[1],
                             commits=infos)
    assert out.unreachable == 2
    gone = client.get(f"/api/v1/projects/{project}/commits/{commits[999]}",
                      headers=user_headers).json()
    assert gone["unreachable_on"] == ["main"]
    kept = client.get(f"/api/v1/projects/{project}/commits/{commits[997]}",
                      headers=user_headers).json()
    assert kept["unreachable_on"] == []


def test_a_fast_forward_walks_its_new_commits_not_the_branch_history(
        settings: Settings, db_session: Session, make_project: Any, unique: Any) -> None:
    project = make_project()["name"]
    commits = [hexsha(f"{unique}{i:04d}") for i in range(50)]
    push(db_session, settings, project, None, commits, [f"c{i}" for i in range(50)])
    p = db_session.query(Project).filter_by(name=project).one()
    walk = verdict_sql.ancestry(db_session, p.id, commits[49], 10_000, until=commits[46])
    assert walk == commits[46:][::-1]  # the walk ends at the old head
    assert len(verdict_sql.ancestry(db_session, p.id, commits[49], 10_000)) == 50
    # an old head that is not an ancestor (a force-push): the whole history is walked
    assert len(verdict_sql.ancestry(db_session, p.id, commits[49], 10_000,
                                    until=hexsha("elsewhere"))) == 50


def test_a_fast_forward_its_commits_prove_asks_no_walk_under_the_lock(
        settings: Settings, db_session: Session, make_project: Any, unique: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pushes to one branch queue on its lock: a push whose own commits lead to the old
    head is a fast-forward without walking the database."""
    project = make_project()["name"]
    commits = [hexsha(f"{unique}{i:04d}") for i in range(4)]
    push(db_session, settings, project, None, commits[:2], ["c0", "c1"])
    walks: list[str] = []
    real = verdict_sql.ancestry
    monkeypatch.setattr(verdict_sql, "ancestry",
                        lambda s, p, sha, *a, **k: walks.append(sha) or real(s, p, sha, *a, **k))
    out = push(db_session, settings, project, commits[1], commits[2:], ["c2", "c3"])
    assert (out.commits, out.unreachable, walks) == (2, 0, [])
    # a force-push's commits do not reach the old head: the walk tells
    out = push(db_session, settings, project, commits[0], [hexsha(f"{unique}f")], ["f"])
    assert out.unreachable == 3 and walks == [hexsha(f"{unique}f")]


def test_pushes_delivered_out_of_order_keep_the_newer_head(
        client: TestClient, user_headers: dict[str, str], db_session: Session,
        make_project: Any, unique: Any) -> None:
    """Forges do not promise the order of deliveries: push A (base -> a) arriving after
    push B (a -> b) is not a force-push back to a; b stays the head and reachable. A
    push that starts from the head (a rewind to a) still moves it back."""
    project = make_project()["name"]
    base, a, b = (hexsha(f"{unique}{x}") for x in ("base", "a", "b"))

    def post(before: str | None, after: str, new: bool = True) -> Any:
        commits = [{"sha": after, "parent": before}] if new else []
        body = {"project": project, "ref": "refs/heads/main", "before": before,
                "after": after, "commits": commits}
        r = client.post("/api/v1/webhooks/push", headers=user_headers, json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()

    post(None, base)
    post(a, b)  # B first
    late = post(base, a)
    assert (late["unreachable"], late["commits"]) == (0, 1)
    assert "delivered after a newer push" in late["note"]
    p = db_session.query(Project).filter_by(name=project).one()
    assert head_of(db_session, p) == b
    rows = db_session.execute(text(
        "SELECT count(*) FROM branch_commits bc JOIN branches br ON br.id = bc.branch_id "
        "WHERE br.project_id = :p AND bc.unreachable_at IS NOT NULL"), {"p": p.id}).scalar()
    assert rows == 0
    rewind = post(b, a, new=False)  # a force-push from the head back to a
    assert (rewind["unreachable"], rewind["note"]) == (1, None)
    assert head_of(db_session, p) == a


def head_of(session: Session, project: Project) -> str | None:
    session.expire_all()
    branch = project_sql.get_branch(session, project, "main")
    return None if branch is None else branch.head_sha


def blocked_by(engine: Engine, pid: int) -> bool:
    """Whether some backend waits for a lock `pid` holds."""
    with engine.connect() as conn:
        return bool(conn.scalar(text(
            "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
            {"pid": pid}))


def test_a_results_post_does_not_wait_for_a_push_in_progress_on_its_branch(
        client: TestClient, settings: Settings, engine: Engine, db_session: Session,
        make_project: Any, make_runner: Any, unique: Any) -> None:
    """A push holds its branch row until it commits; a results post for that branch locks
    the row only against deletion (FOR KEY SHARE) and must not queue behind the push."""
    project = make_project()["name"]
    head = hexsha(f"{unique}head")
    push(db_session, settings, project, None, [head], ["c0"])
    runner, headers = make_runner()
    answers: list[int] = []
    post = threading.Thread(target=lambda: answers.append(client.post(
        "/api/v1/results", headers=headers, json=results(
            [trial(head)], runner_id=runner["id"], project=project, branch="main")
    ).status_code))
    pushing = db.make_sessionmaker(engine)()
    try:
        p = pushing.query(Project).filter_by(name=project).one()
        after = hexsha(f"{unique}next")
        project_sql.record_push(pushing, p, "main", after, [CommitInfo(sha=after, parent=head)])
        holder = int(pushing.scalar(text("SELECT pg_backend_pid()")))
        post.start()
        while post.is_alive() and not blocked_by(engine, holder):
            time.sleep(0.05)
        assert not post.is_alive() or not blocked_by(engine, holder), (
            "the results post waits for the push's branch lock")
    finally:
        pushing.rollback()
        pushing.close()
        if post.ident is not None:
            post.join(60)
    assert answers == [201]
