"""Results ingest: idempotent by uid, normalised, completes the job; concurrent posts share rows."""

from __future__ import annotations

import secrets

from helpers import job_spec, results, stored, trial
from sqlalchemy import text


def test_same_trial_posted_twice_is_stored_once(client, make_runner, engine):
    runner, headers = make_runner()
    body = results([trial(), trial()], runner_id=runner["id"])
    r1 = client.post("/api/v1/results", headers=headers, json=body)
    assert r1.status_code == 201, r1.text
    assert r1.json() == {"stored": 2, "duplicates": 0, "job_id": None}
    r2 = client.post("/api/v1/results", headers=headers, json=body)
    assert r2.json() == {"stored": 0, "duplicates": 2, "job_id": None}
    uids = [t["uid"] for t in body["trials"]]
    with engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM trials WHERE uid = ANY(:u)"),
                         {"u": uids}).scalar()
    assert n == 2


def test_repeated_results_share_the_normalised_rows(client, make_runner, engine):
    runner, headers = make_runner()
    a, b = trial(variant="transfer=ring"), trial(variant="transfer=ring")
    client.post("/api/v1/results", headers=headers, json=results([a], runner_id=runner["id"]))
    client.post("/api/v1/results", headers=headers, json=results([b], runner_id=runner["id"]))
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT allocator_id, workload_id, testbed_id FROM trials WHERE uid IN (:a, :b)"),
            {"a": a["uid"], "b": b["uid"]}).all()
    assert len(rows) == 2 and rows[0] == rows[1]


def test_params_equal_in_python_but_not_in_json_are_other_workloads(client, make_runner,
                                                                     engine):
    # a post's params digests are reused by value and type (sql/results.py)
    runner, headers = make_runner()
    posted = [trial() for _ in range(4)]
    for t, value in zip(posted, (1, True, 1.0, 1), strict=True):
        t["workload"]["params"] = {"threads": 2, "flag": value}
    r = client.post("/api/v1/results", headers=headers,
                    json=results(posted, runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        got = [conn.execute(text("SELECT w.params FROM trials t JOIN workloads w "
                                 "ON w.id = t.workload_id WHERE t.uid = :u"),
                            {"u": t["uid"]}).scalar_one()["flag"] for t in posted]
    assert got == [1, True, 1.0, 1] and [type(v) for v in got] == [int, bool, float, int]


def test_text_numbers_and_times_are_stored_as_posted(client, make_runner, engine):
    # the batch travels to PostgreSQL as one JSON array (sql/results.py)
    runner, headers = make_runner()
    t = trial(uid=f"uid-é-😀-{secrets.token_hex(4)}", ok=False)
    t.update(stderr_tail='line "1"\\ ü 😀\n\ttab', started_at="2026-11-21T12:00:00.123456+02:00",
             exit_code=-(2**31), signal=2**31 - 1, seq=7, warmup=True)
    t["measures"] = {"ops_per_sec": 1.2345678901234567e-300, "max_rss_bytes": 2.0**40}
    t["counters"] = {"big": 10**300, "s": "é😀", "nested": {"a": [1, 2.5, None, True]}}
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT uid, stderr_tail, started_at, exit_code, signal, seq, warmup, ok, measures, "
            "counters FROM trials WHERE uid = :u"), {"u": t["uid"]}).one()
    assert row.stderr_tail == t["stderr_tail"] and row.uid == t["uid"]
    assert row.started_at.isoformat() == "2026-11-21T10:00:00.123456+00:00"
    assert (row.exit_code, row.signal, row.seq, row.warmup, row.ok) == (-(2**31), 2**31 - 1, 7,
                                                                         True, False)
    assert row.measures == t["measures"] and row.counters == t["counters"]


def test_results_with_job_id_complete_the_job(client, make_runner, user_headers, make_project):
    project = make_project()
    runner, headers = make_runner()
    job = client.post("/api/v1/jobs", headers=user_headers, json={
        "kind": "commit", "arch": runner["arch"], "project": project["name"],
        "spec": job_spec(repo_url=project["repo_url"])}).json()
    claimed = client.post("/api/v1/jobs/claim", headers=headers,
                          json={"runner_id": runner["id"]}).json()
    assert claimed["id"] == job["id"]
    body = results([trial(), trial(allocator="jemalloc", commit=None, label="peer")],
                   job_id=job["id"], runner_id=runner["id"], project=project["name"],
                   branch="main")
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 201 and r.json()["job_id"] == job["id"]
    detail = client.get(f"/api/v1/jobs/{job['id']}", headers=user_headers).json()
    assert detail["state"] == "done"
    assert [a["outcome"] for a in detail["attempts"]] == ["done"]


