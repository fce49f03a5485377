"""Branch history -> alerts, run by the analysis worker: search every series new trials
touched for change points, record them, open (and resolve) regression alerts and queue
their webhook events.

For a ``commit`` job (or results without a job) on a tracked branch, every series the new
trials touched (project x branch x workload x params x allocator x variant x testbed x
measure, head trials only) is read per commit (the core's ``sql.series.medians``:
per-commit medians in branch order) and searched with `changepoints`. Every
confirmed change point is recorded once (``change_points``); one in the bad direction
opens an alert, unless the series already has an alert whose first bad commit lies within
``min_segment`` commits of it (the same change seen one commit earlier or later as history
grows). An open alert resolves itself when a later improvement brings the series back
within the minimum magnitude of its median before the change.
"""

from __future__ import annotations

import hashlib
import json

from mallard_stats import changepoints
from mallard_stats.measures import higher_is_better, unjudged_reason
from mallard_stats.policy import ChangePolicy
from sqlalchemy.orm import Session

from mallard_api import notify
from mallard_api.analysis import pull_requests, report
from mallard_api.analysis.policy import change_policy, stats_policy
from mallard_api.config import Settings
from mallard_api.models.alerts import Alert
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import series as series_sql


def series_key(s: alert_sql.TouchedSeries) -> str:
    ident = [s.project, s.branch, s.workload, s.params, s.allocator, s.variant, s.arch,
             s.testbed_fingerprint, s.measure]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def alert_text(s: alert_sql.TouchedSeries, ch: changepoints.Change) -> str:
    params = report.params_text(s.params)
    who = s.allocator + (f" {s.variant}" if s.variant else "")
    return (f"{s.workload} {params} {s.measure} on {s.project}/{s.branch} ({who}, {s.arch}): "
            f"{ch.change_pct:+.1f}% [{ch.ci_low_pct:+.1f}%, {ch.ci_high_pct:+.1f}%] "
            f"from {ch.first_bad_commit[:7]} (last good {ch.last_good_commit[:7]})"
            ).replace("  ", " ")


def detect_changes(session: Session, trial_ids: list[int], settings: Settings) -> list[Alert]:
    """Change detection over every series the trials touched; returns the alerts opened."""
    cpol = change_policy(settings)
    spol = stats_policy(settings)
    to = notify.targets(session, settings.alert_webhooks)
    opened: list[Alert] = []
    for s in alert_sql.touched_series(session, trial_ids):
        if unjudged_reason(s.measure, s.emulated):  # a timing under emulation: never judged
            continue
        points = series_sql.medians(session, series_sql.SeriesCell(
            branch_id=s.branch_id, workload=s.workload, params_sha=s.params_sha,
            threads=None, allocator=s.allocator, variant=s.variant, measure=s.measure,
            arch=s.arch, testbed=s.testbed_fingerprint))
        if len(points) < 2 * cpol.min_segment:
            continue
        commits = [sha for sha, _ in points]
        values = [median for _, median in points]
        known = alert_sql.measure_direction(session, s.measure)
        hib = known if known is not None else higher_is_better(s.measure)
        changes = changepoints.detect(commits, values, higher_is_better=hib, policy=cpol,
                                      stats_policy=spol)
        key = series_key(s)
        position = {c: i for i, c in enumerate(commits)}
        existing = alert_sql.alerts_of_series(session, key)
        for ch in changes:
            alert_sql.add_change_point(session, s, key, ch)
            if not ch.is_regression:
                continue
            near = [a for a in existing if a.first_bad_commit in position
                    and abs(position[a.first_bad_commit] - ch.index) < cpol.min_segment]
            if near or alert_sql.verdict_alert_covers(session, key, ch.first_bad_commit):
                continue
            alert = alert_sql.add_alert(session, s, key, ch, alert_text(s, ch))
            if alert is None:
                continue
            alert_sql.link_change_point(session, key, ch.first_bad_commit, alert.id)
            notify.enqueue_alert_event(session, alert, "alert.opened", to)
            existing.append(alert)
            opened.append(alert)
        _auto_resolve(session, existing, changes, position, values, hib, cpol, to)
    return opened


def _auto_resolve(session: Session, alerts: list[Alert], changes: list[changepoints.Change],
                  position: dict[str, int], values: list[float], hib: bool,
                  cpol: ChangePolicy, to: list[notify.Target]) -> None:
    """Resolve open alerts that a later improvement brought back (module doc)."""
    if not changes:
        return
    last = changes[-1]
    latest = last.after_median
    for a in alerts:
        if a.state == "resolved" or a.before_median in (None, 0.0):
            continue
        at = position.get(a.first_bad_commit)
        if at is None or last.index <= at or last.is_regression:
            continue
        assert a.before_median is not None
        gap = (latest / a.before_median - 1.0)
        back = gap >= -cpol.min_magnitude if hib else gap <= cpol.min_magnitude
        if back:
            resolve(session, a, to, reason=f"recovered at {last.first_bad_commit[:7]}")


def resolve(session: Session, alert: Alert, to: list[notify.Target],
            reason: str | None = None) -> None:
    """Resolve an alert and queue its ``alert.resolved`` event to `to` (idempotent)."""
    if alert.state == "resolved":
        return
    alert_sql.set_state(alert, "resolved")
    if reason and reason not in alert.text:
        alert.text = f"{alert.text}; resolved: {reason}"
    notify.enqueue_alert_event(session, alert, "alert.resolved", to)


def acknowledge(session: Session, settings: Settings, alert: Alert, by: str) -> None:
    """Acknowledge an alert (REST and the alert page go through here): its state, and for
    a pull request's regression its status turned green with a note (`by`: who)."""
    alert_sql.set_state(alert, "acknowledged")
    pull_requests.acknowledged(session, settings, alert, by)
