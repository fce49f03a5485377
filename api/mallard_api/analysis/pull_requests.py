"""Pull/merge requests: a request's head compared with its merge base, the verdict sent
back as a commit status and as one comment on the request (created once, then updated on
every new push, never duplicated; forges.py sends both through the outbox).

What each forge's event carries (read after the delivery is authenticated, on either
webhook address of routes/webhooks.py):

* GitHub `pull_request` (actions opened, reopened, synchronize): `pull_request.number`,
  `pull_request.head.sha`, `pull_request.base.sha`. The base sha is the base branch's
  tip, not the merge base: with a GitHub forge set on the project, the merge base is read
  from `GET /repos/{o}/{r}/compare/{base}...{head}` (`merge_base_commit.sha`); without
  one the base tip is used (the merge base whenever the request is up to date).
* Gitea/Forgejo `pull_request` (actions opened, reopened, synchronized):
  `pull_request.number`, `pull_request.head.sha`, `pull_request.merge_base`.
* GitLab `Merge Request Hook` (actions open, reopen, and update when it carries
  `object_attributes.oldrev`, i.e. new commits; an update without it changed no code):
  `object_attributes.iid`, `object_attributes.last_commit.id`. The hook carries no base
  sha: it is read from `GET /api/v4/projects/{id}/merge_requests/{iid}`
  (`diff_refs.base_sha`, the merge base), so a GitLab project needs its forge set.

A request whose (head, merge base) was compared before (a replay, a reopen, a label
change) queues nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mallard_wire.fields import JsonDict
from mallard_wire.refs import FULL_SHA
from sqlalchemy import select
from sqlalchemy.orm import Session

from mallard_api import forges
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.comparisons import open_comparison, render_report
from mallard_api.config import Settings
from mallard_api.models.comparisons import Comparison
from mallard_api.models.forges import ForgeComment
from mallard_api.models.projects import Project
from mallard_api.models.records import Side
from mallard_api.sql import comparisons as comparison_sql

ACTIONS = {"github": {"opened", "reopened", "synchronize"},
           "gitea": {"opened", "reopened", "synchronized"},
           "gitlab": {"open", "reopen", "update"}}


@dataclass(frozen=True)
class PullRequest:
    number: int
    head: str
    base: str | None  # the merge base when the event carries it (Gitea), else the base tip
    merge_base_known: bool  # base is the merge base itself


@dataclass(frozen=True)
class Handled:
    comparison_id: int
    job_id: int | None  # None: this head and base were compared already
    note: str


class BadEvent(ValueError):
    def __init__(self, field: list[str | int], msg: str, status: int = 422) -> None:
        super().__init__(msg)
        self.field: list[str | int] = field
        self.status = status


def _get(data: Any, *path: str) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _sha(value: Any, field: list[str | int]) -> str:
    if not isinstance(value, str) or not FULL_SHA.match(value):
        raise BadEvent(field, "must be a full commit sha")
    return value.lower()


def parse(forge: str, data: JsonDict) -> PullRequest | None:
    """The request's number, head and base; None for an action that changes no code."""
    if forge == "gitlab":
        where: list[str | int] = ["body", "object_attributes"]
        attrs = data.get("object_attributes")
        action, number = _get(attrs, "action"), _get(attrs, "iid")
        if action == "update" and not _get(attrs, "oldrev"):
            return None  # a title, label or assignee change: no new commits
        head: Any = _get(attrs, "last_commit", "id")
        base: Any = _get(attrs, "diff_refs", "base_sha")  # not sent today: read from the API
        head_field: list[str | int] = [*where, "last_commit", "id"]
        known = base is not None
    else:
        where = ["body", "pull_request"]
        action, number = data.get("action"), _get(data, "pull_request", "number")
        head = _get(data, "pull_request", "head", "sha")
        head_field = [*where, "head", "sha"]
        merge_base = _get(data, "pull_request", "merge_base") if forge == "gitea" else None
        base = merge_base or _get(data, "pull_request", "base", "sha")
        known = bool(merge_base)
    if action not in ACTIONS[forge]:
        return None
    if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 2**31:
        raise BadEvent([*where, "iid" if forge == "gitlab" else "number"],
                       "must be a positive integer")
    head = _sha(head, head_field)
    if base is not None or forge != "gitlab":
        base = _sha(base, [*where, "diff_refs" if forge == "gitlab" else "base", "sha"])
    return PullRequest(number, head, base, known)


def merge_base(session: Session, settings: Settings, project: Project, forge: str,
               pr: PullRequest) -> str:
    """The merge base: the event's own, else the forge's answer, else the base tip."""
    if pr.merge_base_known and pr.base:
        return pr.base
    try:
        found = forges.merge_base(session, settings, project.id, forge, pr.number, pr.base,
                                  pr.head)
    except forges.ForgeError as exc:
        raise BadEvent(["body", "object_attributes" if forge == "gitlab" else "pull_request"],
                       f"the forge did not give the merge base: {exc}", 502) from exc
    if found:
        return found
    if pr.base is None:
        raise BadEvent(["body", "object_attributes", "diff_refs"],
                       "a GitLab merge request hook carries no base commit: set the "
                       f"project's forge (PUT /api/v1/projects/{project.name}/forge) so "
                       "the merge base can be read from GitLab")
    return pr.base


def handle(session: Session, settings: Settings, project: Project, forge: str,
           pr: PullRequest) -> Handled:
    """Queue the comparison merge base vs head (default arch), once per pair."""
    arch = settings.default_arch
    base = merge_base(session, settings, project, forge, pr)
    row = session.get(ForgeComment, (project.id, pr.number))
    if row is None:
        row = ForgeComment(project_id=project.id, number=pr.number)
        session.add(row)
    row.head_sha, row.base_sha = pr.head, base
    seen = comparison_sql.of_pair(session, project.id, arch, base, pr.head)
    if seen is not None and seen.state == "done":  # tell this request what it said
        on_settled(session, settings, seen, comparison_sql.cells(session, seen.id),
                   render_report(session, settings, seen), [row])
    if seen is not None:
        return Handled(seen.id, None, f"pull request #{pr.number}: {pr.head[:7]} vs "
                       f"{base[:7]} was queued before (comparison {seen.id}, {seen.state})")
    comp, job = open_comparison(session, settings, project, arch=arch,
                                base=Side(commit=base), head=Side(commit=pr.head))
    forges.enqueue_status(session, settings, project.id, pr.head, arch, "pending",
                          f"comparing with {base[:7]}", comp.id, context="pull-request")
    return Handled(comp.id, job.id, f"pull request #{pr.number}: {pr.head[:7]} compared "
                   f"with {base[:7]} (comparison {comp.id})")


def waiting(session: Session, comp: Comparison) -> list[ForgeComment]:
    """The requests whose current head and base `comp` compared: they wait for its word."""
    if comp.project_id is None:
        return []
    return list(session.scalars(select(ForgeComment).where(
        ForgeComment.project_id == comp.project_id,
        ForgeComment.head_sha == comp.head.commit,
        ForgeComment.base_sha == comp.base.commit)))


def on_settled(session: Session, settings: Settings, comp: Comparison, cells: list[CellRow],
               report: str, rows: list[ForgeComment]) -> None:
    """A comparison settled with `cells` and `report`: tell the forge of each request in
    `rows` (:func:`waiting`, or the request that asked again)."""
    if comp.project_id is None:
        return
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
