"""The `why:` told to those a verdict was told before its profile existed. A comparison's
alerts and pull requests hear of it when it settles; its differential profiles come later
(profiles.py, a second pass). When a runner's post stores profiles (routes/results.py,
in the post's transaction), for each comparison they belong to:

- each alert of the comparison (of its commit verdict, and of every bisection it is a
  round of) gets one ``alert.explained`` event through the outbox (notify.py), with the
  `why:` of the stored profile of one of the alert's cases (the alert's worst first):
  once per alert, the alert row locked while its outbox is read, so a later profile (of
  another case, or one asked for) never tells it twice;
- each pull request that waits on the comparison gets its one comment updated in place
  through the existing path (`pull_requests.on_settled`, as on a reopen: the status is
  told again too), with the report that now carries the profiles' lines.

Nothing is recomputed: the stored cells and profiles are read.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from mallard_api import notify
from mallard_api.analysis import culprits, differential, pull_requests
from mallard_api.analysis.comparisons import SETTLED, render_report
from mallard_api.config import Settings
from mallard_api.models.alerts import Alert
from mallard_api.models.comparisons import Comparison
from mallard_api.sql import bisections as bisection_sql
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import outbox as outbox_sql
from mallard_api.sql import verdicts as verdict_sql
from mallard_api.ui import links

EVENT = "alert.explained"
Case = tuple[str, int | None]  # workload, threads


def on_stored(session: Session, settings: Settings, comparison_ids: list[int]) -> None:
    """Profiles of these comparisons were stored: tell their alerts and pull requests."""
    for cid in dict.fromkeys(comparison_ids):
        comp = comparison_sql.get(session, cid)
        if comp is None or comp.state not in SETTLED:
            continue
        for alert_id, cases in alerts_of(session, comp).items():
            explain(session, settings, comp, alert_id, cases)
        rows = pull_requests.waiting(session, comp)
        if rows:
            pull_requests.on_settled(session, settings, comp, comparison_sql.cells(session, cid),
                                     render_report(session, settings, comp), rows)


def alerts_of(session: Session, comp: Comparison) -> dict[int, list[Case]]:
    """The comparison's alerts, each with the cases it judges (its worst first): the alert
    of its commit verdict (the alert's cells), of each bisection it is a round of (the
    case the bisection follows)."""
    out: dict[int, list[Case]] = {}
    for alert_id in verdict_sql.alerts_of_comparison(session, comp.id):
        alert = session.get(Alert, alert_id)
        if alert is not None:
            cases = [(alert.workload, alert.threads)]
            cases += [(c.workload, c.threads) for c in alert.cells or []]
            out.setdefault(alert.id, []).extend(dict.fromkeys(cases))
    for b in bisection_sql.of_comparison(session, comp.id):
        if b.alert_id is not None:
            out.setdefault(b.alert_id, []).append((b.workload, b.threads))
    return out


def explain(session: Session, settings: Settings, comp: Comparison, alert_id: int,
            cases: list[Case]) -> bool:
    """Queue the alert's ``alert.explained`` unless it was queued before or no profile of
    its cases moved; whether it was queued now."""
    why = next((w for w in (case_why(session, comp.id, c) for c in cases) if w), None)
    to = notify.targets(session, settings.alert_webhooks)
    if why is None or not to:
        return False
    alert = session.get(Alert, alert_id, with_for_update=True)
    if alert is None or any(m.event == EVENT for m in
                            outbox_sql.list_messages(session, alert_id=alert_id)):
        return False
    page = f"{links.comparison(comp.id)}#profiles"
    notify.enqueue_alert_event(session, alert, EVENT, to, notify.Why(why, page))
    return True


def case_why(session: Session, comparison_id: int, case: Case) -> str | None:
    p = culprits.case_profile(session, [comparison_id], case[0], case[1])
    return None if p is None else differential.why(p)
