"""What a comparison's follow-ups have cost so far (runner seconds of their trials)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

SPENT_SQL = text("""
SELECT COALESCE(SUM((t.measures ->> 'wall_seconds')::float8), 0)
FROM comparison_jobs cj
JOIN trials t ON t.job_id = cj.job_id
WHERE cj.comparison_id = :id AND cj.round >= 1
  AND jsonb_typeof(t.measures -> 'wall_seconds') = 'number'
""")


def spent_seconds(session: Session, comparison_id: int) -> float:
    """Wall seconds of every trial (warm-ups and failures too) of rounds 1 and later."""
    return float(session.execute(SPENT_SQL, {"id": comparison_id}).scalar_one())
