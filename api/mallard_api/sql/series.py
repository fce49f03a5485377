"""The history of one measure along a branch: per commit (branch order) the median,
quartiles, n and raw values (ascending) of the matching, valid, non-warm-up trials."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

# Two steps. First the ids of the matching workloads, testbeds and allocators (a
# `mallard` configuration has one allocator row per commit). Then their rows of
# `series_points` (migration 0012: per commit, cell and measure, the sorted values of the
# valid, non-warm-up trials, kept by a trigger on `trials`), found by its primary key.
IDS_SQL = text("""
SELECT ARRAY(SELECT id FROM workloads WHERE name = :workload
             AND (CAST(:params_sha AS text) IS NULL OR params_sha256 = :params_sha)
             AND (CAST(:threads AS integer) IS NULL OR threads = :threads)) AS w,
       ARRAY(SELECT id FROM testbeds
             WHERE (CAST(:arch AS text) IS NULL OR arch = :arch)
             AND (CAST(:testbed AS text) IS NULL OR fingerprint = :testbed)) AS tb,
       ARRAY(SELECT id FROM allocators WHERE name = :allocator AND variant = :variant) AS a
""")

# The points are built as JSON by PostgreSQL (SeriesPoint's fields): a 1000-commit answer
# carries ~10,000 raw values, and building, validating and encoding them in Python took
# most of the request's time. A point is usually one row (one allocator row per commit);
# several are merged and sorted again. Quartiles: mallard_quantile, linear interpolation
# between closest ranks, as percentile_cont in v_series.
SERIES_SQL = text("""
WITH point AS (
    SELECT sp.commit_id, sp.workload_id, sp.testbed_id,
           CASE WHEN count(*) = 1 THEN mallard_array_cat(sp.vals)
                ELSE (SELECT array_agg(v ORDER BY v) FROM unnest(mallard_array_cat(sp.vals)) v)
           END AS vals
    FROM series_points sp
    WHERE sp.workload_id = ANY(CAST(:w AS integer[]))
      AND sp.testbed_id = ANY(CAST(:tb AS integer[]))
      AND sp.allocator_id = ANY(CAST(:a AS integer[])) AND sp.measure = :measure
    GROUP BY sp.commit_id, sp.workload_id, sp.testbed_id
)
SELECT COALESCE(json_agg(json_build_object(
        'commit_sha', c.sha, 'commit_short', left(c.sha, 7), 'position', bc.position,
        'commit_time', c.committed_at, 'params', w.params, 'threads', w.threads,
        'arch', tb.arch, 'testbed_fingerprint', tb.fingerprint,
        'median', mallard_quantile(p.vals, 0.5), 'p25', mallard_quantile(p.vals, 0.25),
        'p75', mallard_quantile(p.vals, 0.75), 'n', cardinality(p.vals),
        'values', p.vals)
    ORDER BY bc.position, p.workload_id, p.testbed_id), '[]')::text
FROM point p
JOIN branch_commits bc ON bc.commit_id = p.commit_id AND bc.branch_id = :branch_id
JOIN commits c ON c.id = p.commit_id
JOIN workloads w ON w.id = p.workload_id
JOIN testbeds tb ON tb.id = p.testbed_id
""")


def series_json(session: Session, *, branch_id: int, workload: str, params_sha: str | None,
                threads: int | None, allocator: str, variant: str, measure: str,
                arch: str | None, testbed: str | None) -> str:
    """The points as a JSON array (text), in branch order."""
    ids = session.execute(IDS_SQL, dict(
        workload=workload, params_sha=params_sha, threads=threads, allocator=allocator,
        variant=variant, arch=arch, testbed=testbed)).one()
    if not (ids.w and ids.tb and ids.a):
        return "[]"
    return str(session.execute(SERIES_SQL, dict(
        branch_id=branch_id, w=list(ids.w), tb=list(ids.tb), a=list(ids.a),
        measure=measure)).scalar_one())


def series(session: Session, **cell: Any) -> list[dict[str, Any]]:
    """The points as dicts (`commit_time` a datetime), for the analysis and the pages."""
    points: list[dict[str, Any]] = json.loads(series_json(session, **cell))
    for p in points:
        if p["commit_time"] is not None:
            p["commit_time"] = datetime.fromisoformat(p["commit_time"])
    return points


def quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks: PostgreSQL's percentile_cont (and
    v_series'), on values sorted ascending."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def measure_info(session: Session, name: str) -> tuple[str, bool | None]:
    row = session.execute(text("SELECT unit, higher_is_better FROM measures WHERE name = :n"),
                          {"n": name}).first()
    return (str(row[0]), row[1]) if row else ("", None)
