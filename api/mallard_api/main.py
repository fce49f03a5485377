"""The FastAPI application: REST under /api/v1, OpenAPI at /docs, /metrics.

`create_app()` resolves the database (DATABASE_URL, or the embedded PostgreSQL in
MALLARD_DATA_DIR), runs the Alembic migrations unless MALLARD_MIGRATE_ON_START=false,
reads the suites, and mounts one router per resource.

Two connection pools: one for requests (MALLARD_DB_POOL_SIZE connections; at most as
many requests are let in at once, the rest wait in arrival order, and there are as many
request threads (anyio's, and `request_threads` for the results post), so no request
ever waits for a connection; api/README.md says why), one
small one for the background loops (lease sweep, analysis worker, outbox, the metrics
collector), which therefore never take a request's connection.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI
from mallard_wire.fields import JsonDict
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mallard_api import db, errors, rawbody
from mallard_api.analysis import ingest
from mallard_api.analysis.worker import AnalysisService, AnalysisWorker
from mallard_api.auth import TokenCache
from mallard_api.background import BackgroundLoop
from mallard_api.config import Settings, get_settings
from mallard_api.delivery import start_outbox_worker
from mallard_api.deps import get_session
from mallard_api.direct import DirectRoutes
from mallard_api.known import Catalog, CatalogError
from mallard_api.limits import AdmissionMiddleware, BodyLimitMiddleware
from mallard_api.metrics import REGISTRY, DatabaseCollector, MetricsMiddleware
from mallard_api.redirects import PublicRedirects
from mallard_api.routes import (
    alerts,
    baselines,
    bisections,
    calibrations,
    comparisons,
    jobs,
    profiles,
    projects,
    results,
    runners,
    series,
    testbeds,
    uploads,
    webhooks,
)
from mallard_api.schemas.base import ErrorOut, Health
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import webhooks as webhook_sql
from mallard_api.ui import images as ui_images
from mallard_api.ui import routes as ui_routes

API_PREFIX = "/api/v1"
ROUTERS = (projects.router, runners.router, jobs.router, results.router, series.router,
           webhooks.router, comparisons.router, bisections.router, alerts.router,
           calibrations.router, testbeds.router, uploads.router, baselines.router,
           profiles.router)
log = logging.getLogger("mallard_api")


# Python's cyclic garbage collector, left at its defaults, took ~1.7 ms of the API's CPU
# per 100-trial results post (api/README.md, "Benchmark"): a post makes ~1,000 objects
# that live until it is answered, so with a few posts in flight the young generation
# (700 objects) fills mid-request, survivors are promoted, and the full collections
# they trigger walk every object the process holds (~235,000: modules, schemas, the
# OpenAPI document). So, while serving: what exists once the app is up is frozen (never
# walked again), and the young generation holds more than the posts in flight.
GC_THRESHOLD = (20_000, 20, 20)


@contextmanager
def few_collections() -> Iterator[None]:
    before = gc.get_threshold()
    gc.collect()  # no startup garbage kept frozen
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def check_settings(settings: Settings, catalog: Catalog) -> None:
    """What Settings cannot check alone: the default suite of pushes exists."""
    reason = catalog.check_suite(settings.suite)
    if reason:
        raise CatalogError(f"MALLARD_SUITE: {reason}")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    catalog = Catalog.load(settings.suites_dir)
    check_settings(settings, catalog)
    url = db.database_url(settings)
    if settings.migrate_on_start:
        db.migrate(url, settings.migrations_dir)
    engine, background_engine = make_engines(url, settings)
    factory = db.make_sessionmaker(engine)
    background = db.make_sessionmaker(background_engine)
    service = AnalysisService(AnalysisWorker(background, settings),
                              poll_seconds=settings.analysis_poll_seconds,
                              max_backoff=settings.background_max_backoff_seconds)
    sweep = lease_sweep(background, service, settings)
    lifespan = serving(settings, service, sweep, engines=(engine, background_engine))
    app = FastAPI(title="Mallard API", version="1", lifespan=lifespan,
                  description="Continuous benchmarking of memory allocators: projects, "
                              "webhooks, runners, the job queue, results, series, "
                              "comparisons and alerts.")
    app.state.settings = settings
    app.state.token_cache = TokenCache(settings.token_cache_seconds)
    # the results post's threads (deps.in_thread): started when first used, idle between
    # posts, kept for the app's life (its lifespan may run more than once in tests)
    app.state.request_threads = ThreadPoolExecutor(settings.db_pool_size,
                                                   thread_name_prefix="mallard-request")
    app.state.catalog = catalog
    app.state.engine = engine
    app.state.sessionmaker = factory
    app.state.background_sessionmaker = background
    app.state.analysis = service
    app.state.sweep = sweep
    add_middleware(app, settings)
    errors.install(app, settings.retry_after_seconds)
    app.include_router(api_router())
    app.include_router(ui_images.router)  # badges and series images under /ui
    app.include_router(ui_routes.router)  # the web pages under /ui
    json_error_responses(app)
    add_metrics(app, background_engine)
    app.openapi()  # built now, not on the event loop of the first request (metrics use it)
    return app


def make_engines(url: str, settings: Settings) -> tuple[Engine, Engine]:
    """The requests' engine (MALLARD_DB_POOL_SIZE connections) and the background loops'."""
    engine = db.make_engine(url, settings.db_pool_size, overflow=settings.db_pool_size // 2 + 2,
                            timeout=settings.db_pool_timeout_seconds,
                            connect_timeout=settings.db_connect_timeout_seconds)
    background_engine = db.make_engine(url, settings.outbox_concurrency + 3, overflow=2,
                                       timeout=settings.db_pool_timeout_seconds,
                                       connect_timeout=settings.db_connect_timeout_seconds)
    return engine, background_engine


def lease_sweep(background: sessionmaker[Session], service: AnalysisService,
                settings: Settings) -> Callable[[], bool]:
    def sweep() -> bool:
        """Re-queue (or fail) running jobs whose lease expired, whatever their arch; tell
        the analysis; forget old forge delivery ids."""
        with background() as session:
            ids = job_sql.requeue_expired(session, None)
            queued = ingest.jobs_changed(session, ids)
            webhook_sql.prune(session, settings.webhook_delivery_keep_days)
            session.commit()
        if queued:
            service.wake()
        return False

    return sweep


def serving(settings: Settings, service: AnalysisService, sweep: Callable[[], bool], *,
            engines: tuple[Engine, ...]) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the background loops run while it serves, the engines are
    disposed of after."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # as many request threads as request connections (module doc)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.db_pool_size
        start_outbox_worker(app)  # sets app.state.outbox_worker
        service.start()
        sweeper = None
        if settings.sweep_seconds > 0:
            sweeper = BackgroundLoop("lease-sweep", sweep, interval=settings.sweep_seconds,
                                     max_backoff=settings.background_max_backoff_seconds)
            sweeper.start()
        try:
            with few_collections():
                yield
        finally:
            if sweeper is not None:
                sweeper.stop()
            service.stop()
            app.state.outbox_worker.stop()
            for engine in engines:
                engine.dispose()

    return lifespan


def add_middleware(app: FastAPI, settings: Settings) -> None:
    # innermost: past the metrics, the body caps and the admission queue (direct.py)
    app.add_middleware(DirectRoutes, routes={
        ("POST", f"{API_PREFIX}/results"): results.post_results,
        # rendered once (170 KB, ~5 ms of json.dumps an answer on the event loop): a client
        # that pipelines requests for it and reads nothing costs no more than /health
        ("GET", "/openapi.json"): rendered_openapi(app)})
    app.add_middleware(AdmissionMiddleware, limit=settings.db_pool_size, exempt=("/metrics",))
    # bodies capped, paced and read before the admission queue (but the results post's and
    # an upload's: each checks its token first, then reads its own)
    app.add_middleware(BodyLimitMiddleware, default=settings.max_body_bytes, by_prefix={
        f"{API_PREFIX}/results": settings.max_results_body_bytes,
        f"{API_PREFIX}/uploads": settings.max_results_body_bytes,
        f"{API_PREFIX}/webhooks/": settings.max_webhook_body_bytes},
        streamed=(f"{API_PREFIX}/results", f"{API_PREFIX}/uploads"),
        grace=settings.body_grace_seconds,
        min_rate=settings.body_min_bytes_per_second, buffer=settings.body_buffer_bytes,
        retry_after=settings.retry_after_seconds)
    app.add_middleware(PublicRedirects, public_url=settings.public_url)  # never to Host
    app.add_middleware(MetricsMiddleware)  # outermost: 413s are counted too


def api_router() -> APIRouter:
    """/api/v1: the health check and one router per resource."""
    api = APIRouter(prefix=API_PREFIX, responses={
        400: {"model": ErrorOut, "description": "the body is not parseable"},
        503: {"model": ErrorOut, "description": "the database is unavailable; retry after "
                                                 "the Retry-After header's seconds"}})

    @api.get("/health", response_model=Health, tags=["health"])
    def health(session: Annotated[Session, Depends(get_session)]) -> Health:
        session.execute(text("SELECT 1"))
        return Health(status="ok", database="ok")

    for router in ROUTERS:
        api.include_router(router)
    return api


def rendered_openapi(app: FastAPI) -> Callable[[Request], Awaitable[Response]]:
    """GET /openapi.json from the document rendered at its first request, once."""
    body: list[bytes] = []

    async def serve(request: Request) -> Response:
        if not body:
            body.append(bytes(JSONResponse(app.openapi()).body))
        return Response(body[0], media_type="application/json")

    return serve


def json_error_responses(app: FastAPI) -> None:
    """Errors are always JSON in the OpenAPI document, also on operations whose success is
    text/plain."""
    default_openapi = app.openapi

    def openapi() -> JsonDict:
        if app.openapi_schema is None:
            doc = default_openapi()
            rawbody.add_schemas(doc)
            for ops in doc.get("paths", {}).values():
                for op in ops.values():
                    for code, response in op.get("responses", {}).items():
                        content = response.get("content")
                        if code[:1] in "45" and content and "application/json" not in content:
                            response["content"] = {"application/json": next(
                                iter(content.values()))}
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def add_metrics(app: FastAPI, background_engine: Engine) -> None:
    """/metrics: the process's metrics and the database's (read on the background pool)."""
    db_registry = CollectorRegistry()
    db_registry.register(DatabaseCollector(background_engine))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        body = generate_latest(REGISTRY) + generate_latest(db_registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


def app_factory() -> FastAPI:
    """For `uvicorn --factory mallard_api.main:app_factory` (the workers of `serve
    --workers N`). uvicorn's own command line has no way to name `server.HttpProtocol`:
    run the API with `mallard-api serve` to have its header and send bounds."""
    return create_app()
