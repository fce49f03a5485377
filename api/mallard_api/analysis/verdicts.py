"""Commit verdicts: each new commit of a tracked branch judged against its branch's last
measured commit, per arch with a live runner, interleaved on one runner.

A commit verdict *is* a comparison (base = the last measured commit, head = the commit),
run by a `commit` job whose spec carries both sides and the peers; the comparison
lifecycle (comparisons.py: cells, follow-ups) decides it, and the head trials feed the
branch history for change-point detection as before. When the comparison settles, the
settle (settle.py) calls :func:`on_settled` with its cells: the verdict is stored on the
commit, one alert opened per (commit, arch) for its regressed primary cells (deduplicated
against change-point alerts of the same series and commit), the forge statuses queued,
and a bisection started when the regression spans more than one commit.

A push queues at most MALLARD_PUSH_MAX_QUEUED commits (the newest); the others are
backfilled newest first when a runner of the arch finds nothing queued
(:func:`backfill`, MALLARD_PUSH_BACKFILL). A commit with no measured commit before it
on the branch gets a plain commit job (head and peers): the start of its history.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime

from mallard_stats import stats
from mallard_wire.fields import JsonDict
from sqlalchemy.orm import Session

from mallard_api import forges, notify
from mallard_api.analysis import bisections
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.comparisons import open_comparison
from mallard_api.analysis.specs import SpecError, job_spec, peers_of
from mallard_api.config import Settings
from mallard_api.models.alerts import Alert
from mallard_api.models.comparisons import Comparison
from mallard_api.models.projects import Project
from mallard_api.models.records import AlertCell, MovedCell, Side
from mallard_api.models.verdicts import CommitVerdict
from mallard_api.schemas.verdicts import CommitVerdictOut
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import verdicts as sql
from mallard_api.ui import links

log = logging.getLogger("mallard_api.verdicts")
ORDER = ("regressed", "improved", "unknown", "same")


def arches(session: Session, settings: Settings) -> list[str]:
    """Architectures with a live runner (the default arch when none is live)."""
    return sql.live_arches(session, settings.runner_live_seconds) or [settings.default_arch]


def queue_commit(session: Session, settings: Settings, project: Project, *, branch: str,
                 branch_id: int, sha: str, arch: str) -> int | None:
    """Queue the commit job of `sha` on `arch` (a verdict against the last measured commit
    before it when there is one); the job id, None when one is active already."""
    if job_sql.active_commit_job(session, project_id=project.id, sha=sha, arch=arch):
        return None
    pos = sql.position(session, branch_id, project.id, sha)
    base = None if pos is None else sql.last_measured_before(session, branch_id, pos, arch)
    for v in sql.of_commit(session, project.id, sha):
        if v.arch == arch and v.state == "deferred" and (base is None or base == sha):
            v.state = "baseline"  # measured alone: the start of its branch's history
    if base is None or base == sha:
        spec = job_spec(session, project=project, suite=settings.suite,
                        trials=settings.trials, warmup=settings.warmup,
                        head=Side(commit=sha), peers=peers_of(project, settings.peer_list),
                        branch=branch)
        return job_sql.enqueue(session, kind="commit", arch=arch, spec=spec,
                               project_id=project.id,
                               max_attempts=settings.job_max_attempts).id
    comp, job = open_comparison(session, settings, project, kind="commit", arch=arch,
                                base=Side(commit=base), head=Side(commit=sha),
                                peers=peers_of(project, settings.peer_list),
                                max_follow_ups=settings.verdict_max_follow_ups, branch=branch)
    existing = [v for v in sql.of_commit(session, project.id, sha) if v.arch == arch]
    if existing:  # deferred, or a re-run: the verdict follows the new comparison
        v = existing[0]
        v.comparison_id, v.base_sha, v.state, v.verdict = comp.id, base, "queued", None
    else:
        sql.add_verdict(session, CommitVerdict(
            project_id=project.id, branch=branch, commit_sha=sha, base_sha=base, arch=arch,
            comparison_id=comp.id, state="queued"))
    forges.enqueue_status(session, settings, project.id, sha, arch, "pending",
                          f"measuring against {project.name}@{base[:7]}", comp.id)
    return job.id


def backfill(session: Session, settings: Settings, arch: str) -> int | None:
    """A runner of `arch` found nothing queued: queue the newest unmeasured commit of a
    tracked branch (push beyond the cap). The job id, or None."""
    if not settings.push_backfill:
        return None
    for row in sql.deferred(session, arch, 1):
        project = session.get(Project, row.project_id)
        if project is None:
            continue
        try:
            return queue_commit(session, settings, project, branch=row.branch,
                                branch_id=row.branch_id, sha=row.sha, arch=arch)
        except SpecError as exc:  # its recipe or a peer went away since the push
            log.warning("backfill of %s %s: %s", project.name, row.sha[:12], exc.msg)
    return None


# -- while the comparison runs, and when it settles ---------------------------------------
def job_claimed(session: Session, settings: Settings, comparison_id: int | None) -> None:
    """A runner claimed a job of comparison `comparison_id`: the comparison runs, and its
    commit verdicts follow (:func:`follow`)."""
    comp = None if comparison_id is None else comparison_sql.lock(session, comparison_id)
    if comp is None or comp.state in ("done", "failed"):
        return
    comp.state = "running"
    follow(session, settings, comp)


def follow(session: Session, settings: Settings, comp: Comparison) -> None:
    """A running comparison's queued verdicts become `running`, with a pending status that
    says so (the status stays pending until the verdict is done or failed)."""
    if comp.state != "running":
        return
    for v in sql.of_comparison(session, comp.id):
        if v.state == "queued":
            v.state = "running"
            forges.enqueue_status(session, settings, v.project_id, v.commit_sha, v.arch,
                                  "pending", f"running against {comp.project}@{v.base_sha[:7]}",
                                  comp.id)


def _moved(cells: list[CellRow]) -> list[MovedCell]:
    return [MovedCell(workload=c.workload, params=c.params, threads=c.threads,
                      measure=c.measure, verdict=c.verdict, diff_pct=c.diff_pct,
                      ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct, line=c.line)
            for c in cells if c.verdict in ("regressed", "improved")]


def overall(verdicts: list[str]) -> str:
    """The commit's verdict: the worst primary cell's (regressed > improved > unknown >
    same); `unknown` when there is none."""
    for v in ORDER:
        if v in verdicts:
            return v
    return "unknown"


def on_settled(session: Session, settings: Settings, comp: Comparison,
               cells: list[CellRow]) -> None:
    """The comparison settled with `cells` (settle.py): settle its commit verdicts."""
    for v in sql.of_comparison(session, comp.id):
        settle_verdict(session, settings, comp, v, cells)


def settle_verdict(session: Session, settings: Settings, comp: Comparison,
                   v: CommitVerdict, cells: list[CellRow]) -> None:
    if v.state in ("done", "failed"):
        return
    primary = [c for c in cells if c.verdict != stats.DIAGNOSTIC]
    v.finished_at = datetime.now(UTC)
    if comp.state == "failed" or not primary:
        v.state, v.verdict = "failed", None
        forges.enqueue_status(session, settings, v.project_id, v.commit_sha, v.arch, "error",
                              "no result: the job failed (see its log)", comp.id)
        return
    v.state = "done"
    v.verdict = overall([c.verdict for c in primary])
    v.moved = _moved(primary)
    regressed = [c for c in primary if c.verdict == "regressed"]
    summary = summary_line(v, regressed, comp.project)
    if not regressed:
        forges.enqueue_status(session, settings, v.project_id, v.commit_sha, v.arch,
                              "success", summary, comp.id)
        return
    alert = open_alert(session, settings, comp, v, regressed)
    if alert is not None:
        v.alert_id = alert.id
    b = bisections.after_regression(session, settings, comp, v, regressed)
    if b is not None:
        v.bisection_id = b.id
        if alert is not None:
            alert.bisection_id = b.id
    # the status and the alert go out once the bisection is known: they link its page
    forges.enqueue_status(session, settings, v.project_id, v.commit_sha, v.arch, "failure",
                          summary, comp.id, page=None if b is None else links.bisection(b.id))
    if alert is not None:
        notify.enqueue_alert_event(session, alert, "alert.opened",
                                   notify.targets(session, settings.alert_webhooks))


def summary_line(v: CommitVerdict, regressed: list[CellRow], project: str) -> str:
    """The forge status of a settled verdict, naming the build it was judged against."""
    base = f"{project}@{v.base_sha[:7]}"
    if not regressed:
        return f"{v.verdict} vs {base}"
    worst = max(regressed, key=lambda c: abs(c.diff_pct or 0.0))
    return (f"{len(regressed)} regressed vs {base}: {worst.workload} "
            f"threads={worst.threads} {worst.measure} {worst.diff_pct:+.1f}%")


# -- alerts -------------------------------------------------------------------------------
def cell_series_key(comp: Comparison, branch: str, workload: str, params: JsonDict,
                    measure: str) -> str:
    """The change-point series key (analysis.series_key) of a cell of this comparison: of
    the project's own allocator (named after the project), default variant."""
    ident = [comp.project, branch, workload, params, comp.project, "", comp.arch,
             comp.testbed_fingerprint or "", measure]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def verdict_series_key(project: str, branch: str, arch: str) -> str:
    return f"verdict:{project}:{branch}:{arch}"


