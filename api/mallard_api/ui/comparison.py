"""What the comparison page shows: the summary, then per workload cell the primary
measures (verdict, change, interval, p, trials, MDE when the cell has one) each with a
strip plot of both sides' trials, the diagnostics under them, the allocator counters that
moved, the speed x memory label, and the peers' throughput as ratios; then the
thread-scaling curves (base and head against threads) with their verdicts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from mallard_stats import stats
from mallard_stats.hypothesis import Hypothesis, hypothesis_outcome
from mallard_stats.measures import THROUGHPUT
from mallard_stats.stats import DIAGNOSTIC
from markupsafe import Markup
from sqlalchemy.orm import Session

from mallard_api.analysis import comparisons, curves, joint, report
from mallard_api.analysis.cells import CellRow
from mallard_api.config import Settings
from mallard_api.models.comparisons import Comparison
from mallard_api.params import params_key
from mallard_api.sql import comparisons as cmp_sql
from mallard_api.sql import pages as pages_sql
from mallard_api.ui import fmt, svg, timelines, trend

# Measures that get a verdict (the rest are diagnostics shown under them), in page order.
PRIMARY = ("ops_per_sec", "max_rss_bytes", "instructions", "llc_misses")
# A counter "moved" when its median changed by at least this much (percent).
COUNTER_MOVED_PCT = 0.1


def is_primary(cell: CellRow) -> bool:
    """A cell with a verdict (stats decided it is primary), not a diagnostic."""
    return cell.verdict != DIAGNOSTIC


def measure_order(measure: str) -> tuple[int, str]:
    """Primary measures first, in PRIMARY's order, then the rest by name."""
    return (PRIMARY.index(measure), "") if measure in PRIMARY else (len(PRIMARY), measure)


@dataclass
class CellView:
    measure: str
    unit: str
    verdict: str
    base: str
    head: str
    change: str
    interval: str
    half_width: str
    p: str
    trials: str
    robust: str
    mde: str | None
    line: str
    anchor: str
    hypothesis: str | None = None
    plot: Markup | None = None


@dataclass
class GroupView:
    title: str
    anchor: str
    primary: list[CellView] = field(default_factory=list)
    diagnostics: list[CellView] = field(default_factory=list)
    counters_moved: list[CellView] = field(default_factory=list)
    counters_still: list[str] = field(default_factory=list)
    peers: Markup | None = None
    peer_reference: str | None = None
    joint: str | None = None


@dataclass
class CurveView:
    summary: str
    plot: Markup
    oversubscribed: list[int]


def curve_views(cells: list[CellRow], cpus: str | None) -> list[CurveView]:
    """The scaling curves (mallard_api.analysis.curves) drawn as two lines against threads."""
    rcells = [report.ReportCell(c.workload, c.params, c.measure, c.stats())
              for c in cells]
    views = []
    for cv in curves.curves(rcells, curves.cpu_count(cpus)):
        labels = [str(p.threads) for p in cv.points]
        sides: dict[str, list[trend.TrendPoint]] = {"base": [], "head": []}
        for i, p in enumerate(cv.points):
            for side, v in (("base", p.base_median), ("head", p.head_median)):
                if v is not None:
                    sides[side].append(trend.TrendPoint(
                        i, v, v, v, title=f"{side}, {p.threads} threads: "
                        f"{fmt.value(v, cv.measure)} ({p.verdict})"))
        series = [trend.TrendSeries("base", sides["base"], "s0"),
                  trend.TrendSeries("head", sides["head"], "s1")]
        plot = svg.trend_plot(series, trend.TrendAxis(labels, dict(enumerate(labels))),
                              measure=cv.measure, label=f"{cv.workload} {cv.measure} "
                              "against threads, base and head")
        views.append(CurveView(cv.summary(), plot,
                               [p.threads for p in cv.points if p.oversubscribed]))
    return views


def _mde(cell: CellRow) -> str | None:
    return None if cell.mde_pct is None else f"{cell.mde_pct:.1f}%"


