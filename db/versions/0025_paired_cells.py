"""Analysis: a comparison cell says whether it was judged on pairs (`paired`: base and head
trials of the same job and round, `paired.compare_paired`) or as two samples; its counts
(`n_base`, `n_head`, `robust_*`) are then pairs.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE comparison_cells ADD COLUMN paired boolean NOT NULL DEFAULT false")


def downgrade() -> None:
    op.execute("ALTER TABLE comparison_cells DROP COLUMN paired")
