"""An uploaded commit's place on its branch (routes/uploads.py)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from mallard_api.sql import projects as project_sql

# The branch row locked (as a push locks it), so concurrent uploads and pushes number
# the branch consistently; the commit takes the next position unless it has one.
_LOCK = text("SELECT id FROM branches WHERE id = :b FOR NO KEY UPDATE")


def on_branch(session: Session, project_id: int, branch: str, sha: str) -> bool:
    """Put `sha` on `branch` after its last commit unless it is on it (a push, or an
    earlier upload, placed it); True when it was added. A branch's series are in this
    order: uploads in the branch's order, or pushes recorded first, keep it right."""
    branch_id = project_sql.ensure_branch_id(session, project_id, branch)
    session.execute(_LOCK, {"b": branch_id})
    commit_id = project_sql.upsert_commits(session, project_id,
                                           [project_sql.CommitInfo(sha=sha)])[sha]
    return bool(project_sql.add_to_branch(session, branch_id, [commit_id]))
