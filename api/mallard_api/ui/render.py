"""Rendering pages: the Jinja2 environment, the response headers every page carries, and
the route class that turns what goes wrong into a page (login redirect, 401/404 page, a
plain 500 page without a stack trace)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.exceptions import HTTPException

from mallard_api.ui import csrf, fmt, links
from mallard_api.ui.login import COOKIE as SESSION
from mallard_api.ui.login import LoginRequired

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger("mallard_api.ui")
HERE = Path(__file__).resolve().parent

ENV = Environment(loader=FileSystemLoader(HERE / "templates"),
                  autoescape=select_autoescape(["html"]), undefined=StrictUndefined,
                  trim_blocks=True, lstrip_blocks=True)
ENV.globals.update(fmt=fmt, links=links)

# No script runs on any page; styles and the icon come from /ui/static only.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def public_url(request: Request) -> str | None:
    url: str | None = request.app.state.settings.public_url
    return url


def render(template: str, base: str | None, **ctx: Any) -> str:
    """`template` with `ctx`, links under the public URL `base`'s path; a page without a
    request (the static export, `export.py`) leaves out the forms and pickers."""
    defaults = dict(request_path="", viewer=None, csrf="", session_csrf="", signed_in=False,
                    static=True)
    return ENV.get_template(template).render(url=lambda p: links.path(base, p),
                                             **(defaults | ctx))


def page(request: Request, template: str, status: int = 200, *,
         context: DataclassInstance | None = None, **ctx: Any) -> HTMLResponse:
    """Render `template` with `ctx` and, when given, the fields of `context` (a page's
    dataclass, e.g. `comparison.ComparisonPage`) as its variables."""
    if context is not None:
        ctx.update((f.name, getattr(context, f.name)) for f in fields(context))
    token, new = csrf.form_token(request)  # for the page's forms (csrf.py)
    signed = csrf.session_token(request.app.state.settings, request.cookies.get(SESSION))
    html = render(template, public_url(request), request_path=request.url.path,
                  viewer=ctx.pop("viewer", None), csrf=token, session_csrf=signed,
                  signed_in=bool(signed or request.headers.get("authorization")),
                  static=False, **ctx)
    resp = HTMLResponse(html, status_code=status, headers=HEADERS)
    if new:
        csrf.set_cookie(resp, request.app.state.settings, token)
    return resp


def error_page(request: Request, status: int, title: str, message: str,
               headers: dict[str, str] | None = None) -> HTMLResponse:
    resp = page(request, "error.html", status, title=title, message=message, code=status)
    resp.headers.update(headers or {})
    return resp


def login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    login = links.path(public_url(request), "/ui/login")
    return RedirectResponse(f"{login}?next={quote(target, safe='')}", status_code=303,
                            headers=HEADERS)


def _message(exc: HTTPException) -> str:
    detail = exc.detail
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("msg", ""))
    return str(detail)


TITLES = {400: "Bad request", 401: "Not signed in", 403: "Not allowed", 404: "Not found",
          413: "Too large", 422: "Bad request"}


class PageRoute(APIRoute):
    """A page route: errors become pages, never JSON or a traceback."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                return login_redirect(request)
            except RequestValidationError as exc:
                errors = exc.errors()
                where = errors[0].get("loc", ()) if errors else ()
                if where and where[0] == "path":
                    return error_page(request, 404, "Not found",
                                      f"There is no page at {request.url.path}.")
                field = ".".join(str(p) for p in where)
                msg = errors[0].get("msg", "invalid") if errors else "invalid"
                return error_page(request, 422, "Bad request", f"{field}: {msg}")
            except HTTPException as exc:
                headers = dict(exc.headers or {})
                return error_page(request, exc.status_code,
                                  TITLES.get(exc.status_code, "Error"), _message(exc), headers)
            except Exception:
                log.exception("page %s failed", request.url.path)
                return error_page(request, 500, "Server error",
                                  "The page could not be built. The error is in the API's log.")

        return guarded
