"""Bisection: name the culprit commit inside a range of commits that were not each
measured. The search itself is pure (bisect_search.py); this module runs it on the
job queue: each round creates two comparisons, good end vs probe and probe vs bad end
(each interleaved A/B on one runner, only the judged workload and threads), and when both
have settled classifies the probe (`good`, `bad`, or `skip` when a build failed) and
queues the next round. Started by a request (POST /api/v1/bisections) or automatically
when a commit verdict regresses against a measured commit more than one commit back.

When the culprit is named, the alert that started it names it too (`alerts.culprit`,
and its text), and the culprit commit gets a failure status on the forge, linking the
bisection's page (/ui/bisections/{id}).
"""

from __future__ import annotations

from datetime import UTC, datetime

from mallard_stats.measures import higher_is_better
from sqlalchemy.orm import Session

from mallard_api import forges
from mallard_api.analysis.bisect_search import BAD, GOOD, SKIP, Search, classify
from mallard_api.analysis.bisect_search import Evidence as SearchEvidence
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.comparisons import open_comparison
from mallard_api.analysis.culprits import culprit_line, evidence
from mallard_api.config import Settings
from mallard_api.models.alerts import Alert
from mallard_api.models.bisections import Bisection
from mallard_api.models.comparisons import Comparison
from mallard_api.models.projects import Project
from mallard_api.models.records import BisectionStep, Side, StepEvidence
from mallard_api.models.verdicts import CommitVerdict
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import verdicts as sql
from mallard_api.ui import links


def search_of(b: Bisection) -> Search:
    s = Search(len(b.commits) - 1)
    for k, outcome in (b.verdicts or {}).items():
        s.record(int(k), outcome)
    return s


def start(session: Session, settings: Settings, project: Project, *, branch: str | None,
          arch: str, workload: str, measure: str, threads: int | None, commits: list[str],
          origin: str, origin_comparison: int | None = None,
          alert_id: int | None = None) -> Bisection:
    """Create a bisection over `commits` (good .. bad, oldest first) and queue its first
    round (or name the culprit at once when bad's parent is good)."""
    steps: list[BisectionStep] = []
    if origin_comparison is not None:
        steps.append(BisectionStep(
            round=0, index=len(commits) - 1, sha=commits[-1], good_end=commits[0],
            bad_end=commits[-1], good_index=0, bad_index=len(commits) - 1,
            comparisons=[origin_comparison], outcome=BAD,
            note="the commit verdict that found the regression"))
    b = sql.add_bisection(session, Bisection(
        project_id=project.id, project=project.name, branch=branch, arch=arch,
        workload=workload, measure=measure, threads=threads, good=commits[0], bad=commits[-1],
        commits=commits, skipped=[], verdicts={}, steps=steps, state="running", builds=0,
        origin=origin, alert_id=alert_id))
    probe(session, settings, b, project)
    return b


def _comparison(session: Session, settings: Settings, project: Project, b: Bisection,
                base: str, head: str) -> Comparison:
    """One comparison of a round: the judged workload, threads and measure only."""
    comp, _ = open_comparison(
        session, settings, project, arch=b.arch, base=Side(commit=base),
        head=Side(commit=head), workloads=[b.workload],
        threads=[b.threads] if b.threads is not None else None, measure=b.measure,
        bisection_id=b.id)
    return comp


def probe(session: Session, settings: Settings, b: Bisection, project: Project) -> None:
    """Queue the next round, or finish when the search is over."""
    s = search_of(b)
    i = s.next_probe()
    if i is None:
        finish(session, settings, b)
        return
    lo, hi = s.bounds()
    left = _comparison(session, settings, project, b, b.commits[lo], b.commits[i])
    right = _comparison(session, settings, project, b, b.commits[i], b.commits[hi])
    rounds = [st for st in b.steps if st.round > 0]
    b.steps = [*b.steps, BisectionStep(
        round=len(rounds) + 1, index=i, sha=b.commits[i], good_end=b.commits[lo],
        bad_end=b.commits[hi], good_index=lo, bad_index=hi, comparisons=[left.id, right.id],
        outcome=None)]
    b.builds += 1


