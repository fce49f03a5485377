"""Analysis: each comparison cell keeps its minimum detectable effect (`mde_pct`, shown in
v_comparison_cells); the measures table learns the cachegrind counts (`d1_misses`,
`llc_misses`) and perf's hardware counters (`hw_instructions`, `hw_cycles`,
`hw_llc_misses`) with their unit and direction.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

CELLS_VIEW = """
CREATE VIEW v_comparison_cells AS
SELECT comparison_id, workload, params, threads, measure, base_median, head_median,
       ratio, diff_pct, ci_low_pct, ci_high_pct, p_value, p_adjusted,
       n_base, n_head, robust_base, robust_head, verdict, line{extra}
FROM comparison_cells;
"""

NEW_MEASURES = ("d1_misses", "llc_misses", "hw_instructions", "hw_cycles", "hw_llc_misses")


def upgrade() -> None:
    op.execute("ALTER TABLE comparison_cells ADD COLUMN mde_pct double precision")
    op.execute("DROP VIEW v_comparison_cells")
    op.execute(CELLS_VIEW.format(extra=", mde_pct"))
    op.execute("SELECT mallard_grant_reader()")  # a re-created view loses its grants
    # rows that ingest created without a unit or direction get them; others stay as they are
    for name in NEW_MEASURES:
        op.execute(f"""
INSERT INTO measures (name, unit, higher_is_better) VALUES ('{name}', 'count', false)
ON CONFLICT (name) DO UPDATE SET unit = 'count', higher_is_better = false
WHERE measures.unit = '' AND measures.higher_is_better IS NULL""")


def downgrade() -> None:
    op.execute("DROP VIEW v_comparison_cells")
    op.execute(CELLS_VIEW.format(extra=""))
    op.execute("SELECT mallard_grant_reader()")
    op.execute("ALTER TABLE comparison_cells DROP COLUMN mde_pct")
