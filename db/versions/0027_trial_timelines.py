"""What a trial recorded besides its measures when its job asked (`record`):
`trials.memory` (jsonb, a wire `MemoryTimeline`: RSS every interval) and `trials.latency`
(jsonb, a wire `LatencyHistogram`: sampled malloc/free latency buckets); NULL when not
recorded. The comparison page draws them (api/mallard_api/ui/timelines.py).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE trials ADD COLUMN memory jsonb, ADD COLUMN latency jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE trials DROP COLUMN latency, DROP COLUMN memory")
