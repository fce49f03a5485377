"""The API as a local process, for the demo, the benchmarks and the tests of every part:
a free port, `mallard-api serve`, the wait for /api/v1/health, tokens. Written once here;
`scripts/demo.py`, `api/bench/bench_api.py`, `runner/tests/test_agent_api.py` and
`dashboards/tests/conftest.py` use it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

API_BIN = Path(sys.executable).parent / "mallard-api"


def free_port(preferred: int = 0) -> int:
    """`preferred` when it is free (0: none), else a free port of 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the API exited ({self.proc.returncode}){self._tail()}")
            if healthy(self.url):
                return
            time.sleep(0.25)
        raise RuntimeError(f"the API at {self.url} was not healthy after {timeout:.0f} s"
                           f"{self._tail()}")

    def _tail(self) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return f"; log {self.log}:\n{self.log.read_text(errors='replace')[-3000:]}"

    def token(self, role: str, runner: str | None = None) -> str:
        """A new token (`mallard-api token create`, stored hashed), printed once."""
        cmd = [str(API_BIN), "token", "create", "--role", role]
        if runner is not None:
            cmd += ["--runner", runner]
        out = subprocess.run(cmd, env=self.env, cwd=self.cwd, capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"mallard-api token create failed: {out.stderr.strip()}")
        return out.stdout.strip().splitlines()[-1]

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
