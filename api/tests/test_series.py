"""The series query: one measure's history along a branch, in branch order."""

from __future__ import annotations

import json
import statistics

from helpers import push, results, trial


def test_series_orders_by_branch_position_with_quartiles(
        client, make_project, make_runner, user_headers, unique):
    project = make_project()
    name = project["name"]
    commits = [f"{unique}{i}".ljust(40, "b") for i in range(3)]
    push(client, user_headers, name, commits)
    runner, headers = make_runner()
    values = {commits[0]: [10.0, 11.0, 12.0, 13.0], commits[1]: [20.0, 22.0],
              commits[2]: [5.0, 6.0, 7.0]}
    for c, vs in values.items():
        ts = [trial(c, value=v, allocator=name) for v in vs]  # the project's own builds
        ts.append(trial(c, value=1e9, allocator=name, warmup=True))  # never in statistics
        ts.append(trial(c, value=1e9, allocator=name, ok=False))  # nor failed trials
        ts.append(trial(c, value=1e9, allocator=name, variant="transfer=ring"))  # a variant
        ts.append(trial(c, value=1e9, allocator=name, threads=4))  # other params
        body = results(ts, runner_id=runner["id"], project=name, branch="main")
        assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201
    r = client.get("/api/v1/series", headers=user_headers, params={
        "project": name, "branch": "main", "workload": "larson", "threads": 2,
        "measure": "ops_per_sec", "allocator": name, "arch": "x86_64"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["unit"] == "ops/s" and out["higher_is_better"] is True
    assert out["variant"] == "default"
    points = out["points"]
    assert [p["commit_sha"] for p in points] == commits
    assert [p["position"] for p in points] == [1, 2, 3]
    for p in points:
        vs = values[p["commit_sha"]]
        assert p["n"] == len(vs) and sorted(p["values"]) == vs
        assert p["median"] == statistics.median(vs)
        q = statistics.quantiles(vs, n=4, method="inclusive")
        assert abs(p["p25"] - q[0]) < 1e-9 and abs(p["p75"] - q[2]) < 1e-9
    # params as JSON select the same series; the variant selects its own
    r = client.get("/api/v1/series", headers=user_headers, params={
        "project": name, "workload": "larson",
        "params": json.dumps({"seed": 42, "threads": 2, "ops": 1000})})
    assert [p["n"] for p in r.json()["points"]] == [4, 2, 3]
    r = client.get("/api/v1/series", headers=user_headers, params={
        "project": name, "workload": "larson", "threads": 2, "variant": "transfer=ring"})
    assert [p["values"] for p in r.json()["points"]] == [[1e9]] * 3


def test_series_bad_input_names_the_field(client, make_project, user_headers):
    project = make_project()
    r = client.get("/api/v1/series", headers=user_headers,
                   params={"project": project["name"], "workload": "larson", "params": "[1"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "params"]
    r = client.get("/api/v1/series", headers=user_headers,
                   params={"project": "nope-nope", "workload": "larson"})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["query", "project"]
    r = client.get("/api/v1/series", headers=user_headers, params={"project": project["name"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "workload"]


def test_series_view_matches(client, make_project, make_runner, user_headers, engine, unique):
    from sqlalchemy import text

    project = make_project()
    c = unique.ljust(40, "c")
    client.post("/api/v1/webhooks/push", headers=user_headers, json={
        "project": project["name"], "ref": "refs/heads/main", "after": c, "commits": []})
    runner, headers = make_runner()
    client.post("/api/v1/results", headers=headers, json=results(
        [trial(c, value=v) for v in (1.0, 2.0, 3.0)]
        + [trial(None, value=9.0, allocator="jemalloc", label="peer")],
        runner_id=runner["id"], project=project["name"], branch="main"))
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT allocator_label, median, n, commit_position FROM v_series "
            "WHERE project = :p AND measure = 'ops_per_sec' ORDER BY allocator"),
            {"p": project["name"]}).all()
    assert [tuple(r) for r in rows] == [("jemalloc", 9.0, 1, 1),
                                        (f"mallard@{c[:7]}", 2.0, 3, 1)]
