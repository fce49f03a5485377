"""Ingest: measure ids that cannot run out, and who added a measure name.

`measures.id` was a `smallserial` (at most 32,767 values): posts naming new measures
used the sequence up, and every post with a new name was refused from then on. The id
and its sequence become `bigint` (nothing references the id: trials keep their measures
by name, in jsonb, and so do `series_points` and the views), so every stored row keeps
its id and a used-up sequence goes on from 32,768.

`project_id` and `added_at`: the project whose results post first named a measure, and
when (both NULL for the measures the migrations seed): what the API's cap on new measure
names per project (`MALLARD_MAX_MEASURES_PER_PROJECT`) counts. A downgrade renumbers the
ids from 1 when they no longer fit a smallint (nothing references them).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # AS bigint also lifts the sequence's implicit maximum (32,767) to bigint's
    op.execute("ALTER SEQUENCE measures_id_seq AS bigint")
    op.execute("ALTER TABLE measures ALTER COLUMN id TYPE bigint")
    op.execute("ALTER TABLE measures "
               "ADD COLUMN project_id integer REFERENCES projects(id) ON DELETE SET NULL, "
               "ADD COLUMN added_at timestamptz")
    op.execute("CREATE INDEX measures_added_by_project ON measures (project_id) "
               "WHERE added_at IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX measures_added_by_project")
    op.execute("ALTER TABLE measures DROP COLUMN added_at, DROP COLUMN project_id")
    op.execute("""
UPDATE measures m SET id = -r.n
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM measures) r
WHERE m.id = r.id AND (SELECT max(id) FROM measures) > 32767""")
    op.execute("UPDATE measures SET id = -id WHERE id < 0")
    op.execute("SELECT setval('measures_id_seq', "
               "GREATEST((SELECT max(id) FROM measures), 1))")
    op.execute("ALTER TABLE measures ALTER COLUMN id TYPE smallint")
    op.execute("ALTER SEQUENCE measures_id_seq AS smallint")
