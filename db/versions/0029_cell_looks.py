"""Analysis: a comparison cell's `alpha`, the level of its look when a comparison that
plans follow-ups spends alpha over them (`mallard_stats.spending`; NULL: the configured
alpha), and its `block_effect`, the design effect by which its pairs' blocks of rounds
widened its interval (`paired.design_effect`; 1: none).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03
"""

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE comparison_cells ADD COLUMN alpha double precision, "
               "ADD COLUMN block_effect double precision NOT NULL DEFAULT 1")


def downgrade() -> None:
    op.execute("ALTER TABLE comparison_cells DROP COLUMN alpha, DROP COLUMN block_effect")
