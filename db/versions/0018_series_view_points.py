"""Ingest: `v_series` reads `series_points` (migration 0012: per commit, cell and measure,
the sorted values of the valid, non-warm-up trials) instead of aggregating the trials,
so `trials_series_idx`, the covering index (measures included) that only `v_series`
still scanned, is dropped: the largest index on `trials` (~300 MB for 1,000,000
trials) and ~0.5 ms of PostgreSQL CPU per 100-trial post (api/README.md, "Benchmark").

The view keeps its columns and its rows: per branch commit x allocator (name, variant,
commit) x workload x testbed x measure, the median, quartiles (linear interpolation
between closest ranks: `mallard_quantile`, as `percentile_cont`) and count of the same
values, the points of allocator rows that differ only in build flags, compiler or
library merged and sorted again, as the old GROUP BY did. The dashboards' queries on
it read ~1000 short rows per series instead of ~10,000 trials.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-24
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _core() -> ModuleType:
    """Migration 0001 (the allocator label, and the view as it was, for downgrade)."""
    spec = importlib.util.spec_from_file_location(
        "mallard_migration_0001", Path(__file__).with_name("0001_core.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def series_view() -> str:
    """`v_series` over `series_points`: one row per group of points, their values put
    together (usually one row: already sorted)."""
    return f"""
CREATE OR REPLACE VIEW v_series AS
SELECT g.project, g.branch, g.commit_sha, g.commit_short, g.commit_time, g.commit_position,
       g.allocator, g.variant, g.allocator_label, g.workload, g.params, g.threads, g.arch,
       g.testbed_fingerprint, g.measure,
       mallard_quantile(g.vals, 0.5) AS median, mallard_quantile(g.vals, 0.25) AS p25,
       mallard_quantile(g.vals, 0.75) AS p75, cardinality(g.vals)::bigint AS n
FROM (
    SELECT p.name AS project, b.name AS branch,
           c.sha AS commit_sha, left(c.sha, 7) AS commit_short, c.committed_at AS commit_time,
           bc.position AS commit_position,
           a.name AS allocator, COALESCE(NULLIF(a.variant, ''), 'default') AS variant,
           {_core().ALLOCATOR_LABEL} AS allocator_label,
           w.name AS workload, w.params, w.threads,
           tb.arch, tb.fingerprint AS testbed_fingerprint, sp.measure,
           CASE WHEN count(*) = 1 THEN mallard_array_cat(sp.vals)
                ELSE (SELECT array_agg(v ORDER BY v) FROM unnest(mallard_array_cat(sp.vals)) v)
           END AS vals
    FROM branch_commits bc
    JOIN branches b ON b.id = bc.branch_id
    JOIN projects p ON p.id = b.project_id
    JOIN commits c ON c.id = bc.commit_id
    JOIN series_points sp ON sp.commit_id = c.id
    JOIN allocators a ON a.id = sp.allocator_id
    JOIN workloads w ON w.id = sp.workload_id
    JOIN testbeds tb ON tb.id = sp.testbed_id
    GROUP BY p.id, b.id, c.id, bc.position, a.name, a.variant, a.commit_sha, w.id, tb.id,
             sp.measure
) g"""


def old_series_view() -> str:
    """`v_series` as migration 0001 made it (over `trials`)."""
    views = _core().VIEWS
    start = views.index("CREATE VIEW v_series AS")
    return views[start:views.index(";", start)].replace("CREATE VIEW", "CREATE OR REPLACE VIEW")


def upgrade() -> None:
    op.execute(series_view())  # CREATE OR REPLACE keeps the reader's grant
    op.execute("SELECT mallard_grant_reader()")
    op.execute("DROP INDEX IF EXISTS trials_series_idx")


def downgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS trials_series_idx ON trials "
               "(workload_id, testbed_id, allocator_id, commit_id) "
               "INCLUDE (ok, warmup, id, measures)")
    op.execute(old_series_view())
    op.execute("SELECT mallard_grant_reader()")
