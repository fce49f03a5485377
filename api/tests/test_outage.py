"""PostgreSQL goes away and comes back (a real server of its own, stopped and started):
every request is a 503 with Retry-After meanwhile, the API recovers by itself, and the
background loops back off with one log line per round. Driven by events (the server's
stop and start return when done), not by timing."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from conftest import MIGRATIONS, create_database, embedded_server
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import results, trial
from mallard_api.auth import hash_token, new_token
from mallard_api.background import BackgroundLoop
from mallard_api.config import Settings
from mallard_api.embedded import EmbeddedPostgres
from mallard_api.harness import free_port
from mallard_api.main import create_app
from mallard_api.sql import tokens


@pytest.fixture
def own_server() -> Iterator[EmbeddedPostgres]:
    with embedded_server("mallard-api-outage-", port=free_port()) as server:  # a fixed port
        yield server


def _app(server: EmbeddedPostgres, database: str) -> tuple[FastAPI, dict[str, str]]:
    """An app on a database of its own (migrated), no background loops; an admin's
    Authorization header."""
    url = create_database(server, database)
    settings = Settings(database_url=url, migrations_dir=MIGRATIONS, repo_url_allow="file:///",
                        analysis_poll_seconds=0, sweep_seconds=0, outbox_poll_seconds=3600,
                        retry_after_seconds=7)
    app = create_app(settings)  # migrates
    token = new_token()
    with app.state.sessionmaker() as s:
        tokens.create(s, token_sha256=hash_token(token), role="admin", runner_name=None)
        s.commit()
    return app, {"Authorization": f"Bearer {token}"}


def test_the_api_answers_503_while_the_database_is_down_and_recovers(own_server, caplog):
    app, auth = _app(own_server, "mallard_outage")
    with TestClient(app) as client:
        assert client.get("/api/v1/health").status_code == 200
        r = client.put("/api/v1/projects/p", headers=auth, json={"repo_url": "/srv/git/p.git"})
        assert r.status_code == 200, r.text
        runner = client.post("/api/v1/runners/register", headers=auth,
                             json={"name": "r1", "arch": "x86_64"}).json()

        own_server.stop()
        for method, path, body in (("GET", "/api/v1/health", None),
                                   ("GET", "/api/v1/projects", None),
                                   ("PUT", "/api/v1/projects/q", {"repo_url": "/srv/git/q.git"}),
                                   ("POST", "/api/v1/results",
                                    results([trial()], runner_id=runner["id"]))):
            r = client.request(method, path, headers=auth, json=body)
            assert r.status_code == 503, (path, r.text)
            assert r.headers["retry-after"] == "7"
            assert r.json()["detail"][0]["type"] == "unavailable"

        # the background loops back off, one line per round, no traceback
        caplog.clear()
        loop = BackgroundLoop("lease-sweep", app.state.sweep, interval=1, max_backoff=8)
        with caplog.at_level(logging.WARNING, logger="mallard_api.background"):
            delays = [loop.run_once() for _ in range(6)]
        assert delays == [1, 2, 4, 8, 8, 8]
        lines = [r for r in caplog.records if r.name == "mallard_api.background"]
        assert len(lines) == 6 and all(r.exc_info is None for r in lines)
        assert all(len(r.getMessage()) < 400 for r in lines)

        own_server.start()  # same data directory, same port
        assert client.get("/api/v1/health").status_code == 200  # no restart of the API
        r = client.post("/api/v1/results", headers=auth,
                        json=results([trial()], runner_id=runner["id"]))
        assert r.status_code == 201 and r.json()["stored"] == 1
        assert loop.run_once() == 1 and loop.failures == 0
    app.state.engine.dispose()


def test_pooled_connections_of_a_restarted_server_are_replaced(own_server):
    """The server restarts between two requests (no request sees it down): the pool's
    connections are dead, and the first request after the restart still works (each one
    is tested as it is checked out, when the server has said something on it)."""
    app, auth = _app(own_server, "mallard_restart")
    with TestClient(app) as client:
        assert client.get("/api/v1/projects", headers=auth).status_code == 200
        assert app.state.engine.pool.checkedin() >= 1  # an idle connection to the old server
        own_server.stop()
        own_server.start()
        r = client.get("/api/v1/projects", headers=auth)
        assert r.status_code == 200, r.text
    app.state.engine.dispose()