def cell_view(cell: CellRow, unit: str, anchor: str) -> CellView:
    s = cell.stats()
    return CellView(
        measure=cell.measure, unit=unit, verdict=cell.verdict,
        base=fmt.value(cell.base_median, cell.measure, unit),
        head=fmt.value(cell.head_median, cell.measure, unit),
        change=fmt.pct(cell.diff_pct),
        interval=(f"[{fmt.pct(cell.ci_low_pct)}, {fmt.pct(cell.ci_high_pct)}]"
                  if cell.ci_low_pct is not None else "n/a"),
        half_width=report.interval_text(s.diff_pct, s.ci_low_pct, s.ci_high_pct),
        p=fmt.pvalue(cell.p_adjusted),
        trials=(f"{cell.n_base} pairs" if cell.paired else f"{cell.n_base} / {cell.n_head}"),
        robust=f"{cell.robust_base} / {cell.robust_head}",
        mde=_mde(cell), line=cell.line, anchor=anchor)


def trial_plot(cell: CellRow, unit: str, base: list[float], head: list[float]) -> Markup:
    """Both sides' trials, their medians, the head's interval relative to the base median."""
    band = None
    bm = cell.base_median
    if bm is not None and cell.ci_low_pct is not None and cell.ci_high_pct is not None:
        band = svg.Band(1, bm * (1 + cell.ci_low_pct / 100), bm * (1 + cell.ci_high_pct / 100),
                        f"95% interval of head vs base: [{fmt.pct(cell.ci_low_pct)}, "
                        f"{fmt.pct(cell.ci_high_pct)}]")
    rows = [
        svg.StripRow("base", base, [bool(b) for b in stats.robust_mask(base)] if base else None,
                     cell.base_median, "base"),
        svg.StripRow("head", head, [bool(b) for b in stats.robust_mask(head)] if head else None,
                     cell.head_median, "head"),
    ]
    return svg.strip_plot(rows, measure=cell.measure, unit=unit, band=band, reference=bm,
                          label=f"{cell.workload} {fmt.params(cell.params)} {cell.measure}: "
                                f"base and head trials")


def peer_ratios(peer_medians: dict[str, float], throughput: CellRow | None
                ) -> tuple[list[tuple[str, float]], str] | None:
    """Throughput of base, head and the peers relative to glibc (or to base without it)."""
    values = dict(peer_medians)
    if throughput is not None:
        for side, v in (("base", throughput.base_median), ("head", throughput.head_median)):
            if v is not None:
                values.setdefault(side, v)
    ref = "glibc" if values.get("glibc") else "base"
    denom = values.get(ref)
    if not denom:
        return None
    return sorted(((k, v / denom) for k, v in values.items() if k != ref),
                  key=lambda kv: -kv[1]), ref


@dataclass
class ComparisonPage:
    """What the comparison page draws (its template's variables)."""

    comp: Comparison
    groups: list[GroupView]
    decided: list[tuple[CellView, str]]  # (a primary cell that moved, its group's title)
    counts: dict[str, int]  # jobs per state
    total: int
    jobs: list[cmp_sql.JobState]
    hypothesis: str | None
    hypothesis_held: tuple[int, int]  # (held, tested)
    testbed: str | None
    curves: list[CurveView]
    report: str
    timelines: dict[str, timelines.TimelinesView]  # group anchor -> its recorded figures


