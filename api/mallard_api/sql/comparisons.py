"""Comparisons: create, link jobs, read their trials, store their cells."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from mallard_wire.fields import JsonDict
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session

from mallard_api.analysis.cells import CellRow
from mallard_api.models.comparisons import Comparison, ComparisonCell, ComparisonJob


def create(session: Session, c: Comparison) -> Comparison:
    """Store a new comparison; returns it with its id and server defaults."""
    session.add(c)
    session.flush()
    session.refresh(c)
    return c


def get(session: Session, comparison_id: int) -> Comparison | None:
    return session.get(Comparison, comparison_id)


def of_pair(session: Session, project_id: int, arch: str, base: str, head: str,
            suite: str | None = None) -> Comparison | None:
    """The newest comparison of two commits (whole suite, no variants; in `suite` when
    given) that did not fail."""
    q = select(Comparison)
    if suite is not None:
        q = q.where(Comparison.suite == suite)
    rows = session.scalars(q.where(
        Comparison.project_id == project_id, Comparison.arch == arch,
        Comparison.base["commit"].astext == base, Comparison.head["commit"].astext == head,
        Comparison.base["variant"].astext.is_(None),
        Comparison.head["variant"].astext.is_(None),
        Comparison.calibration_id.is_(None), Comparison.state != "failed")
        .order_by(Comparison.id.desc()).limit(20))
    return next((c for c in rows if not c.workloads and not c.threads), None)


def list_all(session: Session, *, project: str | None, state: str | None, limit: int,
             offset: int) -> list[Comparison]:
    q = select(Comparison)
    if project:
        q = q.where(Comparison.project == project)
    if state:
        q = q.where(Comparison.state == state)
    return list(session.scalars(q.order_by(Comparison.id.desc()).limit(limit).offset(offset)))


def link_job(session: Session, *, comparison_id: int, job_id: int, round: int,
             trials: int) -> None:
    session.add(ComparisonJob(comparison_id=comparison_id, job_id=job_id, round=round,
                              trials=trials))
    session.flush()


def comparisons_of_jobs(session: Session, job_ids: list[int]) -> list[int]:
    return [int(c) for c in session.scalars(
        select(ComparisonJob.comparison_id).where(ComparisonJob.job_id.in_(job_ids))
        .distinct().order_by(ComparisonJob.comparison_id))]


def job_kind_and_comparison(session: Session, job_id: int) -> tuple[str | None, int | None]:
    """The job's kind and the comparison that owns it (if any), in one statement."""
    row = session.execute(text(
        "SELECT j.kind, cj.comparison_id FROM jobs j "
        "LEFT JOIN comparison_jobs cj ON cj.job_id = j.id WHERE j.id = :j LIMIT 1"),
        {"j": job_id}).first()
    return (None, None) if row is None else (str(row[0]), row[1])


def lock(session: Session, comparison_id: int) -> Comparison | None:
    return session.scalar(select(Comparison).where(Comparison.id == comparison_id)
                          .with_for_update().execution_options(populate_existing=True))


def for_job(session: Session, job_id: int, *, lock: bool = False) -> Comparison | None:
    """The comparison that owns the job (locked FOR UPDATE when asked)."""
    cid = session.scalar(select(ComparisonJob.comparison_id).where(ComparisonJob.job_id == job_id))
    if cid is None:
        return None
    q = select(Comparison).where(Comparison.id == cid)
    if lock:
        q = q.with_for_update()
    return session.scalar(q)


@dataclass
class JobState:
    job_id: int
    round: int
    trials: int
    state: str


def jobs(session: Session, comparison_id: int) -> list[JobState]:
    rows = session.execute(text(
        "SELECT cj.job_id, cj.round, cj.trials, j.state FROM comparison_jobs cj "
        "JOIN jobs j ON j.id = cj.job_id WHERE cj.comparison_id = :id ORDER BY cj.round, j.id"),
        {"id": comparison_id})
    return [JobState(int(r[0]), int(r[1]), int(r[2]), str(r[3])) for r in rows]


