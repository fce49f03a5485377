"""What the bisection page shows: the request (project, range, workload, measure, threads,
arch), the state, the culprit with the effect across it, and every step with its evidence:
the probed commit, whether it built, and the judged cell of each of its comparisons (the
probe against the good end and against the bad end: verdict, interval, p, MDE, trials).

The plot draws the judged measure's median per commit along the range, one series per
step (the good end, the probe and the bad end it was measured against, trials of both
comparisons pooled at the probe), the culprit marked; every point links to its commit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from markupsafe import Markup
from sqlalchemy.orm import Session

from mallard_api.analysis import culprits
from mallard_api.analysis.cells import CellRow
from mallard_api.models.bisections import Bisection
from mallard_api.models.records import BisectionStep
from mallard_api.sql import bisections as bisection_sql
from mallard_api.sql import comparisons as cmp_sql
from mallard_api.sql import pages as pages_sql
from mallard_api.sql import series as series_sql
from mallard_api.ui import fmt, links, svg, trend
from mallard_api.ui.comparison import CellView, cell_view

OUTCOME_TEXT = {"good": "GOOD", "bad": "BAD", "skip": "SKIPPED"}
AXIS_LABELS_MAX = 12  # commits in a range up to which every probe is named on the x axis


@dataclass
class SideView:
    """One comparison of a step: the probe against one end of the range."""

    label: str
    comparison_id: int | None
    base: str
    head: str
    state: str
    cell: CellView | None = None
    reason: str | None = None  # why there is no judged cell


@dataclass
class StepView:
    round: int
    index: int
    sha: str
    subject: str
    good_end: str
    bad_end: str
    span: int  # commits between the ends
    outcome: str | None
    build: str
    note: str | None
    sides: list[SideView] = field(default_factory=list)


def judged(cells: list[CellRow], b: Bisection) -> CellRow | None:
    """The comparison's cell the bisection follows (as analysis.bisections does)."""
    return next((c for c in cells if c.workload == b.workload and c.measure == b.measure
                 and (b.threads is None or c.threads == b.threads)), None)


def _no_cell(session: Session, state: str, comparison_id: int, b: Bisection) -> str:
    if state in ("queued", "running"):
        return f"measuring (comparison {state})"
    if state == "failed":
        for j in cmp_sql.jobs(session, comparison_id):
            if j.state == "failed":
                line = bisection_sql.failure(session, j.job_id)
                return f"job #{j.job_id} failed" + (f": {line}" if line else "")
        return "the comparison failed"
    threads = f" threads={b.threads}" if b.threads is not None else ""
    return f"no {b.workload}{threads} {b.measure} cell in its results"


def _side(session: Session, b: Bisection, label: str, cid: int, unit: str) -> SideView:
    comp = cmp_sql.get(session, cid)
    if comp is None:
        return SideView(label, None, "", "", "gone", reason="the comparison was deleted")
    view = SideView(label, comp.id, comp.base.commit or "",
                    comp.head.commit or "", comp.state)
    cell = judged(cmp_sql.cells(session, comp.id), b) if comp.state != "failed" else None
    if cell is None:
        view.reason = _no_cell(session, comp.state, comp.id, b)
    else:
        view.cell = cell_view(cell, unit, f"c{comp.id}")
    return view


def _build(step: BisectionStep, sides: list[SideView]) -> str:
    outcome = step.outcome
    if outcome is None:
        return "measuring"
    if outcome == "skip":
        reason = next((s.reason for s in sides if s.reason), "no result")
        return f"skipped: {reason}"
    return "built and measured" if step.round > 0 else "measured by the commit verdict"


def steps(session: Session, b: Bisection, unit: str) -> list[StepView]:
    out = []
    for st in b.steps:
        labels = ["good end vs probe", "probe vs bad end"] if st.round > 0 \
            else ["good end vs bad end"]
        sides = [_side(session, b, lab, cid, unit)
                 for lab, cid in zip(labels, st.comparisons, strict=False)]
        out.append(StepView(
            round=st.round, index=st.index, sha=st.sha,
            subject=culprits.subject(session, b.project_id, st.sha),
            good_end=st.good_end, bad_end=st.bad_end, span=st.bad_index - st.good_index,
            outcome=st.outcome, build=_build(st, sides), note=st.note, sides=sides))
    return out


@dataclass(frozen=True)
class EffectView:
    """The culprit's effect: the cell its line quotes (culprits.culprit_evidence)."""

    change: str
    verdict: str
    interval: str
    comparison_id: int
    base: str
    head: str


@dataclass(frozen=True)
class CulpritView:
    sha: str
    subject: str
    effect: EffectView | None
    line: str | None


