"""Commit verdicts, bisections, branch ancestry and live runners (migration 0008)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from mallard_api.models.bisections import Bisection
from mallard_api.models.verdicts import CommitVerdict

_LIVE_ARCHES = text("""
SELECT DISTINCT arch FROM runners
WHERE last_seen_at > now() - make_interval(secs => :s) AND retired_at IS NULL ORDER BY arch
""")


def live_arches(session: Session, seconds: float) -> list[str]:
    """Architectures with a runner in service (not retired) seen within `seconds`."""
    return [str(a) for a in session.scalars(_LIVE_ARCHES, {"s": seconds})]


def position(session: Session, branch_id: int, project_id: int, sha: str) -> int | None:
    pos = session.scalar(text(
        "SELECT bc.position FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id "
        "WHERE bc.branch_id = :b AND c.project_id = :p AND c.sha = :s"),
        {"b": branch_id, "p": project_id, "s": sha})
    return None if pos is None else int(pos)


# The newest reachable commit before `pos` whose commit job on this arch did not fail, at or
# after the newest baseline at or before `pos` and in no broken range (migration 0023).
_LAST_MEASURED = text("""
WITH newest AS (
    SELECT max(bc.position) AS pos FROM baselines bl
    JOIN branch_commits bc ON bc.branch_id = bl.branch_id AND bc.commit_id = bl.commit_id
    WHERE bl.branch_id = :b AND bc.position <= :pos)
SELECT c.sha FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
WHERE bc.branch_id = :b AND bc.position < :pos AND bc.unreachable_at IS NULL
  AND bc.position >= coalesce((SELECT pos FROM newest), -1)
  AND NOT EXISTS (
    SELECT 1 FROM broken_ranges r
    JOIN branch_commits f ON f.branch_id = r.branch_id AND f.commit_id = r.first_commit_id
    JOIN branch_commits l ON l.branch_id = r.branch_id AND l.commit_id = r.last_commit_id
    WHERE r.branch_id = :b
      AND bc.position BETWEEN least(f.position, l.position) AND greatest(f.position, l.position))
  AND (EXISTS (SELECT 1 FROM jobs j WHERE j.kind = 'commit' AND j.arch = :arch
               AND j.project_id = c.project_id AND j.spec->>'commit' = c.sha
               AND j.state <> 'failed' AND j.state <> 'cancelled')
       OR bc.position = (SELECT pos FROM newest))
