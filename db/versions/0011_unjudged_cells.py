"""Analysis: a comparison cell says why it has no verdict whatever its measure
(`unjudged_reason`, "emulated testbed" for a timing measured under qemu-user), also in
v_comparison_cells. Emulated testbeds themselves need no column: `emulated` and
`emulator` are fingerprint fields of an emulated testbed (testbeds.fields).

Revision ID: 0011
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op

revision = "0011"
down_revision = "0007"
branch_labels = None
depends_on = None

CELLS_VIEW = """
CREATE VIEW v_comparison_cells AS
SELECT comparison_id, workload, params, threads, measure, base_median, head_median,
       ratio, diff_pct, ci_low_pct, ci_high_pct, p_value, p_adjusted,
       n_base, n_head, robust_base, robust_head, verdict, line, mde_pct{extra}
FROM comparison_cells;
"""


def upgrade() -> None:
    op.execute("ALTER TABLE comparison_cells ADD COLUMN unjudged_reason text")
    op.execute("DROP VIEW v_comparison_cells")
    op.execute(CELLS_VIEW.format(extra=", unjudged_reason"))
    op.execute("SELECT mallard_grant_reader()")  # a re-created view loses its grants


def downgrade() -> None:
    op.execute("DROP VIEW v_comparison_cells")
    op.execute(CELLS_VIEW.format(extra=""))
    op.execute("SELECT mallard_grant_reader()")
    op.execute("ALTER TABLE comparison_cells DROP COLUMN unjudged_reason")
