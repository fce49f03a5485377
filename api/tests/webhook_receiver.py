"""A real local HTTP receiver for webhook tests: records every POST (path, JSON body,
headers) and answers with a chosen status; `BlockingReceiver` holds each POST until
released."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class Receiver:
    """A local HTTP receiver in a thread; records every POST; can answer with an error."""

    def __init__(self, port: int = 0, status: int = 200) -> None:
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.requests.append((self.path, json.loads(body), dict(self.headers)))
                self.send_response(outer.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    @property
    def bodies(self) -> list[tuple[str, dict[str, Any]]]:
        """(path, body) of every POST so far."""
        return [(path, body) for path, body, _ in self.requests]


class BlockingReceiver(Receiver):
    """Holds every POST until `release` is set (a receiver that takes 30 s, without
    waiting 30 s)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        super().__init__()
        outer = self
        handler = self.server.RequestHandlerClass

        class Slow(handler):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:  # noqa: N802
                outer.entered.set()
                outer.release.wait(60)
                super().do_POST()

        self.server.RequestHandlerClass = Slow


def wait_for(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)
