"""The ingest phase of `make bench-api`: C clients each POST /api/v1/results P times with
B fresh trials, in R timed rounds, as threads of the benchmark's process
(`--client-mode threads`, the default) or as processes of their own (`processes`, like
runners; on this 2-core machine they cost more client CPU per post, ~1.2-1.7 ms against
~0.9-1.4, and the clients were never the limit: api/README.md, "Benchmark").

Each client first makes W untimed warm-up posts (`--warmup`, like hyperfine's: the API's
pool opening its connections, statements prepared after a few executions, first plans);
then, each round, waits at a barrier, makes its P timed posts and reports. A round's
clock runs from its barrier to its last timed answer; the figure is the median of the
rounds' trials/s (one round of a few seconds moves with whatever the neighbours do while
it runs; several, over ~10 s, much less). A timed post is answered once its trials are
committed (so in the series query's answer), and only timed posts' trials are counted.
Bodies are JSON-encoded before the clock starts (a runner's encoding is not the API's
cost). Each client reports its own CPU time (user + system, from getrusage / os.times)
over the timed posts, so the table shows what the clients cost.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from procstat import cores_used, machine_ticks, self_cpu

WORKLOADS = [("larson", t) for t in (1, 2, 4, 8, 16)] + [("rpc", t) for t in (1, 2, 4, 8, 16)]
ALLOCATORS = [("mallard", ""), ("mallard", "transfer=ring"), ("glibc", ""), ("jemalloc", ""),
              ("mimalloc", "")]
TESTBED = {"arch": "x86_64", "cpu_model": "Bench CPU", "cpus": "1", "kernel": "6.1",
           "governor": "performance", "smt": False, "thp": "madvise",
           "compiler": "gcc 12.2.0", "libc": "glibc 2.36", "page_size": 4096}


@dataclass
class Outcome:
    """What the ingest phase measured (`seconds`, `stored`: all timed rounds together)."""
    seconds: float
    stored: int
    latencies: list[float] = field(default_factory=list)
    client_cpu: float = 0.0  # CPU seconds of all clients over the timed posts
    warmup_stored: int = 0  # trials of the untimed warm-up posts (not in `stored`)
    machine: dict[str, float] = field(default_factory=dict)  # cores busy/idle/iowait/steal
    rounds: list[tuple[float, int]] = field(default_factory=list)  # (seconds, trials) each

    def per_round(self) -> list[float]:
        """Each round's trials/s."""
        return [n / s for s, n in self.rounds]


def body(runner_id: int, batch: int) -> bytes:
    """One post of a commit job: `batch` trials of a fresh commit, JSON-encoded."""
    sha = secrets.token_hex(20)
    trials = []
    for k in range(batch):
        wl, threads = WORKLOADS[k % len(WORKLOADS)]
        name, variant = ALLOCATORS[k % len(ALLOCATORS)]
        trials.append({
            "uid": str(uuid.uuid4()), "label": "head" if name == "mallard" else "peer",
            "allocator": {"name": name, "commit": sha if name == "mallard" else None,
                          "variant": variant or None, "build_flags": "-O2"},
            "workload": {"name": wl, "params": {"threads": threads, "seed": 42}},
            "seq": k, "warmup": False, "ok": True, "exit_code": 0,
            "measures": {"ops_per_sec": 1e6 * random.random(), "wall_seconds": 0.4,
                         "max_rss_bytes": 10485760},
            "counters": {"version": 1, "allocs": k} if name == "mallard" else None})
    return json.dumps({"runner_id": runner_id, "project": "bench", "branch": "main",
                       "testbed": TESTBED, "trials": trials}).encode()


