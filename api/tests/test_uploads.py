"""POST /api/v1/uploads (routes/uploads.py): other harnesses' files stored as trials through
the results ingest, on the real API and its PostgreSQL: each format's real file, a
malformed one (422 naming the place, nothing stored), who may upload, the caps, and the
history an upload makes (series, change points, an alert)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from helpers import run_analysis
from sqlalchemy import Engine, text

DATA = Path(__file__).resolve().parents[2] / "wire" / "tests" / "data"
FILES = {"gbench": "gbench.json", "hyperfine": "hyperfine.json",
         "pytest-benchmark": "pytest_benchmark.json"}
BMF = {"alloc/small": {"latency": {"value": 88.0, "lower_value": 80, "upper_value": 90}},
       "alloc/large": {"latency": {"value": 880.0}, "throughput": {"value": 1.1e6}}}


def sha() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex[:8]


def content(fmt: str) -> bytes:
    return json.dumps(BMF).encode() if fmt == "bmf" else (DATA / FILES[fmt]).read_bytes()


def upload(client, headers, project: str, fmt: str, body: bytes, commit: str | None = None,
           **query: object):
    params = {"project": project, "format": fmt, "commit": commit or sha(), "arch": "x86_64",
              "cpu_model": "Test CPU", "smt": "false", "page_size": "4096", **query}
    return client.post("/api/v1/uploads", headers={**headers,
                                                   "Content-Type": "application/octet-stream"},
                       params={k: v for k, v in params.items() if v is not None}, content=body)


def trials_of(engine: Engine, project: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM trials t JOIN projects p ON p.id = t.project_id "
            "WHERE p.name = :p"), {"p": project}).scalar_one())


@pytest.fixture
def writer(make_project, make_runner):
    """A project and the headers of a runner that may write it."""
    project = make_project()["name"]
    _, headers = make_runner(arch="x86_64", projects=[project])
    return project, headers


@pytest.mark.parametrize(("fmt", "n", "cells", "measure"), [
    ("gbench", 8, 4, "real_time_ns"), ("hyperfine", 6, 2, "run_seconds"),
    ("pytest-benchmark", 205, 3, "round_seconds"), ("bmf", 2, 2, "latency_ns")])
def test_each_format_is_stored_once_as_trials_of_the_commit(client, engine, writer, fmt, n,
                                                            cells, measure):
    project, headers = writer
    commit = sha()
    r = upload(client, headers, project, fmt, content(fmt), commit)
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["trials"], out["stored"], out["duplicates"], out["cells"]) == (n, n, 0, cells)
    assert measure in out["measures"]
    assert (out["project"], out["branch"], out["commit"], out["allocator"]) == (
        project, "main", commit, project)
    assert trials_of(engine, project) == n
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT DISTINCT a.name, a.commit_sha, a.variant, tb.arch, tb.cpu_model, "
            "t.label, c.sha, b.name FROM trials t JOIN allocators a ON a.id = t.allocator_id "
            "JOIN testbeds tb ON tb.id = t.testbed_id JOIN commits c ON c.id = t.commit_id "
            "JOIN branches b ON b.id = t.branch_id JOIN projects p ON p.id = t.project_id "
            "WHERE p.name = :p"), {"p": project}).all()
    assert row == [(project, commit, "", "x86_64", "Test CPU", "head", commit, "main")]
    again = upload(client, headers, project, fmt, content(fmt), commit)  # idempotent
    assert again.status_code == 201 and (again.json()["stored"], again.json()["duplicates"]) \
        == (0, n)
    assert trials_of(engine, project) == n


def test_an_upload_is_a_point_of_the_branch_series(client, writer, user_headers):
    project, headers = writer
    commits = [sha(), sha()]
    for c in commits:
        assert upload(client, headers, project, "hyperfine", content("hyperfine"), c,
                      allocator="myalloc", branch="dev").status_code == 201
    r = client.get("/api/v1/series", headers=user_headers, params={
        "project": project, "branch": "dev", "workload": "sleep-1", "measure": "run_seconds",
        "allocator": "myalloc"})
    assert r.status_code == 200, r.text
    points = r.json()["points"]
    assert [p["commit_sha"] for p in points] == commits and {p["n"] for p in points} == {3}
    assert points[0]["params"] == {"n": "1"}


def test_a_step_in_uploaded_history_opens_an_alert(client, writer, user_headers, app,
                                                   fast_analysis):
    project, headers = writer
    rng = np.random.default_rng(5)
    commits = [sha() for _ in range(24)]
    for i, c in enumerate(commits):
        level = 0.010 * (1.12 if i >= 16 else 1.0)  # 12% slower from commit 16 on
        times = list(level * (1 + 0.003 * rng.standard_normal(5)))
        doc = {"results": [{"command": "./bench --case small", "times": times}]}
        r = upload(client, headers, project, "hyperfine", json.dumps(doc).encode(), c)
        assert r.status_code == 201, r.text
        run_analysis(app)
    r = client.get("/api/v1/alerts", headers=user_headers, params={"project": project})
    assert r.status_code == 200, r.text
    [alert] = r.json()
    assert (alert["workload"], alert["measure"]) == ("bench-case-small", "run_seconds")
    assert alert["first_bad_commit"] == commits[16]
    assert alert["change_pct"] == pytest.approx(12, abs=2)


@pytest.mark.parametrize(("fmt", "doc", "loc", "words"), [
    ("gbench", {"benchmarks": [{"name": "BM_X", "real_time": "fast", "cpu_time": 1}]},
     "benchmarks[0].real_time", "must be a finite number"),
    ("hyperfine", {"results": [{"command": "true", "times": [0.1, None]}]},
     "results[0].times[1]", "must be a finite number"),
    ("bmf", {"b": {"latency": {}}}, '"b".latency.value', "missing"),
    ("pytest-benchmark", {"benchmarks": [{"fullname": "t::f", "stats": {"data": "x"}}]},
     "benchmarks[0].stats.data", "must be an array"),
    ("gbench", "not json", "line 1", "not JSON"),
    ("hyperfine", '{"results": [{"command": "a", "times": [NaN]}]}', "document", "NaN"),
])
def test_a_malformed_file_is_a_422_naming_the_place_and_nothing_is_stored(
        client, engine, writer, fmt, doc, loc, words):
    project, headers = writer
    body = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
    r = upload(client, headers, project, fmt, body)
    assert r.status_code == 422, r.text
    [detail] = r.json()["detail"]
    assert detail["loc"] == ["body", loc] and detail["type"] == "format_error"
    assert words in detail["msg"] and detail["msg"].startswith(f"{fmt}: {loc}: ")
    assert trials_of(engine, project) == 0


def test_a_file_that_is_not_utf8_or_empty_is_refused(client, engine, writer):
    project, headers = writer
    r = upload(client, headers, project, "bmf", b'{"a": "\xff"}')
    assert r.status_code == 422 and "UTF-8" in r.json()["detail"][0]["msg"]
    r = upload(client, headers, project, "bmf", b"")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"]
    assert trials_of(engine, project) == 0


@pytest.mark.parametrize(("query", "loc"), [
    ({"arch": None}, "arch"), ({"format": "csv"}, "format"), ({"commit": "abc123"}, "commit"),
    ({"smt": "maybe"}, "smt"), ({"colour": "blue"}, "colour"), ({"allocator": "a b"}, "allocator"),
    ({"branch": "a..b"}, "branch"),
])
def test_the_query_is_checked_and_names_the_field(client, writer, query, loc):
    project, headers = writer
    r = upload(client, headers, project, "bmf", content("bmf"), **query)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", loc]


def test_who_may_upload(client, engine, make_project, make_runner, make_token, bearer,
                        user_headers, admin_headers):
    project = make_project()["name"]
    body = content("bmf")
    r = client.post("/api/v1/uploads", params={"project": project, "format": "bmf",
                                               "commit": sha(), "arch": "x86_64"}, content=body)
    assert r.status_code == 401
    assert upload(client, user_headers, project, "bmf", body).status_code == 403
    _, other = make_runner(projects=["another-project"])
    r = upload(client, other, project, "bmf", body)
    assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["query", "project"]
    unregistered = bearer(make_token("runner", f"nobody-{uuid.uuid4().hex[:6]}"))
    r = upload(client, unregistered, project, "bmf", body)
    assert r.status_code == 422 and "not registered" in r.json()["detail"][0]["msg"]
    r = upload(client, admin_headers, "no-such-project", "bmf", body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "project"]
    assert trials_of(engine, project) == 0
    assert upload(client, admin_headers, project, "bmf", body).status_code == 201
    assert trials_of(engine, project) == 2


def test_the_token_is_checked_before_the_file_is_read(client):
    r = client.post("/api/v1/uploads", params={"format": "bmf"}, content=b"junk",
                    headers={"Authorization": "Bearer mlrd_unknown"})
    assert r.status_code == 401  # not a 422 for the query or the file


def test_a_file_over_the_body_cap_is_a_413(client, app, writer):
    project, headers = writer
    cap = app.state.settings.max_results_body_bytes
    r = upload(client, headers, project, "bmf", b" " * (cap + 1))
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body"]


@pytest.fixture
def small_caps(app, monkeypatch):
    settings = app.state.settings.model_copy(update={"max_results_body_values": 1000,
                                                     "max_trials_per_post": 5})
    monkeypatch.setitem(app.state._state, "settings", settings)
    return settings


def test_more_trials_or_values_than_the_caps_are_a_413(client, engine, writer, small_caps):
    project, headers = writer
    r = upload(client, headers, project, "hyperfine", content("hyperfine"))  # 6 runs
    assert r.status_code == 413 and "MALLARD_MAX_TRIALS_PER_POST" in r.json()["detail"][0]["msg"]
    doc = {"results": [{"command": "a", "times": [0.1] * 2000}]}
    r = upload(client, headers, project, "hyperfine", json.dumps(doc).encode())
    assert r.status_code == 413
    assert "MALLARD_MAX_RESULTS_BODY_VALUES" in r.json()["detail"][0]["msg"]
    assert trials_of(engine, project) == 0
