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

Commands: a comment whose line reads `/mallard bench [suite]` on a request (GitHub and
Gitea `issue_comment` on a pull request, GitLab `Note Hook` on a merge request) queues
the same comparison (in `suite`, else the deployment's) when the forge says its author
may push to the repository (forges.may_write); the answer is the request's one comment
("queued", then the result, whatever the project's comment mode). What each event
carries: GitHub `issue.number`, `comment.{id, body, user.login}` (the head and base tip
are read from `GET .../pulls/{n}`); Gitea the same plus `pull_request.head.sha` and
`pull_request.merge_base`; GitLab `object_attributes.{id, note, noteable_type}`,
`user.id`, `merge_request.{iid, last_commit.id}`.

Comment modes (the project's forge, `comment_mode`): `always` writes the comment on
every result; `on-change` only when a cell moved or the result differs from what the
comment said; `never` writes none (the status is always sent). A regressed request opens
an alert (source `pull-request`); acknowledging it (analysis/triage.acknowledge) turns
the request's status green with a note.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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
from mallard_api.models.alerts import Alert
from mallard_api.models.comparisons import Comparison
from mallard_api.models.forges import ForgeComment, ProjectForge
from mallard_api.models.projects import Project
from mallard_api.models.records import AlertCell, Side
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.ui import links

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
           pr: PullRequest, *, suite: str | None = None, asked_by: str | None = None
           ) -> Handled:
    """Queue the comparison merge base vs head (default arch) in `suite`, once per pair;
    `asked_by`: a command's author, answered in the request's comment."""
    arch = settings.default_arch
    base = merge_base(session, settings, project, forge, pr)
    row = session.get(ForgeComment, (project.id, pr.number))
    if row is None:
        row = ForgeComment(project_id=project.id, number=pr.number)
        session.add(row)
    row.head_sha, row.base_sha = pr.head, base
    if asked_by is not None:
        row.asked_head = pr.head
    pair = f"{pr.head[:7]} vs {base[:7]}"
    seen = comparison_sql.of_pair(session, project.id, arch, base, pr.head, suite=suite)
    if seen is not None and seen.state == "done":  # tell this request what it said
        on_settled(session, settings, seen, comparison_sql.cells(session, seen.id),
                   render_report(session, settings, seen), [row])
    if seen is not None:
        if asked_by is not None and seen.state != "done":
            _answer(session, project.id, pr.number, f"@{asked_by} asked for {pair}: comparison "
                    f"{seen.id} is {seen.state}; the result will be here.")
        return Handled(seen.id, None, f"pull request #{pr.number}: {pair} was queued "
                       f"before (comparison {seen.id}, {seen.state})")
    comp, job = open_comparison(session, settings, project, arch=arch, suite=suite,
                                base=Side(commit=base), head=Side(commit=pr.head))
    forges.enqueue_status(session, settings, project.id, pr.head, arch, "pending",
                          f"comparing with {base[:7]}", comp.id, context="pull-request")
    if asked_by is not None:
        _answer(session, project.id, pr.number, f"@{asked_by} asked for {pair} ({comp.suite}): "
                f"comparison {comp.id} is queued; the result will be here.")
    return Handled(comp.id, job.id, f"pull request #{pr.number}: {pr.head[:7]} compared "
                   f"with {base[:7]} (comparison {comp.id})")


def _answer(session: Session, project_id: int, number: int, text: str) -> None:
    forges.enqueue_comment(session, project_id, number, f"**Mallard**: {text}")


COMMAND = re.compile(r"^/mallard[ \t]+bench(?:[ \t]+(?P<suite>\S+))?[ \t]*$", re.MULTILINE)
LOGIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}(?:\[bot\])?$")
SUITE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Command:
    """A `/mallard bench [suite]` comment on a request, as its event carries it."""

    number: int
    author: str  # the login (GitHub, Gitea) or username (GitLab) it is answered as
    author_id: str | int  # what the forge's permission API takes: a login, GitLab's id
    comment_id: str
    suite: str | None
    head: str | None  # GitLab and Gitea events carry it; GitHub's is read
    base: str | None
    merge_base_known: bool


def _comment_fields(forge: str, data: JsonDict) -> tuple[Any, ...] | None:
    """(action ok, number, body, login, author id, comment id, head, base, merge base) of
    a comment event; None when it is not on a pull/merge request."""
    if forge == "gitlab":
        attrs = data.get("object_attributes")
        if _get(attrs, "noteable_type") != "MergeRequest":
            return None
        mr = data.get("merge_request")
        return (_get(attrs, "action") in (None, "create"), _get(mr, "iid"),
                _get(attrs, "note"), _get(data, "user", "username"), _get(data, "user", "id"),
                _get(attrs, "id"), _get(mr, "last_commit", "id"), None, None)
    if not isinstance(_get(data, "issue", "pull_request"), dict):
        return None  # a comment on an issue
    pr = data.get("pull_request") if forge == "gitea" else None
    return (data.get("action") == "created", _get(data, "issue", "number"),
            _get(data, "comment", "body"), _get(data, "comment", "user", "login"),
            _get(data, "comment", "user", "login"), _get(data, "comment", "id"),
            _get(pr, "head", "sha"), _get(pr, "base", "sha"), _get(pr, "merge_base"))


def parse_command(forge: str, data: JsonDict) -> Command | None:
    """The command a comment event carries; None for any other comment (not on a
    request, edited or deleted, without a command, or Mallard's own)."""
    got = _comment_fields(forge, data)
    if got is None or not got[0]:
        return None
    _, number, body, login, author_id, comment_id, head, base, mb = got
    where: list[str | int] = (["body", "object_attributes"] if forge == "gitlab"
                              else ["body", "comment"])
    if not isinstance(body, str) or body.startswith("<!-- mallard:"):
        return None
    found = COMMAND.search(body[:65536])
    if found is None:
        return None
    if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 2**31:
        raise BadEvent(["body", "merge_request" if forge == "gitlab" else "issue", "number"],
                       "must be a positive integer")
    if not isinstance(login, str) or not LOGIN.match(login):
        raise BadEvent(["body", "user"] if forge == "gitlab" else [*where, "user", "login"],
                       "must be the commenter's login")
    if forge == "gitlab" and (isinstance(author_id, bool) or not isinstance(author_id, int)):
        raise BadEvent(["body", "user", "id"], "must be the commenter's id")
    if not isinstance(comment_id, int | str) or isinstance(comment_id, bool):
        raise BadEvent([*where, "id"], "must be the comment's id")
    if head is not None or forge != "github":
        field: list[str | int] = (["body", "merge_request", "last_commit", "id"]
                                  if forge == "gitlab" else ["body", "pull_request", "head",
                                                             "sha"])
        head = _sha(head, field)
    base = _sha(mb or base, ["body", "pull_request", "merge_base"]) if mb or base else None
    return Command(number, login, author_id, str(comment_id)[:100], found["suite"], head,
                   base, bool(mb))


def command_request(session: Session, settings: Settings, project: Project, forge: str,
                    cmd: Command) -> PullRequest | str:
    """The request a command asks about, once the forge says its author may push; else
    why nothing is queued. A BadEvent (502) when the forge does not answer."""
    try:
        if not forges.may_write(session, settings, project.id, forge, cmd.author_id):
            return (f"@{cmd.author} may not ask for a benchmark: the forge gives them no "
                    "write access to the repository (or the project has no forge)")
        if cmd.head is not None:
            return PullRequest(cmd.number, cmd.head, cmd.base, cmd.merge_base_known)
        shas = forges.pull_request_shas(session, settings, project.id, cmd.number)
    except forges.ForgeError as exc:
        raise BadEvent(["body", "comment"], f"the forge did not answer: {exc}", 502) from exc
    if shas is None:
        return "the project's forge is not GitHub: the pull request cannot be read"
    return PullRequest(cmd.number, shas[0], shas[1], False)


def run_command(session: Session, settings: Settings, project: Project, forge: str,
                cmd: Command, check_suite: Callable[[str], str | None]) -> Handled | str:
    """Queue what a command asks (:func:`handle`), answered in the request's comment;
    else why not (a suite it does not know is answered there too)."""
    pr = command_request(session, settings, project, forge, cmd)
    if isinstance(pr, str):
        return pr
    suite = cmd.suite or settings.suite
    reason = check_suite(suite) if SUITE.match(suite) else "not a suite name"
    if reason:
        _answer(session, project.id, pr.number, f"@{cmd.author}: {reason}")
        return reason
    return handle(session, settings, project, forge, pr, suite=suite, asked_by=cmd.author)


def waiting(session: Session, comp: Comparison) -> list[ForgeComment]:
    """The requests whose current head and base `comp` compared: they wait for its word."""
    if comp.project_id is None:
        return []
    return list(session.scalars(select(ForgeComment).where(
        ForgeComment.project_id == comp.project_id,
        ForgeComment.head_sha == comp.head.commit,
        ForgeComment.base_sha == comp.base.commit)))


def summary_of(comp: Comparison, cells: list[CellRow]) -> tuple[str, str]:
    """The status state (success | failure | error) and its one-line summary."""
    regressed = [c for c in cells if c.verdict == "regressed"]
    if comp.state == "failed":
        return "error", "no result: the job failed (see its log)"
    if regressed:
        return "failure", f"{len(regressed)} regressed cell(s) vs {comp.base.commit[:7]}"
    return "success", f"no regression vs {comp.base.commit[:7]}"


def comment_due(mode: str, row: ForgeComment, cells: list[CellRow], summary: str) -> bool:
    """Whether the comment is written (module doc: comment modes)."""
    if row.asked_head is not None and row.asked_head == row.head_sha or mode == "always":
        return True
    moved = any(c.verdict in ("regressed", "improved") for c in cells)
    return mode == "on-change" and (moved or row.summary not in (None, summary))


def on_settled(session: Session, settings: Settings, comp: Comparison, cells: list[CellRow],
               report: str, rows: list[ForgeComment]) -> None:
    """A comparison settled with `cells` and `report`: tell the forge of each request in
    `rows` (:func:`waiting`, or the request that asked again)."""
    if comp.project_id is None:
        return
    f = session.get(ProjectForge, comp.project_id)
    state, summary = summary_of(comp, cells)
    for row in rows:
        alert = open_alert(session, comp, row, cells) if state == "failure" else None
        if alert is not None and alert.state == "acknowledged":
            state, summary = "success", f"acknowledged: {summary} (alert {alert.id})"
        forges.enqueue_status(session, settings, comp.project_id, row.head_sha or "",
                              comp.arch, state, summary, comp.id, context="pull-request")
        if f is not None and comment_due(f.comment_mode, row, cells, summary):
            body = (f"**Mallard** ({comp.arch}): {summary}\n\n```\n{report[:60000]}\n```")
            forges.enqueue_comment(session, comp.project_id, row.number, body)
            row.summary = summary


def alert_key(project: str, number: int, arch: str) -> str:
    return f"{project}/pull-request/{number}/{arch}"


def open_alert(session: Session, comp: Comparison, row: ForgeComment, cells: list[CellRow]
               ) -> Alert | None:
    """The request's alert for this head (opened once): its regressed cells, the worst
    first; None without one."""
    regressed = sorted((c for c in cells if c.verdict == "regressed"),
                       key=lambda c: -abs(c.diff_pct or 0.0))
    if not regressed or comp.project_id is None:
        return None
    key, head = alert_key(comp.project, row.number, comp.arch), comp.head.commit or ""
    w = regressed[0]
    alert_sql.add_alert_row(session, Alert(
        series_key=key, project_id=comp.project_id, project=comp.project,
        branch=f"pull-request/{row.number}", workload=w.workload, params=w.params,
        threads=w.threads, arch=comp.arch, testbed_fingerprint=comp.testbed_fingerprint or "",
        allocator=comp.project, variant="", measure=w.measure, first_bad_commit=head,
        last_good_commit=comp.base.commit, change_pct=w.diff_pct or 0.0,
        ci_low_pct=w.ci_low_pct, ci_high_pct=w.ci_high_pct, before_median=w.base_median,
        after_median=w.head_median, state="open", source="pull-request",
        text=(f"{comp.project} pull request #{row.number}: {head[:7]} vs "
              f"{(comp.base.commit or '')[:7]} ({comp.arch}): {len(regressed)} regressed "
              f"cell(s); worst {w.workload} threads={w.threads} {w.measure} "
              f"{w.diff_pct or 0.0:+.1f}% (comparison {comp.id})"),
        cells=[AlertCell(series_key=key, workload=c.workload, params=c.params,
                         threads=c.threads, measure=c.measure, diff_pct=c.diff_pct,
                         ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct, line=c.line)
               for c in regressed]))
    return next((a for a in alert_sql.alerts_of_series(session, key)
                 if a.first_bad_commit == head), None)


def acknowledged(session: Session, settings: Settings, alert: Alert, by: str) -> None:
    """A pull request's regression was acknowledged: while the request's head is still
    the alert's, its status turns green with a note, and the comment says so."""
    if alert.source != "pull-request" or alert.project_id is None:
        return
    number = int(alert.branch.rsplit("/", 1)[-1])
    row = session.get(ForgeComment, (alert.project_id, number))
    if row is None or row.head_sha != alert.first_bad_commit:
        return
    note = f"regression acknowledged by {by} (alert {alert.id}): {alert.text}"
    forges.enqueue_status(session, settings, alert.project_id, alert.first_bad_commit,
                          alert.arch, "success", f"acknowledged: {alert.text}", None,
                          context="pull-request", page=links.alert(alert.id))
    said = forges.last_comment(session, alert.project_id, number)
    forges.enqueue_comment(session, alert.project_id, number,
                           f"**Mallard**: {note}" + (f"\n\n{said}" if said else ""))
    row.summary = note
