"""Allocator trends (`mallard-trends`): a measure over the commits of a branch (v_series).

One panel per workload (repeated), one line per variant × threads × arch for the
project's own allocator (its builds are named after the project: mallard, mimalloc, ...);
peers are drawn as dashed reference lines (their median over the shown range);
change points and open alerts from v_alerts are annotations.
"""

from __future__ import annotations

from .grafana import (
    ALLOCATOR,
    SERIES_SCOPE,
    Dashboard,
    Json,
    arch_threads_variables,
    field_config,
    override,
    page_link,
    pages_variable,
    project_branch_variables,
    sql,
    sql_annotation,
    sql_variable,
)

# The filters every series query shares; the workload is one value per repeated panel.
FILTER = """
    project = ${project:sqlstring} AND branch = ${branch:sqlstring}
    AND measure = ${measure:sqlstring} AND arch IN (${arch:sqlstring})
    AND threads IN (${threads:sqlstring})"""

SCOPE = SERIES_SCOPE

OWN_LINES = f"""
    SELECT commit_time AS "time",
           {ALLOCATOR} || ' threads=' || threads || ' ' || arch AS metric,
           median AS value
    FROM v_series
    WHERE {FILTER}
      AND workload = ${{workload:sqlstring}} AND allocator = ${{project:sqlstring}}
      AND variant IN (${{variant:sqlstring}}) AND $__timeFilter(commit_time)
    ORDER BY 1, 2
"""

PEER_LINES = f"""
    WITH s AS (
      SELECT * FROM v_series
      WHERE {FILTER}
        AND workload = ${{workload:sqlstring}} AND $__timeFilter(commit_time)
    ), ends AS (
      SELECT min(commit_time) AS t0, max(commit_time) AS t1 FROM s
      WHERE allocator = ${{project:sqlstring}}
    ), ref AS (
      SELECT {ALLOCATOR} || ' threads=' || threads || ' ' || arch || ' (peer)' AS metric,
             percentile_cont(0.5) WITHIN GROUP (ORDER BY median) AS value
      FROM s WHERE allocator IN (${{peer:sqlstring}})
      GROUP BY 1
    )
    SELECT t."time", ref.metric, ref.value
    FROM ref CROSS JOIN ends CROSS JOIN LATERAL (VALUES (ends.t0), (ends.t1)) AS t("time")
    WHERE ends.t0 IS NOT NULL
    ORDER BY 1, 2
"""

COMMITS_TABLE = f"""
    SELECT commit_position, commit_short, commit_time, allocator_label, workload, threads, arch,
           median, p25, p75, n
    FROM v_series
    WHERE {FILTER}
      AND workload IN (${{workload:sqlstring}})
      AND ((allocator = ${{project:sqlstring}} AND variant IN (${{variant:sqlstring}}))
           OR allocator IN (${{peer:sqlstring}}))
      AND $__timeFilter(commit_time)
    ORDER BY commit_position DESC, workload, threads, arch, allocator_label
    LIMIT 500
"""

ALERTS_TABLE = """
    SELECT alert_id, state, label, workload, threads, arch, measure, allocator,
           last_good_commit, first_bad_commit, change_pct, ci_low_pct, ci_high_pct,
           opened_at, resolved_at, text
    FROM v_alerts
    WHERE project = ${project:sqlstring} AND branch = ${branch:sqlstring}
      AND workload IN (${workload:sqlstring}) AND arch IN (${arch:sqlstring})
      AND $__timeFilter(opened_at)
    ORDER BY opened_at DESC
"""

# A change point is drawn at the commit time of the alert's first bad commit.
CHANGE_POINTS = """
    SELECT coalesce(c.commit_time, a.opened_at) AS "time",
           a.workload || ' threads=' || coalesce(a.threads::text, '-') || ' ' || a.arch || ' '
             || a.measure || ': ' || coalesce(a.text, '') AS text,
           concat_ws(',', 'change point', a.state, a.label, a.workload, a.arch) AS tags
    FROM v_alerts a
    LEFT JOIN LATERAL (
      SELECT min(s.commit_time) AS commit_time FROM v_series s
      WHERE s.project = a.project AND s.branch = a.branch AND s.commit_sha = a.first_bad_commit
    ) c ON true
    WHERE a.project = ${project:sqlstring} AND a.branch = ${branch:sqlstring}
      AND a.measure = ${measure:sqlstring}
      AND a.workload IN (${workload:sqlstring}) AND a.arch IN (${arch:sqlstring})
      AND $__timeFilter(coalesce(c.commit_time, a.opened_at))
"""

