"""Projects, branches and commits, and recording a push (commits with branch positions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from mallard_wire.recipes import Recipe
from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.commits import Branch, BranchCommit, Commit
from mallard_api.models.projects import Project
from mallard_api.sql import runners


@dataclass
class CommitInfo:
    sha: str
    parent: str | None = None
    message: str | None = None
    author: str | None = None
    time: datetime | None = None


def get(session: Session, name: str, *, lock: bool = False) -> Project | None:
    q = select(Project).where(Project.name == name)
    if lock:
        q = q.with_for_update()
    return session.scalar(q)


def id_of(session: Session, name: str) -> int | None:
    value = session.scalar(text("SELECT id FROM projects WHERE name = :n"), {"n": name})
    return None if value is None else int(value)


def list_all(session: Session) -> list[Project]:
    return list(session.scalars(select(Project).order_by(Project.name)))


def upsert(session: Session, *, name: str, repo_url: str, default_branch: str,
           tracked_branches: list[str], webhook_secret: str | None,
           recipe: Recipe | None = None, create_only: bool = False) -> Project | None:
    """Create or update (a `webhook_secret` or `recipe` left out keeps the current one);
    with `create_only`, None when the project exists already (it was created by another
    request since the caller looked)."""
    values: dict[str, object] = dict(name=name, repo_url=repo_url,
                                     default_branch=default_branch,
                                     tracked_branches=tracked_branches)
    for key, value in (("webhook_secret", webhook_secret), ("recipe", recipe)):
        if value is not None:
            values[key] = value
    update = dict(values)
    stmt = insert(Project).values(**values)
    if create_only:
        done = session.execute(stmt.on_conflict_do_nothing(index_elements=[Project.name])
                               .returning(Project.id)).first()
        if done is None:
            return None
    else:
        session.execute(stmt.on_conflict_do_update(index_elements=[Project.name], set_=update))
    project = get(session, name)
    assert project is not None
    session.refresh(project)
    return project


def set_recipe(session: Session, project: Project, recipe: Recipe | None) -> None:
    project.recipe = recipe
    session.flush()


def set_peers(session: Session, project: Project, peers: list[str] | None) -> None:
    project.peers = peers
    session.flush()


def set_public(session: Session, project: Project, public: bool) -> None:
    project.public = public
    session.flush()


def find_by_repo(session: Session, names: list[str], urls: list[str]) -> Project | None:
    """The project a forge's push is for: by repository URL first, then by name."""
    urls = [u for u in urls if u]
    if urls:
        hit = session.scalar(select(Project).where(Project.repo_url.in_(urls)).limit(1))
        if hit is not None:
            return hit
    names = [n for n in names if n]
    if names:
        return session.scalar(select(Project).where(Project.name.in_(names)).limit(1))
    return None


def branches(session: Session, project: Project) -> list[Branch]:
    return list(session.scalars(
        select(Branch).where(Branch.project_id == project.id).order_by(Branch.name)))


def get_branch(session: Session, project: Project, name: str) -> Branch | None:
    return session.scalar(
        select(Branch).where(Branch.project_id == project.id, Branch.name == name))


def ensure_branch_id(session: Session, project_id: int, name: str) -> int:
    return runners.get_or_insert(
        session, "SELECT id FROM branches WHERE project_id = :p AND name = :n",
        "INSERT INTO branches (project_id, name) VALUES (:p, :n) "
        "ON CONFLICT (project_id, name) DO NOTHING RETURNING id", {"p": project_id, "n": name})


def ensure_branch(session: Session, project: Project, name: str) -> Branch:
    branch = session.get(Branch, ensure_branch_id(session, project.id, name))
    assert branch is not None
    return branch


def upsert_commits(session: Session, project_id: int, infos: list[CommitInfo]
                   ) -> dict[str, int]:
    """Insert the commits that are new (filling in details known now for the others),
    in one statement; sha -> id. `infos` must not repeat a sha. In sha order: two pushes
    that share commits lock their rows in one order (no deadlock)."""
    if not infos:
        return {}
    infos = sorted(infos, key=lambda c: c.sha)
    rows = session.execute(_UPSERT_COMMITS, {
        "p": project_id, "sha": [c.sha for c in infos], "parent": [c.parent for c in infos],
        "message": [c.message for c in infos], "author": [c.author for c in infos],
        "at": [c.time for c in infos]})
    return {str(r.sha): int(r.id) for r in rows}


