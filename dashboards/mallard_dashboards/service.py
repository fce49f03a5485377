"""Service (`mallard-service`): is Mallard itself healthy?

Queue depth and age, jobs by state, runner heartbeats, ingest rate, API latency and
errors, open regression alerts: PromQL on the API's /metrics (docs/contracts.md §6);
plus the job and runner tables from v_jobs / v_runners.
"""

from __future__ import annotations

from .grafana import Dashboard, Json, field_config, override, prom, sql, sql_variable

ARCH = 'arch=~"${arch:regex}"'
# Every API replica exports the database-derived gauges (mallard_jobs, the queue age, the
# runners' last-seen times, mallard_alerts_open) with the same values: one copy is kept
# before summing, so 3 replicas do not read 3x.
ONE = "max without (instance, pod)"

JOBS_TABLE = """
    SELECT job_id, kind, state, arch, runner, attempt, created_at, claimed_at, finished_at,
           queue_seconds, run_seconds
    FROM v_jobs
    WHERE arch IN (${arch:sqlstring}) AND $__timeFilter(created_at)
    ORDER BY created_at DESC
    LIMIT 200
"""

RUNNERS_TABLE = """
    SELECT name, arch, cpus, last_seen_at, seconds_since_seen, cpu_model,
           left(testbed_fingerprint, 12) AS testbed
    FROM v_runners
    WHERE arch IN (${arch:sqlstring})
    ORDER BY seconds_since_seen DESC NULLS FIRST, name
"""

JOB_TIMES = """
    SELECT created_at AS "time", arch || ' queue' AS metric, queue_seconds AS value
    FROM v_jobs
    WHERE arch IN (${arch:sqlstring}) AND $__timeFilter(created_at)
      AND queue_seconds IS NOT NULL
    UNION ALL
    SELECT created_at, arch || ' run', run_seconds
    FROM v_jobs
    WHERE arch IN (${arch:sqlstring}) AND $__timeFilter(created_at)
      AND run_seconds IS NOT NULL
    ORDER BY 1, 2
"""

OPEN_ALERTS_TABLE = """
    SELECT alert_id, opened_at, state, project, branch, workload, threads, arch, measure,
           change_pct, first_bad_commit, text
    FROM v_alerts
    WHERE state = 'open' AND arch IN (${arch:sqlstring})
    ORDER BY opened_at DESC
"""


def build() -> Json:
    d = Dashboard(
        "mallard-service",
        "Mallard · Service",
        "Queue, runners, ingest, API latency and errors, open alerts.",
        ["mallard", "service"],
    )
    d.time_from = "now-6h"
    d.refresh = "30s"
    d.variables = [
        sql_variable(
            "arch",
            "Architecture",
            "SELECT arch FROM v_runners UNION SELECT arch FROM v_jobs ORDER BY 1",
            multi=True,
            include_all=True,
        ),
    ]
    _queue_and_runners(d)
    _ingest_and_api(d)
    _alerts(d)
    return d.to_json()


def _queue_and_runners(d: Dashboard) -> None:
    """The queue depth and age, jobs by state, runner heartbeats, the runners table."""
    d.row("Queue and runners")
    d.add(
        "timeseries",
        "Queue depth",
        [prom(f'sum by (arch) ({ONE} (mallard_jobs{{state="queued", {ARCH}}}))', "{{arch}}")],
        w=8,
        description="Jobs waiting for a runner, per architecture.",
        field=field_config(unit="short", decimals=0),
    )
    d.add(
        "timeseries",
        "Oldest queued job",
        [prom(f"max by (arch) (mallard_queue_oldest_job_age_seconds{{{ARCH}}})", "{{arch}}")],
        w=8,
        description="Age of the oldest queued job; MallardQueueStuck fires above 1 h.",
        field=field_config(
            unit="s",
            thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 3600}],
        ),
    )
    d.add(
        "timeseries",
        "Jobs by state",
        [prom(f"sum by (state) ({ONE} (mallard_jobs{{{ARCH}}}))", "{{state}}")],
        w=8,
        field=field_config(
            unit="short", decimals=0, custom={"stacking": {"mode": "normal"}, "fillOpacity": 30}
        ),
    )
    d.add(
        "timeseries",
        "Seconds since each runner's heartbeat",
        [
            prom(
                f"time() - {ONE} (mallard_runner_last_seen_timestamp_seconds{{{ARCH}}})",
                "{{runner}} ({{arch}})",
            )
        ],
        w=12,
        description="MallardRunnerDown fires above 10 min.",
        field=field_config(
            unit="s", thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 600}]
        ),
    )
    d.add(
        "table",
        "Runners",
        [sql(RUNNERS_TABLE)],
        w=12,
        field=field_config(
            overrides=[
                override("byName", "seconds_since_seen", {"unit": "s"}),
            ]
        ),
    )


