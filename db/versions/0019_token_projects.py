"""Tokens scoped to projects: `api_tokens.projects`, the names of the projects a user token
may see the jobs of (their attempts and logs: a build log is written by the code under
test). NULL: every project, as before (and always for admin and runner tokens: a runner
sees the jobs it ran).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE api_tokens ADD COLUMN projects text[]")


def downgrade() -> None:
    op.execute("ALTER TABLE api_tokens DROP COLUMN projects")
