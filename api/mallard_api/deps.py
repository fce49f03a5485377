"""FastAPI dependencies shared by the routers: the database session and the settings;
and `in_thread`, the hop of the results post to a request thread.

Both dependencies are `async`: FastAPI runs a sync dependency in the thread pool, and
every hop to a thread and back costs more than these do (api/README.md, "Load"). A
session opens no connection until its first statement; closing one that used a
connection (a rollback and the return to the pool) is done in the thread pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from mallard_api.config import Settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        await close_session(session)


async def close_session(session: Session) -> None:
    """Close a request's session; when it holds a connection (a rollback and the return to
    the pool), in the thread pool."""
    if session.in_transaction():
        await run_in_threadpool(session.close)
    else:
        session.close()


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


T = TypeVar("T")


async def in_thread(threads: ThreadPoolExecutor, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` in one of `threads` (the app's `request_threads`), with this task's
    context variables. The event loop's own executor hop costs the process about half
    the CPU of anyio's (`run_in_threadpool`: its capacity limiter and cancel scopes),
    ~40 against ~95 us (api/README.md, "The API's CPU per results post, apicpu"). As
    with anyio's, a cancelled caller still waits for `fn` to finish (its session is
    closed only after), then is cancelled."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    future = asyncio.get_running_loop().run_in_executor(threads, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        raise
