"""Storage per 1M trials before and after retention (api/README.md, "Retention"): a fresh
embedded PostgreSQL, migrated, the bench history bulk-loaded (history.py: 1000 commits of
`main`), every trial aged past the policy, `retention.run`, VACUUM FULL; the sizes of
`trials`, `series_points` and the database, before and after.

    .venv/bin/python api/bench/retention_storage.py [--trials 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "api"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from history import bulk_load  # noqa: E402
from mallard_api import retention  # noqa: E402
from mallard_api.db import make_engine, make_sessionmaker, migrate  # noqa: E402
from mallard_api.embedded import EmbeddedPostgres  # noqa: E402

SIZES = """SELECT pg_total_relation_size('trials'), pg_total_relation_size('series_points'),
                  pg_database_size(current_database()), (SELECT count(*) FROM trials)"""


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=1000)
    args = parser.parse_args()
    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="mallard-retention-")) / "pgdata")
    try:
        url = server.start()
        migrate(url, ROOT / "db")
        plain = url.replace("postgresql+psycopg://", "postgresql://")
        _, stored = bulk_load(plain, args.trials, args.commits)
        with psycopg.connect(plain, autocommit=True) as conn:
            before = conn.execute(SIZES).fetchone()
            conn.execute("UPDATE trials SET ingested_at = now() - interval '100 days'")
            conn.execute("UPDATE projects SET keep_raw_days = 90, keep_pr_days = 30")
        engine = make_engine(url, 1)
        start = time.perf_counter()
        with make_sessionmaker(engine)() as session:
            counts = retention.run(session, dry_run=False)
            session.commit()
        took = time.perf_counter() - start
        engine.dispose()
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute("VACUUM FULL trials")
            after = conn.execute(SIZES).fetchone()
    finally:
        server.stop()
    assert before is not None and after is not None
    print(f"{stored:,} trials loaded; retention deleted {counts[0].raw:,} raw trials in "
          f"{took:.1f} s")
    print("| | trials | series_points | database |\n|---|---|---|---|")
    for name, row in (("before", before), ("after", after)):
        print(f"| {name} ({row[3]:,} trials) | {mib(row[0])} | {mib(row[1])} | {mib(row[2])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
