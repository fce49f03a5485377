"""The embedded PostgreSQL asks every connection for its generated password."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from mallard_api.embedded import HBA, EmbeddedPostgres, _prepare_root


@pytest.fixture
def base() -> Iterator[Path]:
    # not pytest's tmp_path: PostgreSQL runs as its own user when the tests run as root
    d = Path(tempfile.mkdtemp(prefix="mallard-embedded-test-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def refused_without_password(port: int) -> None:
    for user in ("postgres", "mallard", "nobody"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(host="127.0.0.1", port=port, user=user, dbname="postgres",
                            password="", connect_timeout=10)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                        password="wrong", connect_timeout=10)


def test_a_new_data_directory_needs_the_generated_password(base):
    server = EmbeddedPostgres(base / "data", fast=True)
    url = server.start()
    try:
        pw_file = base / "data" / "mallard.password"
        assert stat.S_IMODE(pw_file.stat().st_mode) == 0o600
        password = pw_file.read_text().strip()
        assert len(password) >= 32 and password in url
        assert (base / "data" / "pg_hba.conf").read_text() == HBA
        assert "trust" not in HBA.replace("#", "").split("\n", 1)[1]
        with psycopg.connect(plain(url)) as conn:
            method = conn.execute("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid "
                                  "WHERE rolname = 'postgres'").fetchone()
            assert method == (True,)
        refused_without_password(server.running_port() or 0)
        # a second process finds the running server and its password
        assert EmbeddedPostgres(base / "data").url() == url
    finally:
        server.stop()


def test_an_old_trusting_data_directory_is_upgraded_in_place(base):
    pgdata = base / "data"
    pgdata.mkdir()
    old = EmbeddedPostgres(pgdata, fast=True)
    if os.geteuid() == 0:
        old._user = _prepare_root(pgdata)
    # the data directory as the earlier code made it: trust for every connection
    old._run("initdb", ["-D", str(pgdata), "--auth=trust", "--encoding=UTF8", "--locale=C",
                        "-U", "postgres"])
    assert "trust" in (pgdata / "pg_hba.conf").read_text()
    server = EmbeddedPostgres(pgdata, fast=True)
    url = server.start()
    try:
        port = server.running_port() or 0
        refused_without_password(port)
        with psycopg.connect(plain(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
    finally:
        server.stop()
    # the next start keeps the password and the data, and still asks for it
    again = EmbeddedPostgres(pgdata, fast=True)
    url2 = again.start()
    try:
        assert url2.split("@")[0] == url.split("@")[0]
        with psycopg.connect(plain(url2)) as conn:
            assert conn.execute("SELECT x FROM kept").fetchone() == (42,)
        refused_without_password(again.running_port() or 0)
    finally:
        again.stop()
