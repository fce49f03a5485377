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

The `series_points` trigger keeps its rows and their meaning (per commit, cell and
measure, the sorted values of the valid, non-warm-up trials with a numeric value), with
a cheaper statement (`ADD_POINTS` below). Dropping the index is immediate; a downgrade
builds it again, which locks out inserts into `trials` while it runs.

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


def _migration(name: str) -> ModuleType:
    """An earlier migration of this folder: 0001 (the allocator label, and the view as it
    was), 0012 (the trigger function as it was)."""
    spec = importlib.util.spec_from_file_location(
        f"mallard_migration_{name[:4]}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The trigger's statement (0012's, same rows): each trial's measure names by
# `jsonb_object_keys` in the select list (one value at a time) and its value looked up
# by name, instead of `jsonb_each` in FROM, which builds a tuplestore and a jsonb value
# per entry for every trial: ~0.45M of the ~20M instructions a 100-trial post costs the
# backend (cachegrind; api/README.md, "Benchmark").
ADD_POINTS = """
CREATE OR REPLACE FUNCTION mallard_series_points_add() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
INSERT INTO series_points AS sp (workload_id, testbed_id, allocator_id, measure, commit_id,
                                 vals)
SELECT workload_id, testbed_id, allocator_id, measure, commit_id,
       array_agg((measures -> measure)::float8 ORDER BY (measures -> measure)::float8)
FROM (SELECT t.workload_id, t.testbed_id, t.allocator_id, t.commit_id, t.measures,
             jsonb_object_keys(t.measures) AS measure
      FROM new_trials t WHERE t.ok AND NOT t.warmup AND t.commit_id IS NOT NULL) s
WHERE jsonb_typeof(measures -> measure) = 'number'
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 2, 3, 4, 5
{conflict};
    RETURN NULL;
END $$"""


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
           {_migration('0001_core').ALLOCATOR_LABEL} AS allocator_label,
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
    views = _migration("0001_core").VIEWS
    start = views.index("CREATE VIEW v_series AS")
    return views[start:views.index(";", start)].replace("CREATE VIEW", "CREATE OR REPLACE VIEW")


def upgrade() -> None:
    op.execute(series_view())  # CREATE OR REPLACE keeps the reader's grant
    op.execute("SELECT mallard_grant_reader()")
    op.execute("DROP INDEX IF EXISTS trials_series_idx")
    op.execute(ADD_POINTS.format(conflict=_migration("0012_series_points").CONFLICT))


def downgrade() -> None:
    points = _migration("0012_series_points")
    op.execute(f"""
CREATE OR REPLACE FUNCTION mallard_series_points_add() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
{points.ADD_POINTS.format(source="new_trials", conflict=points.CONFLICT)};
    RETURN NULL;
END $$""")
    op.execute("CREATE INDEX IF NOT EXISTS trials_series_idx ON trials "
               "(workload_id, testbed_id, allocator_id, commit_id) "
               "INCLUDE (ok, warmup, id, measures)")
    op.execute(old_series_view())
    op.execute("SELECT mallard_grant_reader()")
