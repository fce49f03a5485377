"""Analysis: the view v_comparison_jobs, so dashboards find a comparison's trials exactly
(v_measurements.job_id joined to the comparison's jobs, follow-ups included).

Revision ID: 0004_comparison_jobs_view
Revises: 0003_core_artifacts
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004_comparison_jobs_view"
down_revision = "0003_core_artifacts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
CREATE VIEW v_comparison_jobs AS
SELECT comparison_id, job_id, round, trials
FROM comparison_jobs;
""")


def downgrade() -> None:
    op.execute("DROP VIEW v_comparison_jobs")
