"""Calibrations size their canaries from probes: two canary comparisons per workload whose
measured slowdown fits the canary's real cost on the testbed (`comparisons.canary_probe`;
analysis/calibration.py). A probe is neither an A/A nor a canary of the results.

Revision ID: 0015
Revises: 0012
Create Date: 2026-11-24
"""

from alembic import op

revision = "0015"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE comparisons ADD COLUMN canary_probe boolean NOT NULL DEFAULT false")


def downgrade() -> None:
    op.execute("ALTER TABLE comparisons DROP COLUMN canary_probe")
