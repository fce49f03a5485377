"""Migration 0017: a trial's uid is unique through an exclusion constraint over a hash
index; ingest skips stored uids with `ON CONFLICT ON CONSTRAINT trials_uid_excl`, also
when a concurrent transaction inserts the same uid."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from conftest import MIGRATIONS, create_database
from mallard_api import db
from test_trial_refs import _one, add_trial, world

INSERT_SKIPPING = """
INSERT INTO trials (uid, testbed_id, allocator_id, workload_id, label)
SELECT uid, testbed_id, allocator_id, workload_id, label FROM trials WHERE id = %s
ON CONFLICT ON CONSTRAINT trials_uid_excl DO NOTHING RETURNING id"""
COPY_WITH_UID = """
INSERT INTO trials (uid, testbed_id, allocator_id, workload_id, label)
SELECT %s, testbed_id, allocator_id, workload_id, label FROM trials WHERE id = %s"""


def constraints(c: psycopg.Connection) -> set[tuple[str, str]]:
    return {(str(n), str(t)) for n, t in c.execute(
        "SELECT conname, contype FROM pg_constraint WHERE conrelid = 'trials'::regclass "
        "AND contype IN ('u', 'x')").fetchall()}


def test_0017_down_and_up_again(pg_server):
    url = create_database(pg_server, "mallard_migrations_0017")
    db.migrate(url, MIGRATIONS, "0016")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as c:
        assert constraints(c) == {("trials_uid_key", "u")}
        before = add_trial(c, world(c))  # a trial from before: kept, and still unique
    db.migrate(url, MIGRATIONS)
    with psycopg.connect(plain, autocommit=True) as c:
        assert constraints(c) == {("trials_uid_excl", "x")}
        assert c.execute(INSERT_SKIPPING, (before,)).fetchall() == []
        uid = c.execute("SELECT uid FROM trials WHERE id = %s", (before,)).fetchone()
        assert uid is not None
        with pytest.raises(psycopg.errors.ExclusionViolation, match="trials_uid_excl"):
            c.execute(COPY_WITH_UID, (uid[0], before))
        add_trial(c, world(c))
    db.downgrade(url, MIGRATIONS, "0016")
    with psycopg.connect(plain, autocommit=True) as c:
        assert constraints(c) == {("trials_uid_key", "u")}
        assert _one(c, "SELECT count(*) FROM trials") == 2
        with pytest.raises(psycopg.errors.UniqueViolation, match="trials_uid_key"):
            c.execute(COPY_WITH_UID, (uid[0], before))
    db.migrate(url, MIGRATIONS)
    with psycopg.connect(plain, autocommit=True) as c:
        assert constraints(c) == {("trials_uid_excl", "x")}
        assert _one(c, "SELECT count(*) FROM trials") == 2


def test_a_uid_inserted_by_a_concurrent_transaction_is_skipped_once_it_commits(database_url):
    plain = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as setup:
        template = add_trial(setup, world(setup))
    uid = f"concurrent-{uuid.uuid4()}"
    first = psycopg.connect(plain)
    second = psycopg.connect(plain)
    got: list[list[tuple[int]]] = []
    try:
        first.execute(COPY_WITH_UID + " ON CONFLICT ON CONSTRAINT trials_uid_excl DO NOTHING",
                      (uid, template))
        pid = second.info.backend_pid

        def insert() -> None:
            got.append(second.execute(
                COPY_WITH_UID + " ON CONFLICT ON CONSTRAINT trials_uid_excl DO NOTHING "
                "RETURNING id", (uid, template)).fetchall())
            second.commit()

        t = threading.Thread(target=insert)
        t.start()
        with psycopg.connect(plain, autocommit=True) as watch:  # until it waits on ours
            while _one(watch, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s "
                              "AND wait_event_type = 'Lock'", pid) == 0:
                assert t.is_alive()
        first.commit()
        t.join(60)
        assert got == [[]]  # skipped, not an error and not a second row
        with psycopg.connect(plain, autocommit=True) as c:
            assert _one(c, "SELECT count(*) FROM trials WHERE uid = %s", uid) == 1
    finally:
        first.close()
        second.close()
