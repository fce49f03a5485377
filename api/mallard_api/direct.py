"""Routes served before FastAPI's routing (pure ASGI): the results post.

For a 100-trial `POST /api/v1/results`, FastAPI's routing (matching the path against
every route) and its dependency solving cost the API process more CPU than the post's
own work (api/README.md, "Benchmark"). `DirectRoutes` is the innermost middleware:
every request has passed the metrics, the body caps and the admission queue when it
gets here; a request whose method and path are exactly one of its routes goes straight
to that route's endpoint (an `async def (Request) -> Response` that authenticates,
reads the body and does the rest itself), every other request goes on to FastAPI. The
route stays declared on its FastAPI router, with the same endpoint: the OpenAPI
document, the 405's Allow list and any path not matched here exactly (a trailing slash)
go that way. An exception is answered by the app's own handlers, looked up as FastAPI's
ExceptionMiddleware looks them up (status code, then the exception's classes); one with
no handler goes on to the server-error middleware (a 500), as it would there.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


def _handler(handlers: Mapping[Any, Callable[..., Any]], exc: Exception
             ) -> Callable[..., Any] | None:
    if isinstance(exc, HTTPException) and exc.status_code in handlers:
        return handlers[exc.status_code]
    for cls in type(exc).__mro__:
        if cls in handlers and cls is not Exception:  # Exception: the server-error middleware's
            return handlers[cls]
    return None


class DirectRoutes:
    def __init__(self, app: ASGIApp, *, routes: dict[tuple[str, str], Endpoint]) -> None:
        self.app = app
        self.routes = routes  # (method, path) -> endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            endpoint = self.routes.get((scope["method"], scope["path"]))
            if endpoint is not None:
                await self._serve(endpoint, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _serve(self, endpoint: Endpoint, scope: Scope, receive: Receive,
                     send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = _handler(scope["app"].exception_handlers, exc)
            if handler is None:
                raise
            response = await handler(request, exc) if inspect.iscoroutinefunction(handler) \
                else await run_in_threadpool(handler, request, exc)
        await response(scope, receive, send)
