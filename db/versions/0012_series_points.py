"""Runners can be retired (`runners.retired_at`: no longer expected, so not exported as
`mallard_runner_last_seen_timestamp_seconds` and not given push jobs; registering again
brings a runner back), and the series' per-commit summary: `series_points` keeps, per commit, workload, testbed,
allocator and measure, the sorted values of the valid, non-warm-up trials; a statement
trigger on `trials` adds every inserted batch to it in the same transaction, so
`GET /series` reads ~1000 short rows for a 1000-commit history instead of ~10,000 trial
entries with their jsonb (api/README.md, "Benchmark"). Trials are never updated; a
deleted commit takes its rows with it.

Revision ID: 0012
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op
from sqlalchemy import Connection, text

revision = "0012"
down_revision = "0008"
branch_labels = None
depends_on = None

# Rows are upserted in key order, so concurrent batches touching the same rows lock
# them in the same order (no deadlock).
ADD_POINTS = """
INSERT INTO series_points AS sp (workload_id, testbed_id, allocator_id, measure, commit_id,
                                 vals)
SELECT t.workload_id, t.testbed_id, t.allocator_id, m.key, t.commit_id,
       array_agg(m.value::float8 ORDER BY m.value::float8)
FROM {source} t CROSS JOIN LATERAL jsonb_each(t.measures) m
WHERE t.ok AND NOT t.warmup AND t.commit_id IS NOT NULL AND jsonb_typeof(m.value) = 'number'
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 2, 3, 4, 5
{conflict}
"""
CONFLICT = """ON CONFLICT (workload_id, testbed_id, allocator_id, measure, commit_id) DO UPDATE
SET vals = ARRAY(SELECT v FROM unnest(sp.vals || EXCLUDED.vals) v ORDER BY v)"""


def upgrade() -> None:
    op.execute("ALTER TABLE runners ADD COLUMN retired_at timestamptz")
    op.execute("""
CREATE TABLE series_points (
    workload_id  integer NOT NULL REFERENCES workloads(id),
    testbed_id   integer NOT NULL REFERENCES testbeds(id),
    allocator_id integer NOT NULL REFERENCES allocators(id),
    measure      text    NOT NULL,
    commit_id    bigint  NOT NULL REFERENCES commits(id) ON DELETE CASCADE,
    vals         float8[] NOT NULL,
    PRIMARY KEY (workload_id, testbed_id, allocator_id, measure, commit_id)
)""")
    # the quantile of sorted values (linear interpolation between closest ranks, as
    # percentile_cont), and the values of several rows of one point put together
    op.execute("""
CREATE FUNCTION mallard_quantile(v float8[], q float8) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT v[floor(q * (cardinality(v) - 1))::int + 1]
       + (v[least(floor(q * (cardinality(v) - 1))::int + 2, cardinality(v))]
          - v[floor(q * (cardinality(v) - 1))::int + 1])
       * (q * (cardinality(v) - 1) - floor(q * (cardinality(v) - 1)))
$$""")
    op.execute("CREATE AGGREGATE mallard_array_cat(float8[]) "
               "(SFUNC = array_cat, STYPE = float8[], INITCOND = '{}')")
    op.execute("CREATE INDEX series_points_commit_idx ON series_points (commit_id)")
    # The trigger first: creating it locks out inserts into `trials` until this
    # transaction commits, so no trial lands between the backfill and the trigger.
    op.execute(f"""
CREATE FUNCTION mallard_series_points_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{ADD_POINTS.format(source="new_trials", conflict=CONFLICT)};
    RETURN NULL;
END $$""")
    op.execute("""
CREATE TRIGGER trials_series_points AFTER INSERT ON trials
REFERENCING NEW TABLE AS new_trials
FOR EACH STATEMENT EXECUTE FUNCTION mallard_series_points_add()""")
    backfill(op.get_bind())


def backfill(conn: Connection, commits_per_batch: int = 100) -> None:
    """The existing trials, a range of commit ids at a time (each range's grouping and
    sort stay in memory; a key's rows are all in one range, so no batch conflicts with
    another). 1,000,000 trials (1000 commits): ~30 s (api/README.md, "Benchmark")."""
    lo, hi = conn.execute(text("SELECT min(commit_id), max(commit_id) FROM trials")).one()
    if lo is None:
        return
    source = "(SELECT * FROM trials WHERE commit_id >= :lo AND commit_id < :hi)"
    add = text(ADD_POINTS.format(source=source, conflict=""))
    for start in range(int(lo), int(hi) + 1, commits_per_batch):
        conn.execute(add, {"lo": start, "hi": start + commits_per_batch})


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS trials_series_points ON trials")
    op.execute("DROP FUNCTION IF EXISTS mallard_series_points_add()")
    op.execute("DROP TABLE IF EXISTS series_points")
    op.execute("DROP AGGREGATE IF EXISTS mallard_array_cat(float8[])")
    op.execute("DROP FUNCTION IF EXISTS mallard_quantile(float8[], float8)")
    op.execute("ALTER TABLE runners DROP COLUMN IF EXISTS retired_at")
