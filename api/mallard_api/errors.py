"""How the API fails: every bad input is a 4xx naming the field, never a 500.

- Request bodies are parsed by `strict_json`: NaN and ±Infinity are not JSON, and a
  body nested deeper than Python's recursion limit is refused instead of raising
  RecursionError; both are 422s at `["body"]`.
- Validation errors are answered without echoing the input: the input may be huge,
  nested 100,000 levels, not representable as JSON (NaN) or UTF-8 (a lone surrogate),
  or a secret. Locations and messages are made printable and short.
- A database that cannot be reached (down, restarting, pool exhausted) is a 503 with
  `Retry-After`; the connection pool reconnects by itself when the database returns.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import JsonValue
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger("mallard_api")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
DB_UNAVAILABLE = (OperationalError, InterfaceError, PoolTimeoutError, psycopg.OperationalError,
                  psycopg.InterfaceError)


def printable(value: str, limit: int = 200) -> str:
    """A string safe to put in a JSON answer or a log line: short, valid UTF-8."""
    value = _UNPRINTABLE.sub("\ufffd", value)
    return value if len(value) <= limit else value[:limit] + "..."


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def strict_json(raw: bytes | str) -> JsonValue:
    """json.loads that refuses NaN/Infinity and too-deep nesting with a ValueError
    (json.JSONDecodeError, so FastAPI answers it as a 422 `json_invalid`)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        data: JsonValue = json.loads(text, parse_constant=_reject_constant)
        return data
    except RecursionError as exc:
        raise json.JSONDecodeError("nested too deeply", text[:100], 0) from exc
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        raise json.JSONDecodeError(str(exc), text[:100], 0) from exc


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = strict_json(await self.body())
            except UnicodeDecodeError as exc:
                raise json.JSONDecodeError("not UTF-8", "", exc.start) from exc
        return self._json


class StrictJsonRoute(APIRoute):
    """The route class of every router: bodies parsed by `strict_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


def error(status: int, loc: list[str | int], msg: str, kind: str,
          headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, headers=headers, content={
        "detail": [{"loc": loc, "msg": msg, "type": kind}]})


def _loc(item: Any) -> str | int:
    return item if isinstance(item, int) and not isinstance(item, bool) else printable(str(item))


def install(app: FastAPI, retry_after: int) -> None:
    """Register the exception handlers on the app."""

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = []
        for e in exc.errors()[:20]:
            msg = str(e.get("msg", ""))
            ctx = e.get("ctx") or {}
            if e.get("type") == "json_invalid" and "error" in ctx:
                msg = f"{msg}: {ctx['error']}"
            detail.append({"loc": [_loc(x) for x in e.get("loc", ())][:10],
                           "msg": printable(msg, 500), "type": printable(str(e.get("type")))})
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            # FastAPI makes one route per method: answer with every method of the path
            allowed = sorted({m for r in app.routes if isinstance(r, APIRoute)
                              and r.path_regex.match(request.url.path)
                              for m in r.methods or ()})
            return error(405, ["method"], f"{printable(request.method, 20)} is not allowed "
                         f"here; allowed: {', '.join(allowed)}", "method_not_allowed",
                         headers={"Allow": ", ".join(allowed)})
        return await http_exception_handler(request, exc)

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError) -> JSONResponse:
        # A value PostgreSQL cannot store; validation should have caught it first.
        msg = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
        return error(422, ["body"], printable(f"value rejected by the database: {msg}", 500),
                     "data_error")

    last_logged = [0.0, 0]  # when, and how many 503s since

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DBAPIError) and not isinstance(exc, DB_UNAVAILABLE) \
                and not exc.connection_invalidated:
            raise exc
        last_logged[1] += 1
        if time.monotonic() - last_logged[0] >= 10:  # one line per 10 s, however many
            log.warning("database unavailable (%s): %d request(s) answered 503 since the "
                        "last line", type(exc).__name__, last_logged[1])
            last_logged[:] = [time.monotonic(), 0]
        return error(503, [], "the database is unavailable; retry later", "unavailable",
                     headers={"Retry-After": str(retry_after)})

    for kind in DB_UNAVAILABLE:
        app.add_exception_handler(kind, unavailable)