def ensure_commit(session: Session, project_id: int, info: CommitInfo) -> int:
    """Insert the commit if new (fill in missing details if known now); return its id."""
    return upsert_commits(session, project_id, [info])[info.sha]


@dataclass
class PushRecord:
    branch_id: int
    new: list[str]  # shas new on the branch, oldest first
    old_head: str | None  # the head before the push, read under the branch's lock
    stale: bool = False  # `after` is an older position of the branch: nothing was done
    late: bool = False  # an older push delivered after a newer one: the head stayed


_UPSERT_COMMITS = text("""
INSERT INTO commits (project_id, sha, parent_sha, message, author, committed_at)
SELECT CAST(:p AS integer), u.sha, u.parent, u.message, u.author, u.at
FROM unnest(CAST(:sha AS text[]), CAST(:parent AS text[]), CAST(:message AS text[]),
            CAST(:author AS text[]), CAST(:at AS timestamptz[]))
     AS u(sha, parent, message, author, at)
ON CONFLICT (project_id, sha) DO UPDATE SET
    parent_sha = COALESCE(EXCLUDED.parent_sha, commits.parent_sha),
    message = COALESCE(EXCLUDED.message, commits.message),
    author = COALESCE(EXCLUDED.author, commits.author),
    committed_at = COALESCE(EXCLUDED.committed_at, commits.committed_at)
RETURNING id, sha
""")

# New commits get the next positions, in push order (the window runs after the filter);
# the branch's head becomes :head in the same statement.
_ADD_TO_BRANCH = text("""
WITH added AS (
    INSERT INTO branch_commits (branch_id, commit_id, position)
    SELECT CAST(:b AS integer), u.id,
           (SELECT coalesce(max(position), 0) FROM branch_commits
            WHERE branch_id = CAST(:b AS integer)) + row_number() OVER (ORDER BY u.ord)
    FROM unnest(CAST(:ids AS bigint[])) WITH ORDINALITY AS u(id, ord)
    WHERE NOT EXISTS (SELECT 1 FROM branch_commits bc
                      WHERE bc.branch_id = CAST(:b AS integer) AND bc.commit_id = u.id)
    RETURNING commit_id
), moved AS (
    UPDATE branches SET head_sha = CAST(:head AS text), updated_at = now()
    WHERE id = CAST(:b AS integer) AND CAST(:head AS text) IS NOT NULL
)
SELECT commit_id FROM added
""")

# The branch locked, with the positions of its head and of the pushed `after`. FOR NO KEY
# UPDATE, not FOR UPDATE: pushes still queue on it, but results posts, which lock the
# branches their trials name FOR KEY SHARE (db 0016), do not wait for a push to commit.
_LOCK_BRANCH = text("""
SELECT b.head_sha,
       (SELECT bc.position FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
        WHERE bc.branch_id = b.id AND c.project_id = :p AND c.sha = b.head_sha) AS head_at,
       (SELECT bc.position FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
        WHERE bc.branch_id = b.id AND c.project_id = :p AND c.sha = :after) AS after_at
FROM branches b WHERE b.id = :b FOR NO KEY UPDATE OF b
""")


def add_to_branch(session: Session, branch_id: int, commit_ids: list[int], *,
                  head: str | None = None) -> set[int]:
    """Put the commits not yet on the branch after its last one, in this order (the caller
    holds the branch row's lock), and make `head` its head when given; returns the ids
    it added."""
    return {int(r[0]) for r in session.execute(_ADD_TO_BRANCH, {
        "b": branch_id, "ids": commit_ids, "head": head})}


