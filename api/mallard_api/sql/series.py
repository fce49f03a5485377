"""The history of one measure along a branch: per commit (branch order) the median,
quartiles, n and raw values (ascending) of the matching, valid, non-warm-up trials."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

# Two steps. First the ids of the matching workloads, testbeds and allocators (a
# `mallard` configuration has one allocator row per commit). Then the trials with those
# ids as arrays: an index-only scan of trials_series_idx (workload_id, testbed_id,
# allocator_id, commit_id) INCLUDE (ok, warmup, id, measures) reads just the cell's
# entries; a join would let the planner fall back to every trial of the workload.
IDS_SQL = text("""
SELECT ARRAY(SELECT id FROM workloads WHERE name = :workload
             AND (CAST(:params_sha AS text) IS NULL OR params_sha256 = :params_sha)
             AND (CAST(:threads AS integer) IS NULL OR threads = :threads)) AS w,
       ARRAY(SELECT id FROM testbeds
             WHERE (CAST(:arch AS text) IS NULL OR arch = :arch)
             AND (CAST(:testbed AS text) IS NULL OR fingerprint = :testbed)) AS tb,
       ARRAY(SELECT id FROM allocators WHERE name = :allocator AND variant = :variant) AS a
""")

SERIES_SQL = text("""
SELECT c.sha, c.committed_at, bc.position, t.workload_id, t.testbed_id,
       array_agg((t.measures ->> :measure)::float8 ORDER BY (t.measures ->> :measure)::float8)
           AS vals
FROM trials t
JOIN branch_commits bc ON bc.commit_id = t.commit_id AND bc.branch_id = :branch_id
JOIN commits c ON c.id = bc.commit_id
WHERE t.workload_id = ANY(CAST(:w AS integer[])) AND t.testbed_id = ANY(CAST(:tb AS integer[]))
  AND t.allocator_id = ANY(CAST(:a AS integer[]))
  AND t.ok AND NOT t.warmup AND t.measures ? :measure
GROUP BY c.id, bc.position, t.workload_id, t.testbed_id
ORDER BY bc.position, t.workload_id, t.testbed_id
""")


def series(session: Session, *, branch_id: int, workload: str, params_sha: str | None,
           threads: int | None, allocator: str, variant: str, measure: str,
           arch: str | None, testbed: str | None) -> list[dict[str, Any]]:
    ids = session.execute(IDS_SQL, dict(
        workload=workload, params_sha=params_sha, threads=threads, allocator=allocator,
        variant=variant, arch=arch, testbed=testbed)).one()
    if not (ids.w and ids.tb and ids.a):
        return []
    workloads = {r.id: r for r in session.execute(
        text("SELECT id, params, threads FROM workloads WHERE id = ANY(:ids)"),
        {"ids": list(ids.w)})}
    testbeds = {r.id: r for r in session.execute(
        text("SELECT id, arch, fingerprint FROM testbeds WHERE id = ANY(:ids)"),
        {"ids": list(ids.tb)})}
    rows = session.execute(SERIES_SQL, dict(branch_id=branch_id, w=list(ids.w),
                                            tb=list(ids.tb), a=list(ids.a), measure=measure))
    return [
        dict(commit_sha=r.sha, commit_short=r.sha[:7], position=r.position,
             commit_time=r.committed_at, params=workloads[r.workload_id].params,
             threads=workloads[r.workload_id].threads, arch=testbeds[r.testbed_id].arch,
             testbed_fingerprint=testbeds[r.testbed_id].fingerprint,
             median=quantile(r.vals, 0.5), p25=quantile(r.vals, 0.25),
             p75=quantile(r.vals, 0.75), n=len(r.vals), values=list(r.vals))
        for r in rows
    ]


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
