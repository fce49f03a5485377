"""The comparison lifecycle, run by the analysis worker (never inside a request): recompute
a comparison's cells, settle its state or queue a follow-up, and render its report.

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
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from mallard_api.analysis import report, stats
from mallard_api.analysis.hypothesis import Hypothesis
from mallard_api.analysis.measures import THROUGHPUT, higher_is_better, is_deterministic, is_primary
from mallard_api.analysis.policy import Policy, stats_policy
from mallard_api.config import Settings, get_settings
from mallard_api.models.analysis import Comparison, ComparisonCell
from mallard_api.models.core import Job
from mallard_api.sql import comparisons as sql
from mallard_api.sql import jobs as job_sql
from mallard_api.ui import links


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
    return known.get(measure, higher_is_better(measure))


def compute_cells(session: Session, comp: Comparison, policy: Policy
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
            elif r.label == "peer" and m == THROUGHPUT:
                peer_values[(r.workload, pk, r.allocator)].append(float(v))
    known = sql.measure_directions(session)
    keys = sorted(k for k, v in sides.items() if v["base"] or v["head"])
    requested = [comp.hypothesis_measure] if comp.hypothesis_measure else []
    raw = [
        stats.compare_samples(sides[k]["base"], sides[k]["head"],
                              higher_is_better=_direction(k[2], known),
                              deterministic=is_deterministic(k[2]),
                              primary=is_primary(k[2], requested), policy=policy)
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
    policy = stats_policy(settings or get_settings())
    cells, peers, note = compute_cells(session, comp, policy)
    sql.replace_cells(session, comp.id, cells)
    comp.peer_medians = peers
    comp.note = note
    comp.updated_at = datetime.now(UTC)
    refresh_state(session, comp, cells=cells)


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


def hypothesis_of(comp: Comparison) -> Hypothesis | None:
    if comp.hypothesis_low_pct is None or comp.hypothesis_high_pct is None:
        return None
    return Hypothesis(comp.hypothesis_low_pct, comp.hypothesis_high_pct,
                      comp.hypothesis_measure or THROUGHPUT, comp.hypothesis or "")


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