OPEN_ALERTS = """
    SELECT opened_at AS "time", coalesce(resolved_at, now()) AS timeend,
           'alert #' || alert_id || ' ' || state || ': ' || coalesce(text, '') AS text,
           concat_ws(',', 'alert', state, workload, arch) AS tags
    FROM v_alerts
    WHERE project = ${project:sqlstring} AND branch = ${branch:sqlstring}
      AND measure = ${measure:sqlstring}
      AND workload IN (${workload:sqlstring}) AND arch IN (${arch:sqlstring})
      AND state <> 'resolved' AND $__timeFilter(opened_at)
"""


def build() -> Json:
    d = Dashboard(
        "mallard-trends",
        "Mallard · Allocator trends",
        "A measure along the commits of a branch, per workload, threads, arch and allocator "
        "(mallard's variants: default unless chosen); "
        "peers as dashed reference lines; change points and open alerts as annotations.",
        ["mallard", "trends"],
    )
    d.variables = _variables()
    branch_page = page_link("Branch page", "/ui/projects/${project}/branches/${branch}",
                            "the branch's history in Mallard: every point links to its commit")
    d.links = [{**branch_page, "type": "link", "icon": "doc", "includeVars": False,
                "keepTime": False}]
    d.annotations = [
        sql_annotation("Change points", CHANGE_POINTS, "red"),
        sql_annotation("Open alerts", OPEN_ALERTS, "orange"),
    ]
    _history(d, branch_page)
    _numbers(d)
    return d.to_json()


def _variables() -> list[Json]:
    """Project and branch, measure, workloads, arch and threads, mallard's variants, peers."""
    return [
        *project_branch_variables(),
        sql_variable(
            "measure",
            "Measure",
            f"SELECT DISTINCT measure {SCOPE} ORDER BY 1",
            default="ops_per_sec",
        ),
        sql_variable(
            "workload",
            "Workload",
            f"SELECT DISTINCT workload {SCOPE} ORDER BY 1",
            multi=True,
            include_all=True,
        ),
        *arch_threads_variables(),
        sql_variable(
            "variant",
            "Variant",
            f"SELECT DISTINCT variant {SCOPE} AND allocator = ${{project:sqlstring}} ORDER BY 1",
            multi=True,
            default="default",
        ),
        sql_variable(
            "peer",
            "Peers",
            f"SELECT DISTINCT allocator {SCOPE} AND allocator <> ${{project:sqlstring}} ORDER BY 1",
            multi=True,
            include_all=True,
        ),
        pages_variable(),
    ]


def _history(d: Dashboard, branch_page: Json) -> None:
    """One chart per workload: mallard's medians along the commits, the peers dashed."""
    d.row("History along the branch")
    history = d.add(
        "timeseries",
        "$workload · $measure",
        [sql(OWN_LINES, "A", "time_series"), sql(PEER_LINES, "B", "time_series")],
        w=12,
        h=10,
        repeat="workload",
        description="Median of the trials at each commit (x = commit time). Dashed lines: "
        "the peers' median over the shown range, for reference.",
        field=field_config(
            custom={
                "drawStyle": "line",
                "showPoints": "always",
                "pointSize": 5,
                "spanNulls": True,
                "lineWidth": 2,
            },
            overrides=[
                override(
                    "byRegexp",
                    r".*\(peer\)$",
                    {
                        "custom.lineStyle": {"fill": "dash", "dash": [10, 10]},
                        "custom.lineWidth": 1,
                        "custom.showPoints": "never",
                    },
                ),
            ],
        ),
        options={
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["lastNotNull", "min", "max"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    )
    history["links"] = [branch_page]


def _numbers(d: Dashboard) -> None:
    """The charts' points by commit, and the branch's alerts."""
    d.row("Numbers")
    d.add(
        "table",
        "Series by commit",
        [sql(COMMITS_TABLE)],
        w=24,
        h=10,
        description="The points of the charts above, newest commit first (p25/p75: spread "
        "of the trials, n: trials). A commit links to its page in Mallard.",
        field=field_config(overrides=[override("byName", "commit_short", {"links": [
            page_link("commit page", "/ui/commits/${__value.raw}")]})]),
    )
    d.add(
        "table",
        "Alerts on this branch",
        [sql(ALERTS_TABLE)],
        w=24,
        h=8,
        description="Regressions found in the branch history (any measure).",
        field=field_config(
            unit=None,
            overrides=[
                override("byName", "change_pct", {"unit": "percent", "decimals": 1}),
                override("byName", "alert_id", {"links": [
                    page_link("alert page", "/ui/alerts/${__value.raw}")]}),
                override("byName", "first_bad_commit", {"links": [
                    page_link("commit page", "/ui/commits/${__value.raw}")]}),
            ],
        ),
    )