def record_push(session: Session, project: Project, branch_name: str, after: str,
                commits: list[CommitInfo], *,
                late: Callable[[str | None], bool] | None = None) -> PushRecord:
    """Record the pushed commits (oldest first) on the branch, in a few statements
    whatever their number; each commit not yet on the branch gets the next position and
    the head becomes `after`. The commits are written first; then the branch row is
    locked (until the caller commits) so concurrent pushes number consistently: as few
    statements as can be under the lock, since pushes to one branch queue on it.

    A push whose `after` is already on the branch at an older position than the head (a
    replayed delivery) changes nothing: a head never moves back to a known older commit.
    `late(head)`, asked with the head read under the lock: whether the push is an older
    one delivered after a newer one; its commits are recorded and the head stays.
    """
    branch_id = ensure_branch_id(session, project.id, branch_name)
    infos: dict[str, CommitInfo] = {}
    for info in commits:
        infos.setdefault(info.sha, info)
    infos.setdefault(after, CommitInfo(sha=after))
    ordered = list(infos.values())
    id_of = upsert_commits(session, project.id, ordered)
    lock = session.execute(_LOCK_BRANCH, {"b": branch_id, "p": project.id, "after": after}
                           ).one()
    old_head = None if lock.head_sha is None else str(lock.head_sha)
    if lock.after_at is not None and lock.head_at is not None and lock.after_at < lock.head_at:
        return PushRecord(branch_id, [], old_head, stale=True)
    is_late = late is not None and late(old_head)
    added = add_to_branch(session, branch_id, [id_of[c.sha] for c in ordered],
                          head=None if is_late else after)
    return PushRecord(branch_id, [c.sha for c in ordered if id_of[c.sha] in added], old_head,
                      late=is_late)


def commits_on_branch(session: Session, branch: Branch, limit: int, offset: int
                      ) -> list[tuple[Commit, int]]:
    rows = session.execute(
        select(Commit, BranchCommit.position)
        .join(BranchCommit, BranchCommit.commit_id == Commit.id)
        .where(BranchCommit.branch_id == branch.id)
        .order_by(BranchCommit.position.desc()).limit(limit).offset(offset))
    return [(c, int(p)) for c, p in rows]


def get_commit(session: Session, project: Project, sha: str) -> Commit | None:
    """A commit by full sha or unique prefix (at least 4 characters)."""
    rows = list(session.scalars(
        select(Commit).where(Commit.project_id == project.id, Commit.sha.startswith(sha))
        .limit(2)))
    return rows[0] if len(rows) == 1 else None


def memberships(session: Session, commit: Commit) -> list[tuple[str, int]]:
    rows = session.execute(text(
        "SELECT b.name, bc.position FROM branch_commits bc JOIN branches b ON b.id = "
        "bc.branch_id WHERE bc.commit_id = :c ORDER BY b.name"), {"c": commit.id})
    return [(str(n), int(p)) for n, p in rows]


def stored_parents(session: Session, project_id: int, shas: list[str]) -> dict[str, str]:
    """sha -> the parent recorded for it, of those of `shas` that have one."""
    rows = session.execute(text(
        "SELECT sha, parent_sha FROM commits WHERE project_id = :p AND sha = ANY(:s) "
        "AND parent_sha IS NOT NULL"), {"p": project_id, "s": shas})
    return {str(r[0]): str(r[1]) for r in rows}


# Recorded commits below `shas` (children, their children...) that are not among them,
# each with the one of `shas` its first parents reach first (depth-capped).
_BELOW = text("""
WITH RECURSIVE below(sha, reaches, depth) AS (
    SELECT c.sha, c.parent_sha, 1 FROM commits c
    WHERE c.project_id = :p AND c.parent_sha = ANY(:s) AND NOT (c.sha = ANY(:s))
  UNION
    SELECT c.sha, b.reaches, b.depth + 1 FROM below b
    JOIN commits c ON c.project_id = :p AND c.parent_sha = b.sha
    WHERE NOT (c.sha = ANY(:s)) AND b.depth < :cap
)
SELECT DISTINCT sha, reaches FROM below
""")


def below(session: Session, project_id: int, shas: list[str], cap: int) -> dict[str, str]:
    """Recorded commit -> the one of `shas` its recorded first parents lead to (for the
    recorded descendants of `shas` that are not among them)."""
    return {str(r[0]): str(r[1]) for r in session.execute(
        _BELOW, {"p": project_id, "s": shas, "cap": cap})}


def set_retention(session: Session, project: Project, keep_pr_days: int | None,
                  keep_raw_days: int | None) -> None:
    project.keep_pr_days, project.keep_raw_days = keep_pr_days, keep_raw_days
    session.flush()
