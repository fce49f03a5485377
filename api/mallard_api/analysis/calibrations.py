"""Calibration (issue 11 item 6): how often this testbed's verdicts cry wolf, how small a
regression they catch, and the noise that sets each series' SAME band.

A calibration of a build (project, commit, optional variant) runs in two phases of
ordinary comparisons, each queued as a `calibrate` job that the runner treats like a
comparison job (base and head interleaved, no peers, no follow-ups unless asked):

1. **A/A**: ``aa_comparisons`` comparisons of the build against itself (both sides the same
   variant). Every ``improved``/``regressed`` primary cell is a false alarm.
2. **Probes**: once every A/A comparison has settled, per workload two canary comparisons
   (``comparisons.canary_probe``) at the nominal ``canary_ns`` of :data:`PROBE_SIZES`
   (1% and 20%). The nominal ``N = s/100 * (1e9 / median ops_per_cpu_sec) /
   frees_per_op`` is the CPU time of one operation (the workload's own CPU time over its
   measured phase, so other processes on the core do not inflate it; ``ops_per_sec`` only
   for trials without it) spread over the frees of one operation (:data:`FREES_PER_OP`,
   from the allocator's ``frees`` counter: larson 1.002, rpc 2.000; others 1). It is not
   what a canary costs inside a workload: each call costs 1.5-2 ns by itself and the chain
   overlaps with the workload's own work out of order (runner/README.md). The probes
   measure it: their slowdown (the median change of the throughput cells, per CPU-second
   where there is one) fits ``slowdown = a + b x N`` per workload.
3. **Canary**: for each workload and injected size ``s`` (percent, e.g. 1, 3, 10)
   ``canary_comparisons`` comparisons of the build against itself with ``canary_ns=N``
   added to the head's variant, ``N = round((s - a) / b)`` from the fit, at least 1 (the
   nominal ``N`` when the probes did not give a rising line). The fit is in the
   calibration's note, and the measured change of each size (the median ``diff_pct`` of
   its comparisons) is stored beside the nominal one: at 1 ns a canary costs ``a + b``,
   the smallest it can inject.

When every comparison has settled the results are computed and stored once (replacing
any partial set of an interrupted try), per testbed x workload x params x primary measure:

* ``cv_pct``: the median over A/A comparisons and sides of the robust CV of the trials;
* ``false_alarms`` of ``aa_comparisons`` (and ``aa_unknown``), ``false_alarm_rate``;
* ``detection``: per injected size, the comparisons, how many called the cell
  ``regressed`` (the canary only makes things worse), the rate, the measured change;
* ``band_pct``: the series' SAME band, ``clamp(cv_pct, min_effect_pct, band_max_pct)``
  for a noisy measure (none for a deterministic one, which has its own rule): later
  comparisons on the testbed call the series ``same`` when the interval lies inside
  ``±band`` (rules 2 and 4 of ``stats``), in place of the one ±1%/±3% for every series.

The settle (settle.py) calls :func:`advance` whenever one of the calibration's
comparisons settled; the calibration row is locked, so two workers never queue a phase
twice. A runner that dies mid-job loses its lease; the job is re-queued (or fails at its attempt
cap) and its comparison, then the calibration, settles from what was stored: trials are
stored once by their uid, results once per calibration. A calibration whose comparisons
all failed is ``failed`` with a note.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import UTC, datetime

from mallard_stats import stats
from mallard_stats.measures import SPEEDS, is_deterministic
from mallard_wire.fields import JsonDict
from sqlalchemy.orm import Session

from mallard_api.analysis import noise
from mallard_api.analysis.canaries import PROBE_SIZES, canary_ns, fit, fitted_ns, head_variant
from mallard_api.analysis.comparisons import SETTLED, open_comparison
from mallard_api.config import Settings
from mallard_api.models.calibrations import Calibration, CalibrationResult
from mallard_api.models.comparisons import Comparison
from mallard_api.models.records import Detection, Side
from mallard_api.params import params_key
from mallard_api.sql import calibrations as sql
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import projects as project_sql


# -- queueing -------------------------------------------------------------------------------
def queue_comparison(session: Session, cal: Calibration, settings: Settings, *,
                     workloads: list[str], canary_pct: float | None = None,
                     ns: int | None = None, probe: bool = False) -> Comparison:
    """One comparison of the calibration and its `calibrate` job (no peers)."""
    project = project_sql.get(session, cal.project)
    if project is None:
        raise ValueError(f"calibration {cal.id}: no project {cal.project}")
    comp, _ = open_comparison(
        session, settings, project, kind="calibrate", arch=cal.arch,
        base=Side(commit=cal.commit_sha, variant=cal.variant or None),
        head=Side(commit=cal.commit_sha, variant=head_variant(cal.variant, ns) or None),
        workloads=workloads, threads=cal.threads, suite=cal.suite, trials=cal.trials,
        max_follow_ups=settings.calibration_follow_ups, calibration_id=cal.id,
        canary_pct=canary_pct, canary_probe=probe)
    return comp


def start(session: Session, cal: Calibration, settings: Settings) -> None:
    """Queue the A/A phase (the request asks for at least one A/A comparison whenever it
    asks for canaries: their size comes from the A/A trials)."""
    for _ in range(cal.aa_comparisons):
        queue_comparison(session, cal, settings, workloads=cal.workloads)
    cal.state = "aa"
    if cal.aa_comparisons == 0:
        finish(session, cal, settings)


def ops_per_sec_of(session: Session, comps: list[Comparison]) -> dict[str, float]:
    """Per workload, the median operations per CPU-second of the A/A trials (both sides,
    every thread count); wall-clock ops/s for trials without the CPU time (module doc)."""
    values: dict[str, list[float]] = defaultdict(list)
    for comp in comps:
        if comp.canary_pct is not None or comp.canary_probe:
            continue
        for r in comparison_sql.trials(session, comp.id):
            v = r.measures.get("ops_per_cpu_sec") or r.measures.get("ops_per_sec")
            if r.label in ("base", "head") and v:
                values[r.workload].append(float(v))
    return {w: float(statistics.median(vs)) for w, vs in values.items() if vs}


def slowdown_of(session: Session, comp: Comparison) -> float | None:
    """A probe's measured slowdown in percent: the median change of its throughput cells
    (per CPU-second where measured), made positive for a slowdown."""
    cells = comparison_sql.cells(session, comp.id)
    for measure in reversed(SPEEDS):  # per CPU-second first
        diffs = [c.diff_pct for c in cells if c.measure == measure and c.diff_pct is not None]
        if diffs:
            return -float(statistics.median(diffs))
    return None


def queue_probes(session: Session, cal: Calibration, settings: Settings,
                 comps: list[Comparison]) -> bool:
    """Phase 2 (module doc); False when no workload has A/A throughput to size from."""
    rates = ops_per_sec_of(session, comps)
    queued = False
    for workload in cal.workloads:
        if workload not in rates:
            continue
        for size in PROBE_SIZES:
            queue_comparison(session, cal, settings, workloads=[workload],
                             ns=canary_ns(size, rates[workload], workload), probe=True)
            queued = True
    return queued


def queue_canaries(session: Session, cal: Calibration, settings: Settings,
                   comps: list[Comparison]) -> bool:
    """Phase 3 (module doc): canaries sized by the probes' line; the fit goes in the note."""
    rates = ops_per_sec_of(session, comps)
    sized: dict[str, dict[str, int]] = {}
    fits = []
    for workload in cal.workloads:
        if workload not in rates:
            continue
        points = []
        for comp in comps:
            if comp.canary_probe and comp.workloads == [workload]:
                ns = int((comp.head.variant or "").rsplit("canary_ns=", 1)[-1])
                slow = slowdown_of(session, comp)
                if slow is not None:
                    points.append((ns, slow))
        line = fit(points)
        fits.append(f"{workload}: " + ", ".join(f"{n} ns {s:+.1f}%" for n, s in sorted(points))
                    + ("" if line else " (no rising line: nominal sizes)"))
        sized[workload] = {}
        for size in cal.sizes_pct:
            ns = fitted_ns(float(size), line, canary_ns(float(size), rates[workload], workload))
            sized[workload][f"{float(size):g}"] = ns
            for _ in range(cal.canary_comparisons):
                queue_comparison(session, cal, settings, workloads=[workload],
                                 canary_pct=float(size), ns=ns)
    cal.canary_ns = sized
    cal.note = "canaries sized from probes (slowdown at ns per free): " + "; ".join(fits)
    return bool(sized)


