"""Differential profiles of a comparison's cases: `profile` jobs and `comparison_profiles`.

A comparison that settles with REGRESSED or IMPROVED cells queues one `profile` job per
moved case (workload x threads); a user may ask for any case over REST. The job's runner
posts the differential profile (callgrind of base and head, `mallard_wire.profiles`),
stored here as the row's `body`. A profile job is not one of the comparison's jobs
(`comparison_jobs`): its end never re-opens the verdict.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

JOB_KINDS_OLD = "('commit', 'comparison', 'calibrate')"
JOB_KINDS_NEW = "('commit', 'comparison', 'calibrate', 'profile')"


def upgrade() -> None:
    op.execute(f"""
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_check CHECK (kind IN {JOB_KINDS_NEW});

CREATE TABLE comparison_profiles (
    id              bigserial PRIMARY KEY,
    comparison_id   integer NOT NULL REFERENCES comparisons(id) ON DELETE CASCADE,
    workload        text NOT NULL,
    threads         integer,
    params          jsonb NOT NULL DEFAULT '{{}}',
    job_id          bigint REFERENCES jobs(id) ON DELETE SET NULL,
    requested       boolean NOT NULL DEFAULT false,
    body            jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    stored_at       timestamptz
);
CREATE UNIQUE INDEX comparison_profiles_case
    ON comparison_profiles (comparison_id, workload, COALESCE(threads, 0), params);
CREATE INDEX comparison_profiles_job ON comparison_profiles (job_id);
""")


def downgrade() -> None:
    op.execute(f"""
DROP TABLE comparison_profiles;
DELETE FROM jobs WHERE kind = 'profile';
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_check CHECK (kind IN {JOB_KINDS_OLD});
""")
