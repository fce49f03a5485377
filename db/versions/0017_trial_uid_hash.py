"""Ingest: a trial's `uid` is kept unique by an exclusion constraint over a hash index
instead of a unique b-tree. The b-tree's random text keys made its upkeep the dearest
part of storing a trial: with `ON CONFLICT`, ~1.3 of the ~2.4 ms of backend CPU that
inserting 100 trials took (a descent through a 74 MB index per check and per insert, for
1,000,000 trials); the hash index (32 MB) finds a key's bucket from its hash, and
compares whole uids only within it: ~0.7 ms less per 100 trials (api/README.md,
"Benchmark"). The integrity is the same: two trials never share a uid (a plain insert of
a duplicate fails, SQLSTATE 23P01 `exclusion_violation`), and ingest's `ON CONFLICT ON
CONSTRAINT trials_uid_excl DO NOTHING` skips the uids already stored, waiting for a
concurrent insert of the same uid as it did. `uid = ...` and `uid = ANY(...)` lookups use
the hash index. Building it locks `trials` (~11 s for 1,000,000 trials at load ~5).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-24
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE trials ADD CONSTRAINT trials_uid_excl "
               "EXCLUDE USING hash (uid WITH =)")
    op.execute("ALTER TABLE trials DROP CONSTRAINT trials_uid_key")


def downgrade() -> None:
    op.execute("ALTER TABLE trials ADD CONSTRAINT trials_uid_key UNIQUE (uid)")
    op.execute("ALTER TABLE trials DROP CONSTRAINT trials_uid_excl")
