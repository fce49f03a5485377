"""What the project, branch and alert pages show: mallard's history along a branch, per
workload x measure a trend of per-commit medians with their p25-p75 spread, change points,
alerts and baselines marked, broken ranges greyed, every point a link to its commit's
page."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from mallard_wire.fields import JsonDict
from markupsafe import Markup
from sqlalchemy.orm import Session

from mallard_api.models.alerts import Alert
from mallard_api.models.commits import Branch
from mallard_api.models.projects import Project
from mallard_api.params import params_key, params_sha256
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import baselines as baseline_sql
from mallard_api.sql import pages as pages_sql
from mallard_api.sql import series as series_sql
from mallard_api.ui import fmt, links, svg, trend
from mallard_api.ui.comparison import PRIMARY, measure_order


def _series_name(variant: str, arch: str, fingerprint: str, many_testbeds: bool) -> str:
    name = variant or "default"
    return f"{name} · {arch} {fingerprint[:7]}" if many_testbeds else name


@dataclass
class Plot:
    measure: str
    unit: str
    svg: Markup
    legend: list[tuple[str, str]]  # (css class, series name)
    latest: str


@dataclass
class WorkloadTrends:
    title: str
    plots: list[Plot]
    workload: str
    params: str  # params_key: canonical JSON


def choose_measures(available: list[str], asked: list[str]) -> list[str]:
    """The measures asked for (that exist), else the primary ones present, else all."""
    if asked:
        return [m for m in asked if m in available]
    primary = [m for m in PRIMARY if m in available]
    return primary or available


@dataclass
class BranchTrends:
    """The trends section of the project and branch pages (`_trends.html`)."""

    workloads: list[WorkloadTrends]
    measures: list[str]  # drawn
    available: list[str]  # measured on the branch's last commits
    last_n: int
    commits: int
    alerts: list[Alert]
    shas: list[str]  # the plotted commits, in branch order


@dataclass
class AlertSeries:
    """The alert page's series along its branch (None plot: nothing measured)."""

    plot: Markup | None
    points: int
    changes: list[pages_sql.ChangeMark]
    unit: str = ""


@dataclass
class Marks:
    """A branch's baselines and broken ranges on a plot's x axis."""

    markers: list[trend.Marker]
    spans: list[trend.Span]


def branch_marks(session: Session, branch_id: int, positions: Sequence[int]) -> Marks:
    """The branch's baselines (a marker at the first plotted commit from it on) and broken
    ranges (the plotted commits inside them) for a plot of the commits at `positions`
    (ascending branch positions, one per x index)."""
    out = Marks([], [])
    if not positions:
        return out
    for s in baseline_sql.spans(session, branch_id):
        first = bisect.bisect_left(positions, s.lo)
        last = bisect.bisect_right(positions, s.hi) - 1
        why = f": {s.note}" if s.note else ""
        if s.kind == "baseline" and positions[0] <= s.lo <= positions[-1]:
            out.markers.append(trend.Marker(first, "baseline",
                                            title=f"new baseline from here{why}"))
        elif s.kind == "broken" and first <= last:
            out.spans.append(trend.Span(first, last, f"broken range, left out of "
                                                     f"analysis{why}"))
    return out


def branch_trends(session: Session, project: Project, branch: Branch, public_url: str | None,
                  *, measures: list[str], last_n: int) -> BranchTrends:
    own = project.name  # the project's own allocator (its builds are named after it)
    available = pages_sql.branch_measures(session, branch.id, last_n=last_n, allocator=own)
    chosen = choose_measures(available, measures)
    points = pages_sql.branch_points(session, branch.id, last_n=last_n, measures=chosen,
                                     allocator=own) if chosen else []
    units = pages_sql.measure_units(session)
    commits = sorted({(p.position, p.sha) for p in points})
    index = {sha: i for i, (_, sha) in enumerate(commits)}
    axis = trend.TrendAxis([sha[:7] for _, sha in commits])
    drawn = branch_marks(session, branch.id, [pos for pos, _ in commits])
    marks: dict[tuple[str, str, str], list[trend.Marker]] = defaultdict(list)
    for cp in pages_sql.change_points(session, project.name, branch.name):
        if cp.allocator == own and cp.commit_sha in index:
            marks[(cp.workload, params_key(cp.params), cp.measure)].append(trend.Marker(
                index[cp.commit_sha], "change", fmt.pct(cp.change_pct),
                title=f"change point at {cp.commit_sha[:7]}: {fmt.pct(cp.change_pct)} "
                      f"({cp.variant or 'default'}, {cp.direction})"))
    alerts = pages_sql.branch_alerts(session, project.name, branch.name)
    for a in alerts:
        if a.allocator == own and a.first_bad_commit in index:
            marks[(a.workload, params_key(a.params), a.measure)].append(trend.Marker(
                index[a.first_bad_commit], "alert", href=links.path(public_url, links.alert(a.id)),
                title=f"alert #{a.id} ({a.state}): {a.text}"))
    many = len({p.fingerprint for p in points}) > 1

    by_cell: dict[tuple[str, str], dict[str, list[pages_sql.Point]]] = defaultdict(
        lambda: defaultdict(list))
    params_of: dict[tuple[str, str], JsonDict] = {}
    for p in points:
        key = (p.workload, params_key(p.params))
        params_of[key] = p.params
        by_cell[key][p.measure].append(p)
    workloads = []
    for key in sorted(by_cell):
        plots = []
        for measure in sorted(by_cell[key], key=measure_order):
            unit = units.get(measure, "")
            plots.append(_plot(by_cell[key][measure], measure, unit, axis, index, Marks(
                drawn.markers + marks.get((key[0], key[1], measure), []), drawn.spans),
                many, public_url))
        workloads.append(WorkloadTrends(f"{key[0]} {fmt.params(params_of[key])}".strip(), plots,
                                        key[0], key[1]))
    return BranchTrends(workloads=workloads, measures=chosen, available=available,
                        last_n=last_n, commits=len(commits), alerts=alerts,
                        shas=[sha for _, sha in commits])


