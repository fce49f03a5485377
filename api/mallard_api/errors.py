"""How the API fails: every bad input is a 4xx naming the field, never a 500.

- Request bodies are parsed by `strict_json`: NaN and ±Infinity are not JSON, and a
  body nested deeper than Python's recursion limit is refused instead of raising
  RecursionError; both are 422s at `["body"]`.
- Validation errors are answered without echoing the input: the input may be huge,
  nested 100,000 levels, not representable as JSON (NaN) or UTF-8 (a lone surrogate),
  or a secret. Locations and messages are made printable and short, and the message of
  a field named like a secret (secret, token, password, key...) never repeats six
  characters running of its value, whatever its validator said.
- Database errors by kind (`db_error`): PostgreSQL unreachable (no connection, the
  server going away or not taking connections, the pool waited out) or asking for a
  retry (a deadlock, out of connections, disk or memory, a lock or statement timeout)
  is a 503 with `Retry-After`: a retry will work (the connection pool reconnects by
  itself when the database returns). A value it refuses (a data exception, an integrity
  violation, a program limit such as an index entry too large, a statement with too
  many values) is a 422 that names the condition, never the value: a retry never
  works. Anything else is a bug: a 500.
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
from sqlalchemy.exc import DBAPIError, InterfaceError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger("mallard_api")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
# The exceptions a database error may come as (SQLAlchemy's, or psycopg's own).
DB_ERRORS = (DBAPIError, PoolTimeoutError, psycopg.Error)
# SQLSTATE classes and codes of "retry later": connection exception, invalid
# authorization, transaction rollback (deadlock, serialization), insufficient resources,
# operator intervention (shutdown, cannot connect now, query canceled by a timeout),
# system error; lock not available.
_RETRY_CLASSES = ("08", "28", "40", "53", "57", "58")
_RETRY_CODES = ("55P03",)
# data exception, integrity constraint violation, program limit exceeded
_REFUSED_CLASSES = ("22", "23", "54")


def _psycopg_error(exc: BaseException) -> psycopg.Error | None:
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return orig if isinstance(orig, psycopg.Error) else None


def unavailable(exc: BaseException) -> bool:
    """PostgreSQL cannot be reached, or asks to be asked again later (module doc)."""
    if isinstance(exc, PoolTimeoutError | InterfaceError | psycopg.InterfaceError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = _psycopg_error(exc)
    if orig is None:
        return False
    if orig.sqlstate is None:  # raised by the client: a connection that failed or timed out
        return orig.pgconn is not None or isinstance(orig, psycopg.errors.ConnectionTimeout)
    return orig.sqlstate[:2] in _RETRY_CLASSES or orig.sqlstate in _RETRY_CODES


def refused(exc: BaseException) -> str | None:
    """What PostgreSQL (or the client, before sending) refused of a request's values: a
    short description naming the condition and never the value; None when the error is
    not a refused value."""
    orig = _psycopg_error(exc)
    if orig is None or unavailable(exc):
        return None
    if orig.sqlstate is None:
        if isinstance(orig, psycopg.OperationalError):  # e.g. too many values at once
            return "the request holds more values than one database statement takes"
        return None
    if orig.sqlstate[:2] not in _REFUSED_CLASSES:
        return None
    where = ".".join(n for n in (orig.diag.table_name, orig.diag.column_name) if n)
    return (f"the database refused a value of this request ({type(orig).__name__}, "
            f"SQLSTATE {orig.sqlstate}{f', {where}' if where else ''})")


_SECRET_FIELD = re.compile(r"secret|token|passw|credential|private|api_?key", re.IGNORECASE)
_RUN = 6  # characters of a secret-like value a message may not repeat in a row


def _hides_secret(error: Any, msg: str) -> str:
    """`msg`, or a message of its own when the field is named like a secret and `msg`
    repeats a part of its value (the first 4096 characters are looked at)."""
    names = [x for x in error.get("loc", ()) if isinstance(x, str)]
    value = error.get("input")
    if not names or not _SECRET_FIELD.search(names[-1]) or not isinstance(value, str):
        return msg
    value = value[:4096]
    if any(msg[i:i + _RUN] in value for i in range(max(1, len(msg) - _RUN + 1))):
        return "refused (the message is not shown: it would repeat part of this secret)"
    return msg


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


class Refused(Exception):
    """A request the code below the routes refuses (sql/, without HTTP of its own):
    answered `status` with `loc`, `msg` and `kind`, as `auth.field_error` would be."""

    def __init__(self, loc: list[str | int], msg: str, kind: str, status: int = 422) -> None:
        super().__init__(msg)
        self.loc, self.msg, self.kind, self.status = loc, msg, kind, status


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
            msg = _hides_secret(e, msg)
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

    @app.exception_handler(Refused)
    async def refused_request(request: Request, exc: Refused) -> JSONResponse:
        return error(exc.status, exc.loc, exc.msg, exc.kind)

    last_logged = [0.0, 0]  # when, and how many 503s since

    async def db_error(request: Request, exc: Exception) -> JSONResponse:
        if not unavailable(exc):
            why = refused(exc)
            if why is None:
                raise exc  # a bug: the server-error middleware's 500
            # A value PostgreSQL cannot store; validation should have caught it first.
            return error(422, ["body"], why, "data_error")
        last_logged[1] += 1
        if time.monotonic() - last_logged[0] >= 10:  # one line per 10 s, however many
            log.warning("database unavailable (%s): %d request(s) answered 503 since the "
                        "last line", type(exc).__name__, last_logged[1])
            last_logged[:] = [time.monotonic(), 0]
        return error(503, [], "the database is unavailable; retry later", "unavailable",
                     headers={"Retry-After": str(retry_after)})

    for kind in DB_ERRORS:
        app.add_exception_handler(kind, db_error)
