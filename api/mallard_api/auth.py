"""Bearer tokens: random, shown once, stored as sha256; roles runner, user, admin, reader.

A runner token names one runner and may act only for it (register, heartbeat, claim,
lease, fail, post results); user tokens read everything and create projects, jobs and
comparisons, except a job's attempts and logs, which a user token scoped to projects
(`token create --project`) reads only for those (`may_read_job`); admin tokens may do
anything; reader tokens read what user tokens read and change nothing (no triage, no
jobs). Webhooks are authenticated by their
signature instead (routes/webhooks.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from mallard_api.deps import get_session
from mallard_api.sql import tokens as token_sql

ROLES = ("runner", "user", "admin", "reader")


def new_token() -> str:
    return "mlrd_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    role: str
    runner_name: str | None = None
    token_id: int | None = None
    projects: tuple[str, ...] | None = None  # a user token's projects; None: every one


def field_error(status: int, loc: list[str | int], msg: str, kind: str = "value_error"
                ) -> HTTPException:
    """An HTTP error whose detail names the field at fault, shaped like FastAPI's 422."""
    return HTTPException(status, detail=[{"loc": loc, "msg": msg, "type": kind}])


def unauthorized(msg: str) -> HTTPException:
    exc = field_error(401, ["header", "authorization"], msg, "unauthorized")
    exc.headers = {"WWW-Authenticate": "Bearer"}
    return exc


class TokenCache:
    """Principals of tokens looked up in the last `seconds` (by token sha256), so most
    requests skip a database round trip and a thread hop. Only found tokens are kept (an
    unknown one is looked up every time); a revoked token stops working within `seconds`
    (MALLARD_TOKEN_CACHE_SECONDS; 0: no cache)."""

    def __init__(self, seconds: float, size: int = 10_000) -> None:
        self.seconds = seconds
        self.size = size
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, digest: str) -> Principal | None:
        hit = self._entries.get(digest)
        if hit is None or time.monotonic() - hit[0] > self.seconds:
            return None
        return hit[1]

    def put(self, digest: str, p: Principal) -> None:
        if self.seconds <= 0:
            return
        if len(self._entries) >= self.size:
            self._entries.clear()  # rare: more live tokens than slots; start over
        self._entries[digest] = (time.monotonic(), p)


def bearer_token(request: Request) -> str:
    """The token of the Authorization header; 401 when there is none."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("missing bearer token (Authorization: Bearer <token>)")
    return token.strip()


def _known(request: Request, token: str) -> tuple[str, Principal | None]:
    """(sha256, principal) without the database: the bootstrap admin token or the cache."""
    boot = request.app.state.settings.bootstrap_admin_token
    if boot and hmac.compare_digest(token.encode(), boot.encode()):
        return "", Principal(role="admin")
    digest = hash_token(token)
    cache: TokenCache = request.app.state.token_cache
    return digest, cache.get(digest)


def _stored(request: Request, session: Session, digest: str) -> Principal | None:
    row = token_sql.lookup(session, digest)
    if row is None:
        return None
    found = Principal(role=row.role, runner_name=row.runner_name, token_id=row.id,
                      projects=None if row.projects is None else tuple(row.projects))
    request.app.state.token_cache.put(digest, found)
    return found


def token_principal(request: Request, session: Session, token: str) -> Principal | None:
    """Who a token is (the bootstrap admin token, or a stored one); None: unknown/revoked.
    Synchronous (the pages call it from their worker threads)."""
    digest, found = _known(request, token)
    return found if found is not None else _stored(request, session, digest)


async def authenticate(request: Request, session: Session) -> Principal:
    """The token's principal: from the token cache, else looked up (the request's first
    statement, in the thread pool; the rest runs on the event loop); 401 when none."""
    digest, found = _known(request, bearer_token(request))
    if found is None:
        found = await run_in_threadpool(_stored, request, session, digest)
    if found is None:
        raise unauthorized("unknown or revoked token")
    return found


async def principal(request: Request, session: Annotated[Session, Depends(get_session)]
                    ) -> Principal:
    return await authenticate(request, session)


def check_role(p: Principal, roles: tuple[str, ...]) -> Principal:
    """403 unless the principal has one of `roles`."""
    if p.role not in roles:
        raise field_error(403, ["header", "authorization"],
                          f"a {p.role} token cannot do this (needs {' or '.join(roles)})",
                          "forbidden")
    return p


def require(*roles: str):  # type: ignore[no-untyped-def]
    async def dependency(p: Annotated[Principal, Depends(principal)]) -> Principal:
        return check_role(p, roles)

    return dependency


AnyRole = Annotated[Principal, Depends(require("runner", "user", "admin", "reader"))]
UserOrAdmin = Annotated[Principal, Depends(require("user", "admin"))]
RunnerOrAdmin = Annotated[Principal, Depends(require("runner", "admin"))]
Admin = Annotated[Principal, Depends(require("admin"))]


def may_read_job(p: Principal, project: str | None, runner_names: set[str]) -> bool:
    """Who may read a job's attempts and logs (written by the code under test): an admin,
    a runner that ran it, a user token of its project (a token without projects: of
    every project; a job of no project: only such a token)."""
    if p.role == "admin":
        return True
    if p.role == "runner":
        return p.runner_name is not None and p.runner_name in runner_names
    if p.role != "user":
        return False
    return p.projects is None or (project is not None and project in p.projects)


def may_triage(p: Principal, project: str) -> bool:
    """Who may triage a project's alerts (and move its baselines): an admin, a user token of
    the project (a token without projects: of every one); never a reader or a runner."""
    if p.role == "admin":
        return True
    return p.role == "user" and (p.projects is None or project in p.projects)


def actor_name(p: Principal) -> str:
    """How audit rows and notes name who acted: the token's role and id."""
    return f"{p.role} #{p.token_id}" if p.token_id is not None else f"{p.role} (bootstrap)"


def check_runner(p: Principal, runner_name: str, loc: list[str | int]) -> None:
    """403 unless the principal may act for the runner named `runner_name`."""
    if p.role == "admin":
        return
    if p.role != "runner" or p.runner_name != runner_name:
        raise field_error(403, loc, f"this token cannot act for runner '{runner_name}'",
                          "forbidden")