def branch_plot(session: Session, project: Project, branch: Branch, public_url: str | None,
                *, workload: str, params: str | None, measure: str, last_n: int
                ) -> tuple[WorkloadTrends, Plot] | None:
    """The branch page's plot of `measure` for `workload` (its params as params_key; None:
    the first measured), as the series images draw it; None: nothing measured."""
    trends = branch_trends(session, project, branch, public_url, measures=[measure],
                           last_n=last_n)
    for w in trends.workloads:
        if w.workload == workload and params in (None, w.params):
            for p in w.plots:
                if p.measure == measure:
                    return w, p
    return None


def _plot(points: list[pages_sql.Point], measure: str, unit: str, axis: trend.TrendAxis,
          index: dict[str, int], marks: Marks, many: bool, public_url: str | None) -> Plot:
    groups: dict[tuple[str, str, str], list[pages_sql.Point]] = defaultdict(list)
    for p in points:
        groups[(p.variant, p.arch, p.fingerprint)].append(p)
    series = []
    legend = []
    latest = ""
    for k, (variant, arch, fingerprint) in enumerate(sorted(groups)):
        css = f"s{k % 6}"
        name = _series_name(variant, arch, fingerprint, many)
        pts = []
        for p in groups[(variant, arch, fingerprint)]:
            med = series_sql.quantile(p.values, 0.5)
            pts.append(trend.TrendPoint(
                index[p.sha], med, series_sql.quantile(p.values, 0.25),
                series_sql.quantile(p.values, 0.75),
                title=f"{p.sha[:7]} {name}: median {fmt.value(med, measure, unit, 4)} "
                      f"(p25 {fmt.value(series_sql.quantile(p.values, 0.25), measure, unit)}, "
                      f"p75 {fmt.value(series_sql.quantile(p.values, 0.75), measure, unit)}, "
                      f"{len(p.values)} trials)",
                href=links.path(public_url, links.commit(p.sha))))
        series.append(trend.TrendSeries(name, pts, css))
        legend.append((css, name))
        if k == 0 and pts:
            last = max(pts, key=lambda q: q.index)
            latest = fmt.value(last.median, measure, unit)
    return Plot(measure, unit, svg.trend_plot(series, axis, measure=measure, unit=unit,
                                              markers=marks.markers, spans=marks.spans,
                                              label=f"{measure} along the branch"),
                legend, latest)


def alert_series(session: Session, alert: Alert, branch: Branch | None,
                 public_url: str | None) -> AlertSeries:
    """The alert's series along its branch, the change marked, before/after medians drawn."""
    if branch is None:
        return AlertSeries(plot=None, points=0, changes=[])
    points = series_sql.series(session, series_sql.SeriesCell(
        branch_id=branch.id, workload=alert.workload,
        params_sha=params_sha256(alert.params), threads=None, allocator=alert.allocator,
        variant=alert.variant, measure=alert.measure, arch=alert.arch,
        testbed=alert.testbed_fingerprint))
    unit, _ = series_sql.measure_info(session, alert.measure)
    index = {p.commit_sha: i for i, p in enumerate(points)}
    changes = pages_sql.change_points(session, alert.project, alert.branch, alert.series_key)
    markers = [trend.Marker(index[c.commit_sha], "change", fmt.pct(c.change_pct),
                          title=f"change point at {c.commit_sha[:7]}: {fmt.pct(c.change_pct)}")
               for c in changes if c.commit_sha in index]
    drawn = branch_marks(session, branch.id, [p.position for p in points])
    markers += drawn.markers
    levels = []
    at = index.get(alert.first_bad_commit)
    if at is not None:
        markers.append(trend.Marker(at, "alert", title=f"alert #{alert.id}: first bad commit "
                                                     f"{alert.first_bad_commit[:7]}"))
        if alert.before_median is not None and at > 0:
            levels.append(trend.Level(0, at - 1, alert.before_median, "median before the change"))
        if alert.after_median is not None:
            levels.append(trend.Level(at, len(points) - 1, alert.after_median,
                                    "median after the change"))
    axis = trend.TrendAxis([p.commit_short for p in points],
                         {at: alert.first_bad_commit[:7]} if at is not None else {})
    pts = [trend.TrendPoint(
        i, p.median, p.p25, p.p75,
        title=f"{p.commit_short}: median {fmt.value(p.median, alert.measure, unit, 4)} "
              f"({p.n} trials)",
        href=links.path(public_url, links.commit(p.commit_sha)))
        for i, p in enumerate(points)]
    plot = svg.trend_plot([trend.TrendSeries(alert.variant or "default", pts, "s0")], axis,
                          measure=alert.measure, unit=unit, markers=markers, levels=levels,
                          spans=drawn.spans, width=760, height=220,
                          label=f"{alert.measure} along {alert.branch}")
    return AlertSeries(plot=plot if points else None, points=len(points), changes=changes,
                       unit=unit)


def alert_of(session: Session, alert_id: int) -> Alert | None:
    return alert_sql.get(session, alert_id)
