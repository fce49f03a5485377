"""Prometheus metrics (contracts §6).

Request counters and latency are recorded by a middleware, labelled by the route
template (`/api/v1/jobs/{job_id}/lease`, never the raw path; `unmatched` for any
other path) and method (`other` for any method outside HTTP's usual seven). Queue, runner and alert
gauges are computed at scrape time by a collector that queries the database, so every
API replica reports the same truth. `mallard_trials_ingested_total` counts the trials
this process stored.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, text
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REGISTRY = CollectorRegistry()
HTTP_REQUESTS = Counter("mallard_http_requests_total", "HTTP requests by route template",
                        ["method", "route", "status"], registry=REGISTRY)
HTTP_LATENCY = Histogram("mallard_http_request_duration_seconds",
                         "HTTP request latency by route template", ["method", "route"],
                         registry=REGISTRY,
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
TRIALS_INGESTED = Counter("mallard_trials_ingested_total", "Trials stored by results ingest",
                          registry=REGISTRY)


class MetricsMiddleware:
    """Pure ASGI middleware: counts requests and times them by route template.

    The template is found by matching the path against the app's OpenAPI paths (plus
    its plain routes such as /metrics), compiled once: FastAPI's nested routers do not
    leave the full template in the ASGI scope.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._templates: list[tuple[re.Pattern[str], str]] | None = None

    def template(self, scope: Scope) -> str:
        if self._templates is None:
            application = scope.get("app")
            paths: list[str] = []
            if application is not None:
                paths = list(application.openapi().get("paths", {}))
                paths += [r.path for r in application.routes
                          if isinstance(getattr(r, "path", None), str)]
            self._templates = [(compile_path(p)[0], p) for p in paths]
        path = str(scope.get("path", ""))
        for regex, template in self._templates:
            if regex.match(path):
                return template
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            template = self.template(scope)
            method = str(scope.get("method", ""))
            method = method if method in METHODS else "other"  # labels stay bounded
            HTTP_REQUESTS.labels(method, template, str(status)).inc()
            HTTP_LATENCY.labels(method, template).observe(time.perf_counter() - start)


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Any]:
        jobs = GaugeMetricFamily("mallard_jobs", "Jobs by state and arch", labels=["state", "arch"])
        oldest = GaugeMetricFamily("mallard_queue_oldest_job_age_seconds",
                                   "Age of the oldest queued job", labels=["arch"])
        seen = GaugeMetricFamily("mallard_runner_last_seen_timestamp_seconds",
                                 "When each runner in service (not retired) was last "
                                 "heard from (unix time)",
                                 labels=["runner", "arch"])
        alerts = GaugeMetricFamily("mallard_alerts_open", "Open regression alerts",
                                   labels=["project", "workload", "arch", "measure"])
        try:
            with self.engine.connect() as conn:
                for state, arch, n in conn.execute(text(
                        "SELECT state, arch, count(*) FROM jobs GROUP BY state, arch")):
                    jobs.add_metric([state, arch], float(n))
                for arch, age in conn.execute(text(
                        "SELECT arch, EXTRACT(EPOCH FROM now() - min(created_at)) FROM jobs "
                        "WHERE state = 'queued' GROUP BY arch")):
                    oldest.add_metric([arch], float(age))
                for name, arch, ts in conn.execute(text(
                        "SELECT name, arch, EXTRACT(EPOCH FROM last_seen_at) FROM runners "
                        "WHERE retired_at IS NULL")):
                    seen.add_metric([name, arch], float(ts))
                if conn.execute(text("SELECT to_regclass('v_alerts')")).scalar() is not None:
                    for project, workload, arch, measure, n in conn.execute(text(
                            "SELECT project, workload, arch, measure, count(*) FROM v_alerts "
                            "WHERE state = 'open' GROUP BY 1, 2, 3, 4")):
                        alerts.add_metric([str(project), str(workload), str(arch),
                                           str(measure)], float(n))
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB is down
            pass
        yield from (jobs, oldest, seen, alerts)
