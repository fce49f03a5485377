"""Retiring a runner: REST (admin only) and CLI; a retired runner leaves the last-seen
gauge (so MallardRunnerDown resolves) and the arches push jobs are queued for, and comes
back when it registers again."""

from __future__ import annotations

from mallard_api.cli import app as cli
from typer.testing import CliRunner


def last_seen_lines(client, name: str) -> list[str]:
    text = client.get("/metrics").text
    return [line for line in text.splitlines()
            if line.startswith("mallard_runner_last_seen_timestamp_seconds{")
            and f'runner="{name}"' in line]


def test_retire_removes_the_gauge_until_the_runner_registers_again(
        client, make_runner, admin_headers, user_headers):
    runner, headers = make_runner()
    name, arch = runner["name"], runner["arch"]
    assert len(last_seen_lines(client, name)) == 1
    assert runner["retired_at"] is None

    r = client.post(f"/api/v1/runners/{runner['id']}/retire", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json()["retired_at"] is not None
    again = client.post(f"/api/v1/runners/{runner['id']}/retire", headers=admin_headers)
    assert again.status_code == 200 and again.json()["retired_at"] == r.json()["retired_at"]
    assert last_seen_lines(client, name) == []
    listed = {x["name"]: x for x in client.get("/api/v1/runners", headers=user_headers).json()}
    assert listed[name]["retired_at"] is not None

    # registering again (an agent does at start) brings it back
    r = client.post("/api/v1/runners/register", headers=headers,
                    json={"name": name, "arch": arch})
    assert r.status_code == 200 and r.json()["retired_at"] is None
    assert len(last_seen_lines(client, name)) == 1


def test_retire_is_for_admins_and_names_the_runner(client, make_runner, user_headers,
                                                   admin_headers):
    runner, headers = make_runner()
    for h in (headers, user_headers):
        r = client.post(f"/api/v1/runners/{runner['id']}/retire", headers=h)
        assert r.status_code == 403, r.text
    r = client.post("/api/v1/runners/2147483647/retire", headers=admin_headers)
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["path", "runner_id"]
    r = client.post("/api/v1/runners/0/retire", headers=admin_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "runner_id"]


def test_push_jobs_skip_the_arch_of_retired_runners(client, make_runner, make_project,
                                                    admin_headers, user_headers, unique):
    runner, _ = make_runner()
    project = make_project()

    def push_arches(sha: str, before: str | None = None) -> set[str]:
        r = client.post("/api/v1/webhooks/push", headers=user_headers, json={
            "project": project["name"], "ref": "refs/heads/main", "after": sha,
            **({"before": before} if before else {}), "commits": [{"sha": sha}]})
        assert r.status_code == 200, r.text
        jobs = [client.get(f"/api/v1/jobs/{j}", headers=user_headers).json()
                for j in r.json()["jobs"]]
        return {j["arch"] for j in jobs}

    first, second = unique.ljust(40, "1"), unique.ljust(40, "2")
    assert runner["arch"] in push_arches(first)
    client.post(f"/api/v1/runners/{runner['id']}/retire", headers=admin_headers)
    assert runner["arch"] not in push_arches(second, first)


def test_cli_lists_and_retires_by_name(client, make_runner, database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    runner, _ = make_runner()
    res = CliRunner().invoke(cli, ["runner", "retire", runner["name"]])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"retired {runner['name']}"
    assert last_seen_lines(client, runner["name"]) == []
    res = CliRunner().invoke(cli, ["runner", "list"])
    line = next(x for x in res.output.splitlines() if f"\t{runner['name']}\t" in x)
    assert "retired" in line
    res = CliRunner().invoke(cli, ["runner", "retire", "no-such-runner-anywhere"])
    assert res.exit_code == 1 and "no runner named" in res.output
