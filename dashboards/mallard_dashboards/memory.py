"""Memory (`mallard-memory`): the speed/memory trade-off and fragmentation per allocator.

Peak RSS (max_rss_bytes, from getrusage) against throughput (ops_per_sec) is an XY
chart, one point per commit × allocator × workload × threads × arch, one colour per
allocator. The fragmentation workload's peak_rss_bytes / final_rss_bytes show how much
memory an allocator gives back.
"""

from __future__ import annotations

from .grafana import (
    ALLOCATOR,
    SERIES_SCOPE,
    Dashboard,
    Json,
    arch_threads_variables,
    bar_options,
    field_config,
    override,
    project_branch_variables,
    sql,
    sql_variable,
    xy_options,
)

SCOPE = SERIES_SCOPE

FILTER = """
    project = ${project:sqlstring} AND branch = ${branch:sqlstring}
    AND arch IN (${arch:sqlstring}) AND $__timeFilter(commit_time)"""

TRADE_OFF = f"""
    SELECT {ALLOCATOR} AS allocator,
           max(median) FILTER (WHERE measure = 'max_rss_bytes') AS "peak RSS",
           max(median) FILTER (WHERE measure = 'ops_per_sec') AS "throughput"
    FROM v_series
    WHERE {FILTER}
      AND workload IN (${{workload:sqlstring}}) AND threads IN (${{threads:sqlstring}})
      AND measure IN ('max_rss_bytes', 'ops_per_sec')
    GROUP BY commit_sha, 1, workload, threads, arch, testbed_fingerprint
    HAVING count(*) FILTER (WHERE measure = 'max_rss_bytes') > 0
       AND count(*) FILTER (WHERE measure = 'ops_per_sec') > 0
    ORDER BY 1, 2
"""

TRADE_OFF_TABLE = f"""
    SELECT {ALLOCATOR} AS allocator, workload, threads, arch,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY median)
             FILTER (WHERE measure = 'ops_per_sec') AS ops_per_sec,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY median)
             FILTER (WHERE measure = 'max_rss_bytes') AS max_rss_bytes
    FROM v_series
    WHERE {FILTER}
      AND workload IN (${{workload:sqlstring}}) AND threads IN (${{threads:sqlstring}})
      AND measure IN ('max_rss_bytes', 'ops_per_sec')
    GROUP BY 1, workload, threads, arch
    ORDER BY workload, threads, arch, ops_per_sec DESC NULLS LAST
"""

FRAGMENTATION_BARS = f"""
    SELECT {ALLOCATOR} || ' ' || arch AS allocator,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY median)
             FILTER (WHERE measure = 'peak_rss_bytes') AS "peak RSS",
           percentile_cont(0.5) WITHIN GROUP (ORDER BY median)
             FILTER (WHERE measure = 'final_rss_bytes') AS "final RSS"
    FROM v_series
    WHERE {FILTER}
      AND workload = 'fragmentation' AND measure IN ('peak_rss_bytes', 'final_rss_bytes')
    GROUP BY 1
    ORDER BY 1
"""

FRAGMENTATION_HISTORY = f"""
    SELECT commit_time AS "time",
           {ALLOCATOR} || ' ' || arch || ' ' || measure AS metric,
           median AS value
    FROM v_series
    WHERE {FILTER}
      AND workload = 'fragmentation' AND measure IN ('peak_rss_bytes', 'final_rss_bytes')
    ORDER BY 1, 2
"""


def build() -> Json:
    d = Dashboard(
        "mallard-memory",
        "Mallard · Memory",
        "Speed against memory per allocator, and what the fragmentation workload leaves resident.",
        ["mallard", "memory"],
    )
    d.variables = [
        *project_branch_variables(),
        sql_variable(
            "workload",
            "Workload",
            f"SELECT DISTINCT workload {SCOPE} AND measure = 'ops_per_sec' ORDER BY 1",
            multi=True,
            include_all=True,
        ),
        *arch_threads_variables(),
    ]
    _trade_off(d)
    _fragmentation(d)
    return d.to_json()


def _trade_off(d: Dashboard) -> None:
    """Peak RSS against throughput per allocator, and each allocator's medians."""
    d.row("Speed / memory trade-off")
    d.add(
        "xychart",
        "Peak RSS vs throughput, per allocator",
        [sql(TRADE_OFF)],
        w=14,
        h=11,
        description="Each point: one allocator at one commit, workload, threads and arch. "
        "Up and to the left is better (faster, less memory).",
        transformations=[{"id": "partitionByValues", "options": {"fields": ["allocator"]}}],
        field=field_config(
            custom={"show": "points", "pointSize": {"fixed": 7}},
            overrides=[
                override("byName", "peak RSS", {"unit": "bytes"}),
                override("byName", "throughput", {"unit": "ops"}),
            ],
        ),
        options=xy_options("peak RSS"),
    )
    d.add(
        "table",
        "Medians per allocator",
        [sql(TRADE_OFF_TABLE)],
        w=10,
        h=11,
        description="Median over the commits in range of each allocator's median.",
        field=field_config(
            overrides=[
                override("byName", "max_rss_bytes", {"unit": "bytes"}),
                override("byName", "ops_per_sec", {"unit": "ops"}),
            ]
        ),
    )


def _fragmentation(d: Dashboard) -> None:
    """What the fragmentation workload held and left resident, now and along the branch."""
    d.row("Fragmentation workload")
    d.add(
        "barchart",
        "Peak and final RSS (fragmentation)",
        [sql(FRAGMENTATION_BARS)],
        w=12,
        h=9,
        description="peak_rss_bytes: the most the workload held; final_rss_bytes: what stays "
        "resident after it frees most of it. Lower is better; the gap is memory given back.",
        field=field_config(unit="bytes", custom={"fillOpacity": 80}),
        options=bar_options("allocator"),
    )
    d.add(
        "timeseries",
        "Fragmentation along the branch",
        [sql(FRAGMENTATION_HISTORY, fmt="time_series")],
        w=12,
        h=9,
        field=field_config(
            unit="bytes",
            custom={"showPoints": "always", "spanNulls": True},
            overrides=[
                override(
                    "byRegexp",
                    ".*final_rss_bytes$",
                    {"custom.lineStyle": {"fill": "dash", "dash": [10, 10]}},
                )
            ],
        ),
        options={
            "legend": {"displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "multi"},
        },
    )