class Poster:
    """POST /api/v1/results on one keep-alive connection; returns the trials stored.
    `lib`: "stdlib" (the request written in one send on a socket, the answer read by
    http.client: ~0.3 ms of client CPU per 100-trial post) or "httpx" (what the runner
    uses: its pure-Python HTTP layers cost ~0.85 ms; api/README.md, "The API's CPU per
    results post, apicpu"). The clients share the servers' two cores here, unlike
    runners, so the lighter client is the default."""

    def __init__(self, base: str, headers: dict[str, str], lib: str) -> None:
        self.httpx = httpx.Client(base_url=base, headers=headers, timeout=120) \
            if lib == "httpx" else None
        url = urllib.parse.urlsplit(base)
        self.sock = socket.create_connection((url.hostname or "", url.port or 80), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = "".join([f"POST /api/v1/results HTTP/1.1\r\nHost: {url.netloc}\r\n",
                             *(f"{k}: {v}\r\n" for k, v in headers.items())]).encode()

    def __call__(self, b: bytes) -> int:
        if self.httpx is not None:
            r = self.httpx.post("/api/v1/results", content=b)
            r.raise_for_status()
            return int(r.json()["stored"])
        # headers and body in one segment train (http.client sends a large body apart)
        self.sock.sendall(b"%sContent-Length: %d\r\n\r\n%s" % (self.head, len(b), b))
        answer = http.client.HTTPResponse(self.sock)
        answer.begin()
        data = answer.read()
        if answer.status != 201:
            raise SystemExit(f"bench: POST /api/v1/results answered {answer.status}: "
                             f"{data[:500]!r}")
        return int(json.loads(data)["stored"])

    def close(self) -> None:
        self.sock.close()
        if self.httpx is not None:
            self.httpx.close()


def client(base: str, token: str, runner_id: int, posts: int, warmup: int, batch: int,
           rounds: int, lib: str, barrier: Any, out: Any) -> None:
    """One client: warm-up posts; then, each round, the barrier and the timed posts; puts
    (latencies, trials stored, monotonic end, CPU seconds of the timed posts, warm-up
    trials stored) per round on `out` (a queue; for threads a list, and the caller counts
    the process's CPU), then waits at the barrier again (the round is over)."""
    bodies = [body(runner_id, batch) for _ in range(warmup + posts * rounds)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    warm = 0
    post = Poster(base, headers, lib)
    try:
        for b in bodies[:warmup]:
            warm += post(b)
        for k in range(rounds):
            latencies: list[float] = []
            stored = 0
            barrier.wait()
            cpu0 = self_cpu()
            for b in bodies[warmup + k * posts:warmup + (k + 1) * posts]:
                t0 = time.perf_counter()
                stored += post(b)
                latencies.append(time.perf_counter() - t0)
            out.put((latencies, stored, time.monotonic(), self_cpu() - cpu0, warm if k == 0 else 0))
            barrier.wait()
    finally:
        post.close()


class _ListQueue(list[Any]):
    def put(self, item: Any) -> None:
        self.append(item)  # list.append is atomic under the GIL


class _Go:
    """The barrier of a client process: at a round's start "ready" on stdout, then a
    line on stdin; at its end (after the round's report) nothing."""

    def __init__(self) -> None:
        self.starting = True

    def wait(self) -> None:
        if self.starting:
            print("ready", flush=True)
            sys.stdin.readline()
        self.starting = not self.starting


class _Print:
    def put(self, item: Any) -> None:
        print(json.dumps(item), flush=True)


Round = tuple[float, list[Any], list[int], list[int]]  # start, reports, ticks at start/end


def _run_processes(base: str, token: str, runner_ids: list[int], posts: int, warmup: int,
                   batch: int, rounds: int, lib: str, on_start: Callable[[], object]
                   ) -> list[Round]:
    """Each client a `python ingest_load.py` of its own (only the HTTP client imported: a
    runner's client, not this benchmark's process); per round (clock start, their
    reports, the machine's ticks at its start and end)."""
    procs = [subprocess.Popen(
        [sys.executable, __file__, base, str(rid), str(posts), str(warmup), str(batch),
         str(rounds), lib], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "MALLARD_BENCH_TOKEN": token}) for rid in runner_ids]
    done: list[Round] = []
    try:
        for k in range(rounds):
            for p in procs:
                assert p.stdout is not None
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit("bench: an ingest client did not start its round")
            start, ticks0 = time.monotonic(), machine_ticks()
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            if k == 0:
                on_start()
            got = []
            for p in procs:
                assert p.stdout is not None
                got.append(json.loads(p.stdout.readline()))
            done.append((start, got, ticks0, machine_ticks()))
        for p in procs:
            p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"bench: an ingest client failed ({p.returncode})")
        return done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _run_threads(base: str, token: str, runner_ids: list[int], posts: int, warmup: int,
                 batch: int, rounds: int, lib: str, on_start: Callable[[], object]
                 ) -> tuple[list[Round], float]:
    """Each client a thread of this process; the rounds as `_run_processes` returns
    them, and this process's CPU seconds over the timed posts (the threads')."""
    barrier = threading.Barrier(len(runner_ids) + 1)
    results = _ListQueue()
    workers = [threading.Thread(
        target=client, args=(base, token, rid, posts, warmup, batch, rounds, lib, barrier,
                             results))
        for rid in runner_ids]
    for w in workers:
        w.start()
    done: list[Round] = []
    cpu = 0.0
    for k in range(rounds):
        barrier.wait()
        start, own0, ticks0 = time.monotonic(), os.times(), machine_ticks()
        if k == 0:
            on_start()
        barrier.wait()  # every client has posted and reported this round
        own = os.times()
        cpu += (own.user - own0.user) + (own.system - own0.system)
        done.append((start, results[-len(runner_ids):], ticks0, machine_ticks()))
    for w in workers:
        w.join()
    return done, cpu


def ingest(base: str, token: str, clients: int, posts: int, batch: int, *, warmup: int,
           mode: str, rounds: int = 1, lib: str = "stdlib",
           on_start: Callable[[], object] = lambda: None) -> Outcome:
    """Register the clients' runners, run them, and measure; `on_start` is called when
    the first round's clock starts (the caller reads the servers' CPU there)."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as c:
        runner_ids = []
        for i in range(clients):
            r = c.post("/api/v1/runners/register",
                       json={"name": f"bench-{i}", "arch": "x86_64", "cpus": str(i)})
            r.raise_for_status()
            runner_ids.append(int(r.json()["id"]))
    if mode == "processes":
        done = _run_processes(base, token, runner_ids, posts, warmup, batch, rounds, lib,
                              on_start)
        client_cpu = sum(g[3] for _, got, _, _ in done for g in got)
    else:
        # the threads share this process: its CPU over the timed posts is theirs
        done, client_cpu = _run_threads(base, token, runner_ids, posts, warmup, batch, rounds,
                                        lib, on_start)
    out = Outcome(0.0, 0, client_cpu=client_cpu)
    ticks = [0] * 8
    for start, got, ticks0, ticks1 in done:
        seconds, stored = max(g[2] for g in got) - start, sum(g[1] for g in got)
        out.rounds.append((seconds, stored))
        out.seconds += seconds
        out.stored += stored
        out.latencies += [x for g in got for x in g[0]]
        out.warmup_stored += sum(g[4] for g in got)
        ticks = [t + b - a for t, a, b in zip(ticks, ticks0, ticks1, strict=True)]
    out.machine = cores_used([0] * 8, ticks, out.seconds)
    return out


if __name__ == "__main__":  # a client process: BASE RUNNER_ID POSTS WARMUP BATCH ROUNDS LIB
    url, rid, n, w, b, k, lib = sys.argv[1:8]
    client(url, os.environ["MALLARD_BENCH_TOKEN"], int(rid), int(n), int(w), int(b), int(k),
           lib, _Go(), _Print())
