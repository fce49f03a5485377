"""The comparison lifecycle: open a comparison and queue its first job
(:func:`open_comparison`, the one constructor every opener uses: a request, a commit
verdict, a bisection, a calibration, a pull request); then, run by the analysis worker
(never inside a request, ``settle.py``), recompute its cells once, store them, settle its
state or queue a follow-up (:func:`update_comparison`); and render its report. Nothing
here knows who opened a comparison: ``settle.py`` tells them when it settles.

A comparison's cells are recomputed from *all* valid, non-warm-up trials of all its jobs
(the first job and its follow-ups), base against head by trial label, grouped by
workload x params x measure, on one testbed (the first one results came from; trials of
another testbed are left out and the report says so); a cell is judged on its pairs (base
and head of one job's round, run back to back) wherever it has them (``pairs.py``). When
every job has reported:

* no ``unknown`` among the follow-up cells (every measure except allocator counters):
  ``done``;
* some ``unknown`` and fewer than ``max_follow_ups`` follow-ups so far: queue follow-up
  jobs sized to the target MDE within the time budget (``followups.py``), one per unknown
  workload x threads (no peers); state stays ``running``; a cell out of reach of the
  budget gets none and its line says what it would take;
* otherwise (or when the budget is spent) ``done``, the unknowns reported as they are with
  the MDE they reached (the comparison's note says why the follow-ups stopped).

A series calibrated on the comparison's testbed is judged with its calibrated SAME band
(``noise.bands``); the report's notes name the calibrations used. A cell a side of which
has two modes is judged within them, or UNKNOWN when they moved, and the notes carry its
``modes:`` line (``modes.py``).

A job of a comparison that fails for good leaves the comparison ``failed`` when no cells
exist; otherwise the comparison settles as above from the cells it has (each follow-up,
failed or not, counts against the cap). A job that fails, or whose lease expires, queues
its comparison for the worker (:func:`jobs_changed`), so no comparison stays ``running``.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from mallard_stats import spending, stats
from mallard_stats.hypothesis import Hypothesis, parse_hypothesis
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
from mallard_wire.jobs import JobSpec
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import (
    culprits,
    differential,
    explain,
    followups,
    modes,
    noise,
    pairs,
    report,
    specs,
)
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.policy import stats_policy
from mallard_api.analysis.specs import job_spec
from mallard_api.config import Settings
from mallard_api.models.comparisons import Comparison
from mallard_api.models.jobs import Job
from mallard_api.models.projects import Project
from mallard_api.models.records import PeerMedian, Side
from mallard_api.params import params_key
from mallard_api.sql import bisections as bisection_sql
from mallard_api.sql import comparisons as sql
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import profiles as profile_sql
from mallard_api.sql.comparisons import TrialRow
from mallard_api.ui import links

SETTLED = ("done", "failed")
Bands = dict[tuple[str, str, str], float]  # (workload, params key, measure) -> SAME band


def allocator_label(side: Side, name: str) -> str:
    """How a built side is shown: `mimalloc@a3ca0e5 arena_eager_commit=1` (the project's
    name, the short commit, the variant when not the default)."""
    commit = side.commit
    short = commit[:7] if re.fullmatch(r"[0-9a-fA-F]{8,64}", commit) else commit
    variant = side.variant or ""
    return f"{name}@{short}" + (f" {variant}" if variant else "")


def open_comparison(session: Session, settings: Settings, project: Project, *, arch: str,
                    base: Side, head: Side, kind: str = "comparison",
                    workloads: list[str] | None = None, threads: list[int] | None = None,
                    suite: str | None = None, trials: int | None = None,
                    warmup: int | None = None, peers: list[str] | None = None,
                    max_follow_ups: int | None = None, hypothesis: str | None = None,
                    measure: str | None = None, branch: str | None = None,
                    bisection_id: int | None = None, calibration_id: int | None = None,
                    canary_pct: float | None = None, canary_probe: bool = False
                    ) -> tuple[Comparison, Job]:
    """Create a comparison of `head` against `base` on `arch` and queue its first job
    (`kind`: comparison, commit or calibrate); the comparison and the job. Both sides are
    the project's allocator built by its recipe; a job that cannot be built (no recipe, a
    variant key the recipe does not know, an unknown peer project) is a `specs.SpecError`
    raised before anything is stored.

    Suite, trials, warm-up and the follow-up cap default to the settings'; `hypothesis`
    is the request's text (valid, the request checked it), `measure` the judged measure
    without one (a bisection's); `branch` makes the job a commit job of the head on that
    branch (a commit verdict); the calibration fields mark a calibration's comparison."""
    hyp = parse_hypothesis(hypothesis)
    trials = settings.trials if trials is None else trials
    specs.check_sides(session, project, base, head, peers or [])
    comp = sql.create(session, Comparison(
        project_id=project.id, project=project.name, arch=arch, base=base, head=head,
        base_label=allocator_label(base, project.name),
        head_label=allocator_label(head, project.name),
        workloads=workloads, threads=threads, suite=suite or settings.suite, trials=trials,
        warmup=settings.warmup if warmup is None else warmup, peers=peers or [],
        hypothesis=hypothesis, hypothesis_low_pct=hyp.low_pct if hyp else None,
        hypothesis_high_pct=hyp.high_pct if hyp else None,
        hypothesis_measure=hyp.measure if hyp else measure, state="queued",
        max_follow_ups=(settings.comparison_max_follow_ups if max_follow_ups is None
                        else max_follow_ups),
        calibration_id=calibration_id, canary_pct=canary_pct, canary_probe=canary_probe))
    spec = job_spec(session, project=project, suite=comp.suite, trials=trials,
                    warmup=comp.warmup, base=comp.base, head=comp.head, peers=comp.peers,
                    workloads=workloads, threads=threads, branch=branch,
                    comparison_id=comp.id, round=0, bisection_id=bisection_id)
    job = job_sql.enqueue(session, kind=kind, arch=arch, spec=spec, project_id=project.id,
                          max_attempts=settings.job_max_attempts)
    sql.link_job(session, comparison_id=comp.id, job_id=job.id, round=0, trials=trials)
    return comp, job


@dataclass
class Computed:
    """A comparison's cells as one settle computed them (in the order they are stored and
    read back), with what they came from: the trials of its testbed and the SAME bands of
    its calibrated series. The settle hands it to whoever needs the cells."""

    cells: list[CellRow] = field(default_factory=list)
    peers: list[PeerMedian] = field(default_factory=list)
    note: str | None = None
    trials: list[TrialRow] = field(default_factory=list)
    bands: Bands = field(default_factory=dict)


def _direction(measure: str, known: dict[str, bool]) -> bool:
    return known.get(measure, higher_is_better(measure))


def _testbed_rows(session: Session, comp: Comparison, rows: list[TrialRow]
                  ) -> tuple[list[TrialRow], str | None, bool, bool]:
    """The rows of the comparison's testbed (the first one results came from), the note
    on what was left out and what is not judged, and whether it is emulated / isolated."""
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
    return rows, note, emulated, isolated


def _samples(rows: list[TrialRow]) -> tuple[
        dict[tuple[str, str, str], pairs.Sides],
        dict[tuple[str, str], tuple[JsonDict, int | None]],
        dict[tuple[str, str, str], list[float]]]:
    """Base's and head's values per (workload, params key, measure) by round, each workload
    x params' (params, threads), and the peers' throughput values per allocator."""
    params_of: dict[tuple[str, str], tuple[JsonDict, int | None]] = {}
    peer_values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        pk = params_key(r.params)
        params_of[(r.workload, pk)] = (r.params, r.threads)
        if r.label == "peer" and THROUGHPUT in r.measures:
            peer_values[(r.workload, pk, r.allocator)].append(float(r.measures[THROUGHPUT]))
    return pairs.by_round(rows), params_of, peer_values


def _mode_lines(cells: list[report.ReportCell], judged: list[modes.Judged]) -> list[str]:
    """The ``modes:`` line of every cell a side of which has two modes."""
    vary = report.varying_keys(cells)
    return [modes.line(f"{c.workload} {report.params_text(c.params, vary.get(c.workload, ()))}",
                       c.measure, j.modes)
            for c, j in zip(cells, judged, strict=True) if j.modes is not None]


def compute_cells(session: Session, comp: Comparison, policy: Policy) -> Computed:
    """The cells, peer medians and note from the comparison's trials (read once), the
    cells in the order `sql.cells` reads them back (workload, threads, then as computed)."""
    rows = sql.trials(session, comp.id)
    if not rows:
        return Computed()
    rows, note, emulated, isolated = _testbed_rows(session, comp, rows)
    sides, params_of, peer_values = _samples(rows)
    known = sql.measure_directions(session)
    keys = sorted(k for k, v in sides.items() if v.base or v.head)
    requested = [comp.hypothesis_measure] if comp.hypothesis_measure else []
    unjudged = [unjudged_reason(k[2], emulated, isolated) for k in keys]
    looks = [spending.at_look(policy, sides[k].look(), 1 + comp.max_follow_ups) for k in keys]
    raw = [
        pairs.judge(sides[k], higher_is_better=_direction(k[2], known),
                    deterministic=is_deterministic(k[2]),
                    primary=is_primary(k[2], requested) and why is None, policy=at,
                    min_effect_abs=min_effect_abs(k[2], policy.min_effect_bytes))
        for k, why, at in zip(keys, unjudged, looks, strict=True)
    ]
    judged = [modes.within_modes(c, sides[k].values("base"), sides[k].values("head"),
                                 sides[k].pairs(), at, measure=k[2], blocks=sides[k].blocks())
              for k, c, at in zip(keys, raw, looks, strict=True)]
    bands, calibrations = noise.bands(session, comp.testbed_fingerprint)
    decided = stats.adjust_and_decide([j.cell for j in judged], policy,
                                      [bands.get(k) for k in keys], [at.alpha for at in looks])
    if calibrations:
        used = ", ".join(f"#{i}" for i in calibrations)
        note = "; ".join(filter(None, [note, f"SAME bands from calibration {used}"]))
    rcells = [report.ReportCell(k[0], params_of[(k[0], k[1])][0], k[2], s)
              for k, s in zip(keys, decided, strict=True)]
    lines = report.cell_lines(rcells)
    note = "; ".join(filter(None, [note, *_mode_lines(rcells, judged)]))
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
    out.sort(key=lambda c: (c.workload, c.threads is None, c.threads or 0))
    return Computed(out, peers, note, rows, bands)


def update_comparison(session: Session, settings: Settings, comp: Comparison) -> Computed:
    """Recompute the cells and store them; settle the state or queue a follow-up (module
    doc). The cells as computed, for whoever is told next (``settle.py``)."""
    computed = compute_cells(session, comp, stats_policy(settings))
    comp.peer_medians = computed.peers
    comp.note = computed.note
    comp.updated_at = datetime.now(UTC)
    refresh_state(session, settings, comp, computed)
    sql.replace_cells(session, comp.id, computed.cells)  # with what refresh_state added
    return computed


def refresh_state(session: Session, settings: Settings, comp: Comparison,
                  computed: Computed) -> None:
    """Settle ``comp.state`` from its jobs and cells; queue a follow-up when due."""
    if comp.state in SETTLED:
        return
    jobs = sql.jobs(session, comp.id)
    if any(j.state in ("queued", "running") for j in jobs):
        if any(j.state == "running" for j in jobs) or computed.cells:
            comp.state = "running"
        return
    if not computed.cells:
        if jobs and all(j.state in ("failed", "cancelled") for j in jobs):
            comp.state = "failed"
            comp.finished_at = datetime.now(UTC)
        return
    unknown = followups.unknown_primary(computed.cells)
    stop = None
    if unknown and comp.follow_ups < comp.max_follow_ups:
        left = (settings.comparison_follow_up_budget_seconds
                - sql.spent_seconds(session, comp.id))
        plan = followups.plan(unknown, computed.trials, step=comp.trials, warmup=comp.warmup,
                              budget_left=left, bands=computed.bands,
                              policy=spending.at_look(stats_policy(settings), comp.follow_ups + 1,
                                                      1 + comp.max_follow_ups))
        for need in plan.hopeless:  # settled at once: its line says what it would take
            need.cell.line = f"{need.cell.line} ({need.text()})"
        if plan.groups:
            if plan.note:
                comp.note = "; ".join(filter(None, [comp.note, plan.note]))
            queued = queue_follow_up(session, comp, plan.groups, jobs)
            quotas.count_for(session, settings, comp.requested_by,  # asked for by a token
                             [(j.id, j.spec) for j in queued])
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
    """One job per planned workload x threads group, all of the next round (no peers; the
    build of the first job's head: the recipe it started with)."""
    round_ = comp.follow_ups + 1
    first = session.get(Job, jobs[0].job_id) if jobs else None
    if first is None:
        raise ValueError(f"comparison {comp.id} has no job to follow up")
    first_spec = JobSpec.model_validate(first.spec)
    build = next(a.build for a in first_spec.allocators if a.label == "head")
    project = session.get(Project, comp.project_id)
    if project is None or build is None:
        raise ValueError(f"comparison {comp.id}: its project or its head's build is gone")
    out = []
    for g in groups:
        spec = job_spec(
            session, project=project, suite=comp.suite, trials=g.trials,
            warmup=comp.warmup, base=comp.base, head=comp.head, workloads=[g.workload],
            threads=None if g.threads is None else [g.threads], comparison_id=comp.id,
            round=round_, build=build)
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


def bisection_notes(session: Session, settings: Settings, comparison_id: int) -> list[str]:
    """The culprit line of each bisection that measured this comparison (or its page's
    link while it runs), followed by the link to the bisection's page."""
    out = []
    for b in bisection_sql.of_comparison(session, comparison_id):
        url = links.absolute(settings.public_url, links.bisection(b.id))
        line = culprits.culprit_line(session, b)
        out += [line, f"bisection: {url}"] if line else [f"bisection #{b.id} ({b.state}): {url}"]
    return out


def render_report(session: Session, settings: Settings, comp: Comparison,
                  computed: Computed | None = None) -> str:
    """The text report of GET /comparisons/{id}/report: of the stored cells, or of the cells
    a settle just computed and stored (`computed`)."""
    if computed is None:
        cells = sql.cells(session, comp.id)
        bands: Bands = noise.bands(session, comp.testbed_fingerprint)[0]
    else:
        cells, bands = computed.cells, computed.bands
    policy = stats_policy(settings)
    rcells = [report.ReportCell(c.workload, c.params, c.measure,
                                noise.with_band(c.stats(is_deterministic(c.measure)), bands.get(
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
    notes.insert(0, "page: " + links.absolute(settings.public_url, links.comparison(comp.id)))
    notes.extend(bisection_notes(session, settings, comp.id))
    notes.extend(differential.summary(r.body) for r in profile_sql.of_comparisons(
        session, [comp.id]) if r.body is not None)
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
