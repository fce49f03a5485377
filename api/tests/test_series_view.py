"""Migration 0018: `v_series` reads `series_points` and `trials_series_idx` is gone; the
view's rows are the ones the old view (an aggregate over `trials`) gave, value for value,
and `series_points`, kept by the trigger's new statement, holds what migration 0012's
aggregate of the same trials gives."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import psycopg
from conftest import MIGRATIONS, create_database
from helpers import push, results, trial
from mallard_api import db
from test_trial_refs import _one, add_trial, world


def migration(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"mallard_migration_{name[:4]}", MIGRATIONS / "versions" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def points_from_trials(conn: psycopg.Connection, commits: list[str]) -> tuple[Any, Any]:
    """(the rows of `series_points` of these commits, those migration 0012's aggregate
    computes from their trials), both in key order."""
    add = migration("0012_series_points").ADD_POINTS
    source = ("(SELECT * FROM trials WHERE commit_id IN "
              "(SELECT id FROM commits WHERE sha = ANY(%s)))")
    select = add[add.index("SELECT"):].format(source=source, conflict="")
    stored = conn.execute(
        "SELECT workload_id, testbed_id, allocator_id, measure, commit_id, vals "
        "FROM series_points WHERE commit_id IN (SELECT id FROM commits WHERE sha = ANY(%s)) "
        "ORDER BY 1, 2, 3, 4, 5", (commits,)).fetchall()
    return stored, conn.execute(select, (commits,)).fetchall()


def both_ways(conn: psycopg.Connection, project: str) -> tuple[list[Any], list[Any], int]:
    """(rows only the old view gives, rows only the new one gives, rows) for a project."""
    old = migration("0018_series_view_points").old_series_view().replace(
        "CREATE OR REPLACE VIEW v_series", "CREATE TEMP VIEW old_series")
    conn.execute(old)
    try:
        only_old = conn.execute("SELECT * FROM old_series WHERE project = %s EXCEPT ALL "
                                "SELECT * FROM v_series WHERE project = %s",
                                (project, project)).fetchall()
        only_new = conn.execute("SELECT * FROM v_series WHERE project = %s EXCEPT ALL "
                                "SELECT * FROM old_series WHERE project = %s",
                                (project, project)).fetchall()
        n = _one(conn, "SELECT count(*) FROM v_series WHERE project = %s", project)
    finally:
        conn.execute("DROP VIEW old_series")
    return only_old, only_new, n


def test_v_series_gives_what_the_aggregate_over_trials_gave(
        client, make_project, make_runner, user_headers, database_url, unique):
    project = make_project()["name"]
    commits = [f"{unique}{i}".ljust(40, "d") for i in range(3)]
    push(client, user_headers, project, commits)
    runner, headers = make_runner()
    for k, c in enumerate(commits):
        for post in range(2):  # two posts per commit: their points are merged
            ts = [trial(c, value=v * (k + 1) + post) for v in (3.0, 1.0, 2.0, 5.0)]
            ts += [trial(None, value=9.0 + v, allocator="jemalloc", label="peer")
                   for v in range(3)]
            ts += [trial(c, value=1e9, warmup=True), trial(c, value=1e9, ok=False),
                   trial(c, value=7.0, threads=8), trial(c, value=4.0, variant="transfer=ring")]
            other = trial(c, value=0.5 + post)  # the same allocator built another way:
            other["allocator"]["build_flags"] = "-O3"  # one point with the others
            ts.append(other)
            ts.append(trial(c, measures={"ops_per_sec": 6.0, "max_rss_bytes": 1e6}))
            body = results(ts, runner_id=runner["id"], project=project, branch="main")
            r = client.post("/api/v1/results", headers=headers, json=body)
            assert r.status_code == 201, r.text
        aarch = results([trial(c, value=11.0)], runner_id=runner["id"], project=project,
                        branch="main", testbed={**body["testbed"], "arch": "aarch64"})
        assert client.post("/api/v1/results", headers=headers, json=aarch).status_code == 201
    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as conn:
        only_old, only_new, n = both_ways(conn, project)
        # per commit: mallard (x86_64, aarch64), its other variant, its other threads,
        # jemalloc; ops_per_sec and wall_seconds, max_rss_bytes for one of them
        assert (only_old, only_new, n) == ([], [], 3 * (5 * 2 + 1))
        row = conn.execute(
            "SELECT median, p25, p75, n FROM v_series WHERE project = %s AND commit_sha = %s "
            "AND allocator = 'mallard' AND variant = 'default' AND threads = 2 "
            "AND arch = 'x86_64' AND measure = 'ops_per_sec'", (project, commits[0])).fetchone()
        # 3 1 2 5 | 4 2 3 6 | 0.5 1.5 | 6 6: 12 values
        assert row == (3.0, 1.875, 5.25, 12)
        stored, recomputed = points_from_trials(conn, commits)
        # per commit: the 11 series above, the -O3 build's own rows apart: 13
        assert stored == recomputed and len(stored) == 3 * 13


def indexes(c: psycopg.Connection) -> set[str]:
    return {str(r[0]) for r in c.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'trials'").fetchall()}


def reads(c: psycopg.Connection) -> str:
    row = c.execute("SELECT pg_get_viewdef('v_series')").fetchone()
    assert row is not None
    return "series_points" if "series_points" in str(row[0]) else "trials"


def test_0018_down_and_up_again(pg_server):
    url = create_database(pg_server, "mallard_migrations_0018")
    db.migrate(url, MIGRATIONS, "0017")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as c:
        assert "trials_series_idx" in indexes(c) and reads(c) == "trials"
        ids = world(c)
        c.execute("INSERT INTO branch_commits (branch_id, commit_id, position) "
                  "VALUES (%s, %s, 1)", (ids["branch"], ids["commit"]))
        add_trial(c, ids)
        add_trial(c, ids)
        before = c.execute("SELECT * FROM v_series").fetchall()
    assert len(before) == 1 and before[0][-1] == 2
    for step in ("head", "0017", "head"):
        if step == "head":
            db.migrate(url, MIGRATIONS)
        else:
            db.downgrade(url, MIGRATIONS, step)
        with psycopg.connect(plain, autocommit=True) as c:
            assert ("trials_series_idx" in indexes(c)) == (step == "0017")
            assert reads(c) == ("trials" if step == "0017" else "series_points")
            assert c.execute("SELECT * FROM v_series").fetchall() == before
            assert _one(c, "SELECT count(*) FROM information_schema.role_table_grants "
                           "WHERE grantee = 'mallard_reader' AND table_name = 'v_series'") == 1
    with psycopg.connect(plain, autocommit=True) as c:  # a trial inserted by hand
        trial_id = add_trial(c, ids)
        c.execute("""UPDATE trials SET measures = '{"a": 2.5, "b": "3", "c": null, "d": true,
                     "e": 1e300}' WHERE id = %s""", (trial_id,))  # (an UPDATE adds nothing)
        c.execute("""INSERT INTO trials (uid, commit_id, testbed_id, allocator_id,
                     workload_id, label, measures)
                     SELECT uid || '-2', commit_id, testbed_id, allocator_id, workload_id,
                            label, measures FROM trials WHERE id = %s""", (trial_id,))
        got = c.execute("SELECT measure, vals FROM series_points WHERE commit_id = %s "
                        "ORDER BY measure", (ids["commit"],)).fetchall()
        assert got == [("a", [2.5]), ("e", [1e300]), ("ops_per_sec", [1.0, 1.0, 1.0])]
