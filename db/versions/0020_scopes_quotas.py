"""Property-level authorization and quotas (api/README.md, "Security and auth").

- `runners.projects`, `runners.all_projects`: the projects a runner may post history
  without a job to, set by an admin (`PUT /runners/{id}/projects`, `mallard-api runner
  projects`); none by default.
- `jobs.requested_by`, `jobs.trials_requested`, `comparisons.requested_by`: the token
  that asked for a job or a comparison, and the trials it asked for, so the per-token
  quotas on queued work (`MALLARD_QUOTA_*`) can be counted; partial indexes over the
  queued and running rows, which are all a quota reads.
- `commits_parent_idx`: the commits whose parent is one of a push's commits, which the
  push's ancestry-cycle check reads (pushes.py).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-25
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
ALTER TABLE runners
    ADD COLUMN projects text[] NOT NULL DEFAULT '{}',
    ADD COLUMN all_projects boolean NOT NULL DEFAULT false;
ALTER TABLE jobs
    ADD COLUMN requested_by integer REFERENCES api_tokens(id) ON DELETE SET NULL,
    ADD COLUMN trials_requested integer CHECK (trials_requested >= 0);
ALTER TABLE comparisons
    ADD COLUMN requested_by integer REFERENCES api_tokens(id) ON DELETE SET NULL;
CREATE INDEX jobs_requested_by_idx ON jobs (requested_by)
    WHERE requested_by IS NOT NULL AND state IN ('queued', 'running');
CREATE INDEX comparisons_requested_by_idx ON comparisons (requested_by)
    WHERE requested_by IS NOT NULL AND state IN ('queued', 'running');
CREATE INDEX commits_parent_idx ON commits (project_id, parent_sha)
    WHERE parent_sha IS NOT NULL;
""")


def downgrade() -> None:
    op.execute("""
DROP INDEX commits_parent_idx;
DROP INDEX comparisons_requested_by_idx;
DROP INDEX jobs_requested_by_idx;
ALTER TABLE comparisons DROP COLUMN requested_by;
ALTER TABLE jobs DROP COLUMN trials_requested, DROP COLUMN requested_by;
ALTER TABLE runners DROP COLUMN all_projects, DROP COLUMN projects;
""")
