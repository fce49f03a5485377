"""The history `make bench-api` queries, bulk-loaded with SQL (one INSERT ... SELECT over
generate_series): commits along `main` of project `bench`, the testbeds below, the ingest
phase's allocator configurations and workload cells, measures as jsonb."""

from __future__ import annotations

import time

import psycopg
from ingest_load import ALLOCATORS, WORKLOADS

TESTBEDS = ["x86_64", "aarch64"]


def bulk_load(url: str, n_trials: int, n_commits: int) -> tuple[float, int]:
    """Load the history with SQL; returns (seconds, trials stored)."""
    cells = len(TESTBEDS) * len(ALLOCATORS) * len(WORKLOADS)
    per_cell = max(1, n_trials // (n_commits * cells))
    start = time.perf_counter()
    with psycopg.connect(url, autocommit=False) as conn:
        _load_commits(conn, n_commits)
        _load_configurations(conn)
        _load_trials(conn, per_cell)
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        stored = conn.execute("SELECT count(*) FROM trials").fetchone()[0]  # type: ignore[index]
    return time.perf_counter() - start, int(stored)


def _load_commits(conn: psycopg.Connection, n_commits: int) -> None:
    """Project `bench`, its branch `main` and `n_commits` commits along it."""
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


def _load_configurations(conn: psycopg.Connection) -> None:
    """The testbeds, the workload cells and the allocators."""
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


def _load_trials(conn: psycopg.Connection, per_cell: int) -> None:
    """`per_cell` trials per commit, testbed, workload and allocator, measures as jsonb."""
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
