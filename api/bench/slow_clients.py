"""The slow-clients phase of `make bench-api`: /health latency while slow connections
are held open.

First the probe alone: GET /api/v1/health (and GET /api/v1/projects with a user token)
every 50 ms on one kept-alive connection, for a few seconds. Then the same probe while N
slow connections (default 64) are held open, each kind a quarter of them, each one
opened again as soon as the server cuts it (loops bounded by the phase's time; every
socket to 127.0.0.1):

- body: POST /api/v1/webhooks/github or /ui/login (alternately) promising
  `Content-Length: 100000` and sending a byte every 5 s (the review's attack);
- headers: a request whose header lines come one every 5 s and never end;
- idle: a connection that sends nothing;
- unread: GET /openapi.json pipelined 50 times on a 4 KiB receive window, never read.

Besides, one client sends a 128 MiB header (the review's other attack) again and again.
The probe runs on an event loop and thread of its own, apart from the slow connections'.
Reports the probe's p50 / p99 / max with and without them, its errors, and how the
server ended the slow connections (408, 431, closed).
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from bench_report import pct

KINDS = ("body", "headers", "idle", "unread")
TRICKLED = ("/api/v1/webhooks/github", "/ui/login")


@dataclass
class Probe:
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class Slow:
    opened: Counter[str] = field(default_factory=Counter)
    ended: Counter[str] = field(default_factory=Counter)  # "kind: how"
    flood_mib: float = 0.0  # header bytes the flood got in before being cut, in all


async def probe(base: str, token: str, until: float) -> Probe:
    out = Probe()
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        n = 0
        while time.monotonic() < until:
            path = "/api/v1/projects" if n % 2 else "/api/v1/health"
            t0 = time.perf_counter()
            try:
                r = await http.get(path, headers={"Authorization": f"Bearer {token}"})
                if r.status_code != 200:
                    out.errors[f"HTTP {r.status_code}"] += 1
                elif path.endswith("health"):
                    out.latencies.append(time.perf_counter() - t0)
            except httpx.HTTPError as exc:
                out.errors[type(exc).__name__] += 1
            n += 1
            await asyncio.sleep(0.05)
    return out


def _request(method: str, path: str, extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}".encode()


async def _hold(kind: str, i: int, host: str, port: int, until: float, slow: Slow) -> None:
    """One slow connection of `kind`, opened again whenever the server ends it."""
    while time.monotonic() < until:
        sock = None
        if kind == "unread":  # a small receive window, set before connecting
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        reader, writer = await asyncio.open_connection(
            sock=sock) if sock else await asyncio.open_connection(host, port)
        slow.opened[kind] += 1
        try:
            how = await _misbehave(kind, i, reader, writer, until)
        except (ConnectionError, OSError):
            how = "reset"
        finally:
            writer.close()
        if how:
            slow.ended[f"{kind}: {how}"] += 1


async def _misbehave(kind: str, i: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, until: float) -> str | None:
    """Play `kind` until the server ends it (how) or time is up (None)."""
    if kind == "body":
        writer.write(_request("POST", TRICKLED[i % 2], "Content-Length: 100000\r\n"
                              "Content-Type: application/x-www-form-urlencoded\r\n\r\n"))
        drip = b"x"
    elif kind == "headers":
        writer.write(_request("GET", "/api/v1/health"))
        drip = b"X-Slow: 1\r\n"
    elif kind == "unread":  # never read; a blank line now and then notices a reset
        writer.write(_request("GET", "/openapi.json", "\r\n") * 50)
        while time.monotonic() < until:
            await asyncio.sleep(min(5, until - time.monotonic()))
            writer.write(b"\r\n")
            await writer.drain()
        return None
    else:
        drip = b""
    while time.monotonic() < until:
        try:
            data = await asyncio.wait_for(reader.read(64), min(5, until - time.monotonic()))
        except TimeoutError:
            if drip:
                writer.write(drip)
            continue
        if not data:
            return "closed"
        return data.split(b"\r\n", 1)[0].decode(errors="replace")[9:12] or "closed"
    return None


async def _flood(host: str, port: int, until: float, slow: Slow) -> None:
    """A 128 MiB header, again and again, until the server cuts each one."""
    block = b"a" * (1 << 20)
    while time.monotonic() < until:
        reader, writer = await asyncio.open_connection(host, port)
        sent = 0
        try:
            writer.write(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            for _ in range(128):
                writer.write(block)
                await writer.drain()
                sent += len(block)
            await asyncio.wait_for(reader.read(64), 5)
        except (ConnectionError, OSError, TimeoutError):
            pass
        finally:
            writer.close()
            slow.flood_mib += sent / (1 << 20)
            slow.ended["flood: cut"] += 1
        await asyncio.sleep(0.5)


async def _run(base: str, token: str, conns: int, seconds: float, alone: float
               ) -> tuple[Probe, Probe, Slow]:
    where = urlsplit(base)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    assert host == "127.0.0.1", "the benchmark talks to 127.0.0.1 only"
    quiet = await probe(base, token, time.monotonic() + alone)
    slow = Slow()
    until = time.monotonic() + seconds
    held = [asyncio.create_task(_hold(KINDS[i % len(KINDS)], i, host, port, until, slow))
            for i in range(conns)]
    held.append(asyncio.create_task(_flood(host, port, until, slow)))
    await asyncio.sleep(min(2.0, seconds / 4))  # all of them in place first
    # the probe on a loop (and thread) of its own: on this one, writing the flood's
    # blocks and waking 64 connections would delay it, and count as the server's
    loaded = await asyncio.to_thread(asyncio.run, probe(base, token, until))
    await asyncio.gather(*held, return_exceptions=True)
    return quiet, loaded, slow


def run(base: str, token: str, conns: int = 64, seconds: float = 45, alone: float = 5
        ) -> tuple[Probe, Probe, Slow]:
    return asyncio.run(_run(base, token, conns, seconds, alone))


def _row(what: str, p: Probe) -> str:
    ms = [x * 1000 for x in p.latencies] or [float("nan")]
    errors = sum(p.errors.values())
    return (f"| {what}: p50 / p99 / max ({len(p.latencies)} probes) | "
            f"{statistics.median(ms):.1f} ms / **{pct(ms, 99):.1f} ms** / {max(ms):.1f} ms, "
            f"{errors} errors" + (f" ({', '.join(f'{k} x{n}' for k, n in p.errors.items())})"
                                  if errors else "") + " |")


def table(quiet: Probe, loaded: Probe, slow: Slow, conns: int, seconds: float) -> list[str]:
    ended = ", ".join(f"{k} x{n}" for k, n in sorted(slow.ended.items())) or "none"
    return [
        _row("GET /health alone", quiet),
        _row(f"GET /health with {conns} slow connections held open for {seconds:.0f} s "
             "(a quarter each: trickling bodies, endless headers, idle, unread answers) and "
             "a 128 MiB header sent again and again", loaded),
        f"| slow connections opened; how the server ended them | "
        f"{sum(slow.opened.values())} opened; {ended}; the 128 MiB headers got "
        f"{slow.flood_mib:.0f} MiB in before being cut |",
    ]
