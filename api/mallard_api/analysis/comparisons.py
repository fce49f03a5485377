"""The comparison lifecycle, run by the analysis worker (never inside a request): recompute
a comparison's cells, settle its state or queue a follow-up, and render its report.

A comparison's cells are recomputed from *all* valid, non-warm-up trials of all its jobs
(the first job and its follow-ups), base against head by trial label, grouped by
workload x params x measure, on one testbed (the first one results came from; trials of
another testbed are left out and the report says so). When every job has reported:

* no ``unknown`` among the follow-up cells (every measure except allocator counters):
  ``done``;
* some ``unknown`` and fewer than ``max_follow_ups`` follow-ups so far: queue follow-up
  jobs sized to the target MDE within the time budget (``followups.py``), one per unknown
  workload x threads (no peers); state stays ``running``;
* otherwise (or when the budget is spent) ``done``, the unknowns reported as they are with
  the MDE they reached (the comparison's note says why the follow-ups stopped).

A series calibrated on the comparison's testbed is judged with its calibrated SAME band
(``noise.bands``); the report's notes name the calibrations used.

A job of a comparison that fails for good leaves the comparison ``failed`` when no cells
exist; otherwise the comparison settles as above from the cells it has (each follow-up,
failed or not, counts against the cap). A job that fails, or whose lease expires, queues
its comparison for the worker (:func:`jobs_changed`), so no comparison stays ``running``.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from datetime import UTC, datetime

from mallard_stats import stats
from mallard_stats.hypothesis import Hypothesis
from mallard_stats.measures import (
    EMULATED_REASON,
    NOT_ISOLATED_REASON,
    THROUGHPUT,
    higher_is_better,
    is_deterministic,
    is_primary,
    min_effect_abs,
    unjudged_reason,
)
from mallard_stats.policy import Policy
from mallard_wire.fields import JsonDict
from mallard_wire.jobs import JobSpec, SpecAllocator
from sqlalchemy.orm import Session

from mallard_api.analysis import explain, followups, noise, report
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.policy import stats_policy
from mallard_api.config import Settings, get_settings
from mallard_api.models.analysis import Comparison
from mallard_api.models.core import Job
from mallard_api.models.records import PeerMedian, Side
from mallard_api.params import params_key
from mallard_api.sql import comparisons as sql
from mallard_api.sql import followups as followup_sql
from mallard_api.sql import jobs as job_sql
from mallard_api.ui import links


def allocator_label(side: Side, name: str = "mallard") -> str:
    commit = side.commit
    short = commit[:7] if re.fullmatch(r"[0-9a-fA-F]{8,64}", commit) else commit
    variant = side.variant or ""
    return f"{name}@{short}" + (f" {variant}" if variant else "")


def comparison_spec(comp: Comparison, *, project_repo: str, allocator_dir: str,
                    workloads: list[str] | None, threads: list[int] | None, trials: int,
                    peers: list[str], round: int = 0) -> JobSpec:
    """The job spec of contracts §5 for a comparison (labels base, head, peer)."""
    return JobSpec(
        project=comp.project, repo_url=project_repo, allocator_dir=allocator_dir,
        suite=comp.suite, workloads=workloads, threads=threads, trials=trials,
        warmup=comp.warmup,
        allocators=[
            SpecAllocator(label="base", name="mallard", commit=comp.base.commit,
                          variant=comp.base.variant),
            SpecAllocator(label="head", name="mallard", commit=comp.head.commit,
                          variant=comp.head.variant),
        ] + [SpecAllocator(label="peer", name=p) for p in peers],
        comparison_id=comp.id, round=round)


def _direction(measure: str, known: dict[str, bool]) -> bool:
    return known.get(measure, higher_is_better(measure))


def compute_cells(session: Session, comp: Comparison, policy: Policy
                  ) -> tuple[list[CellRow], list[PeerMedian], str | None]:
    """(cells, peer medians, note) from the comparison's trials."""
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
    emulated = any(r.emulated for r in rows)  # one testbed: all rows say the same
    if emulated:
        note = "; ".join(n for n in (note, f"note: {EMULATED_REASON}: timing measures are "
                                           "shown, never judged") if n)
    isolated = sql.isolated(session, comp.id)
    if not isolated and not emulated:
        note = "; ".join(n for n in (note, f"note: {NOT_ISOLATED_REASON}: wall-clock "
                                           f"{THROUGHPUT} is shown, never judged; "
                                           "ops_per_cpu_sec is judged") if n)
    sides: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: {"base": [], "head": []})
    params_of: dict[tuple[str, str], tuple[JsonDict, int | None]] = {}
    peer_values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        pk = params_key(r.params)
        params_of[(r.workload, pk)] = (r.params, r.threads)
        for m, v in r.measures.items():
            if r.label in ("base", "head"):
                sides[(r.workload, pk, m)][r.label].append(float(v))
            elif r.label == "peer" and m == THROUGHPUT:
                peer_values[(r.workload, pk, r.allocator)].append(float(v))
    known = sql.measure_directions(session)
    keys = sorted(k for k, v in sides.items() if v["base"] or v["head"])
    requested = [comp.hypothesis_measure] if comp.hypothesis_measure else []
    unjudged = [unjudged_reason(k[2], emulated, isolated) for k in keys]
    raw = [
        stats.compare_samples(sides[k]["base"], sides[k]["head"],
                              higher_is_better=_direction(k[2], known),
                              deterministic=is_deterministic(k[2]),
                              primary=is_primary(k[2], requested) and why is None,
                              policy=policy,
                              min_effect_abs=min_effect_abs(k[2], policy.min_effect_bytes))
        for k, why in zip(keys, unjudged, strict=True)
    ]
    band_of, calibrations = noise.bands(session, comp.testbed_fingerprint)
    decided = stats.adjust_and_decide(raw, policy, [band_of.get(k) for k in keys])
    if calibrations:
        used = ", ".join(f"#{i}" for i in calibrations)
        note = "; ".join(filter(None, [note, f"SAME bands from calibration {used}"]))
    rcells = [report.ReportCell(k[0], params_of[(k[0], k[1])][0], k[2], s)
              for k, s in zip(keys, decided, strict=True)]
    lines = report.cell_lines(rcells)
    out = []
    for k, s, line, why in zip(keys, decided, lines, unjudged, strict=True):
        params, threads = params_of[(k[0], k[1])]
        if why is not None:
            line = f"{line} (not judged: {why})"
        out.append(CellRow.of(s, workload=k[0], params=params, threads=threads,
                              measure=k[2], line=line, unjudged_reason=why))
    peers = [
        PeerMedian(workload=wl, params=params_of[(wl, pk)][0], allocator=alloc,
                   median=float(statistics.median(vs)))
        for (wl, pk, alloc), vs in sorted(peer_values.items())
    ]
    return out, peers, note


