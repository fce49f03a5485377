"""The history of one measure along a branch: per commit (branch order) the median,
quartiles, n and raw values of the matching, valid, non-warm-up trials."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

SERIES_SQL = text("""
WITH bc AS (
    SELECT c.id AS commit_id, c.sha, c.committed_at, bc.position
    FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
    WHERE bc.branch_id = :branch_id
), w AS (
    SELECT id, params, threads FROM workloads
    WHERE name = :workload
      AND (CAST(:params_sha AS text) IS NULL OR params_sha256 = :params_sha)
      AND (CAST(:threads AS integer) IS NULL OR threads = :threads)
), a AS (
    SELECT id FROM allocators WHERE name = :allocator AND variant = :variant
), tb AS (
    SELECT id, arch, fingerprint FROM testbeds
    WHERE (CAST(:arch AS text) IS NULL OR arch = :arch)
      AND (CAST(:testbed AS text) IS NULL OR fingerprint = :testbed)
), v AS (
    SELECT t.commit_id, t.workload_id, t.testbed_id, t.id AS trial_id,
           (t.measures ->> :measure)::double precision AS value
    FROM trials t
    JOIN w ON w.id = t.workload_id
    JOIN tb ON tb.id = t.testbed_id
    JOIN a ON a.id = t.allocator_id
    JOIN bc ON bc.commit_id = t.commit_id
    WHERE t.ok AND NOT t.warmup AND t.measures ? :measure
)
SELECT bc.sha, bc.committed_at, bc.position, w.params, w.threads, tb.arch, tb.fingerprint,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY v.value) AS median,
       percentile_cont(0.25) WITHIN GROUP (ORDER BY v.value) AS p25,
       percentile_cont(0.75) WITHIN GROUP (ORDER BY v.value) AS p75,
       count(*) AS n,
       array_agg(v.value ORDER BY v.trial_id) AS vals
FROM v
JOIN bc ON bc.commit_id = v.commit_id
JOIN w ON w.id = v.workload_id
JOIN tb ON tb.id = v.testbed_id
GROUP BY bc.sha, bc.committed_at, bc.position, w.id, w.params, w.threads, tb.id, tb.arch,
         tb.fingerprint
ORDER BY bc.position, w.id, tb.id
""")


def series(session: Session, *, branch_id: int, workload: str, params_sha: str | None,
           threads: int | None, allocator: str, variant: str, measure: str,
           arch: str | None, testbed: str | None) -> list[dict[str, Any]]:
    rows = session.execute(SERIES_SQL, dict(
        branch_id=branch_id, workload=workload, params_sha=params_sha, threads=threads,
        allocator=allocator, variant=variant, measure=measure, arch=arch, testbed=testbed))
    return [
        dict(commit_sha=r.sha, commit_short=r.sha[:7], position=r.position,
             commit_time=r.committed_at, params=r.params, threads=r.threads, arch=r.arch,
             testbed_fingerprint=r.fingerprint, median=r.median, p25=r.p25, p75=r.p75,
             n=r.n, values=list(r.vals))
        for r in rows
    ]


def measure_info(session: Session, name: str) -> tuple[str, bool | None]:
    row = session.execute(text("SELECT unit, higher_is_better FROM measures WHERE name = :n"),
                          {"n": name}).first()
    return (str(row[0]), row[1]) if row else ("", None)