def covered_by_verdict(session: Session, series_key: str, commit: str) -> bool:
    """Whether a verdict alert on `commit` already groups this series (change detection
    asks before opening its own)."""
    return alert_sql.verdict_alert_covers(session, series_key, commit)


def open_alert(session: Session, settings: Settings, comp: Comparison, v: CommitVerdict,
               regressed: list[CellRow]) -> Alert | None:
    """One alert per (commit, arch) grouping the regressed primary cells, except the cells
    whose series already has a change-point alert on this commit. The caller announces it
    (after a bisection is started, so the webhook can link that too)."""
    cells = []
    for c in regressed:
        key = cell_series_key(comp, v.branch, c.workload, c.params, c.measure)
        if alert_sql.changepoint_alert_on(session, key, v.commit_sha):
            continue
        cells.append(AlertCell(series_key=key, workload=c.workload, params=c.params,
                               threads=c.threads, measure=c.measure, diff_pct=c.diff_pct,
                               ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct,
                               line=c.line))
    if not cells:
        return None
    worst = max(cells, key=lambda c: abs(c.diff_pct or 0.0))
    base_med = next((c.base_median for c in regressed if c.measure == worst.measure
                     and c.workload == worst.workload and c.params == worst.params), None)
    head_med = next((c.head_median for c in regressed if c.measure == worst.measure
                     and c.workload == worst.workload and c.params == worst.params), None)
    text = (f"{comp.project}@{v.commit_sha[:7]} vs {v.base_sha[:7]} on {comp.project}/"
            f"{v.branch} "
            f"({v.arch}): {len(cells)} regressed cell(s); worst "
            f"{worst.workload} threads={worst.threads} {worst.measure} "
            f"{worst.diff_pct:+.1f}% [{worst.ci_low_pct:+.1f}%, "
            f"{worst.ci_high_pct:+.1f}%]")
    alert = alert_sql.add_alert_row(session, Alert(
        series_key=verdict_series_key(comp.project, v.branch, v.arch),
        project_id=v.project_id, project=comp.project, branch=v.branch,
        workload=worst.workload, params=worst.params, threads=worst.threads,
        arch=v.arch, testbed_fingerprint=comp.testbed_fingerprint or "",
        allocator=comp.project, variant="", measure=worst.measure,
        first_bad_commit=v.commit_sha, last_good_commit=v.base_sha,
        change_pct=worst.diff_pct or 0.0, ci_low_pct=worst.ci_low_pct,
        ci_high_pct=worst.ci_high_pct, p_value=None, before_median=base_med,
        after_median=head_med, state="open", text=text, source="verdict", cells=cells))
    return alert


def verdicts_out(session: Session, settings: Settings, project_id: int, sha: str
                 ) -> list[CommitVerdictOut]:
    """The commit's verdicts per arch, with the report's link."""
    out = []
    for v in sql.of_commit(session, project_id, sha):
        url = None if v.comparison_id is None else links.absolute(
            settings.public_url, links.comparison(v.comparison_id))
        out.append(CommitVerdictOut(
            arch=v.arch, branch=v.branch, base_sha=v.base_sha, state=v.state,
            verdict=v.verdict, moved=list(v.moved or []),
            comparison_id=v.comparison_id, report_url=url, alert_id=v.alert_id,
            bisection_id=v.bisection_id))
    return out
