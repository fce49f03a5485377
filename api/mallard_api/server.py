"""The HTTP server: uvicorn with httptools, and the three bounds its settings lack.

uvicorn's own settings give the keep-alive timeout (an idle connection between requests
is closed after MALLARD_KEEP_ALIVE_SECONDS). Its httptools protocol, which serves (the
faster parser), has no limit on a request's line and headers (h11's
`h11_max_incomplete_event_size` applies to h11 only: one 128 MiB header cost 25 s of
CPU and 190 MiB), no deadline for them (a connection that sends nothing, or a byte a
minute, is kept forever), and no deadline for a client that does not read its answer.
`HttpProtocol` adds the three, per connection, on the event loop:

- the line and headers of a request are at most MALLARD_MAX_HEADER_BYTES: beyond, 431
  and the connection is closed, before the parser has buffered more;
- they arrive within MALLARD_HEADER_TIMEOUT_SECONDS of the connection (or of the
  request's first byte on a kept-alive one): else 408 (nothing when not a byte came)
  and the connection is closed;
- an answer the client leaves unread for MALLARD_SEND_TIMEOUT_SECONDS (the socket's
  buffer stays full) ends the connection.

And when a connection ends, every request of it still unanswered is told so (uvicorn
tells the last one parsed only, so with pipelined requests the one being answered wrote
into the closed transport: an error and a traceback under uvloop).

The body's deadline and rate, and the admission queue, are ASGI (limits.py). `options()`
are the uvicorn options of `mallard-api serve`; `config()`, of a server in this process
(the tests' live servers).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from mallard_api.config import Settings, get_settings

log = logging.getLogger("mallard_api.server")


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int
    header_timeout: float
    send_timeout: float

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(settings.max_header_bytes, settings.header_timeout_seconds,
                   settings.send_timeout_seconds)


def _response(status: int, phrase: str, text: str) -> bytes:
    body = text.encode()
    return (f"HTTP/1.1 {status} {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header size cap, a header deadline and a send
    deadline (module doc). `limits` None: from the process settings (a worker process of
    `serve --workers N` reads them from its environment)."""

    limits: HttpLimits | None = None

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.bounds = self.limits or HttpLimits.of(get_settings())
        self.head_bytes = 0  # of the current request's line and headers, so far
        self.in_head = True  # between requests or inside a line and headers
        self.heads = 0  # requests whose headers were complete
        self.head_timer: asyncio.TimerHandle | None = None
        self.send_timer: asyncio.TimerHandle | None = None
        self.cycles: weakref.WeakSet[RequestResponseCycle] = weakref.WeakSet()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_timer = self.loop.call_later(self.bounds.header_timeout, self.head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self.head_timer, self.send_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.send_timer = None
        self.disconnect_cycles()
        super().connection_lost(exc)

    def disconnect_cycles(self) -> None:
        """Every unanswered request of the connection is told the client is gone, so its
        next send does nothing. uvicorn tells only the last one parsed: with pipelined
        requests the one answering wrote into the closed transport (an error, with
        uvloop) once a client that read nothing went away."""
        for cycle in self.cycles:
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    def data_received(self, data: bytes) -> None:
        if not self.in_head:  # a body: limits.py bounds it
            super().data_received(data)
            return
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.bounds.header_timeout,
                                                   self.head_timed_out)
        room = self.bounds.max_header_bytes - self.head_bytes
        self.head_bytes += len(data)
        if len(data) <= room:
            super().data_received(data)
            return
        heads = self.heads
        super().data_received(data[:room])  # the headers must end in what fits
        if self.transport.is_closing():
            return
        if self.heads == heads:
            self.refuse(431, "Request Header Fields Too Large",
                        f"the request line and headers are over {self.bounds.max_header_bytes} "
                        "bytes (MALLARD_MAX_HEADER_BYTES)")
            return
        self.data_received(data[room:])

    def on_headers_complete(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.in_head = False
        self.heads += 1
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycles.add(self.cycle)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head, self.head_bytes = True, 0

    def busy(self) -> bool:
        """An answer is on its way (or pipelined requests wait for theirs)."""
        return bool(self.pipeline) or (self.cycle is not None
                                       and not self.cycle.response_complete)

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if self.busy():  # the next request's head waits its turn: the deadline runs again
            self.head_timer = self.loop.call_later(self.bounds.header_timeout,
                                                   self.head_timed_out)
            return
        if self.head_bytes == 0:  # not a byte of a request: just close
            self.transport.close()
            return
        self.refuse(408, "Request Timeout", "the request line and headers did not arrive "
                    f"within {self.bounds.header_timeout:g} s (MALLARD_HEADER_TIMEOUT_SECONDS)")

    def refuse(self, status: int, phrase: str, text: str) -> None:
        """Answer `status` and close, logged as one line; while an answer is on its way,
        drop the connection instead (an answer cannot be cut in two)."""
        log.info("%s: %d %s, connection closed", self.peer(), status, text)
        if self.busy():
            self.disconnect_cycles()
            self.transport.abort()
            return
        self.transport.write(_response(status, phrase, text))
        self.transport.close()

    def peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "client"

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_timer is None:
            self.send_timer = self.loop.call_later(self.bounds.send_timeout,
                                                   self.send_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None

    def send_timed_out(self) -> None:
        self.send_timer = None
        log.info("%s: did not read its answer for %g s (MALLARD_SEND_TIMEOUT_SECONDS), "
                 "connection closed", self.peer(), self.bounds.send_timeout)
        self.transport.abort()


def protocol(settings: Settings) -> type[HttpProtocol]:
    """`HttpProtocol` bound to `settings` (a server in this process)."""
    return type("BoundHttpProtocol", (HttpProtocol,), {"limits": HttpLimits.of(settings)})


def options(settings: Settings, *, bound: bool = True) -> dict[str, Any]:
    """uvicorn's options for the API: `HttpProtocol` (`bound`: to `settings`; not: each
    worker process of `serve --workers N` reads its own) and the keep-alive timeout."""
    return {"http": protocol(settings) if bound else HttpProtocol,
            "timeout_keep_alive": settings.keep_alive_seconds}


def config(app: Any, settings: Settings, *, host: str, port: int, **more: Any
           ) -> uvicorn.Config:
    """The uvicorn configuration of a server of `app` in this process."""
    return uvicorn.Config(app, host=host, port=port, **options(settings), **more)