ORDER BY bc.position DESC LIMIT 1
""")


def last_measured_before(session: Session, branch_id: int, pos: int, arch: str) -> str | None:
    """The reference of a commit verdict at `pos`: the last measured commit before it since
    the branch's newest baseline, outside broken ranges; the baseline commit itself when
    none was measured since (a comparison measures both sides)."""
    sha = session.scalar(_LAST_MEASURED, {"b": branch_id, "pos": pos, "arch": arch})
    return None if sha is None else str(sha)


_DEFER = text("""
INSERT INTO commit_verdicts (project_id, branch, commit_sha, base_sha, arch, state)
SELECT :p, :b, u.sha, '', a.arch, 'deferred'
FROM unnest(CAST(:shas AS text[])) AS u(sha), unnest(CAST(:arches AS text[])) AS a(arch)
ON CONFLICT (project_id, commit_sha, arch) DO NOTHING
""")


def defer(session: Session, project_id: int, branch: str, shas: list[str],
          arches: list[str]) -> None:
    """Commits of a push beyond the cap: measured later by backfill."""
    if shas:
        session.execute(_DEFER, {"p": project_id, "b": branch, "shas": shas, "arches": arches})


# Newest first: deferred commits still reachable on their branch.
_DEFERRED = text("""
SELECT v.project_id, b.id AS branch_id, v.branch, v.commit_sha AS sha
FROM commit_verdicts v
JOIN branches b ON b.project_id = v.project_id AND b.name = v.branch
JOIN commits c ON c.project_id = v.project_id AND c.sha = v.commit_sha
JOIN branch_commits bc ON bc.branch_id = b.id AND bc.commit_id = c.id
WHERE v.state = 'deferred' AND v.arch = :arch AND bc.unreachable_at IS NULL
ORDER BY bc.position DESC LIMIT :n
""")


def deferred(session: Session, arch: str, limit: int) -> list[Any]:
    return list(session.execute(_DEFERRED, {"arch": arch, "n": limit}))


# Ancestry along first parents, from `head` back (depth-capped, and ending at `until`
# when the walk reaches it), newest first.
_ANCESTRY = text("""
WITH RECURSIVE walk(sha, parent, depth) AS (
    SELECT sha, parent_sha, 0 FROM commits WHERE project_id = :p AND sha = :head
  UNION ALL
    SELECT c.sha, c.parent_sha, w.depth + 1 FROM walk w
    JOIN commits c ON c.project_id = :p AND c.sha = w.parent
    WHERE w.depth < :cap AND w.sha IS DISTINCT FROM CAST(:until AS text)
)
SELECT sha FROM walk ORDER BY depth
""")


def ancestry(session: Session, project_id: int, head: str, cap: int,
             until: str | None = None) -> list[str]:
    """`head` and its first-parent ancestors known to the API, newest first; the walk
    stops after `until` when it meets it (a push asks only whether its branch's old head
    is an ancestor: a fast-forward walks its new commits, not the branch's history)."""
    return [str(s) for s in session.scalars(_ANCESTRY, {"p": project_id, "head": head,
                                                        "cap": cap, "until": until})]


_MARK_UNREACHABLE = text("""
UPDATE branch_commits bc SET unreachable_at = now()
FROM commits c
WHERE c.id = bc.commit_id AND bc.branch_id = :b AND bc.unreachable_at IS NULL
  AND NOT (c.sha = ANY(CAST(:keep AS text[])))
RETURNING c.sha
""")


def mark_unreachable(session: Session, branch_id: int, keep: list[str]) -> list[str]:
    """Mark the branch's commits outside `keep` unreachable (their results stay)."""
    return [str(s) for s in session.scalars(_MARK_UNREACHABLE, {"b": branch_id, "keep": keep})]


def unreachable_on(session: Session, commit_id: int) -> list[str]:
    return [str(n) for n in session.scalars(text(
        "SELECT b.name FROM branch_commits bc JOIN branches b ON b.id = bc.branch_id "
        "WHERE bc.commit_id = :c AND bc.unreachable_at IS NOT NULL ORDER BY b.name"),
        {"c": commit_id})]


def of_comparison(session: Session, comparison_id: int) -> list[CommitVerdict]:
    return list(session.scalars(select(CommitVerdict).where(
        CommitVerdict.comparison_id == comparison_id).with_for_update()))


def alerts_of_comparison(session: Session, comparison_id: int) -> list[int]:
    """The alerts the comparison's commit verdicts opened (read, not locked)."""
    return [a for a in session.scalars(select(CommitVerdict.alert_id).where(
        CommitVerdict.comparison_id == comparison_id).order_by(CommitVerdict.id))
        if a is not None]


def of_commit(session: Session, project_id: int, sha: str) -> list[CommitVerdict]:
    return list(session.scalars(select(CommitVerdict).where(
        CommitVerdict.project_id == project_id, CommitVerdict.commit_sha == sha)
        .order_by(CommitVerdict.arch)))


def add_verdict(session: Session, v: CommitVerdict) -> CommitVerdict:
    session.add(v)
    session.flush()
    return v


def add_bisection(session: Session, b: Bisection) -> Bisection:
    session.add(b)
    session.flush()
    return b


def get_bisection(session: Session, bisection_id: int, *, lock: bool = False
                  ) -> Bisection | None:
    q = select(Bisection).where(Bisection.id == bisection_id)
    return session.scalar(q.with_for_update() if lock else q)


# Bisections waiting on this comparison (a step's comparisons are listed in its steps).
_BISECTIONS_OF = text("""
SELECT b.id FROM bisections b, jsonb_array_elements(b.steps) s
WHERE b.state = 'running' AND s->'comparisons' @> CAST(:c AS jsonb)
""")


def bisections_of_comparison(session: Session, comparison_id: int) -> list[int]:
    return sorted({int(i) for i in session.scalars(_BISECTIONS_OF,
                                                   {"c": f"[{comparison_id}]"})})


def list_bisections(session: Session, project: str | None, limit: int) -> list[Bisection]:
    q = select(Bisection).order_by(Bisection.id.desc()).limit(limit)
    if project:
        q = q.where(Bisection.project == project)
    return list(session.scalars(q))