def test_measurements_view_has_the_contract_columns(client, make_runner, make_project, engine):
    project = make_project()
    runner, headers = make_runner()
    t = trial(variant="transfer=ring", value=123.0)
    client.post("/api/v1/results", headers=headers,
                json=results([t], runner_id=runner["id"], project=project["name"],
                             branch="main"))
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT * FROM v_measurements WHERE trial_id = (SELECT id FROM trials WHERE uid = :u)"
            " AND measure = 'ops_per_sec'"), {"u": t["uid"]}).mappings().one()
    assert row["value"] == 123.0 and row["unit"] == "ops/s" and row["higher_is_better"]
    assert row["allocator_label"] == "mallard@aaaaaaa transfer=ring"
    assert row["variant"] == "transfer=ring" and row["threads"] == 2
    assert row["project"] == project["name"] and row["branch"] == "main"
    assert row["commit_sha"] == "a" * 40 and row["commit_short"] == "aaaaaaa"


def test_artifacts_are_kept_once(client, make_runner, engine):
    runner, headers = make_runner()
    body = results([trial()], runner_id=runner["id"])
    body["artifacts"] = {"hyperfine": {"larson threads=2": {"mean": 0.4}}}
    for _ in range(2):
        assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT artifacts FROM result_artifacts WHERE runner_id = :r"),
                            {"r": runner["id"]}).scalars().all()
    assert rows == [body["artifacts"]]


def post_at_once(base_url: str, headers: dict[str, str], bodies: list[dict]) -> list[int]:
    """POST every body to /results from a thread of its own, all released together; the
    statuses."""
    import threading

    import httpx

    statuses: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(bodies))

    def worker(body: dict) -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
            barrier.wait()
            r = http.post("/api/v1/results", json=body)
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=worker, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return statuses


def test_concurrent_posts_creating_the_same_rows_all_succeed(live_server, make_runner, unique):
    import random

    runner, headers = make_runner()
    names = [f"wl-{unique}-{i}" for i in range(6)]

    def body(seed: int) -> dict:
        rng = random.Random(seed)
        picked = rng.sample(names, 4)
        return results([trial(f"{unique}{seed}".ljust(40, "e"), workload=w,
                              allocator=f"alloc-{unique}-{rng.randint(0, 2)}") for w in picked],
                       runner_id=runner["id"])

    assert post_at_once(live_server, headers, [body(i) for i in range(8)]) == [201] * 8


def test_rows_that_exist_but_are_not_remembered_are_reused(client, make_runner, make_project,
                                                           engine, unique):
    """A commit and allocators stored before (by a push, another process, or before a
    restart) are found by the insert that would add them: no second row."""
    from mallard_api.sql import ids

    project = make_project()["name"]
    runner, headers = make_runner()
    commit = f"{unique}".ljust(40, "c")
    peer = f"peer-{unique}"

    def post() -> dict[str, int]:
        trials = [trial(commit), trial(commit, variant="transfer=ring"),
                  trial(None, label="peer", allocator=peer)]
        body = results(trials, runner_id=runner["id"], project=project, branch="main")
        assert client.post("/api/v1/results", headers=headers, json=body).json()["stored"] == 3
        with engine.connect() as conn:
            return {f"{r.name}/{r.variant}": (r.allocator_id, r.commit_id) for r in conn.execute(
                text("SELECT a.name, a.variant, t.allocator_id, t.commit_id FROM trials t "
                     "JOIN allocators a ON a.id = t.allocator_id WHERE t.uid = ANY(:u)"),
                {"u": [t["uid"] for t in trials]})}

    first = post()
    ids._known.clear()  # as a new process
    assert post() == first
    assert len({c for _, c in first.values()}) == 1  # the peer ran beside the head's commit
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM allocators WHERE commit_sha = :c "
                                 "OR name = :p"), {"c": commit, "p": peer}).scalar_one() == 3
        assert conn.execute(text("SELECT count(*) FROM commits WHERE sha = :c"),
                            {"c": commit}).scalar_one() == 1


def test_concurrent_posts_of_one_new_commit_share_its_rows(live_server, make_runner, engine,
                                                           make_project, unique):
    """Eight runners post the same new commit and allocators at once: all stored, one
    commit row and one row per allocator configuration."""
    project = make_project()["name"]
    runner, headers = make_runner()
    commit = f"{unique}".ljust(40, "d")
    bodies = [results([trial(commit, variant=v) for v in (None, "a", "b")]
                      + [trial(None, label="peer", allocator=f"peer-{unique}")],
                      runner_id=runner["id"], project=project, branch="main")
              for _ in range(8)]
    assert post_at_once(live_server, headers, bodies) == [201] * 8
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM commits WHERE sha = :c"),
                            {"c": commit}).scalar_one() == 1
        assert conn.execute(text("SELECT count(*) FROM allocators WHERE commit_sha = :c"),
                            {"c": commit}).scalar_one() == 3
        assert conn.execute(text("SELECT count(*), count(DISTINCT commit_id) FROM trials t "
                                 "JOIN commits c ON c.id = t.commit_id WHERE c.sha = :c"),
                            {"c": commit}).one() == (32, 1)


