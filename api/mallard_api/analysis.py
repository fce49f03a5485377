"""Analysis entry points called by the core (contracts §8): after results are stored,
or when a job ends without them, queue the work (`after_ingest`, `jobs_changed`); the
analysis worker (`analysis_worker.py`) then updates the comparison that owns the job and
searches the touched branch series for change points (opening alerts and queueing their
webhook events). Nothing here runs inside a request, and a read never writes.

Comparisons
-----------
A comparison's cells are recomputed from *all* valid, non-warm-up trials of all its jobs
(the first job and its follow-ups), base against head by trial label, grouped by
workload x params x measure, on one testbed (the first one results came from; trials of
another testbed are left out and the report says so). When every job has reported:

* no ``unknown`` among the follow-up cells (every measure except allocator counters):
  ``done``;
* some ``unknown`` and fewer than ``max_follow_ups`` follow-ups so far: queue a follow-up
  ``comparison`` job for just the unknown cells' workloads and threads (no peers), whose
  trials double the total so far (``trials * 2**(round-1)``); state stays ``running``;
* otherwise ``done``, the unknowns reported as they are.

A job of a comparison that fails for good leaves the comparison ``failed`` when no cells
exist; otherwise the comparison settles as above from the cells it has (each follow-up,
failed or not, counts against the cap). A job that fails, or whose lease expires, queues
its comparison for the worker (:func:`jobs_changed`), so no comparison stays ``running``.

Branch history
--------------
For a ``commit`` job (or results without a job) on a tracked branch, every series the new
trials touched (project x branch x workload x params x allocator x variant x testbed x
measure, head trials only) is read per commit (the core's ``sql.series``: per-commit
medians in branch order) and searched with :mod:`mallard_api.changepoints`. Every
confirmed change point is recorded once (``change_points``); one in the bad direction
opens an alert, unless the series already has an alert whose first bad commit lies within
``min_segment`` commits of it (the same change seen one commit earlier or later as history
grows). An open alert resolves itself when a later improvement brings the series back
within the minimum magnitude of its median before the change.

The worker runs each queued item in its own transaction; a failure is logged and the
item retried later (the ingest is never lost: it was committed before).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import statistics
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from mallard_api import changepoints, notify, report, stats
from mallard_api.config import Settings, get_settings
from mallard_api.models.analysis import Alert, Comparison, ComparisonCell
from mallard_api.models.core import Job
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import analysis_queue as queue_sql
from mallard_api.sql import comparisons as sql
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import series as series_sql
from mallard_api.ui import links

log = logging.getLogger("mallard_api.analysis")


# -- settings -------------------------------------------------------------------------------
def stats_policy(settings: Settings | None = None) -> stats.Policy:
    s = settings or get_settings()
    return replace(
        stats.DEFAULT_POLICY,
        alpha=s.stats_alpha,
        min_effect_pct=s.stats_min_effect_pct,
        min_trials=s.stats_min_trials,
        min_trials_deterministic=s.stats_min_trials_deterministic,
        deterministic_tolerance_pct=s.stats_deterministic_tolerance_pct,
        deterministic_min_effect_pct=s.stats_deterministic_min_effect_pct,
        deterministic_min_count=s.stats_deterministic_min_count,
        target_mde_pct=s.stats_target_mde_pct,
        settle_trials=s.stats_settle_trials,
        settle_max_half_width_pct=s.stats_settle_max_half_width_pct,
        n_resamples=s.stats_bootstrap_resamples,
    )


def change_policy(settings: Settings | None = None) -> changepoints.ChangePolicy:
    s = settings or get_settings()
    return changepoints.ChangePolicy(
        max_pvalue=s.changepoint_max_pvalue,
        min_magnitude=s.changepoint_min_magnitude_pct / 100,
        min_segment=s.changepoint_min_segment,
    )


# -- the hooks (in the caller's transaction; they only queue work) --------------------------
def after_ingest(session: Session, *, job_id: int | None, trial_ids: list[int],
                 job_completed: bool = False, job: job_sql.Holding | None = None) -> bool:
    """Called by results ingest after the trials are stored: queue the comparison that
    owns the job, and change detection for the new trials of a commit job (or of results
    without a job). A re-post that stored nothing queues nothing. True when queued.
    `job`: the job as ingest read it (kind, comparison), saving a query."""
    kind, comparison_id = None, None
    if job is not None:
        kind, comparison_id = job.kind, job.comparison_id
    elif job_id is not None:
        kind, comparison_id = sql.job_kind_and_comparison(session, job_id)
    queued = False
    if comparison_id is not None and (trial_ids or job_completed):
        queue_sql.enqueue_comparison(session, comparison_id)
        queued = True
    if trial_ids and kind in (None, "commit"):
        queue_sql.enqueue_changes(session, trial_ids)
        queued = True
    return queued


def jobs_changed(session: Session, job_ids: list[int]) -> bool:
    """Jobs that ended (results, failure, expired lease): queue their comparisons."""
    comparisons = sql.comparisons_of_jobs(session, job_ids) if job_ids else []
    for comparison_id in comparisons:
        queue_sql.enqueue_comparison(session, comparison_id)
    return bool(comparisons)


# -- comparisons ----------------------------------------------------------------------------
def allocator_label(side: dict[str, Any], name: str = "mallard") -> str:
    commit = str(side.get("commit") or "")
    short = commit[:7] if re.fullmatch(r"[0-9a-fA-F]{8,64}", commit) else commit
    variant = side.get("variant") or ""
    return f"{name}@{short}" + (f" {variant}" if variant else "")


def comparison_spec(comp: Comparison, *, project_repo: str, allocator_dir: str,
                    workloads: list[str] | None, threads: list[int] | None, trials: int,
                    peers: list[str], round: int = 0) -> dict[str, Any]:
    """The job spec of contracts §5 for a comparison (labels base, head, peer)."""
    return {
        "project": comp.project, "repo_url": project_repo, "allocator_dir": allocator_dir,
        "suite": comp.suite, "workloads": workloads, "threads": threads, "trials": trials,
        "warmup": comp.warmup,
        "allocators": [
            {"label": "base", "name": "mallard", "commit": comp.base.get("commit"),
             "variant": comp.base.get("variant")},
            {"label": "head", "name": "mallard", "commit": comp.head.get("commit"),
             "variant": comp.head.get("variant")},
        ] + [{"label": "peer", "name": p} for p in peers],
        "comparison_id": comp.id, "round": round,
    }


def _pkey(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def _direction(measure: str, known: dict[str, bool]) -> bool:
    return known.get(measure, stats.higher_is_better(measure))


def compute_cells(session: Session, comp: Comparison, policy: stats.Policy
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(cell rows, peer medians, note) from the comparison's trials."""
    rows = sql.trials(session, comp.id)
    if not rows:
        return [], [], None
    if comp.testbed_fingerprint is None:
        first = next((r for r in rows if r.label in ("base", "head")), rows[0])
        comp.testbed_fingerprint = first.testbed_fingerprint
        comp.cpu_model = first.cpu_model
    other = [r for r in rows if r.testbed_fingerprint != comp.testbed_fingerprint]
    rows = [r for r in rows if r.testbed_fingerprint == comp.testbed_fingerprint]
    note = (f"note: {len(other)} trials from another testbed were left out"
            if other else None)
    sides: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: {"base": [], "head": []})
    params_of: dict[tuple[str, str], tuple[dict[str, Any], int | None]] = {}
    peer_values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        pk = _pkey(r.params)
        params_of[(r.workload, pk)] = (r.params, r.threads)
        for m, v in r.measures.items():
            if r.label in ("base", "head"):
                sides[(r.workload, pk, m)][r.label].append(float(v))
            elif r.label == "peer" and m == report.THROUGHPUT:
                peer_values[(r.workload, pk, r.allocator)].append(float(v))
    known = sql.measure_directions(session)
    keys = sorted(k for k, v in sides.items() if v["base"] or v["head"])
    requested = [comp.hypothesis_measure] if comp.hypothesis_measure else []
    raw = [
        stats.compare_samples(sides[k]["base"], sides[k]["head"],
                              higher_is_better=_direction(k[2], known),
                              deterministic=stats.is_deterministic(k[2]),
                              primary=stats.is_primary(k[2], requested), policy=policy)
        for k in keys
    ]
    decided = stats.adjust_and_decide(raw, policy)
    rcells = [report.ReportCell(k[0], params_of[(k[0], k[1])][0], k[2], s)
              for k, s in zip(keys, decided, strict=True)]
    lines = report.cell_lines(rcells)
    out = []
    for k, s, line in zip(keys, decided, lines, strict=True):
        params, threads = params_of[(k[0], k[1])]
        out.append(dict(
            workload=k[0], params=params, threads=threads, measure=k[2],
            higher_is_better=s.higher_is_better, base_median=s.base_median,
            head_median=s.head_median, ratio=s.ratio, diff_pct=s.diff_pct,
            ci_low_pct=s.ci_low_pct, ci_high_pct=s.ci_high_pct, p_value=s.p_value,
            p_adjusted=s.p_adjusted, n_base=s.n_base, n_head=s.n_head,
            robust_base=s.robust_base, robust_head=s.robust_head, verdict=s.verdict,
            mde_pct=s.mde_pct, line=line))
    peers = [
        {"workload": wl, "params": params_of[(wl, pk)][0], "allocator": alloc,
         "median": float(statistics.median(vs))}
        for (wl, pk, alloc), vs in sorted(peer_values.items())
    ]
    return out, peers, note


