"""The database: URL resolution (embedded server or DATABASE_URL), engine, sessions,
and Alembic migrations run programmatically."""

from __future__ import annotations

import functools
import logging
import select
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from mallard_api.config import Settings
from mallard_api.embedded import EmbeddedPostgres

_lock = threading.Lock()
_embedded: EmbeddedPostgres | None = None


def normalise_url(url: str) -> str:
    """Accept postgres://, postgresql:// and postgresql+psycopg:// URLs; use psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def embedded_server(settings: Settings) -> EmbeddedPostgres:
    global _embedded
    with _lock:
        if _embedded is None or _embedded.pgdata != Path(settings.data_dir).resolve():
            _embedded = EmbeddedPostgres(settings.data_dir, port=settings.embedded_port)
        return _embedded


def database_url(settings: Settings, *, start: bool = True) -> str:
    """DATABASE_URL when set; otherwise the embedded server's (started when needed)."""
    if settings.database_url:
        return normalise_url(settings.database_url)
    server = embedded_server(settings)
    return server.start() if start else server.url()


def stop_embedded() -> None:
    """Stop the embedded server if this process started it (never raises: it may have
    been stopped already, e.g. by a signal to the whole process group)."""
    with _lock:
        if _embedded is not None:
            try:
                _embedded.stop()
            except (RuntimeError, OSError) as exc:
                logging.getLogger(__name__).warning("stopping embedded PostgreSQL: %s", exc)


def make_engine(url: str, pool_size: int = 10, *, overflow: int | None = None,
                timeout: float = 30.0, connect_timeout: int = 5) -> Engine:
    """An engine whose pool tests a connection as it is checked out when the server has
    said something on it since it was returned (`_check_out`), so after a database
    restart the stale connections are replaced instead of failing the request: the API
    recovers by itself. Connecting gives up after `connect_timeout`."""
    engine = create_engine(url, pool_size=pool_size,
                           max_overflow=pool_size if overflow is None else overflow,
                           pool_timeout=timeout,
                           connect_args={"connect_timeout": connect_timeout})
    event.listen(engine, "checkout", functools.partial(_check_out, engine.dialect))
    return engine


# An idle pooled connection has nothing to read: a server that stops or restarts ends
# its sessions (a FATAL message, then end of file), which makes the socket readable. So
# the pool's ping (a `SELECT 1` round trip per request, ~0.1 ms of CPU on each side;
# api/README.md, "Benchmark") runs only when the socket is readable, closed or the
# connection not idle; a failed ping makes the pool replace the connection (SQLAlchemy's
# documented pessimistic disconnect handling: DisconnectionError at checkout).
def _check_out(dialect: Dialect, dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
    conn: psycopg.Connection[Any] = dbapi_conn
    if conn.closed:
        raise DisconnectionError("the connection is closed")
    if conn.info.transaction_status == TransactionStatus.IDLE:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        if not poller.poll(0):
            return
    try:
        dialect.do_ping(dbapi_conn)
    except psycopg.Error as exc:
        raise DisconnectionError(f"the connection failed its ping: {exc}") from exc


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str, migrations_dir: Path) -> Config:
    cfg = Config(str(Path(migrations_dir) / "alembic.ini"))
    cfg.set_main_option("script_location", str(Path(migrations_dir)))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def migrate(url: str, migrations_dir: Path, revision: str = "head") -> None:
    command.upgrade(alembic_config(url, migrations_dir), revision)


def downgrade(url: str, migrations_dir: Path, revision: str) -> None:
    command.downgrade(alembic_config(url, migrations_dir), revision)


def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
