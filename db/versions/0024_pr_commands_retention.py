"""Pull-request commands and comment modes, and a retention policy per project.

`project_forges.comment_mode` (always | on-change | never; default always): when Mallard
writes its one comment on a pull/merge request. `forge_comments.summary`: what the comment
said last (on-change compares with it); `forge_comments.asked_head`: the head a
`/mallard bench` command asked for (its answer is written whatever the mode).

`projects.keep_pr_days` and `projects.keep_raw_days` (NULL: kept forever): the trials of
pull requests and calibrations (commits not on the default branch, and calibration jobs)
are deleted after keep_pr_days; every other raw trial after keep_raw_days, once its
values are in `series_points` (the trigger of 0012 adds them when the trial is inserted),
which are kept: the default branch's history pages read only those.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""ALTER TABLE project_forges ADD COLUMN comment_mode text NOT NULL
        DEFAULT 'always' CHECK (comment_mode IN ('always', 'on-change', 'never'))""")
    op.execute("ALTER TABLE forge_comments ADD COLUMN summary text, "
               "ADD COLUMN asked_head text")
    op.execute("ALTER TABLE projects ADD COLUMN keep_pr_days integer "
               "CHECK (keep_pr_days > 0), ADD COLUMN keep_raw_days integer "
               "CHECK (keep_raw_days > 0)")


def downgrade() -> None:
    op.execute("ALTER TABLE projects DROP COLUMN IF EXISTS keep_pr_days, "
               "DROP COLUMN IF EXISTS keep_raw_days")
    op.execute("ALTER TABLE forge_comments DROP COLUMN IF EXISTS summary, "
               "DROP COLUMN IF EXISTS asked_head")
    op.execute("ALTER TABLE project_forges DROP COLUMN IF EXISTS comment_mode")
