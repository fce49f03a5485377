"""Projects, branches and commits, and recording a push (commits with branch positions)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.core import Branch, BranchCommit, Commit, Project


@dataclass
class CommitInfo:
    sha: str
    parent: str | None = None
    message: str | None = None
    author: str | None = None
    time: datetime | None = None


def get(session: Session, name: str) -> Project | None:
    return session.scalar(select(Project).where(Project.name == name))


def list_all(session: Session) -> list[Project]:
    return list(session.scalars(select(Project).order_by(Project.name)))


def upsert(session: Session, *, name: str, repo_url: str, allocator_dir: str,
           default_branch: str, tracked_branches: list[str], webhook_secret: str | None
           ) -> Project:
    values = dict(name=name, repo_url=repo_url, allocator_dir=allocator_dir,
                  default_branch=default_branch, tracked_branches=tracked_branches)
    update = dict(values)
    if webhook_secret is not None:
        values["webhook_secret"] = webhook_secret
        update["webhook_secret"] = webhook_secret
    stmt = insert(Project).values(**values)
    stmt = stmt.on_conflict_do_update(index_elements=[Project.name], set_=update)
    session.execute(stmt)
    project = get(session, name)
    assert project is not None
    session.refresh(project)
    return project


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


def ensure_branch(session: Session, project: Project, name: str) -> Branch:
    session.execute(
        insert(Branch).values(project_id=project.id, name=name)
        .on_conflict_do_nothing(index_elements=[Branch.project_id, Branch.name]))
    branch = get_branch(session, project, name)
    assert branch is not None
    return branch


def ensure_commit(session: Session, project_id: int, info: CommitInfo) -> int:
    """Insert the commit if new (fill in missing details if known now); return its id."""
    stmt = insert(Commit).values(project_id=project_id, sha=info.sha, parent_sha=info.parent,
                                 message=info.message, author=info.author,
                                 committed_at=info.time)
    upsert = stmt.on_conflict_do_update(
        index_elements=[Commit.project_id, Commit.sha],
        set_=dict(parent_sha=func.coalesce(stmt.excluded.parent_sha, Commit.parent_sha),
                  message=func.coalesce(stmt.excluded.message, Commit.message),
                  author=func.coalesce(stmt.excluded.author, Commit.author),
                  committed_at=func.coalesce(stmt.excluded.committed_at, Commit.committed_at)),
    ).returning(Commit.id)
    return int(session.execute(upsert).scalar_one())


def record_push(session: Session, project: Project, branch_name: str, after: str,
                commits: list[CommitInfo]) -> tuple[Branch, int]:
    """Record the pushed commits (oldest first) on the branch; return (branch, number new).

    Each commit not yet on the branch gets the next position; the branch head becomes
    `after`. The branch row is locked so concurrent pushes number consistently.
    """
    branch = ensure_branch(session, project, branch_name)
    session.execute(select(Branch.id).where(Branch.id == branch.id).with_for_update())
    infos = list(commits)
    if after not in {c.sha for c in infos}:
        infos.append(CommitInfo(sha=after))
    new = 0
    next_pos = int(session.scalar(
        select(func.coalesce(func.max(BranchCommit.position), 0))
        .where(BranchCommit.branch_id == branch.id)) or 0) + 1
    for info in infos:
        commit_id = ensure_commit(session, project.id, info)
        res = session.execute(
            insert(BranchCommit).values(branch_id=branch.id, commit_id=commit_id,
                                        position=next_pos)
            .on_conflict_do_nothing().returning(BranchCommit.commit_id))
        if res.first() is not None:
            next_pos += 1
            new += 1
    branch.head_sha = after
    branch.updated_at = session.scalar(select(func.now()))  # type: ignore[assignment]
    session.flush()
    return branch, new


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
