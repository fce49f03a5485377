"""Database errors by kind (errors.py): 503 with Retry-After only when PostgreSQL cannot
be reached or asks for a retry (no connection, the server going away, the pool waited
out, a deadlock or a timeout); a value it refuses is a 422 that never echoes the value,
with PostgreSQL up, never a 503 (which the runner's spool retries until its lease is
lost) and never a 500. The attack: a 3 KB `build_flags` answered 503 "database
unavailable"."""

from __future__ import annotations

import random
import string
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import results, trial
from mallard_api import db, errors
from mallard_api.harness import free_port
from sqlalchemy import Engine, text

SECRET = "s3cret-value-never-echoed"
_TOO_MANY = ", ".join(f":p{i}" for i in range(70_000))
# name -> the statements a probe runs on one connection, and the binds of the last one
REFUSED = {
    "value_too_long": (["CREATE TEMP TABLE probe_v (x varchar(3))",
                        "INSERT INTO probe_v VALUES (:v)"], {"v": SECRET}),
    "out_of_range": (["SELECT CAST(:v AS smallint)"], {"v": 100_000}),
    "invalid_text": (["SELECT CAST(:v AS integer)"], {"v": SECRET}),
    "numeric_overflow": (["SELECT CAST(:v AS numeric(3, 0))"], {"v": 12345}),
    "not_null": (["CREATE TEMP TABLE probe_n (x text NOT NULL)",
                  "INSERT INTO probe_n VALUES (CAST(:v AS text))"], {"v": None}),
    "index_row_too_large": (["CREATE TEMP TABLE probe_u (x text UNIQUE)",
                             "INSERT INTO probe_u VALUES (:v)"],
                            {"v": SECRET + "".join(random.Random(1).choices(
                                string.ascii_letters, k=3000))}),
    "too_many_parameters": ([f"SELECT {_TOO_MANY}"], {f"p{i}": i for i in range(70_000)}),
}
RETRY_LATER = {
    "server_ends_the_session": (["SELECT pg_terminate_backend(pg_backend_pid())"], {}),
    "statement_timeout": (["SET statement_timeout = 10", "SELECT pg_sleep(2)"], {}),
}


def probe_app(engine: Engine) -> FastAPI:
    """An app with the API's error handlers and one route running a probe's statements."""
    app = FastAPI()
    errors.install(app, retry_after=3)

    @app.get("/probe/{name}")
    def probe(name: str) -> dict[str, str]:
        statements, binds = {**REFUSED, **RETRY_LATER}[name]
        with engine.connect() as conn:
            for sql in statements[:-1]:
                conn.execute(text(sql))
            conn.execute(text(statements[-1]), binds)
        return {}

    return app


@pytest.fixture(scope="module")
def probes(database_url: str) -> Iterator[TestClient]:
    engine = db.make_engine(database_url, 2)
    with TestClient(probe_app(engine), raise_server_exceptions=False) as client:
        yield client
    engine.dispose()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_value_postgresql_refuses_is_a_422_with_postgresql_up(probes, name):
    r = probes.get(f"/probe/{name}")
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["type"] == "data_error" and detail["loc"] == ["body"]
    assert SECRET not in r.text and "retry-after" not in r.headers


@pytest.mark.parametrize("name", sorted(RETRY_LATER))
def test_a_server_that_ends_the_session_or_times_out_is_a_503(probes, name):
    r = probes.get(f"/probe/{name}")
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "3" and r.json()["detail"][0]["type"] == "unavailable"


def test_no_server_and_a_waited_out_pool_are_503(database_url):
    nobody = db.make_engine(f"postgresql+psycopg://u:p@127.0.0.1:{free_port()}/db",
                            connect_timeout=1)
    busy = db.make_engine(database_url, 1, overflow=0, timeout=0.2)
    for engine, held in ((nobody, False), (busy, True)):
        with TestClient(probe_app(engine), raise_server_exceptions=False) as client:
            conn = engine.connect() if held else None  # the pool's only connection
            try:
                r = client.get("/probe/out_of_range")
            finally:
                if conn is not None:
                    conn.close()
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "3"
        engine.dispose()


def test_a_3kb_build_flags_is_a_422_naming_it_and_postgresql_stays_up(client, make_runner,
                                                                      engine):
    runner, headers = make_runner()
    t = trial()
    t["allocator"]["build_flags"] = "".join(random.Random(2).choices(string.ascii_letters,
                                                                     k=3000))
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, "allocator", "build_flags"]
    assert client.get("/api/v1/health").status_code == 200


def test_allocator_fields_too_large_for_their_index_are_a_422_naming_the_allocator(
        client, make_runner, engine):
    """Within every field's length, but 3 bytes a character: more than one index entry
    of `allocators` holds. Refused before the database sees it."""
    runner, headers = make_runner()
    rng = random.Random(3)
    t = trial()
    t["allocator"]["build_flags"] = "".join(chr(rng.randint(0x4E00, 0x9FFF))
                                            for _ in range(1000))
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial(), t], runner_id=runner["id"]))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "trials", 1, "allocator"], detail
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM trials WHERE runner_id = :r"),
                            {"r": runner["id"]}).scalar_one() == 0
    assert client.get("/api/v1/health").status_code == 200