def culprit(session: Session, b: Bisection, unit: str) -> CulpritView | None:
    if b.culprit is None:
        return None
    e = culprits.culprit_evidence(session, b)
    effect = None
    if e is not None and e.diff_pct is not None:
        effect = EffectView(change=fmt.pct(e.diff_pct), verdict=e.verdict,
                            interval=(f"[{fmt.pct(e.ci_low_pct)}, {fmt.pct(e.ci_high_pct)}]"
                                      if e.ci_low_pct is not None else "n/a"),
                            comparison_id=e.comparison_id, base=e.base, head=e.head)
    return CulpritView(sha=b.culprit,
                       subject=culprits.subject(session, b.project_id, b.culprit),
                       effect=effect, line=culprits.culprit_line(session, b))


def _values(session: Session, b: Bisection, cid: int) -> dict[str, list[float]]:
    """The judged measure's trials of one comparison per commit (base and head)."""
    comp = cmp_sql.get(session, cid)
    if comp is None or comp.state == "failed":
        return {}
    cell = judged(cmp_sql.cells(session, comp.id), b)
    threads = cell.threads if cell is not None else b.threads
    out: dict[str, list[float]] = defaultdict(list)
    for t in cmp_sql.trials(session, comp.id):
        if t.workload != b.workload or b.measure not in t.measures \
                or t.label not in ("base", "head") \
                or t.testbed_fingerprint != comp.testbed_fingerprint \
                or (threads is not None and t.threads != threads):
            continue
        sha = comp.base.commit if t.label == "base" else comp.head.commit
        out[str(sha)].append(float(t.measures[b.measure]))
    return out


def plot(session: Session, b: Bisection, unit: str, public_url: str | None
         ) -> tuple[Markup | None, list[tuple[str, str]]]:
    """The per-step medians along the range, the culprit marked; with its legend."""
    index = {sha: i for i, sha in enumerate(b.commits)}
    series, legend = [], []
    for k, st in enumerate(b.steps):
        pooled: dict[str, list[float]] = defaultdict(list)
        for cid in st.comparisons:
            for sha, vals in _values(session, b, cid).items():
                pooled[sha].extend(vals)
        pts = []
        for sha, vals in sorted(pooled.items(), key=lambda kv: index.get(kv[0], -1)):
            if sha not in index or not vals:
                continue
            vals.sort()
            med = series_sql.quantile(vals, 0.5)
            pts.append(trend.TrendPoint(
                index[sha], med, series_sql.quantile(vals, 0.25),
                series_sql.quantile(vals, 0.75),
                title=f"round {st.round}: {sha[:7]} median "
                      f"{fmt.value(med, b.measure, unit, 4)} ({len(vals)} trials)",
                href=links.path(public_url, links.commit(sha))))
        what = "the commit verdict" if st.round == 0 else \
            f"probe {st.sha[:7]} {OUTCOME_TEXT.get(st.outcome or '', 'measuring')}"
        if not pts:  # a skipped (or still queued) probe: named in the legend only
            legend.append(("", f"round {st.round}: {what}, no result"))
            continue
        css = f"s{k % 6}"
        series.append(trend.TrendSeries(f"round {st.round}", pts, css))
        legend.append((css, f"round {st.round}: {what}"))
    if not series:
        return None, []
    markers = []
    # the probes' shas under the axis while they fit (a skipped one crossed out)
    extra = {st.index: st.sha[:7] + (" ✕" if st.outcome == "skip" else "")
             for st in b.steps if st.round > 0} if len(b.commits) <= AXIS_LABELS_MAX else {}
    if b.culprit in index:
        at = index[b.culprit]
        markers.append(trend.Marker(at, "change", f"culprit {b.culprit[:7]}",
                                    title=f"culprit {b.culprit[:7]}: the first bad commit"))
        extra[at] = b.culprit[:7]
    threads = f" threads={b.threads}" if b.threads is not None else ""
    svg_plot = svg.trend_plot(
        series, trend.TrendAxis([c[:7] for c in b.commits], extra), measure=b.measure,
        unit=unit, markers=markers, width=760, height=230,
        label=f"{b.workload}{threads} {b.measure} per commit along the range, per step")
    return svg_plot, legend


@dataclass
class BisectionPage:
    """What the bisection page draws (its template's variables)."""

    b: Bisection
    unit: str
    steps: list[StepView]
    culprit: CulpritView | None
    plot: Markup | None
    legend: list[tuple[str, str]]  # (css class, what the series is)
    outcomes: dict[str, str]
    subjects: dict[str, str]  # sha -> its subject line


def build(session: Session, b: Bisection, public_url: str | None) -> BisectionPage:
    unit = pages_sql.measure_units(session).get(b.measure, "")
    svg_plot, legend = plot(session, b, unit, public_url)
    return BisectionPage(
        b=b, unit=unit, steps=steps(session, b, unit), culprit=culprit(session, b, unit),
        plot=svg_plot, legend=legend, outcomes=OUTCOME_TEXT, subjects={
            sha: culprits.subject(session, b.project_id, sha)
            for sha in [b.good, b.bad, *b.culprit_candidates]})