def on_settled(session: Session, settings: Settings, comp: Comparison) -> None:
    """The comparison settled (settle.py): advance its calibration, if it has one."""
    if comp.calibration_id is not None:
        advance(session, comp.calibration_id, settings)


def advance(session: Session, calibration_id: int, settings: Settings) -> None:
    """Called after one of the calibration's comparisons changed (module doc)."""
    cal = sql.lock(session, calibration_id)
    if cal is None or cal.state in SETTLED:
        return
    comps = sql.comparisons(session, cal.id)
    if any(c.state not in SETTLED for c in comps):
        return
    wants_canaries = bool(cal.canary_comparisons and cal.sizes_pct)
    if cal.state == "aa" and wants_canaries and queue_probes(session, cal, settings, comps):
        cal.state = "canary"  # the probes run first; their canaries follow
        cal.updated_at = datetime.now(UTC)
        return
    if (cal.state == "canary" and not any(c.canary_pct is not None for c in comps)
            and queue_canaries(session, cal, settings, comps)):
        cal.updated_at = datetime.now(UTC)
        return
    finish(session, cal, settings)


def result_rows(session: Session, comps: list[Comparison], settings: Settings
                ) -> list[CalibrationResult]:
    """The per-series rows of the module doc from the settled comparisons."""
    aa: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    cvs: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    canary: dict[tuple[str, str, str, str], dict[float, list[tuple[str, float | None]]]] = (
        defaultdict(lambda: defaultdict(list)))
    meta: dict[tuple[str, str, str, str], tuple[JsonDict, int | None]] = {}
    for comp in comps:
        fp = comp.testbed_fingerprint
        if fp is None or comp.canary_probe:
            continue
        for cell in comparison_sql.cells(session, comp.id):
            if cell.verdict == stats.DIAGNOSTIC:
                continue
            key = (fp, cell.workload, params_key(cell.params), cell.measure)
            meta[key] = (cell.params, cell.threads)
            if comp.canary_pct is None:
                aa[key].append(cell.verdict)
            else:
                canary[key][comp.canary_pct].append((cell.verdict, cell.diff_pct))
        if comp.canary_pct is None:
            sides: dict[tuple[str, str, str, str], dict[str, list[float]]] = defaultdict(
                lambda: {"base": [], "head": []})
            for r in comparison_sql.trials(session, comp.id):
                if r.label not in ("base", "head") or r.testbed_fingerprint != fp:
                    continue
                for m, v in r.measures.items():
                    sides[(fp, r.workload, params_key(r.params), m)][r.label].append(float(v))
            for key, by_side in sides.items():
                for values in by_side.values():
                    cv = stats.robust_cv_pct(values)
                    if cv is not None:
                        cvs[key].append(cv)
    rows = []
    for key in sorted(meta):
        fp, workload, _, measure = key
        params, threads = meta[key]
        verdicts = aa.get(key, [])
        false_alarms = sum(v in ("improved", "regressed") for v in verdicts)
        cv = float(statistics.median(cvs[key])) if cvs.get(key) else None
        detection = []
        for size in sorted(canary.get(key, {})):
            got = canary[key][size]
            detected = sum(v == "regressed" for v, _ in got)
            diffs = [d for _, d in got if d is not None]
            detection.append(Detection(
                size_pct=size, comparisons=len(got), detected=detected,
                rate=detected / len(got),
                measured_pct=float(statistics.median(diffs)) if diffs else None))
        rows.append(CalibrationResult(
            testbed_id=sql.testbed_id_of(session, fp), testbed_fingerprint=fp,
            workload=workload, params=params, threads=threads, measure=measure, cv_pct=cv,
            aa_comparisons=len(verdicts), false_alarms=false_alarms,
            aa_unknown=sum(v == "unknown" for v in verdicts),
            false_alarm_rate=false_alarms / len(verdicts) if verdicts else None,
            detection=detection,
            band_pct=noise.band_pct(cv, is_deterministic(measure), settings)))
    return rows


def finish(session: Session, cal: Calibration, settings: Settings) -> None:
    comps = sql.comparisons(session, cal.id)
    rows = result_rows(session, comps, settings)
    sql.replace_results(session, cal.id, rows)
    now = datetime.now(UTC)
    cal.updated_at = cal.finished_at = now
    if rows:
        cal.state = "done"
        if cal.testbed_id is None:
            cal.testbed_id = rows[0].testbed_id
    else:
        cal.state = "failed"
        failed = sum(c.state == "failed" for c in comps)
        cal.note = (f"no results: {failed} of {len(comps)} comparisons failed"
                    if comps else "no comparisons were asked for")
