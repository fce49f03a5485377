"""FastAPI dependencies shared by the routers: the database session and the settings.

Both are `async`: FastAPI runs a sync dependency in the thread pool, and every hop to a
thread and back costs more than these do (api/README.md, "Load"). A session opens no
connection until its first statement; closing one that used a connection (a rollback
and the return to the pool) is done in the thread pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

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