def build(session: Session, settings: Settings, comp: Comparison) -> ComparisonPage:
    cells = cmp_sql.cells(session, comp.id)
    units = pages_sql.measure_units(session)
    hyp = comparisons.hypothesis_of(comp)
    values = trial_values(session, comp)
    peers: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for p in comp.peer_medians or []:
        peers[(p.workload, params_key(p.params))][p.allocator] = p.median

    grouped: dict[tuple[str, str], list[CellRow]] = defaultdict(list)
    for c in cells:
        grouped[(c.workload, params_key(c.params))].append(c)
    groups: list[GroupView] = []
    decided: list[tuple[CellView, str]] = []
    held: list[bool] = []
    for n, (key, group) in enumerate(sorted(grouped.items())):
        g, group_decided, group_held = group_view(n, key, group, units, hyp, values,
                                                  peers.get(key))
        groups.append(g)
        decided += group_decided
        held += group_held
    rcells = [report.ReportCell(c.workload, c.params, c.measure, c.stats())
              for c in cells]
    by_key = {(j.workload, params_key(j.params)): j.text() for j in joint.joint_labels(rcells)}
    for g, key in zip(groups, sorted(grouped), strict=True):
        g.joint = by_key.get(key)
    figures = timelines.views(session, comp, {key: g.title for g, key in
                                              zip(groups, sorted(grouped), strict=True)})
    cpus = cmp_sql.testbed_cpus(session, comp.testbed_fingerprint)
    counts = cmp_sql.counts(session, comp.id)
    return ComparisonPage(
        comp=comp, groups=groups, decided=decided, counts=counts, total=sum(counts.values()),
        jobs=cmp_sql.jobs(session, comp.id), hypothesis=hyp.describe() if hyp else None,
        hypothesis_held=(sum(held), len(held)),
        testbed=(f"{comp.cpu_model or 'unknown CPU'} ({comp.testbed_fingerprint[:12]})"
                 if comp.testbed_fingerprint else None),
        curves=curve_views(cells, cpus),
        report=comparisons.render_report(session, settings, comp),
        timelines={g.anchor: figures[key] for g, key in zip(groups, sorted(grouped),
                                                            strict=True) if key in figures})


TrialValues = dict[tuple[str, str, str, str], list[float]]


def trial_values(session: Session, comp: Comparison) -> TrialValues:
    """(workload, params key, measure, side) -> the values of base's and head's trials on
    the comparison's testbed."""
    values: TrialValues = defaultdict(list)
    for t in cmp_sql.trials(session, comp.id):
        if t.testbed_fingerprint != comp.testbed_fingerprint or t.label not in ("base", "head"):
            continue
        for m, v in t.measures.items():
            values[(t.workload, params_key(t.params), m, t.label)].append(float(v))
    return values


def group_view(n: int, key: tuple[str, str], group: list[CellRow], units: dict[str, str],
               hyp: Hypothesis | None, values: TrialValues, peers: dict[str, float] | None,
               ) -> tuple[GroupView, list[tuple[CellView, str]], list[bool]]:
    """One workload cell's view; its primary cells that moved (with the group's title) and,
    per cell of the hypothesis's measure, whether the hypothesis held."""
    workload, pk = key
    title = f"{workload} {fmt.params(group[0].params)}".strip()
    g = GroupView(title=title, anchor=f"w{n}")
    decided: list[tuple[CellView, str]] = []
    held = []
    for c in sorted(group, key=lambda c: measure_order(c.measure)):
        unit = units.get(c.measure, "")
        view = cell_view(c, unit, f"w{n}-{c.measure}")
        if report.is_counter(c.measure):
            moved = (c.diff_pct is not None and abs(c.diff_pct) >= COUNTER_MOVED_PCT) \
                or c.verdict in ("improved", "regressed")
            if moved:
                g.counters_moved.append(view)
            else:
                g.counters_still.append(f"{c.measure} {view.base}")
            continue
        if hyp is not None and c.measure == hyp.measure:
            view.hypothesis = hypothesis_outcome(hyp, c.stats())
            held.append(view.hypothesis == "held")
        if is_primary(c):
            view.plot = trial_plot(c, unit, values.get((workload, pk, c.measure, "base"), []),
                                   values.get((workload, pk, c.measure, "head"), []))
            g.primary.append(view)
            if c.verdict in ("improved", "regressed"):
                decided.append((view, title))
        else:
            g.diagnostics.append(view)
    thr = next((c for c in group if c.measure == THROUGHPUT), None)
    ratios = peer_ratios(peers, thr) if peers else None
    if ratios:
        g.peers = svg.ratio_bars(ratios[0], reference=ratios[1])
        g.peer_reference = ratios[1]
    return g, decided, held
