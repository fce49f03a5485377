"""HTTP by hand over a socket to 127.0.0.1, for the slow and malformed clients of the tests
(what no HTTP library will send: a body that trickles, headers that never end)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after it


def connect(url: str, timeout: float = 10, rcvbuf: int | None = None) -> socket.socket:
    where = urlsplit(url)
    assert where.hostname == "127.0.0.1", "the tests talk to 127.0.0.1 only"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connect, so the window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect((where.hostname, where.port or 80))
    return sock


def head(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def start(url: str, method: str, path: str, headers: dict[str, str],
          first: bytes = b"") -> socket.socket:
    """A connection that sent a request's headers and the first bytes of its body."""
    sock = connect(url)
    sock.sendall(head(method, path, headers) + first)
    return sock


def read_answer(sock: socket.socket, timeout: float = 10) -> Answer:
    """The next answer on the connection (its body by Content-Length), and whether the
    server closed the connection after it (waits up to 1 s for that)."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed without an answer (got {data[:200]!r})")
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Answer(status, headers, rest[:length], closed=is_closed(sock, 1.0))


def is_closed(sock: socket.socket, wait: float) -> bool:
    """Whether the server closes the connection within `wait` seconds."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def get(url: str, path: str, timeout: float = 10) -> tuple[int, float]:
    """(status, seconds) of a plain GET on a new connection."""
    t0 = time.monotonic()
    sock = connect(url, timeout)
    try:
        sock.sendall(head("GET", path, {"Connection": "close"}))
        return read_answer(sock, timeout).status, time.monotonic() - t0
    finally:
        sock.close()