def update_comparison(session: Session, comp: Comparison, settings: Settings | None = None
                      ) -> None:
    """Recompute the cells; settle the state or queue a follow-up (module doc)."""
    settings = settings or get_settings()
    policy = stats_policy(settings)
    cells, peers, note = compute_cells(session, comp, policy)
    sql.replace_cells(session, comp.id, cells)
    comp.peer_medians = peers
    comp.note = note
    comp.updated_at = datetime.now(UTC)
    refresh_state(session, comp, cells=cells)
    if comp.state in ("done", "failed"):
        from mallard_api import verdicts  # commit verdicts and bisections (issue 12)

        session.flush()
        verdicts.on_comparison_settled(session, comp, settings)


def _follow_up_unknowns(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cells if c["verdict"] == "unknown" and not report.is_counter(c["measure"])]


def refresh_state(session: Session, comp: Comparison,
                  cells: list[dict[str, Any]] | None = None) -> None:
    """Settle ``comp.state`` from its jobs and cells; queue a follow-up when due."""
    if comp.state in ("done", "failed"):
        return
    jobs = sql.jobs(session, comp.id)
    if any(j.state in ("queued", "running") for j in jobs):
        if any(j.state == "running" for j in jobs) or cells:
            comp.state = "running"
        return
    if cells is None:
        cells = [
            {"verdict": c.verdict, "measure": c.measure, "workload": c.workload,
             "threads": c.threads}
            for c in sql.cells(session, comp.id)
        ]
    if not cells:
        if jobs and all(j.state in ("failed", "cancelled") for j in jobs):
            comp.state = "failed"
            comp.finished_at = datetime.now(UTC)
        return
    unknown = _follow_up_unknowns(cells)
    if unknown and comp.follow_ups < comp.max_follow_ups:
        queue_follow_up(session, comp, unknown, jobs)
        comp.state = "running"
        return
    comp.state = "done"
    comp.finished_at = datetime.now(UTC)