def update_comparison(session: Session, comp: Comparison, settings: Settings | None = None
                      ) -> None:
    """Recompute the cells; settle the state or queue a follow-up (module doc)."""
    policy = stats_policy(settings or get_settings())
    cells, peers, note = compute_cells(session, comp, policy)
    sql.replace_cells(session, comp.id, cells)
    comp.peer_medians = peers
    comp.note = note
    comp.updated_at = datetime.now(UTC)
    refresh_state(session, comp, cells=cells, settings=settings)
    from mallard_api.analysis import verdicts  # commit verdicts, bisections (issue 12)

    if comp.state in ("done", "failed"):
        session.flush()
        verdicts.on_comparison_settled(session, comp, settings or get_settings())
    else:
        verdicts.follow(session, settings or get_settings(), comp)


def refresh_state(session: Session, comp: Comparison,
                  cells: list[CellRow] | None = None,
                  settings: Settings | None = None) -> None:
    """Settle ``comp.state`` from its jobs and cells; queue a follow-up when due."""
    if comp.state in ("done", "failed"):
        return
    jobs = sql.jobs(session, comp.id)
    if any(j.state in ("queued", "running") for j in jobs):
        if any(j.state == "running" for j in jobs) or cells:
            comp.state = "running"
        return
    if cells is None:
        cells = sql.cells(session, comp.id)
    if not cells:
        if jobs and all(j.state in ("failed", "cancelled") for j in jobs):
            comp.state = "failed"
            comp.finished_at = datetime.now(UTC)
        return
    unknown = followups.unknown_primary(cells)
    stop = None
    settings = settings or get_settings()
    if unknown and comp.follow_ups < comp.max_follow_ups:
        left = (settings.comparison_follow_up_budget_seconds
                - followup_sql.spent_seconds(session, comp.id))
        plan = followups.plan(
            unknown, [r for r in sql.trials(session, comp.id)
                      if r.testbed_fingerprint == comp.testbed_fingerprint],
            step=comp.trials, warmup=comp.warmup, budget_left=left,
            policy=stats_policy(settings),
            bands=noise.bands(session, comp.testbed_fingerprint)[0])
        if plan.groups:
            queue_follow_up(session, comp, plan.groups, jobs)
            comp.state = "running"
            return
        stop = plan.note
    elif unknown:
        stop = f"follow-ups stopped: {comp.follow_ups} of at most {comp.max_follow_ups} ran"
    if unknown:
        reached = followups.mde_reached(unknown, settings.stats_target_mde_pct)
        comp.note = "; ".join(filter(None, [comp.note, stop, reached]))
    comp.state = "done"
    comp.finished_at = datetime.now(UTC)