def on_settled(session: Session, settings: Settings, comp: Comparison,
               cells: list[CellRow]) -> None:
    """The comparison settled with `cells` (settle.py): advance the bisections it is a
    round of."""
    for bisection_id in sql.bisections_of_comparison(session, comp.id):
        advance(session, settings, bisection_id, {comp.id: cells})


def advance(session: Session, settings: Settings, bisection_id: int,
            settled: dict[int, list[CellRow]] | None = None) -> None:
    """A comparison of the current round settled (its cells in `settled`, by comparison
    id): classify the probe when both have."""
    b = sql.get_bisection(session, bisection_id, lock=True)
    if b is None or b.state != "running" or not b.steps:
        return
    step = b.steps[-1]
    if step.outcome is not None:
        return
    comps = [comparison_sql.get(session, cid) for cid in step.comparisons]
    if any(c is not None and c.state not in ("done", "failed") for c in comps):
        return
    known = settled or {}
    left, right = (evidence(session, c, b, cells=None if c is None else known.get(c.id))
                   for c in comps)
    hib = next((e.higher_is_better for e in (left, right) if e), higher_is_better(b.measure))
    outcome = classify(*(None if e is None else SearchEvidence(e.diff_pct, e.verdict)
                         for e in (left, right)), higher_is_better=hib)
    step = step.model_copy(update={"outcome": outcome, "evidence": StepEvidence(
        good_vs_probe=left, probe_vs_bad=right)})
    b.steps = [*b.steps[:-1], step]
    b.verdicts = {**(b.verdicts or {}), str(step.index): outcome}
    if outcome == SKIP:
        b.skipped = [*b.skipped, step.index]
    project = session.get(Project, b.project_id)
    if project is None:
        return
    probe(session, settings, b, project)


def finish(session: Session, settings: Settings, b: Bisection) -> None:
    s = search_of(b)
    c = s.culprit()
    b.state = "done"
    b.finished_at = datetime.now(UTC)
    if c is None:
        b.culprit_candidates = [b.commits[i] for i in s.candidates()]
        return
    b.culprit = b.commits[c]
    b.culprit_candidates = [b.culprit]
    line = culprit_line(session, b) or ""
    if b.alert_id is not None:
        alert = session.get(Alert, b.alert_id)
        if alert is not None:
            alert.culprit = b.culprit
            alert.text = f"{alert.text}; {line}"
            alert.updated_at = datetime.now(UTC)
    forges.enqueue_status(session, settings, b.project_id, b.culprit, b.arch, "failure",
                          line.removeprefix("culprit: ")[:140], None, context="bisection",
                          page=links.bisection(b.id))


def judged_cell(settings: Settings, regressed: list[CellRow]) -> CellRow:
    """The cell a bisection follows: the first measure of MALLARD_BISECT_MEASURES among
    the regressed cells (deterministic counts first by default), then the largest move."""
    prefer = [m.strip() for m in settings.bisect_measures.split(",") if m.strip()]
    rank = {m: i for i, m in enumerate(prefer)}
    return min(regressed, key=lambda c: (rank.get(c.measure, len(rank)),
                                         -abs(c.diff_pct or 0.0)))


def after_regression(session: Session, settings: Settings, comp: Comparison, v: CommitVerdict,
                     regressed: list[CellRow]) -> Bisection | None:
    """A commit verdict regressed: bisect when its base is more than one commit back."""
    if not settings.bisect_auto:
        return None
    chain = sql.ancestry(session, v.project_id, v.commit_sha, settings.bisect_max_commits)
    if v.base_sha not in chain:
        return None
    commits = list(reversed(chain[:chain.index(v.base_sha) + 1]))
    if len(commits) <= 2:
        return None
    project = session.get(Project, v.project_id)
    if project is None:
        return None
    cell = judged_cell(settings, regressed)
    return start(session, settings, project, branch=v.branch, arch=v.arch,
                 workload=cell.workload, measure=cell.measure, threads=cell.threads,
                 commits=commits, origin="verdict", origin_comparison=comp.id,
                 alert_id=v.alert_id)


__all__ = ["BAD", "GOOD", "SKIP", "advance", "after_regression", "on_settled", "start"]
