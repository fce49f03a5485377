"""mallard_reader (db/versions/0006): every v_* view readable, every table refused, as that
role on the real PostgreSQL of the tests."""

from __future__ import annotations

import secrets

import psycopg
import pytest
from psycopg import errors, sql

CONTRACT_VIEWS = {"v_measurements", "v_series", "v_jobs", "v_runners", "v_comparisons",
                  "v_comparison_cells", "v_comparison_jobs", "v_alerts"}


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="module")
def reader(database_url):
    """A connection as mallard_reader, its password set as a deployment would."""
    password = secrets.token_urlsafe(24)
    admin = psycopg.connect(plain(database_url), autocommit=True)
    admin.execute(sql.SQL("ALTER ROLE mallard_reader LOGIN PASSWORD {}").format(
        sql.Literal(password)))
    info = psycopg.conninfo.conninfo_to_dict(plain(database_url))
    conn = psycopg.connect(host=info["host"], port=info["port"], dbname=info["dbname"],
                           user="mallard_reader", password=password, autocommit=True)
    try:
        yield conn, admin
    finally:
        conn.close()
        admin.execute("ALTER ROLE mallard_reader NOLOGIN PASSWORD NULL")
        admin.close()


def relations(admin: psycopg.Connection, kind: str) -> list[str]:
    q = {"views": "SELECT viewname FROM pg_views WHERE schemaname = 'public'",
         "tables": "SELECT tablename FROM pg_tables WHERE schemaname = 'public'",
         "sequences": "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"}[kind]
    return sorted(r[0] for r in admin.execute(q))


def test_the_role_is_nologin_unless_a_deployment_says_otherwise(database_url):
    with psycopg.connect(plain(database_url)) as admin:
        row = admin.execute("SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles "
                            "WHERE rolname = 'mallard_reader'").fetchone()
    assert row == (False, False, False)


def test_every_view_is_readable(reader):
    conn, admin = reader
    views = relations(admin, "views")
    assert CONTRACT_VIEWS <= set(views)
    for view in views:
        assert view.startswith("v_"), f"{view}: views the dashboards read are named v_*"
        conn.execute(sql.SQL("SELECT * FROM {} LIMIT 1").format(sql.Identifier(view)))


def test_every_table_and_sequence_is_refused(reader):
    conn, admin = reader
    tables = relations(admin, "tables")
    assert {"projects", "api_tokens", "webhook_endpoints", "trials",
            "alembic_version"} <= set(tables)
    for table in tables:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(table)))
    for seq in relations(admin, "sequences"):
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(sql.SQL("SELECT nextval({})").format(sql.Literal(seq)))


def test_views_are_read_only_and_nothing_can_be_created(reader):
    conn, _ = reader
    with pytest.raises(errors.InsufficientPrivilege):
        conn.execute("DELETE FROM v_comparison_jobs")  # a simple, updatable view
    with pytest.raises(errors.InsufficientPrivilege):
        conn.execute("CREATE TABLE public.mine (x int)")
    with pytest.raises(errors.InsufficientPrivilege):
        conn.execute("SELECT mallard_grant_reader()")


def test_a_later_view_is_readable_once_granted(reader):
    conn, admin = reader
    admin.execute("CREATE VIEW v_reader_test AS SELECT 1 AS one")
    try:
        with pytest.raises(errors.InsufficientPrivilege):  # no default privileges
            conn.execute("SELECT * FROM v_reader_test")
        admin.execute("SELECT mallard_grant_reader()")  # what a view migration ends with
        assert conn.execute("SELECT one FROM v_reader_test").fetchone() == (1,)
    finally:
        admin.execute("DROP VIEW v_reader_test")
