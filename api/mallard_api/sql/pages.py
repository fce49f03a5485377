"""Reads for the web pages (mallard_api/ui): a branch's recent history of every series,
a commit's trials, the change points and alerts to mark, and the session's token."""

from __future__ import annotations

from dataclasses import dataclass

from mallard_wire.fields import JsonDict
from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session

from mallard_api.models.alerts import Alert
from mallard_api.models.commits import Commit
from mallard_api.models.comparisons import Comparison
from mallard_api.models.projects import Project
from mallard_api.models.tokens import ApiToken
from mallard_api.models.verdicts import CommitVerdict


def token_by_id(session: Session, token_id: int) -> ApiToken | None:
    """A stored token that is not revoked (a login session names its token by id)."""
    return session.scalar(select(ApiToken).where(ApiToken.id == token_id,
                                                 ApiToken.revoked_at.is_(None)))


def measure_units(session: Session) -> dict[str, str]:
    return {str(n): str(u or "") for n, u in session.execute(text(
        "SELECT name, unit FROM measures"))}


@dataclass
class Where:
    """A workload cell on a testbed: what a row of trials was measured on."""

    workload: str
    params: JsonDict
    params_sha: str
    arch: str
    fingerprint: str
    cpu_model: str | None


@dataclass
class Point(Where):
    """The valid, non-warm-up trials of one series at one commit (values ascending)."""

    variant: str
    measure: str
    sha: str
    position: int
    values: list[float]


# The last :last_n commits of the branch, then their trials of one allocator (name) and
# the measures asked for. Trials of comparison and calibrate jobs (A/B experiments, canaries)
# are not the branch's history. trials_commit_idx finds a commit's trials. A commit whose
# raw trials retention deleted (sql/retention.py) is read from its `series_points`, the
# same values summarised when they were ingested (with, there, the values of any
# comparison job run on that commit).
_RECENT = """
WITH recent AS (
  SELECT bc.commit_id, bc.position FROM branch_commits bc
  WHERE bc.branch_id = :branch_id ORDER BY bc.position DESC LIMIT :last_n
), summarised AS (
  SELECT r.commit_id, r.position FROM recent r
  WHERE NOT EXISTS (SELECT 1 FROM trials t WHERE t.commit_id = r.commit_id)
)"""

BRANCH_POINTS_SQL = text(_RECENT + """
SELECT w.name AS workload, w.params, w.params_sha256, tb.arch, tb.fingerprint, tb.cpu_model,
       a.variant, m.key AS measure, c.sha, r.position,
       array_agg((m.value #>> '{}')::float8 ORDER BY (m.value #>> '{}')::float8) AS vals
FROM recent r
JOIN commits c ON c.id = r.commit_id
JOIN trials t ON t.commit_id = r.commit_id AND t.ok AND NOT t.warmup
JOIN allocators a ON a.id = t.allocator_id AND a.name = :allocator
LEFT JOIN jobs j ON j.id = t.job_id
JOIN workloads w ON w.id = t.workload_id
JOIN testbeds tb ON tb.id = t.testbed_id
CROSS JOIN LATERAL jsonb_each(t.measures) AS m(key, value)
WHERE m.key = ANY(CAST(:measures AS text[])) AND jsonb_typeof(m.value) = 'number'
  AND COALESCE(j.kind, '') NOT IN ('comparison', 'calibrate')
GROUP BY w.id, tb.id, a.variant, m.key, c.id, r.position
UNION ALL
SELECT w.name, w.params, w.params_sha256, tb.arch, tb.fingerprint, tb.cpu_model,
       a.variant, sp.measure, c.sha, s.position,
       (SELECT array_agg(v ORDER BY v) FROM unnest(mallard_array_cat(sp.vals)) v)
FROM summarised s
JOIN commits c ON c.id = s.commit_id
JOIN series_points sp ON sp.commit_id = s.commit_id
JOIN allocators a ON a.id = sp.allocator_id AND a.name = :allocator
JOIN workloads w ON w.id = sp.workload_id
JOIN testbeds tb ON tb.id = sp.testbed_id
WHERE sp.measure = ANY(CAST(:measures AS text[]))
GROUP BY w.id, tb.id, a.variant, sp.measure, c.id, s.position
ORDER BY 1, 3, 8, 10
""")

BRANCH_MEASURES_SQL = text(_RECENT + """
SELECT m.key
FROM recent r
JOIN trials t ON t.commit_id = r.commit_id AND t.ok AND NOT t.warmup
JOIN allocators a ON a.id = t.allocator_id AND a.name = :allocator
LEFT JOIN jobs j ON j.id = t.job_id
CROSS JOIN LATERAL jsonb_object_keys(t.measures) AS m(key)
WHERE COALESCE(j.kind, '') NOT IN ('comparison', 'calibrate')
UNION
SELECT sp.measure FROM summarised s
JOIN series_points sp ON sp.commit_id = s.commit_id
JOIN allocators a ON a.id = sp.allocator_id AND a.name = :allocator
ORDER BY 1
""")


def branch_measures(session: Session, branch_id: int, *, last_n: int,
                    allocator: str) -> list[str]:
    return [str(r[0]) for r in session.execute(BRANCH_MEASURES_SQL, dict(
        branch_id=branch_id, last_n=last_n, allocator=allocator))]


def branch_points(session: Session, branch_id: int, *, last_n: int, measures: list[str],
                  allocator: str) -> list[Point]:
    rows = session.execute(BRANCH_POINTS_SQL, dict(branch_id=branch_id, last_n=last_n,
                                                   allocator=allocator, measures=measures))
    return [Point(r.workload, dict(r.params), r.params_sha256, r.arch, r.fingerprint,
                  r.cpu_model, r.variant, r.measure, r.sha, int(r.position), list(r.vals))
            for r in rows]


