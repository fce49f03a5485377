"""One settle of a comparison, the analysis worker's `comparison` item: the lifecycle
(`comparisons.update_comparison`) computes its cells once (its trials read once, the SAME
bands once), stores them and settles its state or queues a follow-up; then its
listeners are told once, in this order, with the computed cells and the settings:

- while it runs: its commit verdicts follow it (`verdicts.follow`);
- once it is done or failed: its commit verdicts settle (`verdicts.on_settled`: the
  verdict, alerts, forge statuses, a bisection when the regression spans commits), the
  bisections it is a round of advance (`bisections.on_settled`), the pull requests that
  wait for it get its status and report (`pull_requests`, the report rendered from the
  same cells, only when one waits), its calibration advances (`calibrations`), and its
  moved cases get profile jobs, a second pass off the verdict's path (`profiles`).

The listeners sit above the lifecycle and never call back into it: they open
comparisons (`comparisons.open_comparison`), nothing more.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from mallard_api.analysis import (
    bisections,
    calibrations,
    comparisons,
    profiles,
    pull_requests,
    verdicts,
)
from mallard_api.config import Settings
from mallard_api.models.comparisons import Comparison


def settle(session: Session, settings: Settings, comp: Comparison) -> None:
    """Recompute the (locked) comparison, settle it, tell its listeners (module doc)."""
    computed = comparisons.update_comparison(session, settings, comp)
    if comp.state not in comparisons.SETTLED:
        verdicts.follow(session, settings, comp)
        return
    session.flush()
    verdicts.on_settled(session, settings, comp, computed.cells)
    bisections.on_settled(session, settings, comp, computed.cells)
    waiting = pull_requests.waiting(session, comp)
    if waiting:
        report = comparisons.render_report(session, settings, comp, computed)
        pull_requests.on_settled(session, settings, comp, computed.cells, report, waiting)
    calibrations.on_settled(session, settings, comp)
    profiles.on_settled(session, settings, comp, computed.cells)
