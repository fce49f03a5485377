"""The API as a local process, for the demo, the benchmarks and the tests of every part:
a free port, `mallard-api serve`, the wait for /api/v1/health (and for anything else:
`wait_for`), tokens. Written once here; `scripts/demo.py`, `scripts/demo_push.py`,
`api/bench/bench_api.py`, the API's live server fixture, the runner's agent tests, the
dashboard tests and the k8s tests use it (only `tests/e2e/e2e.py`, which runs on the host's
plain python3 against the containers, has its own wait).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar

from sqlalchemy.orm import Session

from mallard_api import db
from mallard_api.auth import hash_token, new_token
from mallard_api.config import Settings
from mallard_api.embedded import free_port as free_port  # the tests' and demos' import
from mallard_api.sql import tokens as token_sql

T = TypeVar("T")

API_BIN = Path(sys.executable).parent / "mallard-api"


def wait_for(what: str, check: Callable[[], T], timeout: float, *, interval: float = 0.25,
             on_timeout: Callable[[], str] | None = None,
             tolerate: tuple[type[Exception], ...] = (OSError, ValueError, KeyError)) -> T:
    """Call `check` until it returns something truthy (and return that); an exception of
    `tolerate` counts as not yet. AssertionError after `timeout` seconds, naming `what`,
    the last answer and `on_timeout()` (a log's tail)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except tolerate as exc:
            last = exc
        time.sleep(interval)
    extra = on_timeout() if on_timeout else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} "
                         f"(last: {last!r})\n{extra}")


def database_of(env: Mapping[str, str], cwd: Path | None = None) -> str:
    """The database of the API that `env` configures, found as `mallard-api db-url` finds
    it: its DATABASE_URL, else the running embedded server of its MALLARD_DATA_DIR."""
    fields: dict[str, object] = {"database_url": env.get("DATABASE_URL") or None}
    data_dir = Path(env.get("MALLARD_DATA_DIR") or Settings().data_dir)
    fields["data_dir"] = data_dir if data_dir.is_absolute() else (cwd or Path.cwd()) / data_dir
    return db.database_url(Settings(**fields), start=False)  # type: ignore[arg-type]


def mint_token(env: Mapping[str, str], role: str, runner: str | None = None,
               cwd: Path | None = None, projects: tuple[str, ...] = ()) -> str:
    """A new token of the database `env` names (stored hashed, as `mallard-api token
    create` stores it; made here, not by the CLI, whose start-up imports the whole API);
    `projects`: a user token that reads only those projects' jobs."""
    token = new_token()
    engine = db.make_engine(database_of(env, cwd), 1)
    try:
        with Session(engine) as session:
            token_sql.create(session, token_sha256=hash_token(token), role=role,
                             runner_name=runner, description=None,
                             projects=list(projects) or None)
            session.commit()
    finally:
        engine.dispose()
    return token


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as r:
            return int(r.status) == 200
    except (OSError, urllib.error.URLError):
        return False


class ApiProcess:
    """`mallard-api serve` on 127.0.0.1 in its own process group, with `env` (the
    database, secrets, allow-lists), its output to `log` (None: inherited)."""

    def __init__(self, env: dict[str, str], *, log: Path | None = None, port: int = 0,
                 cwd: Path | None = None, args: tuple[str, ...] = ()) -> None:
        self.env = env
        self.log = log
        self.port = free_port(port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.cwd = cwd
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 240) -> ApiProcess:
        out: IO[bytes] | None = None
        if self.log is not None:
            out = open(self.log, "ab")  # noqa: SIM115 - the child keeps its own copy
        try:
            self.proc = subprocess.Popen(
                [str(API_BIN), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                 *self.args], env=self.env, cwd=self.cwd, stdout=out,
                stderr=subprocess.STDOUT if out else None, start_new_session=True)
        finally:
            if out is not None:
                out.close()
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 240) -> None:
        """Until /health answers 200; RuntimeError when the process exits or time is up."""

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the API exited ({self.proc.returncode}){self._tail()}")
            return healthy(self.url)

        try:
            wait_for(f"the API at {self.url} to be healthy", up, timeout)
        except AssertionError as e:
            raise RuntimeError(f"the API at {self.url} was not healthy after {timeout:.0f} s"
                               f"{self._tail()}") from e

    def _tail(self) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return f"; log {self.log}:\n{self.log.read_text(errors='replace')[-3000:]}"

    def token(self, role: str, runner: str | None = None, projects: tuple[str, ...] = ()
              ) -> str:
        """A new token of this API's database (`mint_token`)."""
        return mint_token(self.env, role, runner, self.cwd, projects)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM to the process group (uvicorn workers, the embedded PostgreSQL's
        owner), SIGKILL after `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> ApiProcess:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
