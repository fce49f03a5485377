"""What people decide about alerts and series: triage, acknowledge, baselines, broken
ranges. The REST routes (routes/alerts.py, routes/baselines.py) and the pages' forms
(ui/forms.py) call these functions, and nothing else changes these fields.

- **Triage** of an alert: its `triage` state (untriaged, acknowledged, investigating, fixed,
  wont_fix, invalid), `assignee`, `bug_url`, true/false positive `label` and notes (author
  and time). Every change writes one `alert_audit` row (who, when, field, old -> new).
  The alert's `state` (open, acknowledged, resolved) stays the detector's lifecycle; only
  acknowledging moves it (open -> acknowledged).
- **Acknowledge** (:func:`acknowledge`) is the one way an alert is acknowledged: the REST
  `POST /alerts/{id}/acknowledge`, the triage state `acknowledged` (REST or form) and
  nothing else; a resolved alert cannot be acknowledged (:class:`Refused`, a 409).
- **Baseline** (:func:`accept_baseline`): a commit of a branch accepted as intended (from
  its alert or its commit page). Every series of the branch restarts there: change
  detection and commit verdicts look no further back (sql/baselines.py, sql/verdicts.py);
  the older points stay on the plots. Accepting an alert's change resolves the alert.
- **Broken range** (:func:`mark_broken`): commits of a branch left out of analysis (the
  plots grey them).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from mallard_api import notify
from mallard_api.analysis import alerts, pull_requests
from mallard_api.config import Settings
from mallard_api.models.alerts import Alert
from mallard_api.models.commits import Branch
from mallard_api.schemas.alerts import TriageIn
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import baselines as baseline_sql
from mallard_api.sql import triage as sql

FIELDS = ("triage", "assignee", "bug_url", "label")


@dataclass
class Refused(Exception):
    """The change cannot be made: `field` names what is at fault, `status` the HTTP code."""

    status: int
    field: str
    msg: str


def _set(session: Session, alert: Alert, actor: str, field: str, value: str | None) -> bool:
    old = getattr(alert, field)
    if old == value:
        return False
    setattr(alert, field, value)
    sql.audit(session, alert.id, actor, field, old, value)
    return True


def acknowledge(session: Session, settings: Settings, alert: Alert, actor: str,
                note: str | None = None) -> Alert:
    """Acknowledge `alert` (the one place it happens): open -> acknowledged, triage
    untriaged -> acknowledged, audited; a note when given. `settings` is for what
    acknowledging tells others: a pull request's regression turns its status green."""
    if alert.state == "resolved":
        raise Refused(409, "alert_id", f"alert {alert.id} is already resolved")
    if alert.state != "acknowledged":
        sql.audit(session, alert.id, actor, "state", alert.state, "acknowledged")
        alert_sql.set_state(alert, "acknowledged")
    if alert.triage == "untriaged":
        _set(session, alert, actor, "triage", "acknowledged")
    if note:
        add_note(session, alert, actor, note)
    pull_requests.acknowledged(session, settings, alert, actor)
    return alert


def add_note(session: Session, alert: Alert, actor: str, body: str) -> None:
    sql.add_note(session, alert.id, actor, body)
    sql.audit(session, alert.id, actor, "note", None, body[:200])
    alert_sql.touch(alert)


def apply(session: Session, settings: Settings, alert: Alert, actor: str,
          change: TriageIn) -> Alert:
    """Apply what a person decided: the fields sent, each change audited."""
    sent = change.model_fields_set
    if change.triage == "acknowledged" and "triage" in sent:
        acknowledge(session, settings, alert, actor)
    changed = False
    for field in FIELDS:
        if field in sent:
            value = getattr(change, field)
            changed |= _set(session, alert, actor, field, value.strip() or None
                            if isinstance(value, str) else value)
    if changed:
        alert_sql.touch(alert)
    if change.note:
        add_note(session, alert, actor, change.note)
    return alert


def accept_baseline(session: Session, settings: Settings, branch: Branch, sha: str,
                    actor: str, *, note: str = "", alert: Alert | None = None) -> str:
    """Accept the change at commit `sha` of `branch` as intended: a new baseline there
    (module doc). From an alert: the alert is resolved, its triage `wont_fix` when it was
    untriaged or acknowledged, both audited. Returns the commit's full sha."""
    found = baseline_sql.on_branch(session, branch.id, sha)
    if found is None:
        raise Refused(404, "sha", f"{sha[:64]} is not a commit of {branch.name} "
                      "(or names more than one)")
    baseline_sql.add_baseline(session, branch.id, found.commit_id, actor=actor, note=note,
                              alert_id=None if alert is None else alert.id)
    if alert is not None:
        if alert.triage in ("untriaged", "acknowledged"):
            _set(session, alert, actor, "triage", "wont_fix")
        if alert.state != "resolved":
            sql.audit(session, alert.id, actor, "state", alert.state, "resolved")
            alerts.resolve(session, alert, notify.targets(session, settings.alert_webhooks),
                           reason=f"accepted as the new baseline by {actor}")
        add_note(session, alert, actor, note or f"accepted {found.sha[:7]} as the new "
                 "baseline of " + branch.name)
    return found.sha


def mark_broken(session: Session, branch: Branch, first: str, last: str, actor: str,
                reason: str) -> tuple[str, str]:
    """Leave commits `first`..`last` of `branch` out of analysis; their full shas."""
    ends = []
    for field, sha in (("first", first), ("last", last)):
        found = baseline_sql.on_branch(session, branch.id, sha)
        if found is None:
            raise Refused(404, field, f"{sha[:64]} is not a commit of {branch.name} "
                          "(or names more than one)")
        ends.append(found)
    baseline_sql.add_broken(session, branch.id, ends[0].commit_id, ends[1].commit_id,
                            actor=actor, reason=reason)
    return ends[0].sha, ends[1].sha


def resolve(session: Session, settings: Settings, alert: Alert, actor: str) -> Alert:
    """Resolve `alert` by hand (its `alert.resolved` event queued), audited."""
    if alert.state != "resolved":
        sql.audit(session, alert.id, actor, "state", alert.state, "resolved")
    alerts.resolve(session, alert, notify.targets(session, settings.alert_webhooks))
    return alert
