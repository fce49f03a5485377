"""Comparison (`mallard-comparison`): one A/B comparison in detail.

Pick a comparison (v_comparisons); its cells with difference, interval, p-value and
verdict (v_comparison_cells); a bar chart of the differences with their intervals; the
allocator counters of base and head side by side (v_measurements); and, for a comparison
over several thread counts (the `scaling` suite), base's and head's throughput curves
against threads, one panel per workload.
"""

from __future__ import annotations

from .grafana import (
    VERDICT_COLOURS,
    Dashboard,
    Json,
    bar_options,
    field_config,
    override,
    page_link,
    pages_variable,
    sql,
    sql_variable,
    xy_options,
)

# Queued comparisons (commit verdicts not run yet) last: the default has results.
COMPARISONS = """
    SELECT comparison_id AS __value,
           '#' || comparison_id || ' ' || base_label || ' vs ' || head_label
             || ' [' || arch || ', ' || state || ']' AS __text
    FROM v_comparisons
    WHERE project = ${project:sqlstring}
    ORDER BY state = 'queued', created_at DESC
    LIMIT 200
"""

SUMMARY = """
    SELECT state, hypothesis, cells, improved, regressed, same, unknown
    FROM v_comparisons
    WHERE comparison_id = ${comparison:raw}
"""

CELLS = """
    SELECT workload, threads, measure, base_median, head_median, diff_pct, ci_low_pct,
           ci_high_pct, p_value, p_adjusted, verdict,
           n_base || ' / ' || n_head AS trials,
           robust_base || ' / ' || robust_head AS robust,
           line
    FROM v_comparison_cells
    WHERE comparison_id = ${comparison:raw} AND measure IN (${measure:sqlstring})
    ORDER BY workload, threads, measure
"""

DIFF_BARS = """
    SELECT workload || ' t=' || threads || ' ' || measure AS cell,
           ci_low_pct AS "interval low", diff_pct AS "difference", ci_high_pct AS "interval high"
    FROM v_comparison_cells
    WHERE comparison_id = ${comparison:raw} AND measure IN (${measure:sqlstring})
    ORDER BY workload, threads, measure
"""

# The trials of a comparison are the ones its jobs stored (the first job and its
# follow-ups): v_measurements.job_id joined through v_comparison_jobs.
COMPARISON_TRIALS = """
    WITH m AS (
      SELECT m.* FROM v_measurements m
      JOIN v_comparison_jobs cj ON cj.job_id = m.job_id
      WHERE cj.comparison_id = ${comparison:raw}
        AND m.label IN ('base', 'head')
        AND m.ok AND NOT m.warmup
        AND m.measure IN ('transfer_insert_hit_ratio', 'transfer_remove_hit_ratio')
    )"""

COUNTERS = f"""{COMPARISON_TRIALS}
    SELECT workload || ' t=' || threads AS cell,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY value)
             FILTER (WHERE label = 'base' AND measure = 'transfer_insert_hit_ratio')
             AS "base insert hit",
           percentile_cont(0.5) WITHIN GROUP (ORDER BY value)
             FILTER (WHERE label = 'head' AND measure = 'transfer_insert_hit_ratio')
             AS "head insert hit",
           percentile_cont(0.5) WITHIN GROUP (ORDER BY value)
             FILTER (WHERE label = 'base' AND measure = 'transfer_remove_hit_ratio')
             AS "base remove hit",
           percentile_cont(0.5) WITHIN GROUP (ORDER BY value)
             FILTER (WHERE label = 'head' AND measure = 'transfer_remove_hit_ratio')
             AS "head remove hit"
    FROM m
    GROUP BY workload, threads
    ORDER BY workload, threads
"""

COUNTER_TRIALS = f"""{COMPARISON_TRIALS}
    SELECT label, allocator_label, workload, threads, measure, count(*) AS trials,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY value) AS median,
           min(value) AS min, max(value) AS max
    FROM m
    GROUP BY label, allocator_label, workload, threads, measure
    ORDER BY workload, threads, measure, label
"""


# Workloads of the comparison measured at two thread counts or more: one curve panel each.
CURVE_WORKLOADS = """
    SELECT workload FROM v_comparison_cells
    WHERE comparison_id = ${comparison:raw} AND measure = 'ops_per_sec'
    GROUP BY workload HAVING count(DISTINCT threads) > 1
    ORDER BY workload
"""

# Base's and head's median ops/s against threads (params other than threads fixed by the
# suite); head/base as the ratio the API's curve verdict integrates.
SCALING = """
    SELECT threads, base_median AS "base ops/s", head_median AS "head ops/s",
           ratio AS "head / base", verdict
    FROM v_comparison_cells
    WHERE comparison_id = ${comparison:raw} AND measure = 'ops_per_sec'
      AND workload = ${curve:sqlstring} AND threads IS NOT NULL
    ORDER BY threads
"""