def queue_follow_up(session: Session, comp: Comparison, unknown: list[dict[str, Any]],
                    jobs: list[sql.JobState]) -> Job:
    round_ = comp.follow_ups + 1
    workloads = sorted({c["workload"] for c in unknown})
    thread_set = {c["threads"] for c in unknown}
    threads = None if None in thread_set else sorted(int(t) for t in thread_set)
    trials = comp.trials * 2 ** (round_ - 1)
    first = session.get(Job, jobs[0].job_id) if jobs else None
    spec0 = dict(first.spec) if first is not None else {}
    spec = comparison_spec(
        comp, project_repo=spec0.get("repo_url", ""),
        allocator_dir=spec0.get("allocator_dir", "allocator"), workloads=workloads,
        threads=threads, trials=trials, peers=[], round=round_)
    job = job_sql.enqueue(session, kind="comparison", arch=comp.arch, spec=spec,
                          project_id=comp.project_id,
                          max_attempts=first.max_attempts if first is not None else 3)
    sql.link_job(session, comparison_id=comp.id, job_id=job.id, round=round_, trials=trials)
    comp.follow_ups = round_
    return job


def cell_stats(c: ComparisonCell) -> stats.CellStats:
    return stats.CellStats(
        n_base=c.n_base, n_head=c.n_head, robust_base=c.robust_base, robust_head=c.robust_head,
        base_median=c.base_median, head_median=c.head_median, ratio=c.ratio,
        diff_pct=c.diff_pct, ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct,
        p_value=c.p_value, p_adjusted=c.p_adjusted, verdict=c.verdict,
        higher_is_better=c.higher_is_better, primary=c.verdict != stats.DIAGNOSTIC,
        mde_pct=c.mde_pct)


def hypothesis_of(comp: Comparison) -> report.Hypothesis | None:
    if comp.hypothesis_low_pct is None or comp.hypothesis_high_pct is None:
        return None
    return report.Hypothesis(comp.hypothesis_low_pct, comp.hypothesis_high_pct,
                             comp.hypothesis_measure or report.THROUGHPUT, comp.hypothesis or "")


def render_report(session: Session, comp: Comparison) -> str:
    """The text report of GET /comparisons/{id}/report."""
    cells = sql.cells(session, comp.id)
    rcells = [report.ReportCell(c.workload, c.params, c.measure, cell_stats(c)) for c in cells]
    peers: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for p in comp.peer_medians or []:
        peers[(p["workload"], report.params_key(p["params"]))][p["allocator"]] = p["median"]
    testbed = None
    if comp.testbed_fingerprint:
        testbed = f"{comp.cpu_model or 'unknown CPU'} ({comp.testbed_fingerprint[:12]})"
    notes = [comp.note] if comp.note else []
    notes.insert(0, "page: " + links.absolute(get_settings().public_url, links.comparison(comp.id)))
    if not cells:
        notes.append("no results yet" if comp.state in ("queued", "running")
                     else "no results")
    header = report.ReportHeader(
        comparison_id=comp.id, project=comp.project, arch=comp.arch,
        base_label=comp.base_label, head_label=comp.head_label, state=comp.state,
        testbed=testbed, follow_ups=comp.follow_ups, hypothesis=hypothesis_of(comp),
        notes=notes)
    return report.format_report(header, rcells, peers)


