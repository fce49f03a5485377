"""Every bad input is a 4xx naming the field (errors.py): too-deep JSON, NaN, bad UTF-8,
huge locations; the answers never echo the input."""

from __future__ import annotations

import json

from helpers import TESTBED


def test_deeply_nested_bodies_are_422(client, user_headers, make_runner):
    runner, headers = make_runner()
    deep = b'{"testbed": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for url, h in (("/api/v1/results", headers), ("/api/v1/jobs", user_headers),
                   ("/api/v1/comparisons", user_headers)):
        r = client.post(url, content=deep, headers={**h, "Content-Type": "application/json"})
        assert r.status_code == 422, (url, r.text)
        assert r.json()["detail"][0]["loc"][0] == "body"
    nested = {"testbed": TESTBED, "trials": [], "artifacts": {}}
    level = nested["artifacts"]
    for _ in range(40):  # parseable, but deeper than any stored JSON may be
        level["x"] = {}
        level = level["x"]
    r = client.post("/api/v1/results", headers=headers, json=nested)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "artifacts"]


def test_deeply_nested_series_params_are_422(client, user_headers, make_project):
    project = make_project()
    for params in ("[" * 4000 + "]" * 4000, '{"a":' * 1500 + "1" + "}" * 1500,
                   '{"a": NaN}', '{"a": 1e309}', "\"\\ud800\""):
        r = client.get("/api/v1/series", headers=user_headers,
                       params={"project": project["name"], "workload": "larson",
                               "params": params})
        assert r.status_code == 422, (params[:20], r.text)
        assert r.json()["detail"][0]["loc"] == ["query", "params"]


def test_errors_do_not_echo_the_input(client, make_runner):
    runner, headers = make_runner()
    secret_like = "a-secret-that-must-not-come-back-" * 100
    r = client.post("/api/v1/runners/register", headers=headers,
                    json={"name": runner["name"], "arch": secret_like})
    assert r.status_code == 422
    assert "must-not-come-back" not in r.text
    assert set(r.json()["detail"][0]) == {"loc", "msg", "type"}
    key = "k" * 5000
    r = client.post("/api/v1/results", headers=headers,
                    json={"testbed": TESTBED, "trials": [], key: 1})
    assert r.status_code == 422 and len(r.json()["detail"][0]["loc"][1]) < 300


def test_bodies_that_are_not_utf8_or_json_are_422(client, make_runner):
    runner, headers = make_runner()
    for raw in (b"\xff\xfe\x00", b"{", b'{"name": NaN}', b"Infinity"):
        r = client.post("/api/v1/runners/register", content=raw,
                        headers={**headers, "Content-Type": "application/json"})
        assert r.status_code == 422, (raw, r.text)
        json.dumps(r.json())


def test_bad_results_bodies_are_422_at_body(client, make_runner):
    # the results route parses its raw body itself (rawbody.py): the same answers
    runner, headers = make_runner()
    for raw, kind in ((b"", "missing"), (b"\xff\xfe\x00", "json_invalid"),
                      (b"{", "json_invalid"), (b'{"testbed": NaN}', "json_invalid"),
                      (b"[]", "model_attributes_type")):
        r = client.post("/api/v1/results", content=raw,
                        headers={**headers, "Content-Type": "application/json"})
        assert r.status_code == 422, (raw, r.text)
        detail = r.json()["detail"][0]
        assert detail["loc"][0] == "body" and detail["type"] == kind, (raw, detail)