def build() -> Json:
    d = Dashboard(
        "mallard-comparison",
        "Mallard · Comparison",
        "One A/B comparison: per cell the difference with its interval, p-value and "
        "verdict, and the allocator counters that explain it.",
        ["mallard", "comparison"],
    )
    d.variables = [
        sql_variable("project", "Project", "SELECT DISTINCT project FROM v_comparisons ORDER BY 1"),
        sql_variable("comparison", "Comparison", COMPARISONS, sort=0),
        sql_variable(
            "measure",
            "Measure",
            "SELECT DISTINCT measure FROM v_comparison_cells "
            "WHERE comparison_id = ${comparison:raw} ORDER BY 1",
            multi=True,
            include_all=True,
        ),
        sql_variable("curve", "Scaling workload", CURVE_WORKLOADS, multi=True,
                     include_all=True),
        pages_variable(),
    ]
    d.links = [{**page_link("Comparison page", "/ui/comparisons/${comparison}",
                            "this comparison in Mallard, with plots of every trial"),
                "type": "link", "icon": "doc", "includeVars": False, "keepTime": False}]
    d.time_from = "now-90d"
    _verdicts_and_cells(d)
    _differences(d)
    _counters(d)
    _scaling(d)
    return d.to_json()


def _verdicts_and_cells(d: Dashboard) -> None:
    """The verdict counts, and the cells table linked to the comparison page."""
    d.add(
        "stat",
        "Verdicts",
        [sql(SUMMARY)],
        w=24,
        h=4,
        options={
            "reduceOptions": {"values": True, "calcs": [], "fields": "/.*/"},
            "textMode": "value_and_name",
            "colorMode": "value",
            "graphMode": "none",
        },
        field=field_config(
            overrides=[
                override("byName", "improved", {"color": {"mode": "fixed", "fixedColor": "green"}}),
                override("byName", "regressed", {"color": {"mode": "fixed", "fixedColor": "red"}}),
                override("byName", "unknown", {"color": {"mode": "fixed", "fixedColor": "orange"}}),
            ]
        ),
    )
    cells = d.add(
        "table",
        "Cells",
        [sql(CELLS)],
        w=24,
        h=10,
        description="Difference = head/base - 1 of the medians, with its bootstrap interval; "
        "p: Mann-Whitney U (adjusted for the number of cells); trials and robust trials as "
        "base / head. `line` is the report line.",
        field=field_config(
            overrides=[
                override(
                    "byRegexp",
                    "/diff_pct|ci_low_pct|ci_high_pct/",
                    {"unit": "percent", "decimals": 1},
                ),
                override("byRegexp", "/p_value|p_adjusted/", {"decimals": 3}),
                override(
                    "byName",
                    "verdict",
                    {
                        "mappings": VERDICT_COLOURS,
                        "custom.cellOptions": {"type": "color-text"},
                    },
                ),
            ]
        ),
    )
    cells["links"] = [page_link("Comparison page", "/ui/comparisons/${comparison}")]


def _differences(d: Dashboard) -> None:
    """Each cell's difference between the ends of its confidence interval."""
    d.add(
        "barchart",
        "Differences with intervals",
        [sql(DIFF_BARS)],
        w=24,
        h=9,
        description="Per cell: the difference (head vs base, %) between the low and high "
        "ends of its confidence interval. A cell whose interval spans 0 is not a change.",
        field=field_config(
            unit="percent",
            overrides=[
                override(
                    "byRegexp",
                    "/interval.*/",
                    {"color": {"mode": "fixed", "fixedColor": "semi-dark-blue"}},
                ),
                override(
                    "byName", "difference", {"color": {"mode": "fixed", "fixedColor": "orange"}}
                ),
            ],
        ),
        options=bar_options("cell", "horizontal", groupWidth=0.8, barWidth=0.9),
    )


def _counters(d: Dashboard) -> None:
    """The transfer-cache hit ratios of base and head, and the trials behind them."""
    d.add(
        "barchart",
        "Transfer cache hit ratios, base vs head",
        [sql(COUNTERS)],
        w=12,
        h=9,
        description="Allocator counters from the comparison's trials (median per cell): "
        "a faster-looking change that sends more work to the slow path shows here.",
        field=field_config(unit="percentunit", custom={"fillOpacity": 80}),
        options=bar_options("cell"),
    )
    d.add(
        "table",
        "Counter trials",
        [sql(COUNTER_TRIALS)],
        w=12,
        h=9,
        description="The trials behind the counter chart.",
        field=field_config(
            overrides=[
                override("byRegexp", "/median|min|max/", {"unit": "percentunit", "decimals": 1}),
            ]
        ),
    )


def _scaling(d: Dashboard) -> None:
    """Base's and head's throughput against threads, one panel per scaling workload."""
    d.add(
        "xychart",
        "Thread scaling: $curve, base vs head",
        [sql(SCALING)],
        w=12,
        h=9,
        description="Median ops/s of base and head at each thread count (log2 axis). Above "
        "the runner's pinned CPUs the runs are oversubscribed. The comparison's report and "
        "page give the curve verdict: which thread counts moved, and the signed area "
        "between the curves.",
        field=field_config(
            custom={"show": "points+lines", "pointSize": {"fixed": 6},
                    "axisPlacement": "auto"},
            overrides=[override("byName", "threads",
                                {"custom.scaleDistribution": {"type": "log", "log": 2}})],
        ),
        options=xy_options("threads", exclude=["head / base", "verdict"], tooltip=False),
        repeat="curve",
    )