@dataclass
class ChangeMark:
    workload: str
    params: JsonDict
    fingerprint: str
    allocator: str
    variant: str
    measure: str
    commit_sha: str
    change_pct: float
    direction: str
    alert_id: int | None


def change_points(session: Session, project: str, branch: str,
                  series_key: str | None = None) -> list[ChangeMark]:
    rows = session.execute(text(
        "SELECT workload, params, testbed_fingerprint, allocator, variant, measure, "
        "commit_sha, change_pct, direction, alert_id FROM change_points "
        "WHERE project = :p AND branch = :b "
        "AND (CAST(:k AS text) IS NULL OR series_key = :k) ORDER BY id"),
        {"p": project, "b": branch, "k": series_key})
    return [ChangeMark(r.workload, dict(r.params), r.testbed_fingerprint, r.allocator,
                       r.variant, r.measure, r.commit_sha, float(r.change_pct), r.direction,
                       r.alert_id) for r in rows]


def branch_alerts(session: Session, project: str, branch: str) -> list[Alert]:
    return list(session.scalars(select(Alert).where(Alert.project == project,
                                                    Alert.branch == branch)
                                .order_by(Alert.id.desc())))


def commits_by_prefix(session: Session, prefix: str, limit: int = 20
                      ) -> list[tuple[Commit, Project]]:
    """Commits of any project whose sha starts with `prefix` (hex, checked by the caller)."""
    rows = session.execute(
        select(Commit, Project).join(Project, Project.id == Commit.project_id)
        .where(Commit.sha.startswith(prefix, autoescape=True))
        .order_by(Project.name, Commit.sha).limit(limit))
    return [(c, p) for c, p in rows]


def commits_of(session: Session, project_id: int, shas: list[str]
               ) -> list[tuple[Commit, Project]]:
    """The project's commits with these full shas."""
    rows = session.execute(
        select(Commit, Project).join(Project, Project.id == Commit.project_id)
        .where(Commit.project_id == project_id, Commit.sha.in_(shas)).order_by(Commit.sha))
    return [(c, p) for c, p in rows]


@dataclass
class CommitCell(Where):
    """One allocator configuration's trials of one workload cell at a commit, one measure."""

    allocator: str
    variant: str
    allocator_commit: str
    measure: str
    values: list[float]


COMMIT_TRIALS_SQL = text("""
SELECT w.name AS workload, w.params, w.params_sha256, tb.arch, tb.fingerprint, tb.cpu_model,
       a.name AS allocator, a.variant, a.commit_sha, m.key AS measure,
       array_agg((m.value #>> '{}')::float8 ORDER BY (m.value #>> '{}')::float8) AS vals
FROM trials t
JOIN allocators a ON a.id = t.allocator_id
JOIN workloads w ON w.id = t.workload_id
JOIN testbeds tb ON tb.id = t.testbed_id
CROSS JOIN LATERAL jsonb_each(t.measures) AS m(key, value)
WHERE t.commit_id = :commit_id AND t.ok AND NOT t.warmup AND jsonb_typeof(m.value) = 'number'
GROUP BY w.id, tb.id, a.name, a.variant, a.commit_sha, m.key
ORDER BY w.name, w.params_sha256, tb.fingerprint, a.name <> :own, a.name, a.variant, m.key
""")


def commit_cells(session: Session, commit_id: int, own: str) -> list[CommitCell]:
    """The measured trials of a commit now: its own allocator (`own`, the project's name)
    first, then the peers run beside it."""
    return [CommitCell(r.workload, dict(r.params), r.params_sha256, r.arch, r.fingerprint,
                       r.cpu_model, r.allocator, r.variant, r.commit_sha, r.measure,
                       list(r.vals))
            for r in session.execute(COMMIT_TRIALS_SQL, {"commit_id": commit_id, "own": own})]


def commit_comparisons(session: Session, project_id: int, sha: str, limit: int = 50
                       ) -> list[Comparison]:
    """Comparisons whose base or head names this commit (full sha or a prefix of it)."""
    ids = [int(r[0]) for r in session.execute(text(
        "SELECT id FROM comparisons WHERE project_id = :p AND ("
        " (length(base->>'commit') >= 4 AND left(:sha, length(base->>'commit')) = base->>'commit')"
        " OR (length(head->>'commit') >= 4"
        "     AND left(:sha, length(head->>'commit')) = head->>'commit'))"
        " ORDER BY id DESC LIMIT :n"), {"p": project_id, "sha": sha, "n": limit})]
    if not ids:
        return []
    return list(session.scalars(select(Comparison).where(Comparison.id.in_(ids))
                                .order_by(Comparison.id.desc())))


def commit_alerts(session: Session, project_id: int, sha: str) -> list[Alert]:
    return list(session.scalars(select(Alert).where(
        Alert.project_id == project_id,
        or_(Alert.first_bad_commit == sha, Alert.last_good_commit == sha))
        .order_by(Alert.id.desc())))


def latest_verdicts(session: Session, project_id: int, branch: str) -> list[CommitVerdict]:
    """The finished verdicts (one per arch) of the branch's newest commit that has one."""
    newest = session.scalars(select(CommitVerdict.commit_sha).where(
        CommitVerdict.project_id == project_id, CommitVerdict.branch == branch,
        CommitVerdict.verdict.is_not(None)).order_by(
        CommitVerdict.finished_at.desc().nulls_last(), CommitVerdict.id.desc()).limit(1)
    ).first()
    if newest is None:
        return []
    return list(session.scalars(select(CommitVerdict).where(
        CommitVerdict.project_id == project_id, CommitVerdict.commit_sha == newest,
        CommitVerdict.verdict.is_not(None)).order_by(CommitVerdict.arch)))
