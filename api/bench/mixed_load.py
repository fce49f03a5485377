"""The mixed-load phase of `make bench-api`: many concurrent clients for a fixed time.

Each client is a closed loop (its next request leaves when the previous answer is
back) with a token of its own, and picks an operation at random (seeded):

- read (60%): one of GET /projects/bench, /projects/bench/branches/main/commits?limit=20,
  /jobs?limit=20, /jobs/{a recent job}, /runners, /comparisons?limit=10,
  /alerts?limit=10 (user token);
- result (25%): as a runner does, POST /jobs/claim and, when it got a job, POST
  /results with 20 trials for it (job_id and attempt); when the queue is empty, 20
  trials of history without a job (runner token);
- push (15%): POST /webhooks/push of one new commit on main, which queues a commit job
  (user token).

Every answer other than the expected ones (2xx; 204 for an empty claim) is an error,
and so is a transport error or a client timeout (30 s). Latency is per request,
reported per kind: read, claim, result post, push, and over all requests.

Each client has its own connection (an httpx client of its own), as 64 runners and
users would: one httpx pool of 64 connections shared by the 64 coroutines cost the
load generator 5 ms of CPU per request (1.7 ms this way) and made most of the latency it
measured (p99 3.3 s against the API's own 0.25-0.5 s, by its request histogram).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import secrets
import statistics
import time
import uuid
from dataclasses import dataclass, field

import httpx
import psycopg
from bench_report import pct

KINDS = ("read", "claim", "result", "push")
TESTBED = {"arch": "x86_64", "cpu_model": "Bench CPU", "cpus": "1", "kernel": "6.1",
           "governor": "performance", "smt": False, "thp": "madvise",
           "compiler": "gcc 12.2.0", "libc": "glibc 2.36", "page_size": 4096}


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def make_tokens(plain_url: str, clients: int) -> tuple[str, list[tuple[str, str]]]:
    """A user token and one runner token per client, written as the CLI does (hashed);
    each runner may post history without a job to `bench` (as `mallard-api runner
    projects load-N --allow bench` would let it)."""
    user = "mlrd_" + secrets.token_urlsafe(32)
    runners = [(f"load-{i}", "mlrd_" + secrets.token_urlsafe(32)) for i in range(clients)]
    with psycopg.connect(plain_url) as conn:
        conn.execute("INSERT INTO api_tokens (token_sha256, role) VALUES (%s, 'user')",
                     (hashlib.sha256(user.encode()).hexdigest(),))
        for name, token in runners:
            conn.execute("INSERT INTO api_tokens (token_sha256, role, runner_name) "
                         "VALUES (%s, 'runner', %s)",
                         (hashlib.sha256(token.encode()).hexdigest(), name))
            conn.execute("INSERT INTO runners (name, arch, projects) VALUES (%s, 'x86_64', "
                         "'{bench}') ON CONFLICT (name) DO UPDATE SET projects = '{bench}'",
                         (name,))
    return user, runners


def trials(n: int, sha: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for k in range(n):
        name = ("mallard", "glibc", "jemalloc", "mimalloc", "tcmalloc")[k % 5]
        out.append({
            "uid": str(uuid.uuid4()), "label": "head" if name == "mallard" else "peer",
            "allocator": {"name": name, "commit": sha if name == "mallard" else None,
                          "build_flags": "-O2"},
            "workload": {"name": ("larson", "rpc")[k % 2],
                         "params": {"threads": 1 + k % 2, "seed": 42}},
            "seq": k, "warmup": False, "ok": True, "exit_code": 0,
            "measures": {"ops_per_sec": 1e6 * (1 + 0.05 * random.random()),
                         "wall_seconds": 0.4, "max_rss_bytes": 10485760}})
    return out


class Client:
    def __init__(self, base: str, user: str, runner: tuple[str, str], tally: Tally,
                 seed: int, heads: list[str], recent_jobs: list[int]) -> None:
        self.base = base
        self.rng = random.Random(seed)
        self.tally = tally
        self.name, token = runner
        self.user = {"Authorization": f"Bearer {user}"}
        self.runner = {"Authorization": f"Bearer {token}"}
        self.runner_id = 0
        self.heads = heads  # the branch head, shared: pushes chain on it
        self.recent_jobs = recent_jobs

    async def call(self, http: httpx.AsyncClient, kind: str, method: str, url: str,
                   headers: dict[str, str], ok: tuple[int, ...] = (200, 201),
                   **kw: object) -> httpx.Response | None:
        t0 = time.perf_counter()
        try:
            r = await http.request(method, url, headers=headers, **kw)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            self.tally.error(f"{kind}: {type(exc).__name__}")
            return None
        self.tally.latencies[kind].append(time.perf_counter() - t0)
        if r.status_code not in ok:
            self.tally.error(f"{kind}: HTTP {r.status_code}")
            return None
        return r

    async def register(self, http: httpx.AsyncClient) -> None:
        r = await http.post("/api/v1/runners/register", headers=self.runner,
                            json={"name": self.name, "arch": "x86_64", "cpus": "1",
                                  "testbed": TESTBED})
        r.raise_for_status()
        self.runner_id = int(r.json()["id"])

    async def read(self, http: httpx.AsyncClient) -> None:
        choice = self.rng.randrange(7)
        if choice == 3 and self.recent_jobs:
            url = f"/api/v1/jobs/{self.rng.choice(self.recent_jobs[-200:])}"
        else:
            url = ("/api/v1/projects/bench",
                   "/api/v1/projects/bench/branches/main/commits?limit=20",
                   "/api/v1/jobs?limit=20", "/api/v1/runners", "/api/v1/runners",
                   "/api/v1/comparisons?limit=10", "/api/v1/alerts?limit=10")[choice]
        await self.call(http, "read", "GET", url, self.user)

    async def result(self, http: httpx.AsyncClient) -> None:
        r = await self.call(http, "claim", "POST", "/api/v1/jobs/claim", self.runner,
                            ok=(200, 204), json={"runner_id": self.runner_id,
                                                 "lease_seconds": 900})
        if r is None:
            return
        if r.status_code == 200:
            job = r.json()
            body = {"job_id": job["id"], "attempt": job["attempt"],
                    "runner_id": self.runner_id, "project": "bench", "branch": "main",
                    "testbed": TESTBED, "trials": trials(20, job["spec"]["commit"])}
        else:
            body = {"runner_id": self.runner_id, "project": "bench", "branch": "main",
                    "testbed": TESTBED, "trials": trials(20, secrets.token_hex(20))}
        await self.call(http, "result", "POST", "/api/v1/results", self.runner,
                        ok=(201,), json=body)

    async def push(self, http: httpx.AsyncClient) -> None:
        before = self.heads[-1]
        after = secrets.token_hex(20)
        self.heads.append(after)
        r = await self.call(http, "push", "POST", "/api/v1/webhooks/push", self.user, json={
            "project": "bench", "ref": "refs/heads/main", "before": before, "after": after,
            "commits": [{"sha": after, "parent": before, "message": "load", "author": "b"}]})
        if r is not None:
            self.recent_jobs.extend(r.json()["jobs"])

    async def run(self, http: httpx.AsyncClient, until: float) -> None:
        while time.monotonic() < until:
            x = self.rng.random()
            if x < 0.60:
                await self.read(http)
            elif x < 0.85:
                await self.result(http)
            else:
                await self.push(http)


async def _run(base: str, user: str, runners: list[tuple[str, str]], seconds: float,
               head: str) -> tuple[Tally, float]:
    tally = Tally()
    heads = [head]
    recent: list[int] = []
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    https = [httpx.AsyncClient(base_url=base, timeout=30, limits=one) for _ in runners]
    try:
        clients = [Client(base, user, r, tally, i, heads, recent)
                   for i, r in enumerate(runners)]
        for c, http in zip(clients, https, strict=True):
            await c.register(http)
        start = time.monotonic()
        await asyncio.gather(*(c.run(http, start + seconds)
                               for c, http in zip(clients, https, strict=True)))
        return tally, time.monotonic() - start
    finally:
        for http in https:
            await http.aclose()


def run(base: str, plain_url: str, clients: int, seconds: float) -> tuple[Tally, float]:
    user, runners = make_tokens(plain_url, clients)
    with psycopg.connect(plain_url) as conn:
        head = conn.execute(
            "SELECT c.sha FROM branch_commits bc JOIN branches b ON b.id = bc.branch_id "
            "JOIN projects p ON p.id = b.project_id JOIN commits c ON c.id = bc.commit_id "
            "WHERE p.name = 'bench' AND b.name = 'main' ORDER BY bc.position DESC LIMIT 1"
        ).fetchone()[0]  # type: ignore[index]
        conn.execute("UPDATE branches SET head_sha = %s WHERE name = 'main'", (head,))
    return asyncio.run(_run(base, user, runners, seconds, head))


def table(tally: Tally, elapsed: float, clients: int,
          cpu: dict[str, float] | None = None) -> list[str]:
    """The rows of the results table; `cpu`: CPU seconds spent during the phase, by part."""
    total = sum(len(v) for v in tally.latencies.values())
    errors = sum(tally.errors.values())
    rows = [f"| mixed load: {clients} clients for {elapsed:.0f} s | {total:,} requests "
            f"({total / elapsed:,.0f}/s), **{errors} errors**"
            + (f" ({', '.join(f'{k} x{n}' for k, n in sorted(tally.errors.items()))})"
               if errors else "") + " |"]
    every = [x for kind in KINDS for x in tally.latencies[kind]]
    for kind, values in [*((k, tally.latencies[k]) for k in KINDS), ("every", every)]:
        ms = [x * 1000 for x in values]
        if not ms:
            continue
        rows.append(f"| {kind} latency p50 / p95 / p99 ({len(ms):,} requests) | "
                    f"{statistics.median(ms):.0f} ms / {pct(ms, 95):.0f} ms / "
                    f"**{pct(ms, 99):.0f} ms** |")
    if cpu and total:
        rows.append("| CPU per request (mixed load) | " + ", ".join(
            f"{name} {1000 * sec / total:.1f} ms" for name, sec in cpu.items()) + " |")
    return rows
