"""Alembic migrations: up, down to base, and up again, on a database of their own."""

from __future__ import annotations

import psycopg
import pytest
from conftest import MIGRATIONS, create_database
from helpers import MALLARD_RECIPE
from mallard_api import db
from mallard_wire.jobs import JobSpec
from mallard_wire.recipes import Recipe
from psycopg.types.json import Jsonb

VIEWS = {"v_measurements", "v_series", "v_jobs", "v_runners"}


def objects(url: str) -> tuple[set[str], set[str]]:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        views = {r[0] for r in conn.execute(
            "SELECT viewname FROM pg_views WHERE schemaname = 'public'")}
    return tables, views


def test_upgrade_downgrade_upgrade(pg_server):
    url = create_database(pg_server, "mallard_migrations")
    db.migrate(url, MIGRATIONS)
    tables, views = objects(url)
    assert {"trials", "jobs", "runners", "commits", "branch_commits", "analysis_queue",
            "webhook_deliveries"} <= tables
    assert VIEWS <= views
    db.downgrade(url, MIGRATIONS, "base")
    tables, views = objects(url)
    assert tables <= {"alembic_version"} and not views
    db.migrate(url, MIGRATIONS)
    tables, views = objects(url)
    assert VIEWS <= views and "trials" in tables


def test_view_columns_are_the_contract(database_url):
    expected = {
        "v_measurements": "trial_id started_at ingested_at project commit_sha commit_short "
                          "commit_time branch allocator variant allocator_label label workload "
                          "params threads arch testbed_fingerprint cpu_model measure unit "
                          "higher_is_better value ok warmup job_id",
        "v_series": "project branch commit_sha commit_short commit_time commit_position "
                    "allocator variant allocator_label workload params threads arch "
                    "testbed_fingerprint measure median p25 p75 n",
        "v_jobs": "job_id kind state arch runner attempt created_at claimed_at finished_at "
                  "queue_seconds run_seconds",
        "v_runners": "runner_id name arch cpus last_seen_at seconds_since_seen "
                     "testbed_fingerprint cpu_model",
    }
    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as c:
        for view, cols in expected.items():
            got = [r[0] for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "ORDER BY ordinal_position", (view,))]
            assert got == cols.split(), view


def test_0003_makes_an_old_series_index_covering(pg_server):
    url = create_database(pg_server, "mallard_migrations_0003")
    db.migrate(url, MIGRATIONS, "0002_analysis")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:  # as 0001 used to create it
        conn.execute("DROP INDEX trials_series_idx")
        conn.execute("CREATE INDEX trials_series_idx ON trials "
                     "(workload_id, testbed_id, allocator_id, commit_id)")
    db.migrate(url, MIGRATIONS, "0017")  # 0018 drops the index (v_series reads series_points)
    with psycopg.connect(plain) as conn:
        indexdef = conn.execute("SELECT indexdef FROM pg_indexes "
                                "WHERE indexname = 'trials_series_idx'").fetchone()[0]
        assert "INCLUDE (ok, warmup, id, measures)" in indexdef
        assert conn.execute("SELECT to_regclass('result_artifacts')").fetchone()[0]


def test_0005_queues_the_comparisons_still_open(pg_server):
    url = create_database(pg_server, "mallard_migrations_0005")
    db.migrate(url, MIGRATIONS, "0004_comparison_jobs_view")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        for state in ("queued", "running", "done", "failed"):
            conn.execute("INSERT INTO comparisons (project, arch, base, head, base_label, "
                         "head_label, trials, state) VALUES ('p', 'x86_64', '{}', '{}', 'a', "
                         "'b', 5, %s)", (state,))
    db.migrate(url, MIGRATIONS)
    with psycopg.connect(plain) as conn:
        queued = conn.execute("SELECT c.state FROM analysis_queue q JOIN comparisons c "
                              "ON c.id = q.comparison_id ORDER BY c.id").fetchall()
    assert [r[0] for r in queued] == ["queued", "running"]
    db.downgrade(url, MIGRATIONS, "0004_comparison_jobs_view")
    tables, _ = objects(url)
    assert "analysis_queue" not in tables and "webhook_deliveries" not in tables


