"""The spool keeps every pending post on disk until the API answers 2xx, and decides
from each answer whether to retry, drop (lease lost) or set aside (never accepted).

The answers here are built by hand (the decision is the spool's own logic); the agent
tests get the same answers from the real API (through a proxy where it must misbehave).
"""

from __future__ import annotations

import json
import threading
import time

import httpx
from mallard_runner.spool import Spool


def response(code: int, body: object = None, headers: dict[str, str] | None = None
             ) -> httpx.Response:
    return httpx.Response(code, json=body if body is not None else {}, headers=headers,
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

    assert spool.flush(send, force=True) == 1
    assert json.loads(path.read_text())["attempts"] == 1
    assert "ConnectError" in json.loads(path.read_text())["last_error"]
    assert spool.flush(send, force=True) == 1
    assert json.loads(path.read_text())["attempts"] == 2
    delivered = []
    assert spool.flush(send, lambda item, r: delivered.append(item.url), force=True) == 0
    assert not path.exists() and delivered == ["/results"]


def test_each_post_waits_for_its_own_backoff(tmp_path):
    spool = Spool(tmp_path, backoff_base=30, backoff_max=60)
    path = spool.put("/results", {})
    sent: list[str] = []

    def send(url: str, body: dict) -> httpx.Response:
        sent.append(url)
        return response(502)

    assert spool.flush(send) == 1 and sent == ["/results"]
    entry = json.loads(path.read_text())
    assert entry["next_attempt_at"] >= time.time() + 25
    assert spool.flush(send) == 1 and sent == ["/results"]  # not due: not sent again
    assert spool.flush(send, force=True) == 1 and len(sent) == 2


def test_retry_after_is_honoured(tmp_path):
    spool = Spool(tmp_path, backoff_base=0.01)
    path = spool.put("/results", {})
    spool.flush(lambda u, b: response(429, headers={"Retry-After": "120"}))
    assert json.loads(path.read_text())["next_attempt_at"] >= time.time() + 110


def test_a_post_the_api_will_never_take_is_kept_in_rejected(tmp_path):
    spool = Spool(tmp_path)
    path = spool.put("/results", {"job_id": 3, "trials": []}, "results-3")
    seen = []
    assert spool.flush(lambda u, b: response(422, {"detail": [{"loc": ["body", "trials"]}]}),
                       on_rejected=lambda item, r: seen.append((item.job_id, r.status_code))) == 0
    assert not path.exists() and spool.pending() == []
    (kept,) = spool.rejected()
    assert kept.parent == tmp_path / "rejected" and kept.name == path.name
    entry = json.loads(kept.read_text())
    assert "HTTP 422" in entry["last_error"] and entry["body"]["job_id"] == 3
    assert seen == [(3, 422)]


def test_lease_lost_is_dropped_and_never_retried(tmp_path):
    spool = Spool(tmp_path)
    path = spool.put("/results", {"job_id": 4, "attempt": 1})
    dropped, rejected = [], []
    answer = response(409, {"detail": [{"type": "lease_lost", "msg": "attempt 2 holds it"}]})
    assert spool.flush(lambda u, b: answer, on_dropped=lambda i, r: dropped.append(i.url),
                       on_rejected=lambda i, r: rejected.append(i.url)) == 0
    assert dropped == ["/results"] and rejected == []
    assert not path.exists() and spool.rejected() == []


def test_another_409_is_rejected_not_dropped(tmp_path):
    spool = Spool(tmp_path)
    spool.put("/results", {"job_id": 4})
    assert spool.flush(lambda u, b: response(409, {"detail": "conflict"})) == 0
    assert len(spool.rejected()) == 1


def test_server_errors_are_bounded_but_unavailability_is_not(tmp_path):
    spool = Spool(tmp_path, max_attempts=3)
    poison = spool.put("/results", {"job_id": 5}, "a")
    away = spool.put("/jobs/6/fail", {"log": "x"}, "b")

    def send(url: str, body: dict) -> httpx.Response:
        return response(500) if url == "/results" else response(503)

    rejected = []
    for _ in range(2):
        assert spool.flush(send, on_rejected=lambda i, r: rejected.append(i.url), force=True) == 2
    assert json.loads(poison.read_text())["server_errors"] == 2
    assert spool.flush(send, on_rejected=lambda i, r: rejected.append(i.url), force=True) == 1
    assert rejected == ["/results"] and not poison.exists()
    for _ in range(10):  # 503 (and 408, 429, no answer) never count
        spool.flush(send, force=True)
    assert away.exists() and json.loads(away.read_text())["server_errors"] == 0
    (kept,) = spool.rejected()
    assert json.loads(kept.read_text())["server_errors"] == 3


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


def test_later_answers_are_retried_with_their_retry_after_and_never_counted(tmp_path):
    """408, 425 (too early), 429 and 503 say "later": retried however many times, each
    after the Retry-After the API gave; a 422 is set aside at once, with the answer."""
    spool = Spool(tmp_path, max_attempts=1, backoff_base=0.01)
    for code in (408, 425, 429, 503):
        path = spool.put("/results", {"job_id": code})
        for _ in range(3):
            before = time.time()
            assert spool.flush(lambda u, b, c=code: response(c, headers={"Retry-After": "30"}),
                               force=True) == 1
            entry = json.loads(path.read_text())
            assert entry["next_attempt_at"] >= before + 30 and entry["server_errors"] == 0
        path.unlink()
    spool.put("/results", {"job_id": 1})
    answer = {"detail": [{"loc": ["body", "trials", 0, "allocator", "build_flags"],
                          "msg": "String should have at most 1000 characters",
                          "type": "string_too_long"}]}
    assert spool.flush(lambda u, b: response(422, answer)) == 0
    (kept,) = spool.rejected()
    entry = json.loads(kept.read_text())
    assert entry["attempts"] == 1 and "HTTP 422" in entry["last_error"]
    assert "build_flags" in entry["last_error"]
