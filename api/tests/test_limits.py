"""Body caps (limits.py): checked before the body is read, 413 naming the body."""

from __future__ import annotations

import asyncio
import json

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