def _ingest_and_api(d: Dashboard) -> None:
    """Trials ingested, API latency and errors, the jobs table and their times."""
    d.row("Ingest and API")
    d.add(
        "timeseries",
        "Trials ingested per second",
        [prom("sum(rate(mallard_trials_ingested_total[$__rate_interval]))", "trials/s")],
        w=8,
        field=field_config(unit="ops"),
    )
    _api_latency(d)
    _api_requests(d)
    d.add(
        "table",
        "Jobs",
        [sql(JOBS_TABLE)],
        w=16,
        h=9,
        field=field_config(
            overrides=[
                override("byRegexp", "/queue_seconds|run_seconds/", {"unit": "s"}),
            ]
        ),
    )
    d.add(
        "timeseries",
        "Job queue and run time",
        [sql(JOB_TIMES, fmt="time_series")],
        w=8,
        h=9,
        field=field_config(unit="s"),
    )


def _api_latency(d: Dashboard) -> None:
    """API latency: p50 and p95 overall, p95 by route (dotted)."""
    d.add(
        "timeseries",
        "API latency p50 / p95",
        [
            prom(
                "histogram_quantile(0.5, sum by (le) "
                "(rate(mallard_http_request_duration_seconds_bucket[$__rate_interval])))",
                "p50",
                "A",
            ),
            prom(
                "histogram_quantile(0.95, sum by (le) "
                "(rate(mallard_http_request_duration_seconds_bucket[$__rate_interval])))",
                "p95",
                "B",
            ),
            prom(
                "histogram_quantile(0.95, sum by (route, le) "
                "(rate(mallard_http_request_duration_seconds_bucket[$__rate_interval])))",
                "p95 {{route}}",
                "C",
            ),
        ],
        w=8,
        field=field_config(
            unit="s",
            overrides=[
                override(
                    "byRegexp",
                    "/p95 .*/",
                    {"custom.lineWidth": 1, "custom.lineStyle": {"fill": "dot"}},
                ),
            ],
        ),
    )


def _api_requests(d: Dashboard) -> None:
    """Requests per second by status, and the 5xx ratio on the right axis."""
    d.add(
        "timeseries",
        "API requests and 5xx ratio",
        [
            prom(
                "sum by (status) (rate(mallard_http_requests_total[$__rate_interval]))",
                "{{status}}",
                "A",
            ),
            prom(
                'sum(rate(mallard_http_requests_total{status=~"5.."}[$__rate_interval])) / '
                "sum(rate(mallard_http_requests_total[$__rate_interval]))",
                "5xx ratio",
                "B",
            ),
        ],
        w=8,
        description="Requests per second by status; the 5xx ratio (right axis) fires "
        "MallardApiErrorRate above 5 %.",
        field=field_config(
            unit="reqps",
            overrides=[
                override(
                    "byName", "5xx ratio", {"unit": "percentunit", "custom.axisPlacement": "right"}
                ),
            ],
        ),
    )


def _alerts(d: Dashboard) -> None:
    """Open regression alerts: the count, by series (Prometheus), and the table (database)."""
    d.row("Alerts")
    d.add(
        "stat",
        "Open regression alerts",
        [prom(f"sum({ONE} (mallard_alerts_open{{{ARCH}}})) or vector(0)", "open",
                   instant=True)],
        w=6,
        h=6,
        field=field_config(
            unit="short",
            thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
        ),
        options={
            "reduceOptions": {"values": False, "calcs": ["lastNotNull"], "fields": ""},
            "colorMode": "background",
            "graphMode": "none",
        },
    )
    d.add(
        "table",
        "Open alerts by series (Prometheus)",
        [
            prom(
                f"sum by (project, workload, arch, measure) ({ONE} "
                f"(mallard_alerts_open{{{ARCH}}})) > 0",
                instant=True,
            )
        ],
        w=18,
        h=6,
        transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True}}}],
    )
    d.add(
        "table",
        "Open alerts (database)",
        [sql(OPEN_ALERTS_TABLE)],
        w=24,
        h=8,
        field=field_config(
            overrides=[
                override("byName", "change_pct", {"unit": "percent", "decimals": 1}),
            ]
        ),
    )
