"""Routes served before FastAPI's routing (direct.py) and the serving process's garbage
collector settings (main.few_collections)."""

from __future__ import annotations

import gc

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.testclient import TestClient
from mallard_api.direct import DirectRoutes
from mallard_api.main import GC_THRESHOLD, few_collections
from mallard_api.routes.results import post_results
from starlette.responses import Response


def test_the_results_post_is_the_innermost_middlewares_route(app: FastAPI) -> None:
    # add_middleware puts the newest first: the last one is the innermost, so a results
    # post has passed the metrics, the redirects' guard, the body caps and the admission
    # queue
    innermost = app.user_middleware[-1]
    assert innermost.cls is DirectRoutes
    routes = innermost.kwargs["routes"]
    assert routes[("POST", "/api/v1/results")] is post_results
    assert set(routes) == {("POST", "/api/v1/results"), ("GET", "/openapi.json")}
    assert [m.cls.__name__ for m in app.user_middleware] == [
        "MetricsMiddleware", "PublicRedirects", "BodyLimitMiddleware", "AdmissionMiddleware",
        "DirectRoutes"]


def small_app() -> FastAPI:
    calls: list[str] = []

    async def direct(request: Request) -> Response:
        calls.append(request.url.path)
        kind = request.query_params.get("raise")
        if kind == "http":
            raise HTTPException(409, detail=[{"loc": ["body"], "msg": "taken", "type": "t"}])
        if kind == "value":
            raise ValueError("handled by the app's ValueError handler")
        if kind == "bug":
            raise RuntimeError("no handler")
        return PlainTextResponse("direct", status_code=201)

    app = FastAPI()
    app.state.calls = calls

    @app.post("/thing")
    async def routed() -> str:
        return "routed"

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    app.add_middleware(DirectRoutes, routes={("POST", "/thing"): direct})
    return app


def test_only_the_exact_method_and_path_go_direct() -> None:
    app = small_app()
    with TestClient(app) as client:
        r = client.post("/thing")
        assert (r.status_code, r.text) == (201, "direct")
        # FastAPI's answer: a redirect to the route without the slash
        assert client.post("/thing/", follow_redirects=False).status_code == 307
        assert client.get("/thing").status_code == 405  # FastAPI's, with its Allow
        assert client.get("/thing").headers["allow"] == "POST"
    assert app.state.calls == ["/thing"]


def test_exceptions_are_answered_by_the_apps_handlers() -> None:
    with TestClient(small_app(), raise_server_exceptions=False) as client:
        r = client.post("/thing", params={"raise": "http"})
        assert r.status_code == 409
        assert r.json() == {"detail": [{"loc": ["body"], "msg": "taken", "type": "t"}]}
        r = client.post("/thing", params={"raise": "value"})
        assert (r.status_code, r.json()) == (422, {"detail": "handled by the app's "
                                                             "ValueError handler"})
        assert client.post("/thing", params={"raise": "bug"}).status_code == 500


def test_few_collections_freezes_and_restores() -> None:
    before = gc.get_threshold()
    with few_collections():
        assert gc.get_threshold() == GC_THRESHOLD
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