def test_a_jobs_results_go_to_its_own_project_only(client, make_runner, user_headers,
                                                    make_project, engine):
    """The attack: the runner holding a job of project A posts its trials naming project
    B. 403 naming `project`, nothing stored, the job still running; the same post naming
    A is taken."""
    mine, victim = make_project(), make_project()
    runner, headers = make_runner(projects=None)
    job = client.post("/api/v1/jobs", headers=user_headers, json={
        "kind": "commit", "arch": runner["arch"], "project": mine["name"],
        "spec": job_spec(repo_url=mine["repo_url"])}).json()
    claimed = client.post("/api/v1/jobs/claim", headers=headers,
                          json={"runner_id": runner["id"]}).json()
    assert claimed["id"] == job["id"]
    body = results([trial()], job_id=job["id"], runner_id=runner["id"],
                   project=victim["name"], branch="main")
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 403, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "project"]
    assert stored(engine, [t["uid"] for t in body["trials"]]) == 0
    assert client.get(f"/api/v1/jobs/{job['id']}", headers=user_headers).json()["state"] == \
        "running"
    r = client.post("/api/v1/results", headers=headers, json={**body, "project": mine["name"]})
    assert r.status_code == 201, r.text


def test_a_runner_posts_history_only_to_the_projects_it_may_write(
        client, make_runner, make_project, admin_headers, engine, database_url,
        monkeypatch):
    """The attack: any runner posts made-up history without a job to any project. A
    runner may write none until an admin says which (REST or the CLI); 403 naming
    `project`, nothing stored."""
    from mallard_api.cli import app as cli
    from typer.testing import CliRunner

    mine, victim = make_project(), make_project()
    runner, headers = make_runner(projects=None)
    assert runner["projects"] == []

    def post(project: str) -> tuple[int, list[str]]:
        body = results([trial()], runner_id=runner["id"], project=project, branch="main")
        r = client.post("/api/v1/results", headers=headers, json=body)
        return r.status_code, [t["uid"] for t in body["trials"]]

    status, uids = post(victim["name"])
    assert status == 403 and stored(engine, uids) == 0
    # the runner cannot widen its own scope; an admin can
    scope = f"/api/v1/runners/{runner['id']}/projects"
    assert client.put(scope, headers=headers,
                      json={"projects": "all"}).status_code == 403
    r = client.put(scope, headers=admin_headers, json={"projects": [mine["name"]]})
    assert r.status_code == 200 and r.json()["projects"] == [mine["name"]], r.text
    assert post(mine["name"])[0] == 201
    status, uids = post(victim["name"])
    assert status == 403 and stored(engine, uids) == 0
    bad = client.put(scope, headers=admin_headers, json={"projects": [""]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body",
                                                                             "projects"]
    # the CLI: every project, then none again
    monkeypatch.setenv("DATABASE_URL", database_url)
    res = CliRunner().invoke(cli, ["runner", "projects", runner["name"], "--all"])
    assert res.exit_code == 0 and res.output.strip().endswith("\tall"), res.output
    assert post(victim["name"])[0] == 201
    res = CliRunner().invoke(cli, ["runner", "projects", runner["name"], "--none"])
    assert res.exit_code == 0 and res.output.strip().endswith("\tnone"), res.output
    status, uids = post(victim["name"])
    assert status == 403 and stored(engine, uids) == 0
    assert CliRunner().invoke(cli, ["runner", "projects", "no-such-runner"]).exit_code == 1


def test_a_trials_layout_is_stored_and_a_trial_without_one_has_none(client, make_runner,
                                                                     engine):
    runner, headers = make_runner()
    sampled, fixed = trial(), trial()
    sampled["layout"] = {"aslr": True, "env_pad": 1232}
    r = client.post("/api/v1/results", headers=headers,
                    json=results([sampled, fixed], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        got = dict(conn.execute(text("SELECT uid, layout FROM trials WHERE uid IN (:a, :b)"),
                                {"a": sampled["uid"], "b": fixed["uid"]}).all())
    assert got == {sampled["uid"]: {"aslr": True, "env_pad": 1232}, fixed["uid"]: None}
    for bad, field in (({"aslr": "yes", "env_pad": 0}, "aslr"),
                       ({"aslr": True, "env_pad": -16}, "env_pad"),
                       ({"aslr": True, "env_pad": 16, "seed": 1}, "seed")):
        t = trial()
        t["layout"] = bad
        r = client.post("/api/v1/results", headers=headers,
                        json=results([t], runner_id=runner["id"]))
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][-1] == field
