"""A trial's process layout: `trials.layout` (jsonb, a wire `TrialLayout`).

A runner with `layouts=sampled` (runner/README.md) runs each timed trial in a layout of its
own, ASLR on and the environment padded by a random offset, and records it:
`{"aslr": true, "env_pad": 1232}`. NULL: the trial ran in the fixed layout (ASLR off, the
environment of a fixed size), as every trial stored before this revision did.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-04
"""

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE trials ADD COLUMN layout jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE trials DROP COLUMN layout")
