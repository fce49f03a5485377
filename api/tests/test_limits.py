"""Bodies (limits.py): caps checked before the body is read (413 naming the body); slow
bodies cut off (408) and read before the admission queue, so that slow clients hold no
slot; the bytes they hold bounded (503); a client gone before its body, one log line."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import uuid

import pytest
import raw_http
from mallard_api.harness import wait_for
from mallard_api.limits import BodyLimitMiddleware


def run(middleware, headers: list[tuple[bytes, bytes]], chunks: list[bytes]):
    """Drive the middleware like a server: returns (status, body, chunks the app read,
    whether the app was called)."""
    seen: dict = {"called": False, "read": []}

    async def app(scope, receive, send):
        seen["called"] = True
        while True:
            m = await receive()
            seen["read"].append(m.get("body", b""))
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = BodyLimitMiddleware(app, default=10, by_prefix={"/big": 100})
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
               for i, c in enumerate(chunks)]
    given: list[bytes] = []
    sent: list[dict] = []

    async def receive():
        if pending:
            m = pending.pop(0)
            given.append(m["body"])
            return m
        return {"type": "http.disconnect"}

    async def send(m):
        sent.append(m)

    scope = {"type": "http", "path": middleware, "method": "POST", "headers": headers}
    asyncio.run(mw(scope, receive, send))
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, body, seen, given


def test_content_length_over_the_cap_is_refused_unread():
    status, body, seen, given = run("/small", [(b"content-length", b"11")], [b"x" * 11])
    assert status == 413 and not seen["called"] and given == []  # not a byte read
    detail = json.loads(body)["detail"][0]
    assert detail["loc"] == ["body"] and detail["type"] == "too_large"


def test_chunked_bodies_are_counted():
    status, _, seen, given = run("/small", [(b"transfer-encoding", b"chunked")],
                                 [b"x" * 6, b"x" * 6, b"x" * 100])
    assert status == 413 and not seen["called"]
    assert len(given) == 2  # stopped as soon as it went over
    status, _, seen, _ = run("/small", [(b"transfer-encoding", b"chunked")], [b"ab", b"cd"])
    assert status == 200 and b"".join(seen["read"]) == b"abcd"


def test_caps_per_route():
    status, _, seen, _ = run("/big/x", [(b"content-length", b"50")], [b"x" * 50])
    assert status == 200 and seen["read"] == [b"x" * 50]
    assert run("/big/x", [(b"content-length", b"101")], [b"x" * 101])[0] == 413
    assert run("/small", [(b"content-length", b"junk")], [b""])[0] == 413


def test_the_app_caps_bodies_before_auth_or_parsing(client, app):
    cap = app.state.settings.max_body_bytes
    r = client.post("/api/v1/runners/register", content=b"{" + b" " * cap + b"}",
                    headers={"Content-Type": "application/json"})  # no token either
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body"]
    r = client.post("/api/v1/webhooks/github",
                    content=b"x" * (app.state.settings.max_webhook_body_bytes + 1))
    assert r.status_code == 413


def test_admission_lets_in_at_most_the_limit_in_arrival_order():
    from mallard_api.limits import AdmissionMiddleware

    inside, peak, order = 0, 0, []
    gate = asyncio.Event()

    async def app(scope, receive, send):
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        order.append(scope["path"])
        await gate.wait()
        inside -= 1

    mw = AdmissionMiddleware(app, limit=3, exempt=("/metrics",))

    async def main():
        tasks = [asyncio.create_task(mw({"type": "http", "path": f"/r{i}"}, None, None))
                 for i in range(10)]
        metrics = asyncio.create_task(mw({"type": "http", "path": "/metrics"}, None, None))
        for _ in range(5):
            await asyncio.sleep(0)
        assert peak == 4 and order[:3] == ["/r0", "/r1", "/r2"] and "/metrics" in order
        gate.set()
        await asyncio.gather(*tasks, metrics)

    asyncio.run(main())
    assert [p for p in order if p != "/metrics"] == [f"/r{i}" for i in range(10)]


# -- slow clients, against a real server (the `guarded` fixture: 4 slots, 3 s grace) --------

TRICKLED = ("/api/v1/webhooks/github", "/ui/login")


def _trickling(url: str, paths: tuple[str, ...], n: int, headers: dict[str, str] | None = None
               ) -> list[socket.socket]:
    """n connections that promise 100,000 bytes and send one."""
    socks = []
    for i in range(n):
        socks.append(raw_http.start(url, "POST", paths[i % len(paths)], {
            "Content-Length": "100000", "Content-Type": "application/x-www-form-urlencoded",
            **(headers or {})}, b"x"))
    time.sleep(0.3)  # every one of them is inside the server now
    return socks


def test_trickling_bodies_hold_no_slot_and_are_cut_off(guarded):
    """The review's freeze: more slow bodies than admission slots, to the two
    unauthenticated routes; /health and a read answer while they are held, and each slow
    body gets a 408 and a closed connection once it falls behind its pace."""
    url, app = guarded
    slots = app.state.settings.db_pool_size
    socks = _trickling(url, TRICKLED, 3 * slots)
    try:
        t0 = time.monotonic()
        for path in ("/api/v1/health", "/api/v1/projects", "/api/v1/health"):
            status, took = raw_http.get(url, path, timeout=5)
            assert status in (200, 401) and took < 1.0, (path, status, took)
        assert time.monotonic() - t0 < app.state.settings.body_grace_seconds  # still held
        for sock in socks:
            answer = raw_http.read_answer(sock, timeout=10)
            assert answer.status == 408 and answer.closed
            detail = json.loads(answer.body)["detail"][0]
            assert detail["loc"] == ["body"] and detail["type"] == "timeout"
            assert "bytes/s" in detail["msg"]
    finally:
        for sock in socks:
            sock.close()


def test_unauthenticated_results_posts_are_answered_before_their_body(guarded):
    """The results post reads its own body after the token: a trickling post without a
    token (or with a wrong one) is a 401 at once, holding a slot only for that."""
    url, app = guarded
    slots = app.state.settings.db_pool_size
    socks = _trickling(url, ("/api/v1/results",), slots, {"Authorization": "Bearer mlrd_no"})
    socks += _trickling(url, ("/api/v1/results",), slots)
    try:
        for sock in socks:
            assert raw_http.read_answer(sock, timeout=3).status == 401
        assert raw_http.get(url, "/api/v1/health", timeout=5)[0] == 200
    finally:
        for sock in socks:
            sock.close()


def test_an_authenticated_trickle_is_cut_off_too(guarded, make_token):
    url, _ = guarded
    token = make_token("runner", f"trickler-{uuid.uuid4().hex[:6]}")
    sock = _trickling(url, ("/api/v1/results",), 1, {"Authorization": f"Bearer {token}",
                                                     "Content-Type": "application/json"})[0]
    try:
        t0 = time.monotonic()
        answer = raw_http.read_answer(sock, timeout=10)
        assert answer.status == 408 and answer.closed and time.monotonic() - t0 < 6
    finally:
        sock.close()


def test_bodies_waiting_for_a_slot_are_bounded_in_bytes(guarded):
    """Bodies read before admission hold at most MALLARD_BODY_BUFFER_BYTES together: past
    it, a 503 with Retry-After instead of more memory."""
    url, app = guarded
    budget = app.state.settings.body_buffer_bytes
    part = budget // 2 + 1024
    headers = {"Content-Length": str(part + 1000), "Content-Type": "application/json"}
    first = raw_http.start(url, "PUT", "/api/v1/projects/held", headers, b" " * part)
    try:
        time.sleep(0.5)
        second = raw_http.start(url, "PUT", "/api/v1/projects/held", headers, b" " * part)
        try:
            answer = raw_http.read_answer(second, timeout=5)
            assert answer.status == 503 and answer.headers["retry-after"]
            assert json.loads(answer.body)["detail"][0]["type"] == "busy"
        finally:
            second.close()
    finally:
        first.close()
    wait_for("the first body to be let go", lambda: _buffered(app) == 0, 5)


def _buffered(app) -> int:
    mw = app.middleware_stack
    while not isinstance(mw, BodyLimitMiddleware):
        mw = mw.app
    return mw.buffered


@pytest.mark.parametrize("path", ["/api/v1/webhooks/github", "/ui/login", "/api/v1/results"])
def test_a_client_gone_before_its_body_is_one_log_line(guarded, make_token, caplog,
                                                       monkeypatch, path):
    """The review: each client that went away before its body logged an ERROR traceback."""
    url, _ = guarded
    monkeypatch.setattr(logging.getLogger("uvicorn"), "propagate", True)
    caplog.set_level(logging.INFO)
    token = make_token("runner", f"leaver-{uuid.uuid4().hex[:6]}")
    sock = raw_http.start(url, "POST", path, {
        "Content-Length": "5000", "Authorization": f"Bearer {token}",
        "X-Hub-Signature-256": "sha256=00", "Content-Type": "application/json"}, b"{" * 10)
    time.sleep(0.3)
    sock.close()
    lines = wait_for("the log line", lambda: [r for r in caplog.records
                                              if "went away" in r.getMessage()], 5)
    time.sleep(0.3)  # anything else it would log
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and path in lines[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
