"""Every bad input is a 4xx naming the field (errors.py): too-deep JSON, NaN, bad UTF-8,
huge locations; the answers never echo the input."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import TESTBED
from mallard_api import errors
from mallard_api.config import Settings
from pydantic import BaseModel, ValidationError, field_validator


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


def windows(secret: str, size: int = 6) -> set[str]:
    return {secret[i:i + size] for i in range(len(secret) - size + 1)}


def test_a_refused_webhook_secret_is_not_echoed(client, user_headers, unique):
    """The attack: a `webhook_secret` with a placeholder word came back, its first 12
    characters, in the 422."""
    for secret in (f"example-{unique}-Zq8xV2mK4pLw", "CHANGE-ME-Zq8xV2mK4pLw", "shortZq8x"):
        r = client.put(f"/api/v1/projects/p-{unique}", headers=user_headers,
                       json={"repo_url": "/srv/git/p.git", "webhook_secret": secret})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "webhook_secret"]
        assert not any(w in r.text for w in windows(secret)), r.text


def test_a_placeholder_setting_is_refused_without_its_value():
    secret = "replace-me-Zq8xV2mK4pLw"
    with pytest.raises(ValidationError) as exc:
        Settings(github_webhook_secret=secret)
    assert "MALLARD_GITHUB_WEBHOOK_SECRET is a placeholder" in str(exc.value)
    assert not any(w in str(exc.value) for w in windows(secret)), str(exc.value)


class _Echoing(BaseModel):
    """A body whose validators repeat what they were given (as check_secret did)."""

    api_token: str
    name: str

    @field_validator("api_token", "name")
    @classmethod
    def _echo(cls, value: str) -> str:
        raise ValueError(f"{value[:12]!r} is not accepted")


def test_no_message_repeats_a_secret_like_field(unique):
    """Whatever a validator says, the 422 repeats no part of a secret-, token- or
    password-named field's value (errors.py); other fields' messages stay as they are."""
    app = FastAPI()
    errors.install(app, retry_after=1)

    @app.post("/echo")
    def echo(body: _Echoing) -> dict[str, str]:
        return {}

    token = f"tok-{unique}-Zq8xV2mK4pLw"
    with TestClient(app) as c:
        r = c.post("/echo", json={"api_token": token, "name": "plain-name"})
    assert r.status_code == 422
    by_field = {d["loc"][-1]: d["msg"] for d in r.json()["detail"]}
    assert not any(w in by_field["api_token"] for w in windows(token)), by_field
    assert "plain-name" in by_field["name"]
