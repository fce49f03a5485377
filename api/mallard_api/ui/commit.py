"""What the commit page shows, as a list of sections (one per project holding the sha).

A section is a function `(SectionContext) -> <its dataclass> | None` registered in
SECTIONS, drawn by the template `templates/commit/<name>.html` with its dataclass as `s`;
None leaves the section out. To add one: write the dataclass and the function, its
template, add the dataclass to `Section` and the function to SECTIONS where it should
appear.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from mallard_stats import stats
from markupsafe import Markup
from sqlalchemy.orm import Session

from mallard_api.models.alerts import Alert
from mallard_api.models.bisections import Bisection
from mallard_api.models.commits import Commit
from mallard_api.models.comparisons import Comparison
from mallard_api.models.projects import Project
from mallard_api.models.verdicts import CommitVerdict
from mallard_api.sql import bisections as bisection_sql
from mallard_api.sql import comparisons as cmp_sql
from mallard_api.sql import pages as pages_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import series as series_sql
from mallard_api.sql import verdicts as verdict_sql
from mallard_api.ui import fmt, svg
from mallard_api.ui.comparison import PRIMARY, measure_order
from mallard_api.ui.profiles import ProfileView
from mallard_api.ui.profiles import views as profile_views


@dataclass
class SectionContext:
    session: Session
    project: Project
    commit: Commit
    public_url: str | None


@dataclass
class Summary:
    project: str
    sha: str
    parent: str | None
    author: str | None
    message: str | None
    time: datetime | None
    branches: list[tuple[str, int]]  # (branch, position)
    unreachable: list[str]  # branches a force-push took it off


@dataclass
class Verdicts:
    verdicts: list[CommitVerdict]


@dataclass
class Bisections:
    bisections: list[Bisection]
    sha: str


@dataclass
class MedianGroup:
    """One workload cell on one testbed: medians (n) per configuration, and a strip plot."""

    title: str
    testbed: str
    measures: list[str]
    labels: list[str]
    table: dict[str, dict[str, tuple[str, int]]]  # label -> measure -> (median, n)
    plot_measure: str
    plot: Markup


@dataclass
class Medians:
    groups: list[MedianGroup]


@dataclass
class Alerts:
    alerts: list[Alert]
    sha: str


@dataclass
class Comparisons:
    comparisons: list[tuple[Comparison, dict[str, int]]]  # with its jobs per state


@dataclass
class Profiles:
    profiles: list[ProfileView]  # of the comparisons naming the commit


Section = Summary | Verdicts | Bisections | Medians | Alerts | Comparisons | Profiles


def summary(ctx: SectionContext) -> Summary:
    c = ctx.commit
    return Summary(project=ctx.project.name, sha=c.sha, parent=c.parent_sha, author=c.author,
                   message=c.message, time=c.committed_at,
                   branches=project_sql.memberships(ctx.session, c),
                   unreachable=verdict_sql.unreachable_on(ctx.session, c.id))


def verdicts(ctx: SectionContext) -> Verdicts | None:
    """Per arch the verdict against the branch's last measured commit (as GET
    /api/v1/projects/{p}/commits/{sha}): the cells that moved, its comparison, alert and
    bisection."""
    rows = verdict_sql.of_commit(ctx.session, ctx.project.id, ctx.commit.sha)
    return Verdicts(rows) if rows else None


def bisections(ctx: SectionContext) -> Bisections | None:
    """Bisections that named this commit the culprit (or one of the candidates)."""
    rows = bisection_sql.naming(ctx.session, ctx.project.id, ctx.commit.sha)
    return Bisections(rows, ctx.commit.sha) if rows else None


def _label(cell: pages_sql.CommitCell) -> str:
    name = cell.allocator
    if cell.allocator_commit:
        name += f"@{cell.allocator_commit[:7]}"
    return name + (f" {cell.variant}" if cell.variant else "")


def medians(ctx: SectionContext) -> Medians | None:
    """Per workload cell and testbed: each allocator configuration's medians (n trials),
    and a strip plot of the trials of the first primary measure across configurations."""
    cells = pages_sql.commit_cells(ctx.session, ctx.commit.id, ctx.project.name)
    if not cells:
        return Medians(groups=[])
    units = pages_sql.measure_units(ctx.session)
    grouped: dict[tuple[str, str, str], list[pages_sql.CommitCell]] = defaultdict(list)
    for c in cells:
        grouped[(c.workload, c.params_sha, c.fingerprint)].append(c)
    groups = []
    for key in sorted(grouped, key=lambda k: (k[0], fmt.params(grouped[k][0].params), k[2])):
        rows = grouped[key]
        first = rows[0]
        present = sorted({r.measure for r in rows}, key=measure_order)
        measures = [m for m in present if m in PRIMARY] or present[:3]
        labels = list(dict.fromkeys(_label(r) for r in rows))
        table: dict[str, dict[str, tuple[str, int]]] = {lab: {} for lab in labels}
        for r in rows:
            if r.measure in measures:
                table[_label(r)][r.measure] = (
                    fmt.value(series_sql.quantile(r.values, 0.5), r.measure,
                              units.get(r.measure, "")), len(r.values))
        plot_measure = measures[0]
        strip_rows = [svg.StripRow(_label(r), r.values,
                                   [bool(b) for b in stats.robust_mask(r.values)],
                                   series_sql.quantile(r.values, 0.5),
                                   "head" if r.allocator == ctx.project.name else "peer")
                      for r in rows if r.measure == plot_measure]
        groups.append(MedianGroup(
            title=f"{first.workload} {fmt.params(first.params)}".strip(),
            testbed=f"{first.arch} {first.cpu_model or ''} ({first.fingerprint[:12]})",
            measures=measures, labels=labels, table=table,
            plot_measure=plot_measure,
            plot=svg.strip_plot(strip_rows, measure=plot_measure,
                                unit=units.get(plot_measure, ""), width=520,
                                label=f"{first.workload} {plot_measure}: trials at this commit")))
    return Medians(groups=groups)


def alerts(ctx: SectionContext) -> Alerts | None:
    rows = pages_sql.commit_alerts(ctx.session, ctx.project.id, ctx.commit.sha)
    return Alerts(rows, ctx.commit.sha) if rows else None


def comparisons(ctx: SectionContext) -> Comparisons | None:
    rows = pages_sql.commit_comparisons(ctx.session, ctx.project.id, ctx.commit.sha)
    if not rows:
        return None
    return Comparisons([(c, cmp_sql.counts(ctx.session, c.id)) for c in rows])


def profiles(ctx: SectionContext) -> Profiles | None:
    rows = pages_sql.commit_comparisons(ctx.session, ctx.project.id, ctx.commit.sha)
    found = profile_views(ctx.session, [c.id for c in rows]) if rows else []
    return Profiles(found) if found else None


SECTIONS: list[tuple[str, Callable[[SectionContext], Section | None]]] = [
    ("summary", summary),
    ("verdicts", verdicts),
    ("bisections", bisections),
    ("alerts", alerts),
    ("medians", medians),
    ("comparisons", comparisons),
    ("profiles", profiles),
]


def build(session: Session, commit: Commit, project: Project, public_url: str | None,
          skip: tuple[str, ...] = ()) -> list[tuple[str, Section]]:
    """The page's sections for the commit in `project`, but those named in `skip`."""
    ctx = SectionContext(session, project, commit, public_url)
    out: list[tuple[str, Section]] = []
    for name, fn in SECTIONS:
        if name in skip:
            continue
        data = fn(ctx)
        if data is not None:
            out.append((name, data))
    return out