def test_0021_a_used_up_measure_sequence_goes_on(pg_server):
    """The attack: measure names posted until `measures_id_seq` (a smallserial) is used
    up; from then on no new name could be stored. 0021 widens the id and its sequence:
    every stored name keeps its id, the next one is 32,768."""
    url = create_database(pg_server, "mallard_migrations_0021")
    db.migrate(url, MIGRATIONS, "0020")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute("INSERT INTO measures (name) VALUES ('posted_before')")
        before = dict(conn.execute("SELECT name, id FROM measures").fetchall())
        conn.execute("SELECT setval('measures_id_seq', 32767)")  # used up
        with pytest.raises(psycopg.errors.SequenceGeneratorLimitExceeded):
            conn.execute("INSERT INTO measures (name) VALUES ('one_too_many')")
    db.migrate(url, MIGRATIONS, "0021")
    with psycopg.connect(plain, autocommit=True) as conn:
        assert dict(conn.execute("SELECT name, id FROM measures").fetchall()) == before
        new = conn.execute("INSERT INTO measures (name) VALUES ('one_more') RETURNING id")
        assert new.fetchone()[0] == 32768
        types = dict(conn.execute(
            "SELECT 'column', data_type FROM information_schema.columns WHERE "
            "table_name = 'measures' AND column_name = 'id' UNION ALL "
            "SELECT 'sequence', data_type FROM information_schema.sequences WHERE "
            "sequence_name = 'measures_id_seq'").fetchall())
        assert types == {"column": "bigint", "sequence": "bigint"}
    db.downgrade(url, MIGRATIONS, "0020")  # ids renumbered to fit a smallint again
    with psycopg.connect(plain, autocommit=True) as conn:
        rows = dict(conn.execute("SELECT name, id FROM measures").fetchall())
        assert set(rows) == set(before) | {"one_more"} and max(rows.values()) < 32767
        conn.execute("INSERT INTO measures (name) VALUES ('after_downgrade')")
    db.migrate(url, MIGRATIONS)


def test_0022_projects_get_mallards_recipe_and_old_specs_their_builds(pg_server):
    """Before 0022 every project built Mallard's allocator from `allocator_dir` and a job's
    side named `mallard` was that build. After it: the project carries Mallard's recipe
    (source = its old allocator_dir), `allocator_dir` is gone, and each stored spec's
    `mallard` side has its build (the spec's repository, that recipe); peers and results
    stay as they were; the new specs validate as the runner reads them. Down and up again
    keeps the folder."""
    url = create_database(pg_server, "mallard_migrations_0022")
    db.migrate(url, MIGRATIONS, "0021")
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    old_spec = {"project": "old", "repo_url": "/srv/git/old.git", "allocator_dir": "src/alloc",
                "suite": "quick", "allocators": [
                    {"label": "base", "name": "mallard", "commit": "a" * 40},
                    {"label": "head", "name": "mallard", "commit": "b" * 40,
                     "variant": "transfer=ring"},
                    {"label": "peer", "name": "jemalloc"}]}
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute("INSERT INTO projects (name, repo_url, allocator_dir) VALUES "
                     "('old', '/srv/git/old.git', 'src/alloc'), "
                     "('plain', '/srv/git/plain.git', DEFAULT)")
        conn.execute("INSERT INTO jobs (kind, arch, spec) VALUES ('comparison', 'x86_64', %s)",
                     (Jsonb(old_spec),))
    db.migrate(url, MIGRATIONS, "0022")
    with psycopg.connect(plain) as conn:
        rows = dict(conn.execute("SELECT name, recipe FROM projects").fetchall())
        cols = {r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns "
                                           "WHERE table_name = 'projects'")}
        spec = conn.execute("SELECT spec FROM jobs").fetchone()[0]
    assert "allocator_dir" not in cols and {"recipe", "peers"} <= cols
    assert rows["old"] == {**MALLARD_RECIPE, "source": "src/alloc"}
    assert rows["plain"] == {**MALLARD_RECIPE, "source": "allocator"}
    assert Recipe.model_validate(rows["old"]) == Recipe.model_validate(
        {**MALLARD_RECIPE, "source": "src/alloc"})
    assert "allocator_dir" not in spec
    base, head, peer = spec["allocators"]
    assert base["build"] == head["build"] == {"repo_url": "/srv/git/old.git",
                                              "recipe": rows["old"]}
    assert head["variant"] == "transfer=ring" and peer == {"label": "peer", "name": "jemalloc"}
    parsed = JobSpec.model_validate(spec)
    assert [a.name for a in parsed.allocators] == ["mallard", "mallard", "jemalloc"]
    db.downgrade(url, MIGRATIONS, "0021")
    with psycopg.connect(plain) as conn:
        dirs = dict(conn.execute("SELECT name, allocator_dir FROM projects").fetchall())
        spec = conn.execute("SELECT spec FROM jobs").fetchone()[0]
    assert dirs == {"old": "src/alloc", "plain": "allocator"}
    assert spec == old_spec
    db.migrate(url, MIGRATIONS)