# -- branch history -------------------------------------------------------------------------
def series_key(s: alert_sql.TouchedSeries) -> str:
    ident = [s.project, s.branch, s.workload, s.params, s.allocator, s.variant, s.arch,
             s.testbed_fingerprint, s.measure]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def alert_text(s: alert_sql.TouchedSeries, ch: changepoints.Change) -> str:
    params = report.params_text(s.params if isinstance(s.params, dict) else {})
    who = s.allocator + (f" {s.variant}" if s.variant else "")
    return (f"{s.workload} {params} {s.measure} on {s.project}/{s.branch} ({who}, {s.arch}): "
            f"{ch.change_pct:+.1f}% [{ch.ci_low_pct:+.1f}%, {ch.ci_high_pct:+.1f}%] "
            f"from {ch.first_bad_commit[:7]} (last good {ch.last_good_commit[:7]})"
            ).replace("  ", " ")


def detect_changes(session: Session, trial_ids: list[int], settings: Settings | None = None
                   ) -> list[Alert]:
    """Change detection over every series the trials touched; returns the alerts opened."""
    settings = settings or get_settings()
    cpol = change_policy(settings)
    spol = stats_policy(settings)
    to = notify.targets(session, settings.alert_webhooks)
    opened: list[Alert] = []
    for s in alert_sql.touched_series(session, trial_ids):
        points = series_sql.series(
            session, branch_id=s.branch_id, workload=s.workload, params_sha=s.params_sha,
            threads=None, allocator=s.allocator, variant=s.variant, measure=s.measure,
            arch=s.arch, testbed=s.testbed_fingerprint)
        points = [p for p in points if p["median"] is not None]
        if len(points) < 2 * cpol.min_segment:
            continue
        commits = [p["commit_sha"] for p in points]
        values = [float(p["median"]) for p in points]
        known = alert_sql.measure_direction(session, s.measure)
        hib = known if known is not None else stats.higher_is_better(s.measure)
        changes = changepoints.detect(commits, values, higher_is_better=hib, policy=cpol,
                                      stats_policy=spol)
        key = series_key(s)
        position = {c: i for i, c in enumerate(commits)}
        existing = alert_sql.alerts_of_series(session, key)
        for ch in changes:
            alert_sql.add_change_point(
                session, series_key=key, project=s.project, branch=s.branch,
                workload=s.workload, params=s.params, arch=s.arch,
                testbed_fingerprint=s.testbed_fingerprint, allocator=s.allocator,
                variant=s.variant, measure=s.measure, commit_sha=ch.first_bad_commit,
                prev_commit_sha=ch.last_good_commit, change_pct=ch.change_pct,
                ci_low_pct=ch.ci_low_pct, ci_high_pct=ch.ci_high_pct, p_value=ch.p_value,
                direction=ch.direction)
            if not ch.is_regression:
                continue
            near = [a for a in existing if a.first_bad_commit in position
                    and abs(position[a.first_bad_commit] - ch.index) < cpol.min_segment]
            if near or alert_sql.verdict_alert_covers(session, key, ch.first_bad_commit):
                continue
            alert = alert_sql.add_alert(
                session, series_key=key, project_id=s.project_id, project=s.project,
                branch=s.branch, workload=s.workload, params=s.params, threads=s.threads,
                arch=s.arch, testbed_fingerprint=s.testbed_fingerprint, allocator=s.allocator,
                variant=s.variant, measure=s.measure, first_bad_commit=ch.first_bad_commit,
                last_good_commit=ch.last_good_commit, change_pct=ch.change_pct,
                ci_low_pct=ch.ci_low_pct, ci_high_pct=ch.ci_high_pct, p_value=ch.p_value,
                before_median=ch.before_median, after_median=ch.after_median,
                state="open", text=alert_text(s, ch))
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
                  cpol: changepoints.ChangePolicy, to: list[notify.Target]) -> None:
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


def resolve(session: Session, alert: Alert, to: list[notify.Target] | None = None,
            reason: str | None = None) -> None:
    """Resolve an alert and queue its ``alert.resolved`` event (idempotent)."""
    if alert.state == "resolved":
        return
    alert_sql.set_state(alert, "resolved")
    if reason and reason not in alert.text:
        alert.text = f"{alert.text}; resolved: {reason}"
    if to is None:
        to = notify.targets(session, get_settings().alert_webhooks)
    notify.enqueue_alert_event(session, alert, "alert.resolved", to)
