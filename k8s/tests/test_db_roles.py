"""docker/postgres/roles.sh (compose's db-init, the StatefulSet's migration init container)
and docker/secrets.sh, run under dash against a real PostgreSQL (mallard_api.embedded).

A database as earlier versions left it (everything owned by the superuser the API used,
a `grafana` role reading every table) is brought to: an owner role that is not a
superuser, owns the database and every object, and can migrate; mallard_reader with a
password, reading only the views; grafana gone. Re-running changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "docker" / "postgres" / "roles.sh"
SECRETS = REPO / "docker" / "secrets.sh"
OWNER_PW = "owner-password-0123456789"
READER_PW = "reader-password-0123456789"

pytest.importorskip("mallard_api.embedded")


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from mallard_api.embedded import POSTGRES_BIN_PATH, EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="mallard-roles-test-"))
    pg = EmbeddedPostgres(base / "data", fast=True)
    pg.start()
    pg.bin = POSTGRES_BIN_PATH
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


def superuser(pg: Any, db: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(pg.url(db).replace("+psycopg", ""), autocommit=True)


def roles_sh(pg: Any, url: str, reader: str = "", **extra: str
             ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{pg.bin}:{os.environ['PATH']}", "PGHOST": "127.0.0.1",
           "PGPORT": str(pg.running_port()), "PGUSER": "postgres", "PGPASSWORD": pg.password(),
           "DATABASE_URL": url, "MALLARD_READER_PASSWORD": reader, "TMPDIR": tempfile.gettempdir(),
           **extra}
    return subprocess.run(["dash", str(ROLES)], env=env, capture_output=True, text=True,
                          timeout=120)


def old_database(pg: Any, name: str) -> str:
    """A database as before: migrated by the superuser, a grafana role reading tables."""
    from mallard_api import db as api_db

    with superuser(pg) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        c.execute("DROP ROLE IF EXISTS grafana")
        c.execute("CREATE ROLE grafana LOGIN PASSWORD 'grafana-old-password'")
    api_db.migrate(pg.url(name), REPO / "db")
    with superuser(pg, name) as c:
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO grafana")
        c.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO grafana")
    return name


def test_an_old_database_gets_an_owner_that_is_not_a_superuser(server):
    db = old_database(server, "roles_old")
    port = server.running_port()
    url = f"postgresql://mallard_app:{OWNER_PW}@127.0.0.1:{port}/{db}"
    out = roles_sh(server, url, READER_PW)
    assert out.returncode == 0, out.stderr
    assert "owner mallard_app (not a superuser)" in out.stdout
    assert OWNER_PW not in out.stdout + out.stderr
    with superuser(server, db) as c:
        super_, createrole, createdb = c.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles "
            "WHERE rolname = 'mallard_app'").fetchone()
        assert not (super_ or createrole or createdb)
        assert c.execute("SELECT pg_get_userbyid(datdba) FROM pg_database "
                         "WHERE datname = %s", (db,)).fetchone() == ("mallard_app",)
        owners = {r[0] for r in c.execute(
            "SELECT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public'")}
        assert owners == {"mallard_app"}
        assert c.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'grafana'"
                         ).fetchone() == (0,)
    # the owner can migrate (down and up again: creates and drops tables and views)
    from mallard_api import db as api_db

    owner_url = f"postgresql+psycopg://mallard_app:{OWNER_PW}@127.0.0.1:{port}/{db}"
    api_db.downgrade(owner_url, REPO / "db", "0004_comparison_jobs_view")
    api_db.migrate(owner_url, REPO / "db")
    # the reader logs in and reads views, not tables
    with psycopg.connect(host="127.0.0.1", port=port, dbname=db, user="mallard_reader",
                         password=READER_PW, autocommit=True) as r:
        r.execute("SELECT * FROM v_jobs LIMIT 1")
        with pytest.raises(errors.InsufficientPrivilege):
            r.execute("SELECT * FROM projects LIMIT 1")
    # idempotent: a second run changes nothing and succeeds
    again = roles_sh(server, url, READER_PW)
    assert again.returncode == 0, again.stderr


def test_without_a_reader_password_the_reader_cannot_log_in(server):
    db = old_database(server, "roles_noreader")
    port = server.running_port()
    url = f"postgresql://mallard_app:{OWNER_PW}@127.0.0.1:{port}/{db}"
    assert roles_sh(server, url, READER_PW).returncode == 0
    assert roles_sh(server, url, "").returncode == 0
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(host="127.0.0.1", port=port, dbname=db, user="mallard_reader",
                        password=READER_PW)


@pytest.mark.parametrize("url,words", [
    ("postgresql://postgres:{pw}@h:5432/x", "is the superuser"),
    ("postgresql://nopassword@h:5432/x", "no password"),
    ("postgresql://u:p%40ss-0123456789@h:5432/x", "URL-safe"),
])
def test_bad_urls_are_refused(server, url, words):
    out = roles_sh(server, url.format(pw=OWNER_PW))
    assert out.returncode != 0 and words in out.stderr


def test_a_superuser_as_the_api_role_is_refused(server):
    with superuser(server) as c:
        c.execute("DROP ROLE IF EXISTS old_super")
        c.execute("CREATE ROLE old_super SUPERUSER LOGIN")
    url = f"postgresql://old_super:{OWNER_PW}@127.0.0.1:{server.running_port()}/postgres"
    out = roles_sh(server, url)
    assert out.returncode != 0 and "is a superuser" in out.stderr


def test_a_wrong_superuser_is_said_at_once_and_no_server_after_waiting(server):
    url = f"postgresql://mallard_app:{OWNER_PW}@127.0.0.1:{server.running_port()}/postgres"
    out = roles_sh(server, url, PGUSER="mallard")  # an old volume's superuser name
    assert out.returncode != 0 and "set POSTGRES_USER=mallard" in out.stderr
    out = roles_sh(server, url, PGPASSWORD="wrong-password-0123456789")
    assert out.returncode != 0 and "set POSTGRES_USER=mallard" in out.stderr
    from mallard_api.harness import free_port

    closed = str(free_port())  # nothing listens there
    out = roles_sh(server, url, PGPORT=closed, MALLARD_DB_WAIT_SECONDS="2")
    assert out.returncode != 0 and "did not accept connections" in out.stderr


# -- docker/secrets.sh ---------------------------------------------------------------------
def secrets_sh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["dash", str(SECRETS), *args], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("value,words", [
    ("CHANGE-ME", "CHANGE-ME placeholder"), ("change-me-but-long-enough", "CHANGE-ME"),
    ("short", "shorter than 16 bytes"), ("", "is not set")])
def test_placeholder_and_short_secrets_are_refused(value, words):
    out = secrets_sh({"MY_SECRET": value}, "MY_SECRET", "--", "echo", "started")
    assert out.returncode == 78 and words in out.stderr and "started" not in out.stdout
    assert "MY_SECRET" in out.stderr
    if len(value) > 9:
        assert value not in out.stderr  # names the variable, never prints the value


def test_a_real_secret_starts_the_program_and_optional_ones_may_be_unset():
    out = secrets_sh({"A": "a-real-secret-0123456789"}, "A", "--optional", "B", "--",
                     "echo", "started")
    assert out.returncode == 0 and out.stdout.strip() == "started"
    out = secrets_sh({"A": "a-real-secret-0123456789", "B": "CHANGE-ME"}, "A", "--optional",
                     "B", "--", "echo", "started")
    assert out.returncode == 78 and "B is the CHANGE-ME placeholder" in out.stderr
