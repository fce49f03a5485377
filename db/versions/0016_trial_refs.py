"""Ingest: the references of a batch of trials are checked once per statement, not once
per row. `trials` had eight foreign keys; PostgreSQL checks each one with a query per
inserted row (800 for a 100-trial post, ~3.5 ms of the ~7 ms the insert costs:
api/README.md, "Benchmark"). They are replaced by triggers that keep the same integrity:

- on `trials` (after INSERT or UPDATE, per statement, over the transition table): the
  distinct ids of each reference column must exist; they are locked `FOR KEY SHARE`
  (as a foreign key does), so a concurrent delete of a referenced row waits for the
  inserting transaction, and one that won the race makes the insert fail;
- on each referenced table (after DELETE or UPDATE of `id`, per row): the action the
  foreign key had: projects CASCADE; jobs, runners, branches, commits SET NULL;
  testbeds, allocators, workloads refuse (NO ACTION) while trials use the row.

The four foreign keys of `series_points` (checked per upserted row by its trigger) go the
same way: its rows are made from the batch of trials in the same statement, after their
ids were checked; a deleted commit still takes its points, and a testbed, allocator or
workload with points cannot be deleted.

A violation is the error a foreign key gives (SQLSTATE 23503, `foreign_key_violation`,
naming the old constraint). The service deletes none of these rows; ingest writes only
ids it resolved itself (sql/results.py). Also dropped: `trials_ingested_idx`, which no
query reads (EXPLAIN of the queries in api/mallard_api/sql: api/README.md).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# column, referenced table, id type, ON DELETE action (as in 0001)
REFS = [
    ("job_id", "jobs", "bigint", "SET NULL"),
    ("runner_id", "runners", "integer", "SET NULL"),
    ("project_id", "projects", "integer", "CASCADE"),
    ("branch_id", "branches", "integer", "SET NULL"),
    ("commit_id", "commits", "bigint", "SET NULL"),
    ("testbed_id", "testbeds", "integer", "NO ACTION"),
    ("allocator_id", "allocators", "integer", "NO ACTION"),
    ("workload_id", "workloads", "integer", "NO ACTION"),
]


def _check_batch() -> str:
    """The statement trigger: one pass over the batch for the distinct ids of every
    column, then one locking read per referenced table."""
    declare = "\n".join(f"    want_{col} {typ}[];" for col, _, typ, _ in REFS)
    gather = ",\n".join(f"           array_agg(DISTINCT {col}) FILTER (WHERE {col} IS NOT NULL)"
                        for col, _, _, _ in REFS)
    into = ", ".join(f"want_{col}" for col, _, _, _ in REFS)
    checks = "\n".join(f"""    IF want_{col} IS NOT NULL THEN
        PERFORM 1 FROM {table} WHERE id = ANY(want_{col}) FOR KEY SHARE;
        GET DIAGNOSTICS found = ROW_COUNT;
        IF found < cardinality(want_{col}) THEN
            RAISE foreign_key_violation USING MESSAGE = 'insert or update on table "trials" '
                || 'violates foreign key constraint "{_fkey("trials", col)}"',
                DETAIL = 'A {col} of the trials is not present in table "{table}".';
        END IF;
    END IF;""" for col, table, _, _ in REFS)
    return f"""
CREATE FUNCTION mallard_trials_refs_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
{declare}
    found bigint;
BEGIN
    SELECT
{gather}
    INTO {into}
    FROM new_trials;
{checks}
    RETURN NULL;
END $$"""


# referenced table -> (referencing table, column, ON DELETE action), as the foreign keys
# had them. `series_points` (migration 0012) is derived from the trials in the same
# statement, so its ids were checked with theirs; a deleted commit still takes its
# points with it.
PARENTS: dict[str, list[tuple[str, str, str]]] = {}
for _col, _table, _, _action in REFS:
    PARENTS.setdefault(_table, []).append(("trials", _col, _action))
for _col, _table, _action in (("workload_id", "workloads", "NO ACTION"),
                              ("testbed_id", "testbeds", "NO ACTION"),
                              ("allocator_id", "allocators", "NO ACTION"),
                              ("commit_id", "commits", "CASCADE")):
    PARENTS[_table].append(("series_points", _col, _action))


def _fkey(child: str, col: str) -> str:
    return f"{child}_{col}_fkey"  # the name PostgreSQL gave the foreign key


def _refused(parent: str, child: str, col: str) -> str:
    return f"""IF EXISTS (SELECT 1 FROM {child} WHERE {col} = OLD.id) THEN
            RAISE foreign_key_violation USING MESSAGE = 'update or delete on table "{parent}" '
                || 'violates foreign key constraint "{_fkey(child, col)}" on table "{child}"',
                DETAIL = format('Key (id)=(%s) is still referenced from table "{child}".',
                                OLD.id);
        END IF;"""


def _parent_action(parent: str) -> str:
    """The row trigger of a referenced table: its delete does what the foreign keys'
    ON DELETE did; an id that changes is refused while referenced."""
    on_delete, on_update = [], []
    for child, col, action in PARENTS[parent]:
        if action == "CASCADE":
            on_delete.append(f"DELETE FROM {child} WHERE {col} = OLD.id;")
        elif action == "SET NULL":
            on_delete.append(f"UPDATE {child} SET {col} = NULL WHERE {col} = OLD.id;")
        else:
            on_delete.append(_refused(parent, child, col))
        on_update.append(_refused(parent, child, col))
    return f"""
CREATE FUNCTION mallard_ref_{parent}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        {chr(10).join(on_delete)}
    ELSIF OLD.id IS DISTINCT FROM NEW.id THEN
        {chr(10).join(on_update)}
    END IF;
    RETURN NULL;
END $$"""


def upgrade() -> None:
    op.execute(_check_batch())
    for event in ("INSERT", "UPDATE"):
        op.execute(f"""
CREATE TRIGGER trials_refs_{event.lower()} AFTER {event} ON trials
REFERENCING NEW TABLE AS new_trials
FOR EACH STATEMENT EXECUTE FUNCTION mallard_trials_refs_check()""")
    for parent, children in PARENTS.items():
        op.execute(_parent_action(parent))
        op.execute(f"""
CREATE TRIGGER {parent}_refs AFTER DELETE OR UPDATE OF id ON {parent}
FOR EACH ROW EXECUTE FUNCTION mallard_ref_{parent}()""")
        for child, col, _ in children:
            op.execute(f"ALTER TABLE {child} DROP CONSTRAINT {_fkey(child, col)}")
    op.execute("DROP INDEX IF EXISTS trials_ingested_idx")


def downgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS trials_ingested_idx ON trials (ingested_at)")
    for parent, children in PARENTS.items():
        op.execute(f"DROP TRIGGER IF EXISTS {parent}_refs ON {parent}")
        op.execute(f"DROP FUNCTION IF EXISTS mallard_ref_{parent}()")
        for child, col, action in children:
            on_delete = "" if action == "NO ACTION" else f" ON DELETE {action}"
            op.execute(f"ALTER TABLE {child} ADD CONSTRAINT {_fkey(child, col)} "
                       f"FOREIGN KEY ({col}) REFERENCES {parent}(id){on_delete}")
    op.execute("DROP TRIGGER IF EXISTS trials_refs_insert ON trials")
    op.execute("DROP TRIGGER IF EXISTS trials_refs_update ON trials")
    op.execute("DROP FUNCTION IF EXISTS mallard_trials_refs_check()")
