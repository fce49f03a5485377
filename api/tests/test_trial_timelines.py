"""A trial's memory timeline and latency histogram (mallard_wire/timelines.py) through
POST /results: stored with the trial as posted, and refused naming the field when bad."""

from __future__ import annotations

import pytest
from helpers import results, trial
from sqlalchemy import text

MEMORY = {"interval_ms": 10.0, "rss_bytes": [1 << 20, 8 << 20, 2 << 20]}
LATENCY = {"sample_every": 64, "malloc": [[20, 900], [90, 3]], "free": [[16, 950]]}


def test_a_trial_keeps_what_it_recorded(client, make_runner, engine):
    runner, headers = make_runner()
    t = trial(measures={"ops_per_sec": 1e6, "malloc_p99_ns": 25.0,
                        "rss_area_byte_seconds": 0.11 * (1 << 20)})
    plain = trial()
    r = client.post("/api/v1/results", headers=headers,
                    json=results([{**t, "memory": MEMORY, "latency": LATENCY}, plain],
                                 runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as c:
        rows = dict(c.execute(text("SELECT uid, (memory, latency) IS NULL FROM trials "
                                   "WHERE uid IN (:a, :b)"), {"a": t["uid"],
                                                              "b": plain["uid"]}).all())
        stored = c.execute(text("SELECT memory, latency FROM trials WHERE uid = :u"),
                           {"u": t["uid"]}).one()
    assert rows == {t["uid"]: False, plain["uid"]: True}
    assert stored.memory == MEMORY and stored.latency == LATENCY


@pytest.mark.parametrize(("field", "value", "loc"), [
    ("memory", {"interval_ms": 10, "rss_bytes": [1] * 513}, ["memory", "rss_bytes"]),
    ("memory", {"interval_ms": -1, "rss_bytes": [1]}, ["memory", "interval_ms"]),
    ("memory", [1, 2, 3], ["memory"]),
    ("latency", {"sample_every": 64, "malloc": [[999, 1]]}, ["latency", "malloc", 0, 0]),
    ("latency", {"sample_every": 0}, ["latency", "sample_every"]),
])
def test_a_bad_recording_is_422_naming_the_field(client, make_runner, field, value, loc):
    runner, headers = make_runner()
    r = client.post("/api/v1/results", headers=headers,
                    json=results([{**trial(), field: value}], runner_id=runner["id"]))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, *loc]
