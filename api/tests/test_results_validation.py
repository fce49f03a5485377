"""Results validation: a bad value is a 4xx naming the field, and nothing is stored."""

from __future__ import annotations

import json
import secrets

import pytest
from helpers import claim_job as claim
from helpers import queue_job, results, stored, trial
from mallard_wire.fields import MAX_MEASURES
from sqlalchemy import text


def test_unknown_job_names_the_field(client, make_runner):
    runner, headers = make_runner()
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial()], job_id=987654321, runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "job_id"]


def test_bad_measure_value_names_the_field(client, make_runner):
    runner, headers = make_runner()
    body = results([trial(measures={"ops_per_sec": "fast"})], runner_id=runner["id"])  # type: ignore[dict-item]
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 422
    loc = r.json()["detail"][0]["loc"]
    assert loc[:3] == ["body", "trials", 0] and "measures" in loc


def test_nul_characters_are_rejected_with_the_field(client, make_runner):
    runner, headers = make_runner()
    t = trial()
    t["workload"]["params"]["note"] = "bad\x00byte"
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:4] == ["body", "trials", 0, "workload"]


def test_stderr_with_nul_characters_is_kept_cleaned(client, make_runner, engine):
    runner, headers = make_runner()
    t = trial(ok=False)
    t["stderr_tail"] = "Segmentation fault\x00\x00 core dumped"
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        tail = conn.execute(text("SELECT stderr_tail FROM trials WHERE uid = :u"),
                            {"u": t["uid"]}).scalar()
    assert tail == "Segmentation fault\ufffd\ufffd core dumped"


def test_a_stderr_tail_is_stored_without_the_tokens_it_holds(client, make_runner, engine,
                                                              make_token):
    """The allocator under test wrote it: what it read of a token is not kept."""
    runner, headers = make_runner()
    stolen = make_token("admin")
    t = trial(ok=False)
    t["stderr_tail"] = f"MALLARD_RUNNER_TOKEN={stolen}\nbearer {stolen}\nSegmentation fault"
    r = client.post("/api/v1/results", headers=headers,
                    json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        tail = conn.execute(text("SELECT stderr_tail FROM trials WHERE uid = :u"),
                            {"u": t["uid"]}).scalar()
    assert stolen not in tail and tail.endswith("Segmentation fault")


def test_unknown_project_names_the_field(client, make_runner):
    runner, headers = make_runner()
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial()], runner_id=runner["id"], project="no-such-project"))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "project"]


def test_largest_measures_object_is_stored(client, make_runner):
    runner, headers = make_runner()
    # incompressible names of the longest length, the most of them (MAX_MEASURES)
    measures = {f"m{i:02d}_" + secrets.token_hex(30): -1.2345678901234567e-300
                for i in range(MAX_MEASURES)}
    t = trial(measures=measures)
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 201, r.text
    measures["one_too_many"] = 1.0
    r = client.post("/api/v1/results", headers=headers,
                    json=results([trial(measures=measures)], runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, "measures"]


# -- bad values: 4xx naming the field, nothing stored (issue 15) ---------------------------
@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e309"])
@pytest.mark.parametrize("where", ["measures", "counters"])
def test_non_finite_numbers_are_422(client, make_runner, engine, raw, where):
    runner, headers = make_runner()
    t = trial()
    key = "ops_per_sec" if where == "measures" else "allocs"
    t[where][key] = 1.5
    text_body = json.dumps(results([t], runner_id=runner["id"])).replace(
        f'"{key}": 1.5', f'"{key}": {raw}')
    assert raw in text_body
    r = client.post("/api/v1/results", headers={**headers, "Content-Type": "application/json"},
                    content=text_body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][0] == "body"
    assert stored(engine, [t["uid"]]) == 0


def test_lone_surrogates_never_give_a_500(client, make_runner, engine, user_headers):
    runner, headers = make_runner()

    def post(t, artifacts=None):
        body = results([t], runner_id=runner["id"])
        body["artifacts"] = artifacts
        raw = json.dumps(body).replace("SURROGATE", "\\ud800")
        return client.post("/api/v1/results", content=raw,
                           headers={**headers, "Content-Type": "application/json"})

    t = trial(uid="uid-SURROGATE")
    r = post(t)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:4] == ["body", "trials", 0,
                                                                         "uid"]
    r = post(trial(), {"note": "SURROGATE"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "artifacts"]
    kept = trial(ok=False)
    kept["stderr_tail"] = "crash SURROGATE here"
    r = post(kept)
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        assert conn.execute(text("SELECT stderr_tail FROM trials WHERE uid = :u"),
                            {"u": kept["uid"]}).scalar() == "crash \ufffd here"
    # a key with a surrogate: the 422 names it without failing to encode it
    bad_key = trial()
    bad_key["measures"] = {"SURROGATE": 1.0}
    r = post(bad_key)
    assert r.status_code == 422 and "measures" in r.json()["detail"][0]["loc"]
    # a failure log with one is kept, cleaned
    job_id = queue_job(client, user_headers, runner["arch"])
    claim(client, headers, runner)
    raw = json.dumps({"runner_id": runner["id"], "attempt": 1, "log": "log SURROGATE",
                      "retryable": False})
    r = client.post(f"/api/v1/jobs/{job_id}/fail", content=raw.replace("SURROGATE", "\\ud800"),
                    headers={**headers, "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    attempts = client.get(f"/api/v1/jobs/{job_id}", headers=user_headers).json()["attempts"]
    assert attempts[0]["log"] == "log \ufffd"


def test_a_misspelled_field_is_422_naming_it(client, make_runner, engine):
    runner, headers = make_runner()
    t = trial()
    t["measure"] = t.pop("measures")
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, "measure"]
    assert r.json()["detail"][0]["type"] == "extra_forbidden"
    body = results([trial()], runner_id=runner["id"])
    body["job"] = 1
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "job"]
    assert stored(engine, [t["uid"]]) == 0


def test_artifacts_are_capped(client, app, make_runner, engine):
    runner, headers = make_runner()
    body = results([trial()], runner_id=runner["id"])
    cap = app.state.settings.max_artifacts_bytes
    body["artifacts"] = {"blob": "x" * (cap + 1)}
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body", "artifacts"]
    assert stored(engine, [body["trials"][0]["uid"]]) == 0


@pytest.mark.parametrize("value", [True, False, "1.5", None])
def test_a_measure_is_a_number_never_a_boolean_or_text(client, make_runner, engine, value):
    runner, headers = make_runner()
    t = trial(measures={"ops_per_sec": value})
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, "measures", "ops_per_sec"]
    assert stored(engine, [t["uid"]]) == 0


@pytest.mark.parametrize("field,value", [("signal", False), ("seq", True), ("ok", 1),
                                         ("warmup", "true"), ("started_at", 0),
                                         ("exit_code", "1")])
def test_trial_fields_take_their_own_json_type_only(client, make_runner, engine, field, value):
    runner, headers = make_runner()
    t = {**trial(), field: value}
    r = client.post("/api/v1/results", headers=headers, json=results([t], runner_id=runner["id"]))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "trials", 0, field]
    assert stored(engine, [t["uid"]]) == 0
