"""Pull/merge requests: a request's head compared with its base, the verdict sent back as
a commit status and as one comment on the request (created once, then updated on every
new push, never duplicated; forges.py sends both through the outbox).

Events read (per-project webhook address, authenticated like pushes):
GitHub `pull_request` and Gitea/Forgejo `pull_request` (actions opened, reopened,
synchronize/synchronized): `pull_request.number`, `head.sha`, and the base:
Gitea's `merge_base`, else `base.sha` (GitHub sends no merge base: its `base.sha` is the
base branch's tip, the merge base whenever the request is up to date with it). GitLab
`Merge Request Hook` (actions open, reopen, update): `object_attributes.iid`,
`last_commit.id`, `diff_refs.base_sha` (the merge base).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mallard_wire.fields import FULL_SHA
from sqlalchemy import select
from sqlalchemy.orm import Session

from mallard_api import forges
from mallard_api.analysis.comparisons import allocator_label, comparison_spec
from mallard_api.config import Settings
from mallard_api.models.analysis import Comparison
from mallard_api.models.core import Project
from mallard_api.models.records import Side
from mallard_api.models.verdicts import ForgeComment
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import jobs as job_sql

PR_EVENTS = {"github": "pull_request", "gitea": "pull_request",
             "gitlab": "Merge Request Hook"}
ACTIONS = {"opened", "reopened", "synchronize", "synchronized", "open", "reopen", "update"}


@dataclass(frozen=True)
class PullRequest:
    number: int
    head: str
    base: str


class BadEvent(ValueError):
    def __init__(self, field: list[str | int], msg: str) -> None:
        super().__init__(msg)
        self.field: list[str | int] = field


def _get(data: Any, *path: str) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def parse(forge: str, data: dict[str, Any]) -> PullRequest | None:
    """The request's number, head and base; None for an action that changes no code."""
    if forge == "gitlab":
        action, number = _get(data, "object_attributes", "action"), \
            _get(data, "object_attributes", "iid")
        head = _get(data, "object_attributes", "last_commit", "id")
        base = _get(data, "object_attributes", "diff_refs", "base_sha")
        where = ["body", "object_attributes"]
    else:
        action, number = data.get("action"), _get(data, "pull_request", "number")
        head = _get(data, "pull_request", "head", "sha")
        base = _get(data, "pull_request", "merge_base") or _get(data, "pull_request", "base",
                                                                "sha")
        where = ["body", "pull_request"]
    if action not in ACTIONS:
        return None
    if not isinstance(number, int) or not 0 < number < 2**31:
        raise BadEvent([*where, "number"], "must be a positive integer")
    for name, sha in (("head", head), ("base", base)):
        if not isinstance(sha, str) or not FULL_SHA.match(sha):
            raise BadEvent([*where, name], "must be a full commit sha")
    return PullRequest(number, str(head).lower(), str(base).lower())


def handle(session: Session, settings: Settings, project: Project, pr: PullRequest
           ) -> tuple[int, int]:
    """Queue the comparison base vs head (default arch); (comparison id, job id)."""
    arch = settings.default_arch
    comp = comparison_sql.create(session, Comparison(
        project_id=project.id, project=project.name, arch=arch,
        base=Side(commit=pr.base), head=Side(commit=pr.head),
        base_label=allocator_label(Side(commit=pr.base)),
        head_label=allocator_label(Side(commit=pr.head)), workloads=None, threads=None,
        suite=settings.suite, trials=settings.trials, warmup=settings.warmup, peers=[],
        hypothesis=None, state="queued", max_follow_ups=settings.comparison_max_follow_ups))
    spec = comparison_spec(comp, project_repo=project.repo_url,
                           allocator_dir=project.allocator_dir, workloads=None, threads=None,
                           trials=settings.trials, peers=[])
    job = job_sql.enqueue(session, kind="comparison", arch=arch, spec=spec,
                          project_id=project.id, max_attempts=settings.job_max_attempts)
    comparison_sql.link_job(session, comparison_id=comp.id, job_id=job.id, round=0,
                            trials=settings.trials)
    row = session.get(ForgeComment, (project.id, pr.number))
    if row is None:
        session.add(ForgeComment(project_id=project.id, number=pr.number, head_sha=pr.head,
                                 base_sha=pr.base))
    else:
        row.head_sha, row.base_sha = pr.head, pr.base
    forges.enqueue_status(session, settings, project.id, pr.head, arch, "pending",
                          f"comparing with {pr.base[:7]}", comp.id, context="pull-request")
    return comp.id, job.id


def on_settled(session: Session, settings: Settings, comp: Comparison, report: str) -> None:
    """A comparison settled: if it is a request's current head vs base, tell the forge."""
    if comp.project_id is None:
        return
    rows = session.scalars(select(ForgeComment).where(
        ForgeComment.project_id == comp.project_id,
        ForgeComment.head_sha == comp.head.commit,
        ForgeComment.base_sha == comp.base.commit))
    cells = comparison_sql.cells(session, comp.id)
    regressed = [c for c in cells if c.verdict == "regressed"]
    state = "error" if comp.state == "failed" else ("failure" if regressed else "success")
    summary = (f"{len(regressed)} regressed cell(s) vs {comp.base.commit[:7]}"
               if regressed else f"no regression vs {comp.base.commit[:7]}")
    if comp.state == "failed":
        summary = "no result: the job failed (see its log)"
    for row in rows:
        forges.enqueue_status(session, settings, comp.project_id, row.head_sha or "",
                              comp.arch, state, summary, comp.id, context="pull-request")
        body = (f"**Mallard** ({comp.arch}): {summary}\n\n```\n{report[:60000]}\n```")
        forges.enqueue_comment(session, comp.project_id, row.number, body)
