"""Baselines and broken ranges of a branch's history (migration 0023): where every series
of the branch restarts, and which commits analysis leaves out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.baselines import Baseline, BrokenRange


@dataclass(frozen=True)
class OnBranch:
    commit_id: int
    sha: str
    position: int


def on_branch(session: Session, branch_id: int, sha: str) -> OnBranch | None:
    """A commit of the branch by its full sha or a unique prefix (4+ hex digits)."""
    rows = session.execute(text(
        "SELECT c.id, c.sha, bc.position FROM branch_commits bc JOIN commits c "
        "ON c.id = bc.commit_id WHERE bc.branch_id = :b AND c.sha LIKE :s || '%' LIMIT 2"),
        {"b": branch_id, "s": sha.lower()}).all()
    if len(rows) != 1:
        return None
    return OnBranch(int(rows[0].id), str(rows[0].sha), int(rows[0].position))


def add_baseline(session: Session, branch_id: int, commit_id: int, *, actor: str, note: str,
                 alert_id: int | None) -> bool:
    """False when the branch already has a baseline at this commit."""
    res = session.execute(insert(Baseline).values(
        branch_id=branch_id, commit_id=commit_id, actor=actor, note=note, alert_id=alert_id)
        .on_conflict_do_nothing(index_elements=["branch_id", "commit_id"])
        .returning(Baseline.id))
    return res.scalar() is not None


def add_broken(session: Session, branch_id: int, first_id: int, last_id: int, *, actor: str,
               reason: str) -> None:
    session.add(BrokenRange(branch_id=branch_id, first_commit_id=first_id,
                            last_commit_id=last_id, actor=actor, reason=reason))
    session.flush()


# Commits of the branch analysis leaves out: before its newest baseline, or in a broken range.
_EXCLUDED = text("""
WITH newest AS (
    SELECT max(bc.position) AS pos FROM baselines bl
    JOIN branch_commits bc ON bc.branch_id = bl.branch_id AND bc.commit_id = bl.commit_id
    WHERE bl.branch_id = :b),
broken AS (
    SELECT least(f.position, l.position) AS lo, greatest(f.position, l.position) AS hi
    FROM broken_ranges r
    JOIN branch_commits f ON f.branch_id = r.branch_id AND f.commit_id = r.first_commit_id
    JOIN branch_commits l ON l.branch_id = r.branch_id AND l.commit_id = r.last_commit_id
    WHERE r.branch_id = :b)
SELECT c.sha FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
WHERE bc.branch_id = :b AND (bc.position < coalesce((SELECT pos FROM newest), -1)
      OR EXISTS (SELECT 1 FROM broken WHERE bc.position BETWEEN broken.lo AND broken.hi))
""")


def excluded(session: Session, branch_id: int) -> set[str]:
    return {str(s) for s in session.scalars(_EXCLUDED, {"b": branch_id})}


@dataclass(frozen=True)
class Mark:
    """A baseline (first == last) or a broken range, as a page shows it."""

    kind: str  # baseline | broken
    first_sha: str
    last_sha: str
    note: str
    actor: str
    created_at: datetime


_MARKS = text("""
SELECT 'baseline' AS kind, c.sha AS first_sha, c.sha AS last_sha, bl.note, bl.actor,
       bl.created_at
FROM baselines bl JOIN commits c ON c.id = bl.commit_id WHERE bl.branch_id = :b
UNION ALL
SELECT 'broken', f.sha, l.sha, r.reason, r.actor, r.created_at
FROM broken_ranges r JOIN commits f ON f.id = r.first_commit_id
JOIN commits l ON l.id = r.last_commit_id WHERE r.branch_id = :b
ORDER BY created_at
""")


def marks(session: Session, branch_id: int) -> list[Mark]:
    return [Mark(**r._mapping) for r in session.execute(_MARKS, {"b": branch_id})]


@dataclass(frozen=True)
class Span:
    """A baseline (lo == hi: its commit's position) or a broken range, by branch position,
    as the trend plots draw them."""

    kind: str  # baseline | broken
    lo: int
    hi: int
    note: str


_SPANS = text("""
SELECT 'baseline' AS kind, bc.position AS lo, bc.position AS hi, bl.note
FROM baselines bl
JOIN branch_commits bc ON bc.branch_id = bl.branch_id AND bc.commit_id = bl.commit_id
WHERE bl.branch_id = :b
UNION ALL
SELECT 'broken', least(f.position, l.position), greatest(f.position, l.position), r.reason
FROM broken_ranges r
JOIN branch_commits f ON f.branch_id = r.branch_id AND f.commit_id = r.first_commit_id
JOIN branch_commits l ON l.branch_id = r.branch_id AND l.commit_id = r.last_commit_id
WHERE r.branch_id = :b
ORDER BY lo
""")


def spans(session: Session, branch_id: int) -> list[Span]:
    return [Span(str(r.kind), int(r.lo), int(r.hi), str(r.note))
            for r in session.execute(_SPANS, {"b": branch_id})]