def queue_follow_up(session: Session, comp: Comparison, groups: list[followups.Group],
                    jobs: list[sql.JobState]) -> list[Job]:
    """One job per planned workload x threads group, all of the next round."""
    round_ = comp.follow_ups + 1
    first = session.get(Job, jobs[0].job_id) if jobs else None
    if first is None:
        raise ValueError(f"comparison {comp.id} has no job to follow up")
    first_spec = JobSpec.model_validate(first.spec)
    out = []
    for g in groups:
        spec = comparison_spec(
            comp, project_repo=first_spec.repo_url,
            allocator_dir=first_spec.allocator_dir, workloads=[g.workload],
            threads=None if g.threads is None else [g.threads], trials=g.trials, peers=[],
            round=round_)
        job = job_sql.enqueue(session, kind=first.kind, arch=comp.arch, spec=spec,
                              project_id=comp.project_id, max_attempts=first.max_attempts)
        sql.link_job(session, comparison_id=comp.id, job_id=job.id, round=round_,
                     trials=g.trials)
        out.append(job)
    comp.follow_ups = round_
    return out


def hypothesis_of(comp: Comparison) -> Hypothesis | None:
    if comp.hypothesis_low_pct is None or comp.hypothesis_high_pct is None:
        return None
    return Hypothesis(comp.hypothesis_low_pct, comp.hypothesis_high_pct,
                      comp.hypothesis_measure or THROUGHPUT, comp.hypothesis or "")


def bisection_notes(session: Session, comparison_id: int) -> list[str]:
    """The culprit line of each bisection that measured this comparison (or its page's
    link while it runs), followed by the link to the bisection's page."""
    from mallard_api.analysis.bisections import culprit_line
    from mallard_api.sql import bisection_pages

    out = []
    for b in bisection_pages.of_comparison(session, comparison_id):
        url = links.absolute(get_settings().public_url, links.bisection(b.id))
        line = culprit_line(session, b)
        out += [line, f"bisection: {url}"] if line else [f"bisection #{b.id} ({b.state}): {url}"]
    return out


def render_report(session: Session, comp: Comparison) -> str:
    """The text report of GET /comparisons/{id}/report."""
    cells = sql.cells(session, comp.id)
    band_of = noise.bands(session, comp.testbed_fingerprint)[0]
    policy = stats_policy(get_settings())
    rcells = [report.ReportCell(c.workload, c.params, c.measure,
                                noise.with_band(c.stats(is_deterministic(c.measure)), band_of.get(
                                    (c.workload, params_key(c.params), c.measure)), policy,
                                    c.measure))
              for c in cells]
    peers: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for p in comp.peer_medians or []:
        peers[(p.workload, params_key(p.params))][p.allocator] = p.median
    testbed = None
    if comp.testbed_fingerprint:
        testbed = f"{comp.cpu_model or 'unknown CPU'} ({comp.testbed_fingerprint[:12]})"
    notes = [comp.note] if comp.note else []
    notes.insert(0, "page: " + links.absolute(get_settings().public_url, links.comparison(comp.id)))
    notes.extend(bisection_notes(session, comp.id))
    if not cells:
        notes.append("no results yet" if comp.state in ("queued", "running")
                     else "no results")
    header = report.ReportHeader(
        comparison_id=comp.id, project=comp.project, arch=comp.arch,
        base_label=comp.base_label, head_label=comp.head_label, state=comp.state,
        testbed=testbed, follow_ups=comp.follow_ups, hypothesis=hypothesis_of(comp),
        notes=notes)
    cpus = sql.testbed_cpus(session, comp.testbed_fingerprint)
    return report.format_report(header, rcells, peers, explain.report_extras(rcells, cpus))
