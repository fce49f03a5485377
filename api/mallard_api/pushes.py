"""A push, whatever forge it came from: record its commits on the branch and queue
`commit` jobs, one per architecture with a live runner (MALLARD_DEFAULT_ARCH when none),
for the push's newest new commits (at most MALLARD_PUSH_MAX_QUEUED; the rest are
backfilled later, verdicts.py). Each commit job builds the project's own allocator by its
recipe (a project without one records the push and queues nothing), and judges its
commit against the last measured commit of the branch (a commit verdict). A force-push
(the old head is not an ancestor of the new one) marks the commits it took off the branch
unreachable; their results are kept. An older push delivered after a newer one (its
`before` is no longer the head, its `after` is an ancestor of the head) records its
commits and leaves the head where it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import HTTPException
from sqlalchemy.orm import Session

from mallard_api.analysis import specs, verdicts
from mallard_api.auth import field_error
from mallard_api.config import Settings
from mallard_api.models.projects import Project
from mallard_api.models.records import Side
from mallard_api.schemas.commits import PushOut
from mallard_api.sql import projects as project_sql
from mallard_api.sql import verdicts as verdict_sql
from mallard_api.sql.projects import CommitInfo
from mallard_api.urls import check_repo_url, parse_allow_list

ZERO = "0" * 40
LATE_DEPTH = 64  # deliveries come out of order by a few pushes, not by this many commits


def is_tracked(project: Project, branch: str) -> bool:
    return branch == project.default_branch or branch in (project.tracked_branches or [])


def handle_push(session: Session, settings: Settings, project: Project, *, ref: str,
                after: str, commits: list[CommitInfo], before: str | None = None,
                charge: Callable[[list[int]], None] | None = None) -> PushOut:
    """Record the push and queue commit jobs for its newest new commits (at most
    `push_max_queued`, oldest of them first) on a tracked branch; commits the caller.
    `charge`, when given, is handed the queued jobs' ids before the commit (a token's
    quotas): when it refuses them (429), the push is recorded and its new commits are
    deferred, none queued, and the note says which quota. `before`, the head the push
    started from, tells an older push delivered late (`arrives_late`)."""
    if not ref.startswith("refs/heads/"):
        return PushOut(project=project.name, branch=None, commits=0, jobs=[],
                       ignored=f"{ref} is not a branch")
    branch = ref[len("refs/heads/"):]
    if not after or set(after) == {"0"}:
        return PushOut(project=project.name, branch=branch, commits=0, jobs=[],
                       ignored="branch deleted")
    after = after.lower()
    refuse_cycles(session, settings, project, after, commits)
    ignored = not_queued(session, settings, project, branch, after)  # before the lock
    record = project_sql.record_push(session, project, branch, after, commits, late=(
        lambda head: arrives_late(session, project, head, before, after, commits)))
    if record.stale:
        session.commit()  # nothing changed but the delivery id (when there is one)
        return PushOut(project=project.name, branch=branch, commits=0, jobs=[],
                       ignored=f"{after[:12]} is older than the head of {branch}: "
                               "a branch head never moves back (a replayed delivery?)")
    jobs: list[int] = []
    queued: set[str] = set()
    unreachable = [] if record.late else mark_rewritten(session, settings, project, record,
                                                        after, commits)
    wanted = record.new[-settings.push_max_queued:] if settings.push_max_queued else []
    over_quota = None
    if ignored is None:
        try:
            with session.begin_nested():  # past a quota: none of the jobs, all deferred
                jobs, queued = queue_jobs(session, settings, project, branch,
                                          record.branch_id, wanted)
                if charge is not None and jobs:
                    charge(jobs)
        except HTTPException as exc:
            if exc.status_code != 429:
                raise
            detail: Any = exc.detail  # field_error's: [{"loc", "msg", "type"}]
            over_quota = str(detail[0]["msg"] if isinstance(detail, list) else detail)
            jobs, queued, wanted = [], set(), []
    deferred = len(record.new) - len(wanted) if ignored is None else 0
    if deferred:
        verdict_sql.defer(session, project.id, branch, record.new[:deferred],
                          verdicts.arches(session, settings))
    note = push_note(settings, record, len(wanted), deferred, over_quota)
    session.commit()
    return PushOut(project=project.name, branch=branch, commits=len(record.new),
                   queued=len(queued), jobs=jobs, ignored=ignored, deferred=deferred,
                   unreachable=len(unreachable), note=note)


def push_note(settings: Settings, record: project_sql.PushRecord, queued: int, deferred: int,
              over_quota: str | None) -> str | None:
    """What the answer says beyond its counts: a late delivery, the commits deferred."""
    late = (f"delivered after a newer push: its commits are recorded, the head stays at "
            f"{(record.old_head or '')[:12]}" if record.late else None)
    if not deferred:
        return late
    why = over_quota or f"MALLARD_PUSH_MAX_QUEUED={settings.push_max_queued}"
    return "; ".join(filter(None, [late, (
        f"{len(record.new)} new commits: the newest {queued} queued ({why}); {deferred} "
        "deferred" + (", backfilled newest first when runners are idle"
                      if settings.push_backfill else " (backfill is off)"))]))


def queue_jobs(session: Session, settings: Settings, project: Project, branch: str,
               branch_id: int, wanted: list[str]) -> tuple[list[int], set[str]]:
    """The commit jobs of `wanted` (oldest first), one per live architecture: their ids,
    and the commits that got one."""
    jobs: list[int] = []
    queued: set[str] = set()
    for sha in wanted:
        for arch in verdicts.arches(session, settings):
            job_id = verdicts.queue_commit(session, settings, project, branch=branch,
                                           branch_id=branch_id, sha=sha, arch=arch)
            if job_id is not None:
                jobs.append(job_id)
                queued.add(sha)
    return jobs, queued


def mark_rewritten(session: Session, settings: Settings, project: Project,
                   record: project_sql.PushRecord, after: str, commits: list[CommitInfo]
                   ) -> list[str]:
    """A force-push (the old head is not an ancestor of `after`, whose ancestry reaches
    the branch's old history): what is gone stays, marked unreachable; what it marked.
    A push whose own commits lead from `after` to the old head is a fast-forward without
    asking the database (the walk runs under the branch's lock)."""
    old_head = record.old_head
    if not old_head or old_head == after or old_head in pushed_ancestry(after, commits):
        return []
    keep = verdict_sql.ancestry(session, project.id, after, settings.bisect_max_commits,
                                until=old_head)
    new = set(record.new)
    joins = any(sha not in new for sha in keep[1:])  # reaches the branch's old history
    if old_head in keep or not joins:
        return []
    return verdict_sql.mark_unreachable(session, record.branch_id, keep)


def arrives_late(session: Session, project: Project, head: str | None, before: str | None,
                 after: str, commits: list[CommitInfo]) -> bool:
    """Whether a push is an older one delivered after a newer one (forges do not promise
    the order of their deliveries): it started from a `before` that is no longer the
    branch's `head`, and its `after` is among the head's ancestors. Without this, it
    would look like a force-push back to `after` and mark the newer commits unreachable.
    A force-push starts from the head it replaces, so it is not late. The walk runs under
    the branch's lock, so it looks only `LATE_DEPTH` commits below the head."""
    if head is None or not before or set(before) == {"0"} or before.lower() == head \
            or head == after:
        return False
    if head in pushed_ancestry(after, commits):
        return False  # a fast-forward from an older head
    return after in verdict_sql.ancestry(session, project.id, head, LATE_DEPTH, until=after)


def pushed_ancestry(after: str, commits: list[CommitInfo]) -> set[str]:
    """`after` and its first parents as far as the push's own commits tell them."""
    parent_of = {c.sha: c.parent for c in commits}
    seen: set[str] = set()
    node: str | None = after
    while node is not None and node not in seen:
        seen.add(node)
        node = parent_of.get(node)
    return seen


def not_queued(session: Session, settings: Settings, project: Project, branch: str,
               after: str) -> str | None:
    """Why the push's commits are recorded but queue no job; None when they queue."""
    if not is_tracked(project, branch):
        return f"branch {branch} is not tracked"
    if check_repo_url(project.repo_url, parse_allow_list(settings.repo_url_allow)):
        return ("the project's repo_url is not allowed by MALLARD_REPO_URL_ALLOW: "
                "commits recorded, no job queued")
    if (unbuildable := cannot_build(session, settings, project, after)) is not None:
        return f"{unbuildable}: commits recorded, no job queued"
    return None


def cannot_build(session: Session, settings: Settings, project: Project, sha: str
                 ) -> str | None:
    """Why the project's commit jobs cannot be built (no recipe, a peer project that is
    gone), None when they can: each queues the project's own allocator by its recipe."""
    try:
        specs.check_sides(session, project, None, Side(commit=sha),
                          specs.peers_of(project, settings.peer_list))
    except specs.SpecError as exc:
        return exc.msg
    return None


def first_cycle(parents: dict[str, str | None]) -> list[str] | None:
    """A cycle of the graph where each commit has at most one parent (`parents`; a parent
    outside the mapping ends a walk), as the commits on it; None when there is none."""
    walked: dict[str, str] = {}  # commit -> the walk that reached it first
    for start in parents:
        path: list[str] = []
        node: str | None = start
        while node is not None and node in parents and node not in walked:
            walked[node] = start
            path.append(node)
            node = parents[node]
        if node is not None and walked.get(node) == start:
            return path[path.index(node):]
    return None


def refuse_cycles(session: Session, settings: Settings, project: Project, after: str,
                  commits: list[CommitInfo]) -> None:
    """422 naming the commit when the push would make a commit its own ancestor: its
    parents among themselves, or through commits recorded before (a recorded commit below
    one of the push's). Nothing is recorded then, so nothing is queued or bisected."""
    pushed: dict[str, str | None] = {}
    for info in commits:
        pushed.setdefault(info.sha, info.parent)
    pushed.setdefault(after, None)
    shas = list(pushed)
    recorded = project_sql.stored_parents(
        session, project.id, [s for s, parent in pushed.items() if parent is None])
    below = project_sql.below(session, project.id, shas, settings.bisect_max_commits)
    parents: dict[str, str | None] = {}
    for sha, parent in pushed.items():  # what each commit's parent will be, as the push
        parent = parent or recorded.get(sha)  # records it (upsert_commits)
        parents[sha] = below.get(parent, parent) if parent is not None else None
    cycle = first_cycle(parents)
    if cycle is None:
        return
    where = [i for i, c in enumerate(commits) if c.sha in cycle]
    loc: list[str | int] = ["body", "commits", where[0]] if where else ["body", "after"]
    first = commits[where[0]].sha if where else after
    at = cycle.index(first)
    shown = " -> ".join(s[:12] for s in [*cycle[at:], *cycle[:at], first])
    raise field_error(422, loc, f"commit {first[:12]} would be its own ancestor ({shown}): "
                      "a push whose commits are each other's parents is refused, and "
                      "nothing of it is recorded")


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
