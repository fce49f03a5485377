"""Calibration (`mallard-calibration`): how small a regression this testbed catches and how
often it cries wolf, from the API's calibrations (A/A and canary comparisons).

The power curve is the detection rate (share of canary comparisons called REGRESSED)
against the injected size, one line per workload x threads x measure; the false-alarm rate
is the share of A/A comparisons called REGRESSED or IMPROVED, per finished calibration
over time.
"""

from __future__ import annotations

from .grafana import Dashboard, Json, field_config, sql, sql_variable, xy_options

SCOPE = "FROM v_calibration_power WHERE project = ${project:sqlstring}"

POWER = """
    SELECT injected_pct AS "injected %",
           workload || ' threads=' || coalesce(threads::text, '-') || ' ' || measure AS series,
           avg(detection_rate) AS "detection rate"
    FROM v_calibration_power
    WHERE project = ${project:sqlstring} AND testbed_fingerprint IN (${testbed:sqlstring})
      AND measure IN (${measure:sqlstring})
      AND calibration_id = (SELECT max(calibration_id) FROM v_calibration_power
                            WHERE project = ${project:sqlstring}
                              AND testbed_fingerprint IN (${testbed:sqlstring}))
    GROUP BY 1, 2
    ORDER BY 2, 1
"""

FALSE_ALARMS = """
    SELECT finished_at AS "time",
           workload || ' threads=' || coalesce(threads::text, '-') || ' ' || measure AS metric,
           false_alarm_rate AS value
    FROM v_calibration_false_alarms
    WHERE project = ${project:sqlstring} AND testbed_fingerprint IN (${testbed:sqlstring})
      AND measure IN (${measure:sqlstring}) AND $__timeFilter(finished_at)
    ORDER BY 1, 2
"""

LATEST = """
    SELECT calibration_id, workload, threads, measure, cv_pct AS "CV %", false_alarms,
           aa_comparisons AS "A/A", false_alarm_rate, band_pct AS "SAME band %"
    FROM v_calibration_false_alarms
    WHERE project = ${project:sqlstring} AND testbed_fingerprint IN (${testbed:sqlstring})
      AND calibration_id = (SELECT max(calibration_id) FROM v_calibration_false_alarms
                            WHERE project = ${project:sqlstring}
                              AND testbed_fingerprint IN (${testbed:sqlstring}))
    ORDER BY workload, threads, measure
"""


def build() -> Json:
    d = Dashboard(
        "mallard-calibration",
        "Mallard · Calibration",
        "Detection rate against injected regression size (power curve) and the false-alarm "
        "rate of A/A comparisons, per testbed.",
        ["mallard", "calibration"],
    )
    d.variables = [
        sql_variable("project", "Project", "SELECT DISTINCT project FROM v_calibration_power "
                     "ORDER BY 1"),
        sql_variable("testbed", "Testbed", f"SELECT DISTINCT testbed_fingerprint {SCOPE} "
                     "ORDER BY 1"),
        sql_variable("measure", "Measure", f"SELECT DISTINCT measure {SCOPE} ORDER BY 1",
                     multi=True, include_all=True),
    ]
    d.row("Detection power")
    d.add(
        "xychart",
        "Detection rate vs injected size (latest calibration)",
        [sql(POWER)],
        w=14,
        h=11,
        description="Share of canary comparisons (MALLARD_CANARY_NS sized to the injected "
        "percentage) called REGRESSED. A curve that reaches 0.8 at 3% detects a 3% "
        "regression 8 times in 10.",
        transformations=[{"id": "partitionByValues", "options": {"fields": ["series"]}}],
        field=field_config(custom={"show": "points+lines", "pointSize": {"fixed": 7}}),
        options=xy_options("injected %"),
    )
    d.add(
        "table",
        "Latest calibration: noise, false alarms, SAME band",
        [sql(LATEST)],
        w=10,
        h=11,
    )
    d.row("False alarms")
    d.add(
        "timeseries",
        "False-alarm rate of A/A comparisons",
        [sql(FALSE_ALARMS, fmt="time_series")],
        w=24,
        h=9,
        description="Per finished calibration: A/A comparisons (one build against itself) "
        "whose cell was REGRESSED or IMPROVED, of those run.",
        field=field_config(unit="percentunit",
                           custom={"showPoints": "always", "spanNulls": True}),
        options={
            "legend": {"displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "multi"},
        },
    )
    return d.to_json()
