"""Core: keep the artifacts a results post carries (hyperfine exports...), and make the
series index covering (for databases created before 0001 had it).

Revision ID: 0003_core_artifacts
Revises: 0002_analysis
Create Date: 2026-11-21
"""

from alembic import op

revision = "0003_core_artifacts"
down_revision = "0002_analysis"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
CREATE TABLE result_artifacts (
    id          bigserial PRIMARY KEY,
    job_id      bigint REFERENCES jobs(id) ON DELETE SET NULL,
    runner_id   integer REFERENCES runners(id) ON DELETE SET NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    artifacts   jsonb NOT NULL
);
CREATE INDEX result_artifacts_job_idx ON result_artifacts (job_id);
""")
    # 0001 now creates trials_series_idx covering; an older database gets it rebuilt here.
    op.execute("""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'trials_series_idx'
                   AND indexdef LIKE '%INCLUDE%') THEN
        DROP INDEX IF EXISTS trials_series_idx;
        CREATE INDEX trials_series_idx ON trials (workload_id, testbed_id, allocator_id,
                                                  commit_id) INCLUDE (ok, warmup, id, measures);
    END IF;
END $$;
""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS result_artifacts")
