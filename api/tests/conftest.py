"""Shared fixtures for the API tests: one real PostgreSQL per test session.

Fixture names are stable (the analysis tests use them too):

- `pg_server`    (session) the embedded PostgreSQL server (`mallard_api.embedded`), started
                 in a tmp dir on a free 127.0.0.1 port, stopped at the end of the session.
- `database_url` (session) URL of the test database `mallard_test`, migrated to head with
                 Alembic (postgresql+psycopg://...).
- `settings`     (session) `Settings` for that database (migrations off, webhook secrets set:
                 GITHUB_SECRET, GITLAB_TOKEN, GITEA_SECRET below; any file:// repo_url
                 allowed; no background analysis worker: tests call `analyze`; the outbox
                 worker polls once an hour: tests deliver with `delivery.deliver_due`;
                 no token cache: a revoked token fails at once).
- `app`          (session) the FastAPI app from `create_app(settings)`.
- `client`       (session) a `fastapi.testclient.TestClient` on `app`; project `mallard`
                 (repo /srv/git/mallard.git, its own recipe) is registered.
- `engine`       (session) a SQLAlchemy engine on the test database.
- `db_session`   (function) a SQLAlchemy `Session`; rolled back and closed after the test.
- `make_token`   (session) `make_token(role, runner=None, projects=None) -> str`: a new
                 bearer token (`projects`: a user token that reads only those projects' jobs).
- `admin_token`, `user_token` (session) tokens of those roles.
- `bearer`       (session) `bearer(token) -> {"Authorization": "Bearer ..."}`.
- `admin_headers`, `user_headers` (session) headers with those tokens.
- `unique`       (function) a short unique string, for names that must not collide.
- `make_runner`  (function) `make_runner(arch=None, name=None, projects="all") ->
                 (runner_json, headers)`: registers a runner (its own unique arch by
                 default, so its queue is private to the test) with a runner token of its
                 own; an admin lets it post history without a job to `projects` (None:
                 none, the API's default).
- `make_project` (function) `make_project(name=None, recipe=MALLARD_RECIPE, **fields) ->
                 project_json`: a user registers it, an admin gives it the recipe.
- `analyze`      (session) `analyze(settings=None) -> int`: run the queued analysis now (the
                 comparisons and change detection that ingest queued): helpers.run_analysis.
- `fast_analysis` (function) the analysis modules read the test's `settings` with a lean
                 bootstrap (2,000 resamples) instead of the process settings; returns them.
- `live_server`  (session) base URL (http://127.0.0.1:PORT) of a real uvicorn server
                 running `app` in a thread, for clients outside Python (curl, git hooks).
- `guarded`      (session) (base URL, app) of a second real server, with tight slow-client
                 bounds (`GUARDED`: 4 admission slots, 3 s body grace at 1000 bytes/s, 2 s
                 header and send timeouts, 8 KiB of headers) and uvicorn's loggers left
                 to propagate (tests read its log with caplog).

Tests share one database: use `unique` names and arches instead of cleaning tables.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from mallard_api import db
from mallard_api.auth import hash_token, new_token
from mallard_api.config import Settings
from mallard_api.embedded import EmbeddedPostgres
from mallard_api.main import create_app
from mallard_api.sql import tokens
from sqlalchemy import Engine
from sqlalchemy.orm import Session

REPO = Path(__file__).resolve().parents[2]
MIGRATIONS = REPO / "db"
GITHUB_SECRET = "github-test-secret"
GITLAB_TOKEN = "gitlab-test-token"
GITEA_SECRET = "gitea-test-secret"
GUARDED = {"db_pool_size": 4, "body_grace_seconds": 3.0, "body_min_bytes_per_second": 1000,
           "header_timeout_seconds": 2.0, "send_timeout_seconds": 2.0,
           "max_header_bytes": 8192, "max_webhook_body_bytes": 1 << 20,
           "body_buffer_bytes": 3 << 19, "keep_alive_seconds": 5}


@contextmanager
def embedded_server(prefix: str, port: int = 0) -> Iterator[EmbeddedPostgres]:
    """A started PostgreSQL in a temporary folder, stopped and removed afterwards."""
    # Not pytest's tmp_path: other sessions of the same user prune those concurrently.
    base = Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedPostgres(base / "data", port=port, fast=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres]:
    with embedded_server("mallard-api-test-") as server:
        yield server


def create_database(server: EmbeddedPostgres, name: str) -> str:
    admin = server.url().replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.url(name)


@pytest.fixture(scope="session")
def database_url(pg_server: EmbeddedPostgres) -> str:
    url = create_database(pg_server, "mallard_test")
    db.migrate(url, MIGRATIONS)
    return url


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, migrate_on_start=False,
                    migrations_dir=MIGRATIONS, github_webhook_secret=GITHUB_SECRET,
                    gitlab_webhook_token=GITLAB_TOKEN, gitea_webhook_secret=GITEA_SECRET,
                    bootstrap_admin_token=None, db_pool_size=10, repo_url_allow="file:///",
                    analysis_poll_seconds=0, outbox_poll_seconds=3600,
                    token_cache_seconds=0,
                    # one user token (user_headers) queues work in every test of the session,
                    # and no runner runs it: quotas are tested with tokens of their own
                    # (test_quotas.py)
                    quota_queued_jobs=0, quota_queued_comparisons=0, quota_queued_trials=0)


@pytest.fixture(scope="session")
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture(scope="session")
def client(app: FastAPI, make_token: Callable[..., str]) -> Iterator[TestClient]:
    """The app's client, with project `mallard` registered (its own recipe, from the
    repository's .mallard.toml): what `helpers.job_spec` builds."""
    from helpers import register_recipe

    with TestClient(app) as c:
        admin = {"Authorization": f"Bearer {make_token('admin')}"}
        r = c.put("/api/v1/projects/mallard", headers=admin,
                  json={"repo_url": "/srv/git/mallard.git", "default_branch": "main"})
        assert r.status_code == 200, r.text
        register_recipe(c, admin, "mallard")
        yield c


