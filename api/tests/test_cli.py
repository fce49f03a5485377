"""The admin CLI against the test database."""

from __future__ import annotations

from mallard_api.cli import app
from typer.testing import CliRunner


def test_token_create_prints_a_working_token(client, database_url, monkeypatch, unique):
    monkeypatch.setenv("DATABASE_URL", database_url)
    res = CliRunner().invoke(app, ["token", "create", "--role", "runner", "--runner",
                                   "cli-" + unique])
    assert res.exit_code == 0, res.output
    token = res.output.strip().splitlines()[-1]
    r = client.post("/api/v1/runners/register", headers={"Authorization": f"Bearer {token}"},
                    json={"name": "cli-" + unique, "arch": "x86_64"})
    assert r.status_code == 200
    r = client.post("/api/v1/runners/register", headers={"Authorization": f"Bearer {token}"},
                    json={"name": "other-" + unique, "arch": "x86_64"})
    assert r.status_code == 403


def test_token_create_validates_role(database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert CliRunner().invoke(app, ["token", "create", "--role", "root"]).exit_code == 2
    assert CliRunner().invoke(app, ["token", "create", "--role", "runner"]).exit_code == 2


def test_token_create_scopes_a_user_token_to_projects(database_url, monkeypatch, engine):
    from sqlalchemy import text

    monkeypatch.setenv("DATABASE_URL", database_url)
    res = CliRunner().invoke(app, ["token", "create", "--role", "user", "--project", "a",
                                   "--project", "b"])
    assert res.exit_code == 0, res.output
    from mallard_api.auth import hash_token

    with engine.connect() as conn:
        projects = conn.execute(text("SELECT projects FROM api_tokens WHERE token_sha256 = :h"),
                                {"h": hash_token(res.output.strip().splitlines()[-1])}).scalar()
    assert projects == ["a", "b"]
    res = CliRunner().invoke(app, ["token", "create", "--role", "admin", "--project", "a"])
    assert res.exit_code == 2 and "--project is for --role user" in res.output


def test_db_url_prints_the_configured_url(database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    res = CliRunner().invoke(app, ["db-url"])
    assert res.exit_code == 0 and res.output.strip().startswith("postgresql://")


def test_db_url_of_the_embedded_server(pg_server, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("MALLARD_DATA_DIR", str(pg_server.pgdata))
    res = CliRunner().invoke(app, ["db-url"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == pg_server.url().replace("postgresql+psycopg", "postgresql")


def test_token_list_and_revoke(client, database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    runner = CliRunner()
    token = runner.invoke(app, ["token", "create", "--role", "user", "--description",
                                "to revoke"]).output.strip().splitlines()[-1]
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/v1/projects", headers=headers).status_code == 200
    listed = runner.invoke(app, ["token", "list"]).output
    assert token not in listed  # only ids and roles, never tokens
    token_id = [line.split("\t")[0] for line in listed.splitlines() if "to revoke" in line][-1]
    assert runner.invoke(app, ["token", "revoke", token_id]).exit_code == 0
    assert client.get("/api/v1/projects", headers=headers).status_code == 401
    assert runner.invoke(app, ["token", "revoke", token_id]).exit_code == 1


def test_serve_refuses_placeholder_secrets_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("MALLARD_BOOTSTRAP_ADMIN_TOKEN", "CHANGE-ME")
    monkeypatch.setenv("MALLARD_GITEA_WEBHOOK_SECRET", "short")
    res = CliRunner().invoke(app, ["serve"])
    assert res.exit_code == 2
    assert "bootstrap_admin_token: Value error, MALLARD_BOOTSTRAP_ADMIN_TOKEN is a " \
           "placeholder" in res.output
    assert "MALLARD_GITEA_WEBHOOK_SECRET is shorter than 16 bytes" in res.output


def test_serve_refuses_an_unknown_default_suite(monkeypatch, database_url):
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("MALLARD_MIGRATE_ON_START", "false")
    monkeypatch.setenv("MALLARD_SUITE", "nosuch")
    res = CliRunner().invoke(app, ["serve"])
    assert res.exit_code == 2 and "MALLARD_SUITE: unknown suite 'nosuch'" in res.output


def test_analysis_worker_runs_the_queue_until_stopped(client, database_url, make_runner,
                                                      make_project, engine):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from helpers import results, trial
    from sqlalchemy import text

    project = make_project()
    runner, headers = make_runner()
    body = results([trial()], runner_id=runner["id"], project=project["name"], branch="main")
    assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    env = {**os.environ, "DATABASE_URL": database_url}
    exe = Path(sys.executable).parent / "mallard-api"
    proc = subprocess.Popen([str(exe), "analysis-worker", "--poll-seconds", "0.2"], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            with engine.connect() as conn:
                left = conn.execute(text("SELECT count(*) FROM analysis_queue "
                                         "WHERE failed_at IS NULL")).scalar_one()
            if left == 0:
                break
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
