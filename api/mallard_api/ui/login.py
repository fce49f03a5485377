"""Who may see a page: a bearer token (as for the REST API) or a login session cookie.

The login form takes an API token (any role: pages only read) and answers with a cookie
``mallard_session = v1.<token id>.<expires>.<signature>``: HttpOnly, SameSite=Strict,
Path=/ui, Secure when MALLARD_PUBLIC_URL is https, for MALLARD_UI_SESSION_HOURS. The
cookie never holds the token. The signature is HMAC-SHA256 over ``v1.<id>.<expires>``
keyed with HMAC-SHA256(MALLARD_UI_SESSION_SECRET, the token's stored sha256), so

* a session is checked against the token row on every request: revoking the token
  (``mallard-api token revoke``) ends its sessions at once, and a session dies at its
  expiry whatever the browser keeps;
* forging one needs the token's hash and, when MALLARD_UI_SESSION_SECRET is set (shared
  by every replica), that secret too; without it, sessions still work on any number of
  replicas, and reading the api_tokens table is enough to forge one (say so to operators).

The bootstrap admin token (not stored) signs as token id 0 with its own sha256.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from fastapi import Request
from sqlalchemy.orm import Session

from mallard_api import auth
from mallard_api.config import Settings
from mallard_api.sql import pages as pages_sql

COOKIE = "mallard_session"
_VERSION = "v1"
_MAX_COOKIE = 200


class LoginRequired(Exception):
    """No credentials at all: the page answers with a redirect to the login form."""


def _key(settings: Settings, token_sha256: str) -> bytes:
    secret = (settings.ui_session_secret or "").encode()
    return hmac.new(secret, token_sha256.encode(), hashlib.sha256).digest()


def _sign(settings: Settings, token_sha256: str, msg: str) -> str:
    mac = hmac.new(_key(settings, token_sha256), msg.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def make_cookie(settings: Settings, token_id: int, token_sha256: str,
                now: float | None = None) -> tuple[str, int]:
    """(cookie value, max-age seconds) for a session of the token."""
    max_age = int(settings.ui_session_hours * 3600)
    expires = int((now if now is not None else time.time()) + max_age)
    msg = f"{_VERSION}.{token_id}.{expires}"
    return f"{msg}.{_sign(settings, token_sha256, msg)}", max_age


def read_cookie(settings: Settings, session: Session, value: str | None,
                now: float | None = None) -> auth.Principal | None:
    """The principal of a valid, unexpired session cookie whose token still exists."""
    if not value or len(value) > _MAX_COOKIE:
        return None
    parts = value.split(".")
    if len(parts) != 4 or parts[0] != _VERSION or not parts[1].isdigit() \
            or not parts[2].isdigit():
        return None
    token_id, expires = int(parts[1]), int(parts[2])
    if expires < (now if now is not None else time.time()):
        return None
    if token_id == 0:
        boot = settings.bootstrap_admin_token
        if not boot:
            return None
        sha, who = auth.hash_token(boot), auth.Principal(role="admin")
    else:
        row = pages_sql.token_by_id(session, token_id)
        if row is None:
            return None
        sha = row.token_sha256
        who = auth.Principal(role=row.role, runner_name=row.runner_name, token_id=row.id)
    msg = f"{_VERSION}.{token_id}.{expires}"
    if not hmac.compare_digest(_sign(settings, sha, msg), parts[3]):
        return None
    return who


def login(request: Request, session: Session, token: str) -> tuple[str, int] | None:
    """Check a token typed into the login form; (cookie value, max-age) or None."""
    token = token.strip()
    if not token or len(token) > 500:
        return None
    who = auth.token_principal(request, session, token)
    if who is None:
        return None
    settings: Settings = request.app.state.settings
    return make_cookie(settings, who.token_id or 0, auth.hash_token(token))


def page_principal(request: Request, session: Session) -> auth.Principal:
    """The bearer header when sent (a bad one is a 401), else the session cookie; neither:
    LoginRequired."""
    if request.headers.get("authorization"):
        who = auth.token_principal(request, session, auth.bearer_token(request))
        if who is None:
            raise auth.unauthorized("unknown or revoked token")
        return who
    who = read_cookie(request.app.state.settings, session, request.cookies.get(COOKIE))
    if who is None:
        raise LoginRequired()
    return who


def page_visitor(request: Request, session: Session) -> auth.Principal | None:
    """As `page_principal`, but None for a visitor without credentials: the pages of a
    public project read without a token (`ui/public.py`)."""
    try:
        return page_principal(request, session)
    except LoginRequired:
        return None


def cookie_secure(settings: Settings) -> bool:
    return bool(settings.public_url and settings.public_url.startswith("https://"))


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a page path of ours, never another site."""
    if not target or not target.startswith("/ui/") or target.startswith("//") \
            or "\\" in target or any(ord(ch) < 32 for ch in target) or len(target) > 1000:
        return "/ui/"
    return target