@pytest.fixture(scope="session")
def analyze(app: FastAPI) -> Callable[..., int]:
    from helpers import run_analysis

    return lambda settings=None: run_analysis(app, settings)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    eng = db.make_engine(database_url, 5)
    yield eng
    eng.dispose()


@pytest.fixture
def db_session(engine: Engine) -> Iterator[Session]:
    session = db.make_sessionmaker(engine)()
    try:
        yield session
    finally:
        session.rollback()
        session.close()


@pytest.fixture(scope="session")
def make_token(engine: Engine) -> Callable[..., str]:
    def make(role: str, runner: str | None = None, projects: list[str] | None = None) -> str:
        token = new_token()
        with db.make_sessionmaker(engine)() as session:
            tokens.create(session, token_sha256=hash_token(token), role=role,
                          runner_name=runner, projects=projects)
            session.commit()
        return token

    return make


@pytest.fixture(scope="session")
def bearer() -> Callable[[str], dict[str, str]]:
    return lambda token: {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="session")
def admin_token(make_token: Callable[..., str]) -> str:
    return make_token("admin")


@pytest.fixture(scope="session")
def user_token(make_token: Callable[..., str]) -> str:
    return make_token("user")


@pytest.fixture(scope="session")
def admin_headers(admin_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {admin_token}"}


@pytest.fixture(scope="session")
def user_headers(user_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user_token}"}


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def make_runner(client: TestClient, make_token: Callable[..., str],
                admin_headers: dict[str, str]
                ) -> Callable[..., tuple[dict[str, Any], dict[str, str]]]:
    def make(arch: str | None = None, name: str | None = None,
             projects: list[str] | str | None = "all"
             ) -> tuple[dict[str, Any], dict[str, str]]:
        name = name or f"runner-{uuid.uuid4().hex[:8]}"
        arch = arch or f"arch-{uuid.uuid4().hex[:8]}"
        headers = {"Authorization": f"Bearer {make_token('runner', name)}"}
        r = client.post("/api/v1/runners/register", headers=headers,
                        json={"name": name, "arch": arch, "cpus": "1",
                              "testbed": {"arch": arch, "cpu_model": "Test CPU"}})
        assert r.status_code == 200, r.text
        if projects is not None:  # what an admin lets it write without a job
            r = client.put(f"/api/v1/runners/{r.json()['id']}/projects",
                           headers=admin_headers, json={"projects": projects})
            assert r.status_code == 200, r.text
        return r.json(), headers

    return make


@pytest.fixture
def make_project(client: TestClient, user_headers: dict[str, str],
                 admin_headers: dict[str, str]) -> Callable[..., dict[str, Any]]:
    """A project a user registers, then given a recipe by an admin (mallard's, unless
    `recipe` says another; recipe=None: none, it cannot queue builds)."""
    from helpers import MALLARD_RECIPE, register_recipe

    def make(name: str | None = None, recipe: dict[str, Any] | None = MALLARD_RECIPE,
             **fields: Any) -> dict[str, Any]:
        name = name or f"proj-{uuid.uuid4().hex[:8]}"
        body = {"repo_url": f"/srv/git/{name}.git", "default_branch": "main", **fields}
        r = client.put(f"/api/v1/projects/{name}", headers=user_headers, json=body)
        assert r.status_code == 200, r.text
        if recipe is None:
            return dict(r.json())
        register_recipe(client, admin_headers, name, recipe)
        r = client.get(f"/api/v1/projects/{name}", headers=user_headers)
        return dict(r.json())

    return make


@pytest.fixture
def fast_analysis(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Settings:
    """The analysis reads the process settings; use the test's, with a lean bootstrap."""
    from helpers import patch_analysis_settings

    s = settings.model_copy(update={"stats_bootstrap_resamples": 2000})
    patch_analysis_settings(monkeypatch, s)
    return s


@contextmanager
def serving(app: FastAPI, settings: Settings, **options: Any) -> Iterator[str]:
    """A real uvicorn server of `app` in a thread (the API's HttpProtocol and keep-alive,
    bound to `settings`; no lifespan: the caller runs it, if wanted); its base URL."""
    import threading
    import time

    import uvicorn
    from mallard_api import server as http_server
    from mallard_api.harness import free_port

    port = free_port()
    options = {"log_level": "warning", "lifespan": "off", **options}
    server = uvicorn.Server(http_server.config(app, settings, host="127.0.0.1", port=port,
                                               **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="session")
def live_server(app: FastAPI, settings: Settings) -> Iterator[str]:
    with serving(app, settings) as url:
        yield url


@pytest.fixture(scope="session")
def guarded(settings: Settings) -> Iterator[tuple[str, FastAPI]]:
    tight = settings.model_copy(update=GUARDED)
    app = create_app(tight)
    try:
        with serving(app, tight, log_config=None) as url:
            yield url, app
    finally:
        app.state.engine.dispose()
