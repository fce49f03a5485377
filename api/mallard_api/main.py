"""The FastAPI application: REST under /api/v1, OpenAPI at /docs, /metrics.

`create_app()` resolves the database (DATABASE_URL, or the embedded PostgreSQL in
MALLARD_DATA_DIR), runs the Alembic migrations unless MALLARD_MIGRATE_ON_START=false,
and mounts one router per resource.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session
from starlette.responses import Response

from mallard_api import db
from mallard_api.config import Settings, get_settings
from mallard_api.deps import get_session
from mallard_api.metrics import REGISTRY, DatabaseCollector, MetricsMiddleware
from mallard_api.routes import jobs, projects, results, runners, series, webhooks
from mallard_api.schemas import ErrorOut, Health
from mallard_api.sql import jobs as job_sql
from mallard_api.ui import routes as ui_routes

API_PREFIX = "/api/v1"
# Routers written by the analysis engineer, included when their modules exist.
OPTIONAL_ROUTERS = ("comparisons", "alerts", "webhook_endpoints")


def _optional_routers() -> list[APIRouter]:
    out = []
    for name in OPTIONAL_ROUTERS:
        try:
            module = importlib.import_module(f"mallard_api.routes.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"mallard_api.routes.{name}":
                raise
            continue
        out.append(module.router)
    return out


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    url = db.database_url(settings)
    if settings.migrate_on_start:
        db.migrate(url, settings.migrations_dir)
    engine = db.make_engine(url, settings.db_pool_size)

    factory = db.make_sessionmaker(engine)

    def sweep() -> list[int]:
        """Re-queue (or fail) running jobs whose lease expired, whatever their arch."""
        with factory() as session:
            ids = job_sql.requeue_expired(session, None)
            session.commit()
        return ids

    async def sweeper(interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await run_in_threadpool(sweep)
            except Exception:  # noqa: BLE001 - the next round tries again
                logging.getLogger(__name__).exception("lease sweep failed")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from mallard_api.notify import start_outbox_worker  # alert webhook delivery

        start_outbox_worker(app)  # sets app.state.outbox_worker
        task = None
        if settings.sweep_seconds > 0:
            task = asyncio.create_task(sweeper(settings.sweep_seconds))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            app.state.outbox_worker.stop()
            engine.dispose()

    app = FastAPI(title="Mallard API", version="1", lifespan=lifespan,
                  description="Continuous benchmarking of memory allocators: projects, "
                              "webhooks, runners, the job queue, results, series, "
                              "comparisons and alerts.")
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = factory
    app.state.sweep = sweep
    db_registry = CollectorRegistry()
    db_registry.register(DatabaseCollector(engine))
    app.add_middleware(MetricsMiddleware)

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError) -> JSONResponse:
        # A value PostgreSQL cannot store; validation should have caught it first.
        msg = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
        return JSONResponse(status_code=422, content={"detail": [
            {"loc": ["body"], "msg": f"value rejected by the database: {msg}",
             "type": "data_error"}]})

    api = APIRouter(prefix=API_PREFIX, responses={
        400: {"model": ErrorOut, "description": "the body is not parseable"}})

    @api.get("/health", response_model=Health, tags=["health"])
    def health(session: Annotated[Session, Depends(get_session)]) -> Health:
        session.execute(text("SELECT 1"))
        return Health(status="ok", database="ok")

    for router in (projects.router, runners.router, jobs.router, results.router,
                   series.router, webhooks.router, *_optional_routers()):
        api.include_router(router)
    app.include_router(api)
    app.include_router(ui_routes.router)  # the web pages under /ui

    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        """Errors are always JSON, also on operations whose success is text/plain."""
        if app.openapi_schema is None:
            doc = default_openapi()
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

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        body = generate_latest(REGISTRY) + generate_latest(db_registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return app


def app_factory() -> FastAPI:
    """For `uvicorn --factory mallard_api.main:app_factory`."""
    return create_app()
