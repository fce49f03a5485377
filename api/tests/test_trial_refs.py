"""Migration 0016: the references of `trials` (and `series_points`) are checked per
statement by triggers instead of per row by foreign keys, with the same integrity: a
missing id is a foreign_key_violation, and deleting a referenced row does what the
foreign key's ON DELETE did (CASCADE, SET NULL, or refused)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from conftest import MIGRATIONS, create_database
from mallard_api import db


@pytest.fixture(scope="module")
def conn(pg_server) -> Iterator[psycopg.Connection]:  # type: ignore[no-untyped-def]
    url = create_database(pg_server, "mallard_trial_refs")
    db.migrate(url, MIGRATIONS)
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as c:
        yield c


def _one(conn: psycopg.Connection, sql: str, *args: object) -> int:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return int(row[0])


def world(conn: psycopg.Connection) -> dict[str, int]:
    """A project with a branch, a commit, a runner, a job and a trial's other rows."""
    u = uuid.uuid4().hex[:12]
    ids = {"project": _one(conn, "INSERT INTO projects (name, repo_url) VALUES (%s, %s) "
                                 "RETURNING id", f"p-{u}", f"file:///srv/git/{u}.git")}
    ids["branch"] = _one(conn, "INSERT INTO branches (project_id, name) VALUES (%s, 'main') "
                               "RETURNING id", ids["project"])
    ids["commit"] = _one(conn, "INSERT INTO commits (project_id, sha) VALUES (%s, %s) "
                               "RETURNING id", ids["project"], u * 3 + "abcd")
    ids["runner"] = _one(conn, "INSERT INTO runners (name, arch) VALUES (%s, 'x86_64') "
                               "RETURNING id", f"r-{u}")
    ids["job"] = _one(conn, "INSERT INTO jobs (kind, arch, spec) VALUES ('commit', 'x86_64', "
                            "'{}') RETURNING id")
    ids["testbed"] = _one(conn, "INSERT INTO testbeds (fingerprint, arch, fields) VALUES (%s, "
                                "'x86_64', '{}') RETURNING id", u)
    ids["allocator"] = _one(conn, "INSERT INTO allocators (name) VALUES (%s) RETURNING id",
                            f"a-{u}")
    ids["workload"] = _one(conn, "INSERT INTO workloads (name, params, params_sha256) "
                                 "VALUES ('larson', '{}', %s) RETURNING id", u)
    return ids


def add_trial(conn: psycopg.Connection, ids: dict[str, int], **override: int) -> int:
    v = {**ids, **override}
    return _one(conn, """
        INSERT INTO trials (uid, job_id, runner_id, project_id, branch_id, commit_id,
                            testbed_id, allocator_id, workload_id, label, measures)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'head', '{"ops_per_sec": 1.0}')
        RETURNING id""", uuid.uuid4().hex, v["job"], v["runner"], v["project"], v["branch"],
                v["commit"], v["testbed"], v["allocator"], v["workload"])


def test_no_foreign_keys_left_on_trials(conn):
    assert _one(conn, "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid "
                      "IN ('trials'::regclass, 'series_points'::regclass)") == 0


@pytest.mark.parametrize("column", ["job", "runner", "project", "branch", "commit", "testbed",
                                    "allocator", "workload"])
def test_a_missing_id_is_a_foreign_key_violation(conn, column):
    ids = world(conn)
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match=f"trials_{column}_id_fkey"):
        add_trial(conn, ids, **{column: 2**31 - 7})
    with pytest.raises(psycopg.errors.ForeignKeyViolation):  # an update is checked too
        trial = add_trial(conn, ids)
        conn.execute(f"UPDATE trials SET {column}_id = 2147483640 WHERE id = %s", (trial,))


def test_deletes_do_what_the_foreign_keys_did(conn):
    ids = world(conn)
    trial = add_trial(conn, ids)
    assert _one(conn, "SELECT count(*) FROM series_points WHERE commit_id = %s",
                ids["commit"]) == 1
    for table, col in (("jobs", "job"), ("runners", "runner"), ("commits", "commit"),
                       ("branches", "branch")):  # ON DELETE SET NULL
        conn.execute(f"DELETE FROM {table} WHERE id = %s", (ids[col],))
        assert conn.execute(f"SELECT {col}_id FROM trials WHERE id = %s",
                            (trial,)).fetchone() == (None,)
    # a deleted commit took its series points (as ON DELETE CASCADE did)
    assert _one(conn, "SELECT count(*) FROM series_points WHERE commit_id = %s",
                ids["commit"]) == 0
    for table in ("testbeds", "allocators", "workloads"):  # refused while used
        key = table[:-1]
        with pytest.raises(psycopg.errors.ForeignKeyViolation, match="still referenced"):
            conn.execute(f"DELETE FROM {table} WHERE id = %s", (ids[key],))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(f"UPDATE {table} SET id = id + 100000 WHERE id = %s", (ids[key],))
    conn.execute("DELETE FROM projects WHERE id = %s", (ids["project"],))  # CASCADE
    assert _one(conn, "SELECT count(*) FROM trials WHERE id = %s", trial) == 0
    for table in ("testbeds", "allocators", "workloads"):  # no trials left: allowed
        conn.execute(f"DELETE FROM series_points WHERE {table[:-1]}_id = %s",
                     (ids[table[:-1]],))
        conn.execute(f"DELETE FROM {table} WHERE id = %s", (ids[table[:-1]],))


def test_0016_down_and_up_again(pg_server):
    url = create_database(pg_server, "mallard_migrations_0016")
    db.migrate(url, MIGRATIONS, "0015")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    fks = ("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid "
           "IN ('trials'::regclass, 'series_points'::regclass)")
    with psycopg.connect(plain, autocommit=True) as c:
        assert _one(c, fks) == 12
        add_trial(c, world(c))  # a trial from before: kept, and valid
    db.migrate(url, MIGRATIONS)
    with psycopg.connect(plain, autocommit=True) as c:
        assert _one(c, fks) == 0
        assert _one(c, "SELECT count(*) FROM pg_indexes WHERE indexname = "
                       "'trials_ingested_idx'") == 0
        add_trial(c, world(c))
    db.downgrade(url, MIGRATIONS, "0015")
    with psycopg.connect(plain, autocommit=True) as c:
        assert _one(c, fks) == 12
        assert _one(c, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%%refs%%'") == 0
        assert _one(c, "SELECT count(*) FROM trials") == 2
    db.migrate(url, MIGRATIONS)
