"""A results post's memory is bounded whatever its shape (routes/results.py, limits.py,
mallard_wire.results). The attacks: a 20,000-trial post grew the API from 216 to 1,345
MiB; 32 MiB of `[1,1,1,...]` in a workload's params, 1,085 MiB; 2.5 million params keys,
2,065 MiB. Now a post holds at most MALLARD_MAX_RESULTS_BODY_VALUES JSON values (counted
before it is parsed) and MALLARD_MAX_TRIALS_PER_POST trials (413 naming the field), a
workload's params at most 64 keys, a trial's counters 256, a nested value 1,000 values
(422 naming the field); nothing is stored."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest
from conftest import MIGRATIONS, create_database
from helpers import results, trial
from mallard_api import db
from mallard_api.harness import ApiProcess
from mallard_wire.fields import MAX_NESTED_VALUES
from mallard_wire.results import MAX_COUNTERS, MAX_PARAMS
from sqlalchemy import Engine, text


def stored(engine: Engine, uids: list[str]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM trials WHERE uid = ANY(:u)"),
                                {"u": uids}).scalar_one())


@pytest.fixture
def small_caps(app, monkeypatch):
    settings = app.state.settings.model_copy(update={"max_results_body_values": 1000,
                                                     "max_trials_per_post": 3})
    monkeypatch.setitem(app.state._state, "settings", settings)
    return settings


def test_a_body_of_too_many_values_is_refused_before_it_is_parsed(client, small_caps,
                                                                  make_runner, engine):
    runner, headers = make_runner()
    t = trial()
    t["workload"]["params"] = {f"p{i}": list(range(20)) for i in range(60)}  # 1,260 values
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 413, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body"] and "MALLARD_MAX_RESULTS_BODY_VALUES" in detail["msg"]
    assert stored(engine, [t["uid"]]) == 0
    # commas inside strings are not values: a long comma-separated stderr tail is fine
    t = trial()
    t["stderr_tail"] = ",".join(["x"] * 5000)
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text


def test_more_trials_than_the_cap_are_refused(client, small_caps, make_runner, engine):
    runner, headers = make_runner()
    trials = [trial() for _ in range(4)]
    r = client.post("/api/v1/results", headers=headers,
                    json=results(trials, runner_id=runner["id"]))
    assert r.status_code == 413, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "trials"] and "MALLARD_MAX_TRIALS_PER_POST" in detail["msg"]
    assert "at most 3" in detail["msg"]
    assert stored(engine, [t["uid"] for t in trials]) == 0


@pytest.mark.parametrize("where", ["params", "counters", "nested"])
def test_params_counters_and_nested_values_are_bounded(client, make_runner, engine, where):
    runner, headers = make_runner()
    t = trial()
    if where == "params":
        t["workload"]["params"] = {f"p{i}": i for i in range(MAX_PARAMS + 1)}
        loc = ["body", "trials", 0, "workload", "params"]
    elif where == "counters":
        t["counters"] = {f"c{i}": i for i in range(MAX_COUNTERS + 1)}
        loc = ["body", "trials", 0, "counters"]
    else:
        t["counters"] = {"sizes": [[1, 2]] * (MAX_NESTED_VALUES // 3 + 1)}
        loc = ["body", "trials", 0, "counters", "sizes"]
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc
    assert stored(engine, [t["uid"]]) == 0
    t["counters"] = {"sizes": [[1, 2]] * (MAX_NESTED_VALUES // 3 - 1)}  # just within
    t["workload"]["params"] = {f"p{i}": i for i in range(MAX_PARAMS)}
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text


def peak_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def test_a_real_api_parses_no_post_at_30_times_its_size(pg_server, unique):
    """The worst shape for memory: tiny values (each costs ~100 bytes parsed). Refused
    before it is parsed, the API's peak RSS moves by less than the body's size again."""
    url = create_database(pg_server, f"mallard_memory_{unique}")
    db.migrate(url, MIGRATIONS)
    base = Path(tempfile.mkdtemp(prefix="mallard-api-memory-"))
    env = {**os.environ, "DATABASE_URL": url, "MALLARD_ANALYSIS_POLL_SECONDS": "0"}
    t = trial()
    t["workload"]["params"] = {"sizes": [1] * 15_000_000}
    body = json.dumps(results([t]), separators=(",", ":")).encode()
    assert 28 << 20 < len(body) < 32 << 20  # under the body cap
    try:
        with ApiProcess(env, log=base / "api.log") as api:
            auth = {"Authorization": f"Bearer {api.token('admin')}"}
            with httpx.Client(base_url=f"{api.url}/api/v1", headers=auth, timeout=120) as http:
                assert http.post("/results", json=results([trial()])).status_code == 201
                before = peak_mib(api.proc.pid)
                r = http.post("/results", content=body,
                              headers={"Content-Type": "application/json"})
                assert r.status_code == 413, r.text
                assert peak_mib(api.proc.pid) - before < 100
    finally:
        shutil.rmtree(base, ignore_errors=True)
