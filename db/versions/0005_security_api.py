"""API security and robustness: forge delivery ids (replays), the analysis queue (heavy
analysis outside requests).

- `webhook_deliveries`: one row per forge delivery id (X-GitHub-Delivery,
  X-Gitea-Delivery, GitLab's event UUID / Idempotency-Key); a delivery seen before is
  answered without doing anything. Kept `MALLARD_WEBHOOK_DELIVERY_KEEP_DAYS`.
- `analysis_queue`: durable work for the analysis worker, polled with
  `FOR UPDATE SKIP LOCKED`: `comparison` (recompute a comparison, settle its state,
  queue follow-ups) and `changes` (change detection over the series new trials touched).
  Comparisons still queued or running are queued once here, so none stays `running`.

Revision ID: 0005
Revises: 0004_comparison_jobs_view
Create Date: 2026-11-22
"""

from alembic import op

revision = "0005"
down_revision = "0004_comparison_jobs_view"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
CREATE TABLE webhook_deliveries (
    forge       text NOT NULL,
    delivery_id text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (forge, delivery_id)
);
CREATE INDEX webhook_deliveries_received_idx ON webhook_deliveries (received_at);

CREATE TABLE analysis_queue (
    id            bigserial PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('comparison', 'changes')),
    comparison_id integer REFERENCES comparisons(id) ON DELETE CASCADE,
    trial_ids     bigint[],
    created_at    timestamptz NOT NULL DEFAULT now(),
    not_before    timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    failed_at     timestamptz,
    CHECK ((kind = 'comparison') = (comparison_id IS NOT NULL)),
    CHECK ((kind = 'changes') = (trial_ids IS NOT NULL))
);
CREATE INDEX analysis_queue_due_idx ON analysis_queue (not_before, id)
    WHERE failed_at IS NULL;
CREATE INDEX analysis_queue_comparison_idx ON analysis_queue (comparison_id)
    WHERE comparison_id IS NOT NULL;

INSERT INTO analysis_queue (kind, comparison_id)
SELECT 'comparison', id FROM comparisons WHERE state IN ('queued', 'running');
""")


def downgrade() -> None:
    op.execute("""
DROP TABLE IF EXISTS analysis_queue;
DROP TABLE IF EXISTS webhook_deliveries;
""")