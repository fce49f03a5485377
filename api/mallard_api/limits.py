"""Request bodies: capped, paced and read before the admission queue; the queue (pure ASGI).

`BodyLimitMiddleware`, outside the admission queue:

- **Caps.** A request whose Content-Length is over its route's cap is answered 413
  without reading a byte of the body; a chunked one is answered 413 as soon as it goes
  over. Caps are settings: `MALLARD_MAX_RESULTS_BODY_BYTES` (POST /results),
  `MALLARD_MAX_WEBHOOK_BODY_BYTES` (/webhooks/...), `MALLARD_MAX_BODY_BYTES` (the rest).
- **Pace.** A body must keep up: at every moment, the bytes received are at least
  (seconds since its headers - `MALLARD_BODY_GRACE_SECONDS`) x
  `MALLARD_BODY_MIN_BYTES_PER_SECOND`; a body that falls behind is answered 408 and its
  connection closed. So a body of n bytes takes at most grace + n / rate seconds.
- **Read before the queue.** Every body (but the `streamed` routes') is read whole here,
  before the request waits for an admission slot: a client that trickles its body holds
  a connection, never a slot, so trickling clients cannot keep anyone else out. The
  bodies read so far hold at most `MALLARD_BODY_BUFFER_BYTES` in all (beyond: 503 with
  Retry-After), so many clients cannot make the process hold more. The results post is
  `streamed`: it checks its token first and reads its own body (routes/results.py), paced
  and capped the same, so an unauthenticated one holds a slot for a token lookup only.
- **A client that goes away** before its body is read is logged as one line (INFO), no
  traceback, and answered nothing.

`AdmissionMiddleware`: at most `limit` requests inside the app at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import weakref
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


class _TooLarge(Exception):
    pass


class BodyTimeout(Exception):
    """The body fell behind its pace."""


async def _answer(send: Send, status: int, msg: str, kind: str,
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps({"detail": [{"loc": ["body"], "msg": msg, "type": kind}]}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})


async def _answer_413(send: Send, limit: int) -> None:
    await _answer(send, 413, f"the request body is larger than this route accepts "
                             f"({limit} bytes)", "too_large")


def _who(scope: Scope) -> str:
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else "a client"
    return f"{peer} ({scope.get('method')} {str(scope.get('path', ''))[:200]})"


@dataclass
class Pace:
    """A body's pace: received bytes at least (now - start - grace) x rate."""

    grace: float
    rate: float
    start: float = 0.0
    received: int = 0

    def __post_init__(self) -> None:
        self.start = asyncio.get_running_loop().time()

    async def next(self, receive: Receive) -> Message:
        """The next message, or BodyTimeout when the body fell behind."""
        deadline = self.start + self.grace + self.received / self.rate
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            raise BodyTimeout from None
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
        return message

    def refusal(self) -> str:
        return (f"the request body did not keep up: at least {self.rate:g} bytes/s after "
                f"the first {self.grace:g} s (MALLARD_BODY_MIN_BYTES_PER_SECOND, "
                f"MALLARD_BODY_GRACE_SECONDS); {self.received} bytes arrived")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, default: int, by_prefix: dict[str, int],
                 streamed: tuple[str, ...] = (), grace: float = 10.0,
                 min_rate: float = 16384, buffer: int = 64 << 20,
                 retry_after: int = 5) -> None:
        self.app = app
        self.default = default
        # longest prefix first, so /api/v1/webhooks/github picks the webhook cap
        self.by_prefix = sorted(by_prefix.items(), key=lambda kv: -len(kv[0]))
        self.streamed = streamed
        self.grace, self.min_rate = grace, min_rate
        self.buffer, self.retry_after = buffer, retry_after
        self.buffered = 0  # bytes of the bodies read here, of requests not yet answered
        self._lock = threading.Lock()  # tests drive one app from several threads' loops

    def limit(self, path: str) -> int:
        for prefix, limit in self.by_prefix:
            if path.startswith(prefix):
                return limit
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        limit = self.limit(path)
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _answer_413(send, limit)
            return
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not chunked and (length is None or int(length) == 0):  # no body
            await self.app(scope, receive, send)
        elif path.startswith(self.streamed):
            await self._streamed(scope, receive, send, limit)
        else:
            await self._buffered(scope, receive, send, limit)

    async def _streamed(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """The app reads the body itself: paced, and counted against the cap (the server
        frames it by Content-Length; a body that somehow outgrows it never reaches the
        app whole)."""
        pace = Pace(self.grace, self.min_rate)
        started = False

        async def paced() -> Message:
            message = await pace.next(receive)
            if pace.received > limit:
                raise _TooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, paced, sending)
        except (BodyTimeout, _TooLarge) as exc:
            if started:
                raise
            if isinstance(exc, _TooLarge):
                await _answer_413(send, limit)
            else:
                await self._timed_out(scope, send, pace)
        except ClientDisconnect:
            log.info("%s went away before its body was read (%d bytes came)",
                     _who(scope), pace.received)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """Read the whole body, then hand it to the app (module doc)."""
        pace = Pace(self.grace, self.min_rate)
        chunks: list[bytes] = []
        try:
            while True:
                message = await pace.next(receive)
                if message["type"] == "http.disconnect":
                    log.info("%s went away before its body was read (%d bytes came)",
                             _who(scope), pace.received)
                    return
                chunk = message.get("body", b"")
                if pace.received > limit:
                    await _answer_413(send, limit)
                    return
                if not self._hold(len(chunk)):
                    await _answer(send, 503, "the server holds too many request bodies; "
                                  "retry later", "busy",
                                  ((b"retry-after", str(self.retry_after).encode()),))
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            await self._replayed(scope, receive, send, b"".join(chunks))
        except BodyTimeout:
            await self._timed_out(scope, send, pace)
        finally:
            self._hold(-sum(len(c) for c in chunks))

    def _hold(self, size: int) -> bool:
        """Count `size` more bytes held (negative: released); False when over the budget."""
        with self._lock:
            if size > 0 and self.buffered + size > self.buffer:
                return False
            self.buffered += size
            return True

    async def _replayed(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        try:
            await self.app(scope, replay, send)
        except ClientDisconnect:
            log.info("%s went away before its answer", _who(scope))

    async def _timed_out(self, scope: Scope, send: Send, pace: Pace) -> None:
        log.info("%s: 408, its body did not keep up (%d bytes in %.1f s)", _who(scope),
                 pace.received, asyncio.get_running_loop().time() - pace.start)
        await _answer(send, 408, pace.refusal(), "timeout")


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