@dataclass
class TrialRow:
    label: str
    allocator: str  # a built peer with its commit: `jemalloc@abc1234` (not `jemalloc`)
    variant: str
    workload: str
    params: JsonDict
    threads: int | None
    testbed_fingerprint: str
    cpu_model: str | None
    measures: dict[str, float]
    emulated: bool = False  # the testbed ran another architecture under qemu-user
    job_id: int | None = None  # with seq, the round it ran in: base and head of one are a pair
    seq: int | None = None
    look: int = 0  # the comparison round its job belongs to (0 the first job, then follow-ups)


TRIALS_SQL = text("""
SELECT t.label,
       a.name || CASE WHEN t.label = 'peer' AND a.commit_sha <> ''
                      THEN '@' || left(a.commit_sha, 7) ELSE '' END AS allocator,
       a.variant, w.name AS workload, w.params, w.threads,
       tb.fingerprint, tb.cpu_model, t.measures,
       COALESCE((tb.fields->>'emulated')::boolean, false) AS emulated,
       t.job_id, t.seq, cj.round
FROM comparison_jobs cj
JOIN trials t ON t.job_id = cj.job_id
JOIN allocators a ON a.id = t.allocator_id
JOIN workloads w ON w.id = t.workload_id
JOIN testbeds tb ON tb.id = t.testbed_id
WHERE cj.comparison_id = :id AND t.ok AND NOT t.warmup
ORDER BY t.id
""")


def trials(session: Session, comparison_id: int) -> list[TrialRow]:
    """Every valid, non-warm-up trial of every job of the comparison."""
    return [
        TrialRow(r.label, r.allocator, r.variant, r.workload, dict(r.params), r.threads,
                 r.fingerprint, r.cpu_model, dict(r.measures or {}), bool(r.emulated),
                 int(r.job_id), int(r.seq), int(r.round))
        for r in session.execute(TRIALS_SQL, {"id": comparison_id})
    ]


ISOLATED_SQL = text("""
SELECT bool_and(COALESCE((ra.artifacts->'noise_control'->>'isolated')::boolean, true))
FROM comparison_jobs cj
JOIN result_artifacts ra ON ra.job_id = cj.job_id
WHERE cj.comparison_id = :id
""")


def isolated(session: Session, comparison_id: int) -> bool:
    """False when a job of the comparison ran on CPUs that other processes may use (its
    results' ``noise_control.isolated``); True when every one was isolated or none said."""
    return session.execute(ISOLATED_SQL, {"id": comparison_id}).scalar() is not False


def measure_directions(session: Session) -> dict[str, bool]:
    rows = session.execute(text(
        "SELECT name, higher_is_better FROM measures WHERE higher_is_better IS NOT NULL"))
    return {str(r[0]): bool(r[1]) for r in rows}


def replace_cells(session: Session, comparison_id: int, cells: Sequence[CellRow]) -> None:
    session.execute(delete(ComparisonCell).where(ComparisonCell.comparison_id == comparison_id))
    for c in cells:
        session.add(ComparisonCell(comparison_id=comparison_id, **asdict(c)))
    session.flush()


def cells(session: Session, comparison_id: int) -> list[CellRow]:
    return [CellRow.from_attributes(c) for c in session.scalars(
        select(ComparisonCell).where(ComparisonCell.comparison_id == comparison_id)
        .order_by(ComparisonCell.workload, ComparisonCell.threads, ComparisonCell.id))]


def counts(session: Session, comparison_id: int) -> dict[str, int]:
    rows = session.execute(
        select(ComparisonCell.verdict, func.count()).where(
            ComparisonCell.comparison_id == comparison_id).group_by(ComparisonCell.verdict))
    out = {"improved": 0, "regressed": 0, "same": 0, "unknown": 0}
    for verdict, n in rows:
        out[str(verdict)] = int(n)
    return out


def testbed_cpus(session: Session, fingerprint: str | None) -> str | None:
    """The pinned CPUs (``0,1``) of a testbed, for the curves' oversubscribed points."""
    if not fingerprint:
        return None
    cpus = session.execute(text("SELECT fields->>'cpus' FROM testbeds WHERE fingerprint = :f"),
                           {"f": fingerprint}).scalar()
    return str(cpus) if cpus is not None else None


# what a comparison's follow-ups have cost so far (runner seconds of their trials)
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
