"""Commit verdicts, bisections, forge statuses (issue 12).

- `commit_verdicts`: a commit judged against its branch's last measured commit, per arch,
  through a comparison (base = that commit, head = this one); the verdict, the moved
  cells and the alert it opened are kept on it.
- `bisections`: the search for the culprit inside a range of unmeasured commits; its
  steps (each a pair of comparisons: good end vs midpoint, midpoint vs bad end) with
  their evidence are a jsonb list on the row.
- `project_forges`: where a project's commit statuses and pull-request comments go; the
  token is a secret (never returned by the API, never logged).
- `forge_comments`: the one comment per pull/merge request, updated on new pushes.
- `alerts.source` (`changepoint` or `verdict`), `alerts.cells` (the cells a verdict
  alert groups), `alerts.culprit` and `alerts.bisection_id`.
- `branch_commits.unreachable_at`: set when a force-push rewrote the branch past it (its
  results are kept).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op

revision = "0008"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
CREATE TABLE commit_verdicts (
    id bigserial PRIMARY KEY,
    project_id integer NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    branch text NOT NULL,
    commit_sha text NOT NULL,
    base_sha text NOT NULL,
    arch text NOT NULL,
    comparison_id integer REFERENCES comparisons(id) ON DELETE SET NULL,
    state text NOT NULL DEFAULT 'queued',          -- queued | running | done | failed
    verdict text,                                  -- regressed | improved | same | unknown
    moved jsonb NOT NULL DEFAULT '[]',             -- cells whose verdict is not same
    alert_id integer REFERENCES alerts(id) ON DELETE SET NULL,
    bisection_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    UNIQUE (project_id, commit_sha, arch)
)""")
    op.execute("CREATE INDEX commit_verdicts_comparison ON commit_verdicts (comparison_id)")
    op.execute("""
CREATE TABLE bisections (
    id bigserial PRIMARY KEY,
    project_id integer NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    project text NOT NULL,
    branch text,
    arch text NOT NULL,
    workload text NOT NULL,
    measure text NOT NULL,
    threads integer,
    good text NOT NULL,
    bad text NOT NULL,
    commits jsonb NOT NULL,                        -- good .. bad, oldest first
    skipped jsonb NOT NULL DEFAULT '[]',           -- indexes whose build failed
    verdicts jsonb NOT NULL DEFAULT '{}',          -- index -> good | bad
    steps jsonb NOT NULL DEFAULT '[]',
    state text NOT NULL DEFAULT 'running',         -- running | done | failed
    culprit text,
    culprit_candidates jsonb NOT NULL DEFAULT '[]',
    builds integer NOT NULL DEFAULT 0,
    alert_id integer REFERENCES alerts(id) ON DELETE SET NULL,
    origin text NOT NULL DEFAULT 'request',        -- request | verdict
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
)""")
    op.execute("""
CREATE TABLE project_forges (
    project_id integer PRIMARY KEY REFERENCES projects(id) ON DELETE CASCADE,
    kind text NOT NULL,                            -- github | gitlab | gitea
    base_url text NOT NULL,
    repo text NOT NULL,                            -- owner/name, or GitLab's project id/path
    token text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)""")
    op.execute("""
CREATE TABLE forge_comments (
    project_id integer NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    number integer NOT NULL,
    comment_id text,
    head_sha text,
    base_sha text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, number)
)""")
    op.execute("ALTER TABLE alerts ADD COLUMN source text NOT NULL DEFAULT 'changepoint'")
    op.execute("ALTER TABLE alerts ADD COLUMN cells jsonb")
    op.execute("ALTER TABLE alerts ADD COLUMN culprit text")
    op.execute("ALTER TABLE alerts ADD COLUMN bisection_id bigint")
    op.execute("ALTER TABLE branch_commits ADD COLUMN unreachable_at timestamptz")
    op.execute("ALTER TABLE webhook_outbox ADD COLUMN project_id integer "
               "REFERENCES projects(id) ON DELETE CASCADE")


def downgrade() -> None:
    op.execute("ALTER TABLE webhook_outbox DROP COLUMN project_id")
    op.execute("ALTER TABLE branch_commits DROP COLUMN unreachable_at")
    for col in ("bisection_id", "culprit", "cells", "source"):
        op.execute(f"ALTER TABLE alerts DROP COLUMN {col}")
    for table in ("forge_comments", "project_forges", "bisections", "commit_verdicts"):
        op.execute(f"DROP TABLE {table}")
