"""Forms cannot be posted from another site: an Origin check and a form token.

Every POST form under /ui (the login form, the sign-out button) is checked twice before
anything is done:

- **Origin.** The browser's `Origin` header (else the `Referer`'s origin) must be ours:
  MALLARD_PUBLIC_URL's scheme and host when set, else the request's own host (its Host
  header, any scheme: a proxy may terminate TLS in front). `Origin: null` is refused.
  With neither header (not a browser) the token alone decides.
- **Token** (a double-submit cookie). A page sets the cookie `mallard_csrf` (32 random
  bytes; HttpOnly, SameSite=Strict, Path=/ui, Secure with an https public URL) when the
  browser has none, and its forms carry the same value in a hidden field `csrf`; a post
  whose field differs from its cookie (compared in constant time) is refused. Another
  site can neither read the cookie nor, SameSite=Strict, have the browser send it.

The forms that change something (triage, baselines: `check_signed_in`) need a signed-in
session, and their token is tied to it instead: HMAC-SHA256 over the session cookie keyed
with MALLARD_UI_SESSION_SECRET, so it changes with every sign-in and cannot be computed
without the (HttpOnly, SameSite=Strict) session cookie. A post authenticated by a bearer
header (not a browser: no ambient credential to abuse) passes on its Origin alone.

A refused post is a 403 page naming what was wrong; it logs nobody in or out.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from urllib.parse import urlsplit

from fastapi import Request
from starlette.responses import Response

from mallard_api.auth import field_error
from mallard_api.config import Settings
from mallard_api.ui import links

COOKIE = "mallard_csrf"
FIELD = "csrf"
_SHAPE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # token_urlsafe(32)
log = logging.getLogger("mallard_api.ui")


def form_token(request: Request) -> tuple[str, bool]:
    """(the browser's form token, whether it is new and must be set as the cookie)."""
    have = request.cookies.get(COOKIE, "")
    if _SHAPE.match(have):
        return have, False
    return secrets.token_urlsafe(32), True


def set_cookie(response: Response, settings: Settings, value: str) -> None:
    response.set_cookie(COOKIE, value, path=links.path(settings.public_url, links.PREFIX),
                        httponly=True, samesite="strict",
                        secure=bool(settings.public_url
                                    and settings.public_url.startswith("https://")))


def _origin(request: Request) -> str | None:
    """The origin the browser says the form came from; None: it says nothing."""
    origin = request.headers.get("origin")
    if origin is not None:
        return origin.strip()
    referer = request.headers.get("referer")
    if referer is None:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "null"


def origin_refusal(request: Request, public_url: str | None) -> str | None:
    """Why the post's Origin (or Referer) is not ours; None when it is (or is absent)."""
    origin = _origin(request)
    if origin is None:
        return None
    sent = urlsplit(origin)
    if sent.scheme not in ("http", "https") or not sent.netloc:
        return f"the form was posted from an opaque origin ({origin[:100]!r})"
    if public_url:
        ours = urlsplit(public_url)
        same = (sent.scheme, sent.netloc.lower()) == (ours.scheme, ours.netloc.lower())
    else:
        same = sent.netloc.lower() == request.headers.get("host", "").lower()
    return None if same else f"the form was posted from another site ({origin[:100]!r})"


def check(request: Request, form: dict[str, str]) -> None:
    """403 unless the post comes from our own page (module doc)."""
    settings: Settings = request.app.state.settings
    reason = origin_refusal(request, settings.public_url)
    loc: list[str | int] = ["header", "origin"]
    if reason is None:
        cookie, sent = request.cookies.get(COOKIE, ""), form.get(FIELD, "")
        if not cookie or not hmac.compare_digest(cookie.encode(), sent.encode()):
            reason, loc = "the form's token is missing or stale: reload the page", ["body", FIELD]
    if reason is not None:
        log.info("refused a cross-site post to %s: %s", request.url.path, reason)
        raise field_error(403, loc, reason, "csrf")


def session_token(settings: Settings, session_cookie: str | None) -> str:
    """The form token of a signed-in session ('' without a session cookie)."""
    if not session_cookie:
        return ""
    key = (settings.ui_session_secret or "").encode() + b"\0" + session_cookie.encode()
    return hmac.new(key, b"mallard csrf v1", hashlib.sha256).hexdigest()


def check_signed_in(request: Request, form: dict[str, str], session_cookie: str | None
                    ) -> None:
    """403 unless a form that changes something comes from our page of this session."""
    settings: Settings = request.app.state.settings
    reason = origin_refusal(request, settings.public_url)
    loc: list[str | int] = ["header", "origin"]
    if reason is None and not request.headers.get("authorization"):
        want, sent = session_token(settings, session_cookie), form.get(FIELD, "")
        if not want or not hmac.compare_digest(want.encode(), sent.encode()):
            reason, loc = ("the form's token is missing or not of this session: reload the "
                           "page"), ["body", FIELD]
    if reason is not None:
        log.info("refused a cross-site post to %s: %s", request.url.path, reason)
        raise field_error(403, loc, reason, "csrf")
