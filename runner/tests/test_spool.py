"""The spool keeps every pending post on disk until the API answers 2xx."""

from __future__ import annotations

import json
import threading

import httpx
from mallard_runner.spool import Spool


def response(code: int, body: object = None) -> httpx.Response:
    return httpx.Response(code, json=body if body is not None else {},
                          request=httpx.Request("POST", "http://api/x"))


def test_written_before_any_attempt_and_removed_only_after_2xx(tmp_path):
    spool = Spool(tmp_path / "spool")
    path = spool.put("/results", {"trials": [{"uid": "u1"}]}, "results-1")
    assert json.loads(path.read_text())["body"] == {"trials": [{"uid": "u1"}]}
    assert not list((tmp_path / "spool").glob(".*.tmp"))  # no temp file left behind
    answers = iter([httpx.ConnectError("down"), response(503), response(201, {"stored": 1})])

    def send(url: str, body: dict) -> httpx.Response:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert spool.flush(send) == 1
    assert json.loads(path.read_text())["attempts"] == 1
    assert "ConnectError" in json.loads(path.read_text())["last_error"]
    assert spool.flush(send) == 1
    assert json.loads(path.read_text())["attempts"] == 2
    delivered = []
    assert spool.flush(send, lambda item, r: delivered.append(item.url)) == 0
    assert not path.exists() and delivered == ["/results"]


def test_a_post_the_api_will_never_take_is_set_aside(tmp_path):
    spool = Spool(tmp_path)
    path = spool.put("/jobs/3/fail", {"log": "x"})
    assert spool.flush(lambda u, b: response(422, {"detail": "bad"})) == 0
    assert not path.exists()
    (kept,) = tmp_path.glob("*.rejected")
    assert "HTTP 422" in json.loads(kept.read_text())["last_error"]


def test_oldest_first_and_drain_gives_up_when_stopped(tmp_path):
    spool = Spool(tmp_path)
    a = spool.put("/a", {})
    b = spool.put("/b", {})
    seen: list[str] = []

    def send(url: str, body: dict) -> httpx.Response:
        seen.append(url)
        return response(500)

    stop = threading.Event()
    stop.set()
    assert spool.drain(send, stop, max_seconds=30) == 2
    assert seen == ["/a", "/b"] and a.exists() and b.exists()
