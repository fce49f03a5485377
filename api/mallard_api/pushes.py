"""A push, whatever forge it came from: record its commits on the branch and queue
`commit` jobs, one per runner architecture known (default x86_64 when no runner
registered), for the push's newest new commits (at most MALLARD_PUSH_MAX_QUEUED)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from mallard_api.config import Settings
from mallard_api.models.core import Project
from mallard_api.schemas.core import PushOut
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import runners as runner_sql
from mallard_api.sql.projects import CommitInfo
from mallard_api.urls import check_repo_url, parse_allow_list

ZERO = "0" * 40


def commit_spec(settings: Settings, project: Project, branch: str, sha: str) -> dict[str, Any]:
    """The job spec of contracts §5 for benchmarking one commit (head plus peers)."""
    return {
        "project": project.name, "repo_url": project.repo_url,
        "allocator_dir": project.allocator_dir, "suite": settings.suite,
        "workloads": None, "threads": None, "trials": settings.trials,
        "warmup": settings.warmup, "branch": branch, "commit": sha,
        "allocators": [{"label": "head", "name": "mallard", "commit": sha, "variant": None}]
        + [{"label": "peer", "name": peer} for peer in settings.peer_list],
    }


def is_tracked(project: Project, branch: str) -> bool:
    return branch == project.default_branch or branch in (project.tracked_branches or [])


def handle_push(session: Session, settings: Settings, project: Project, *, ref: str,
                after: str, commits: list[CommitInfo]) -> PushOut:
    """Record the push and queue commit jobs for its newest new commits (at most
    `push_max_queued`, oldest of them first) on a tracked branch; commits the caller."""
    if not ref.startswith("refs/heads/"):
        return PushOut(project=project.name, branch=None, commits=0, jobs=[],
                       ignored=f"{ref} is not a branch")
    branch = ref[len("refs/heads/"):]
    if not after or set(after) == {"0"}:
        return PushOut(project=project.name, branch=branch, commits=0, jobs=[],
                       ignored="branch deleted")
    after = after.lower()
    record = project_sql.record_push(session, project, branch, after, commits)
    if record.stale:
        session.commit()  # nothing changed but the delivery id (when there is one)
        return PushOut(project=project.name, branch=branch, commits=0, jobs=[],
                       ignored=f"{after[:12]} is older than the head of {branch}: "
                               "a branch head never moves back (a replayed delivery?)")
    jobs: list[int] = []
    queued: set[str] = set()
    ignored = None
    wanted = record.new[-settings.push_max_queued:] if settings.push_max_queued else []
    if not is_tracked(project, branch):
        ignored = f"branch {branch} is not tracked"
    elif check_repo_url(project.repo_url, parse_allow_list(settings.repo_url_allow)):
        ignored = "the project's repo_url is not allowed by MALLARD_REPO_URL_ALLOW: " \
                  "commits recorded, no job queued"
    else:
        arches = runner_sql.arches(session) or [settings.default_arch]
        for sha in wanted:
            for arch in arches:
                if job_sql.active_commit_job(session, project_id=project.id, sha=sha,
                                             arch=arch) is not None:
                    continue
                job = job_sql.enqueue(session, kind="commit", arch=arch,
                                      spec=commit_spec(settings, project, branch, sha),
                                      project_id=project.id,
                                      max_attempts=settings.job_max_attempts)
                jobs.append(job.id)
                queued.add(sha)
    session.commit()
    return PushOut(project=project.name, branch=branch, commits=len(record.new),
                   queued=len(queued), jobs=jobs, ignored=ignored)


def chain(before: str | None, raw: list[tuple[str, str | None, str | None, Any]]
          ) -> list[CommitInfo]:
    """Forge payloads list commits oldest first without parents: each one's parent is the
    one before it (the first one's is `before`)."""
    out: list[CommitInfo] = []
    parent = None if not before or set(before) == {"0"} else before.lower()
    for sha, message, author, when in raw:
        out.append(CommitInfo(sha=sha.lower(), parent=parent, message=message, author=author,
                              time=when))
        parent = sha.lower()
    return out
