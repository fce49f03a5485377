"""The history of one measure along a branch: per commit (branch order) the median,
quartiles, n and raw values (ascending) of the matching, valid, non-warm-up trials."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pydantic import TypeAdapter
from sqlalchemy import text
from sqlalchemy.orm import Session

from mallard_api.schemas.series import SeriesPoint

# One statement. `ids`: the matching workloads, testbeds and allocators (a `mallard`
# configuration has one allocator row per commit: thousands of ids, kept inside
# PostgreSQL rather than sent to Python and back). `point`: their rows of `series_points`
# (migration 0012: per commit, cell and measure, the sorted values of the valid,
# non-warm-up trials, kept by a trigger on `trials`), found by its primary key; a point
# is usually one row, several are merged and sorted again.
_POINTS = """
WITH ids AS MATERIALIZED (
    SELECT ARRAY(SELECT id FROM workloads WHERE name = :workload
                 AND (CAST(:params_sha AS text) IS NULL OR params_sha256 = :params_sha)
                 AND (CAST(:threads AS integer) IS NULL OR threads = :threads)) AS w,
           ARRAY(SELECT id FROM testbeds
                 WHERE (CAST(:arch AS text) IS NULL OR arch = :arch)
                 AND (CAST(:testbed AS text) IS NULL OR fingerprint = :testbed)) AS tb,
           ARRAY(SELECT id FROM allocators WHERE name = :allocator AND variant = :variant) AS a
), point AS (
    SELECT sp.commit_id, sp.workload_id, sp.testbed_id,
           CASE WHEN count(*) = 1 THEN mallard_array_cat(sp.vals)
                ELSE (SELECT array_agg(v ORDER BY v) FROM unnest(mallard_array_cat(sp.vals)) v)
           END AS vals
    FROM series_points sp
    WHERE sp.workload_id = ANY(CAST((SELECT w FROM ids) AS integer[]))
      AND sp.testbed_id = ANY(CAST((SELECT tb FROM ids) AS integer[]))
      AND sp.allocator_id = ANY(CAST((SELECT a FROM ids) AS integer[]))
      AND sp.measure = :measure
    GROUP BY sp.commit_id, sp.workload_id, sp.testbed_id
)
"""
_JOINS = """
FROM point p
JOIN branch_commits bc ON bc.commit_id = p.commit_id AND bc.branch_id = :branch_id
JOIN commits c ON c.id = p.commit_id
"""
# The points are built as JSON by PostgreSQL (SeriesPoint's fields): a 1000-commit answer
# carries ~10,000 raw values, and building, validating and encoding them in Python took
# most of the request's time. Quartiles: mallard_quantile, linear interpolation between
# closest ranks, as percentile_cont in v_series. The measure's unit and direction come
# along, so an answer is one statement.
SERIES_SQL = text(_POINTS + """
SELECT COALESCE(json_agg(json_build_object(
        'commit_sha', c.sha, 'commit_short', left(c.sha, 7), 'position', bc.position,
        'commit_time', c.committed_at, 'params', w.params, 'threads', w.threads,
        'arch', tb.arch, 'testbed_fingerprint', tb.fingerprint,
        'median', mallard_quantile(p.vals, 0.5), 'p25', mallard_quantile(p.vals, 0.25),
        'p75', mallard_quantile(p.vals, 0.75), 'n', cardinality(p.vals),
        'values', p.vals)
    ORDER BY bc.position, p.workload_id, p.testbed_id), '[]')::text AS points,
    (SELECT unit FROM measures WHERE name = :measure) AS unit,
    (SELECT higher_is_better FROM measures WHERE name = :measure) AS higher_is_better
""" + _JOINS + """
JOIN workloads w ON w.id = p.workload_id
JOIN testbeds tb ON tb.id = p.testbed_id
""")
# What change detection needs: the commit and the median, in branch order.
MEDIANS_SQL = text(_POINTS + """
SELECT c.sha, mallard_quantile(p.vals, 0.5) AS median
""" + _JOINS + """
ORDER BY bc.position, p.workload_id, p.testbed_id
""")


BRANCH_SQL = text("""
SELECT p.name AS project, CAST(COALESCE(:branch, p.default_branch) AS text) AS branch,
       b.id AS branch_id
FROM projects p
LEFT JOIN branches b ON b.project_id = p.id AND b.name = COALESCE(:branch, p.default_branch)
WHERE p.name = :project
""")


@dataclass(frozen=True)
class BranchRef:
    project: str
    branch: str  # the name asked for, or the project's default branch
    branch_id: int | None  # None: the project has no such branch


def branch_ref(session: Session, project: str, branch: str | None) -> BranchRef | None:
    """The branch of a series (None: no such project), in one statement."""
    row = session.execute(BRANCH_SQL, {"project": project, "branch": branch}).first()
    if row is None:
        return None
    return BranchRef(str(row.project), str(row.branch),
                     None if row.branch_id is None else int(row.branch_id))


@dataclass(frozen=True)
class SeriesAnswer:
    points: str  # a JSON array of SeriesPoint
    unit: str
    higher_is_better: bool | None


@dataclass(frozen=True)
class SeriesCell:
    """Which series: a branch, a workload (its params by sha, or any; its threads, or any),
    an allocator configuration, a measure, and optionally an arch and a testbed."""

    branch_id: int
    workload: str
    params_sha: str | None
    threads: int | None
    allocator: str
    variant: str
    measure: str
    arch: str | None
    testbed: str | None


def answer(session: Session, cell: SeriesCell) -> SeriesAnswer:
    """The points as a JSON array (text), in branch order, with the measure's unit."""
    row = session.execute(SERIES_SQL, asdict(cell)).one()
    return SeriesAnswer(str(row.points), str(row.unit or ""),
                        None if row.higher_is_better is None else bool(row.higher_is_better))


_POINT_LIST = TypeAdapter(list[SeriesPoint])


def series(session: Session, cell: SeriesCell) -> list[SeriesPoint]:
    """The points that have a median, as records, for the pages."""
    points = json.loads(answer(session, cell).points)
    return _POINT_LIST.validate_python([p for p in points if p["median"] is not None])


def medians(session: Session, cell: SeriesCell) -> list[tuple[str, float]]:
    """(commit sha, median) per point in branch order: what change detection reads."""
    rows = session.execute(MEDIANS_SQL, asdict(cell))
    return [(str(r.sha), float(r.median)) for r in rows if r.median is not None]


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
