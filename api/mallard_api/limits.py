"""Request body caps per route, enforced before the body is read (pure ASGI).

A request whose Content-Length is over its route's cap is answered 413 without reading
a byte of the body. A chunked request (no Content-Length) is read here, counting bytes,
and answered 413 as soon as it goes over the cap; otherwise the body is handed on. So no
route, dependency or parser ever sees more than its cap. Caps are settings:
`MALLARD_MAX_RESULTS_BODY_BYTES` (POST /results), `MALLARD_MAX_WEBHOOK_BODY_BYTES`
(/webhooks/...), `MALLARD_MAX_BODY_BYTES` (everything else).
"""

from __future__ import annotations

import asyncio
import json
import weakref

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _TooLarge(Exception):
    pass


async def _answer_413(send: Send, limit: int) -> None:
    body = json.dumps({"detail": [{
        "loc": ["body"], "msg": f"the request body is larger than this route accepts "
                                f"({limit} bytes)", "type": "too_large"}]}).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, default: int, by_prefix: dict[str, int]) -> None:
        self.app = app
        self.default = default
        # longest prefix first, so /api/v1/webhooks/github picks the webhook cap
        self.by_prefix = sorted(by_prefix.items(), key=lambda kv: -len(kv[0]))

    def limit(self, path: str) -> int:
        for prefix, limit in self.by_prefix:
            if path.startswith(prefix):
                return limit
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(str(scope.get("path", "")))
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await _answer_413(send, limit)
                return
            await self._counted(scope, receive, send, limit)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            await self._buffered(scope, receive, send, limit)
        else:
            await self.app(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """The server frames the body by Content-Length; count anyway, so a body that
        somehow outgrows it never reaches the app whole."""
        seen = 0

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        await self.app(scope, counting, send)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _answer_413(send, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class AdmissionMiddleware:
    """At most `limit` requests inside the app at once; the others wait here, in arrival
    order, before anything is done for them (pure ASGI).

    A request may hold one database connection from its first statement to its end,
    across several hops between the event loop and the thread pool. With no more
    requests inside than connections in the pool, no request ever waits for a
    connection, let alone while holding a thread that the request owning the connection
    needs to finish (api/README.md, "Load"). `exempt` paths (/metrics: its own pool) skip
    the queue.
    """

    def __init__(self, app: ASGIApp, *, limit: int, exempt: tuple[str, ...] = ()) -> None:
        self.app = app
        self.limit = limit
        self.exempt = exempt
        # one queue per event loop (an app is served by one loop per process; tests may
        # drive the same app from several)
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] \
            = weakref.WeakKeyDictionary()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or str(scope.get("path", "")).startswith(self.exempt):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self.limit)
        async with slots:
            await self.app(scope, receive, send)
