"""The server's bounds (server.py), each as the attack, against a real server (`guarded`:
8 KiB of headers, 2 s header and send timeouts): huge headers, headers that never end,
a connection that sends nothing, an answer nobody reads."""

from __future__ import annotations

import logging
import threading
import time

import raw_http
from mallard_api.harness import wait_for


def test_headers_over_the_cap_are_a_431_and_a_closed_connection(guarded):
    url, app = guarded
    cap = app.state.settings.max_header_bytes
    sock = raw_http.connect(url)
    try:
        sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                     + b"a" * (cap + 100))
        answer = raw_http.read_answer(sock, timeout=5)
        assert answer.status == 431 and answer.closed
        assert b"MALLARD_MAX_HEADER_BYTES" in answer.body
    finally:
        sock.close()
    # many small headers count the same
    sock = raw_http.start(url, "GET", "/api/v1/health", {f"X-H{i}": "v" * 50
                                                         for i in range(cap // 50)})
    try:
        assert raw_http.read_answer(sock, timeout=5).status == 431
    finally:
        sock.close()
    # just under the cap is served
    sock = raw_http.start(url, "GET", "/api/v1/health", {"X-Big": "a" * (cap - 200)})
    try:
        assert raw_http.read_answer(sock, timeout=5).status == 200
    finally:
        sock.close()


def test_a_huge_header_is_cut_off_early_and_the_api_keeps_answering(guarded):
    """The review: one 128 MiB header cost 25 s of the API's CPU. Here 64 MiB are offered;
    the server stops reading after its cap (what it took is what the sockets' buffers
    held), at once, and /health answers meanwhile."""
    url, _ = guarded
    sent, done = [0], threading.Event()

    def flood() -> None:
        sock = raw_http.connect(url)
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            block = b"a" * (1 << 20)
            for _ in range(64):
                sock.sendall(block)
                sent[0] += len(block)
        except OSError:
            pass  # the server closed it
        finally:
            sock.close()
            done.set()

    t0 = time.monotonic()
    threading.Thread(target=flood, daemon=True).start()
    assert raw_http.get(url, "/api/v1/health", timeout=5)[0] == 200
    assert done.wait(10) and time.monotonic() - t0 < 10
    assert sent[0] < 32 << 20, sent[0]


def test_headers_that_never_end_are_a_408_after_the_header_timeout(guarded):
    url, app = guarded
    limit = app.state.settings.header_timeout_seconds
    sock = raw_http.connect(url)
    try:
        t0 = time.monotonic()
        sock.sendall(b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(3):  # a slowloris: a header line now and then
            time.sleep(limit / 4)
            sock.sendall(b"X-Slow: 1\r\n")
        answer = raw_http.read_answer(sock, timeout=limit + 3)
        took = time.monotonic() - t0
        assert answer.status == 408 and answer.closed and limit - 0.1 < took < limit + 2
    finally:
        sock.close()


def test_a_connection_that_sends_nothing_is_closed(guarded):
    url, app = guarded
    limit = app.state.settings.header_timeout_seconds
    sock = raw_http.connect(url)
    try:
        t0 = time.monotonic()
        assert raw_http.is_closed(sock, limit + 3)
        assert time.monotonic() - t0 < limit + 2
    finally:
        sock.close()


def test_a_kept_alive_connection_gets_the_header_timeout_per_request(guarded):
    """The header deadline runs from a request's first byte, not from the connection's
    start: a client that waits between requests is served (up to the keep-alive)."""
    url, app = guarded
    limit = app.state.settings.header_timeout_seconds
    sock = raw_http.connect(url)
    try:
        for _ in range(2):
            sock.sendall(raw_http.head("GET", "/api/v1/health"))
            sock.settimeout(5)
            data = b""
            while b'"ok"}' not in data:
                data += sock.recv(65536)
            assert data.startswith(b"HTTP/1.1 200")
            time.sleep(limit + 0.5)
    finally:
        sock.close()


def test_an_answer_nobody_reads_ends_its_connection(guarded, caplog, monkeypatch):
    """A client that asks for large answers (the OpenAPI document, pipelined) and never
    reads them, sending a stray byte now and then: the server gives up on it after the
    send timeout instead of holding it open, and never writes into an answer on its way
    (no error, no traceback)."""
    url, app = guarded
    limit = app.state.settings.send_timeout_seconds
    monkeypatch.setattr(logging.getLogger("uvicorn"), "propagate", True)
    caplog.set_level(logging.INFO)
    socks = []
    try:
        for _ in range(4):  # more than one: the answer was built before the client stalls
            sock = raw_http.connect(url, rcvbuf=4096)
            sock.sendall(raw_http.head("GET", "/openapi.json") * 40)  # pipelined
            socks.append(sock)
        time.sleep(0.2)
        for sock in socks:
            sock.sendall(b"\r\n")  # the head of a next request, that never ends
        lines = wait_for("the send timeouts", lambda: [
            r for r in caplog.records if "did not read its answer" in r.getMessage()] or None,
            limit + 5)
        assert lines
        assert raw_http.get(url, "/api/v1/health", timeout=5)[0] == 200
        time.sleep(app.state.settings.header_timeout_seconds + 0.5)
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    finally:
        for sock in socks:
            sock.close()

