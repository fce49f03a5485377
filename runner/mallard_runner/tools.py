"""Running the build's tools: a command whose output goes into the build log, a file lock
(several runners may share one cache), and `BuildError`, the failure that carries that log."""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class BuildError(RuntimeError):
    """A checkout or build that failed; `log` holds what the tools printed."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log

    def __str__(self) -> str:
        return f"{self.args[0]}\n--- log ---\n{self.log[-8000:]}"


def run(cmd: list[str], log: list[str], *, env: Mapping[str, str], cwd: Path | None = None,
        timeout: float = 1800, identity: Mapping[str, Any] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run a tool with `env` (the whole environment: sandbox.py's allow-list), as the user
    `identity` names (subprocess keyword arguments, sandbox.Sandbox.identity), its output
    appended to `log`."""
    log.append("$ " + " ".join(cmd))
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                             env={"GIT_TERMINAL_PROMPT": "0", **env}, stdin=subprocess.DEVNULL,
                             **(identity or {}))
    except subprocess.TimeoutExpired as e:
        log.append(f"timed out after {timeout}s")
        raise BuildError(f"{cmd[0]} timed out", "\n".join(log)) from e
    except OSError as e:
        log.append(str(e))
        raise BuildError(f"cannot run {cmd[0]}: {e}", "\n".join(log)) from e
    if out.stdout.strip():
        log.append(out.stdout.rstrip())
    if out.stderr.strip():
        log.append(out.stderr.rstrip())
    if out.returncode != 0:
        why = (f"killed by signal {-out.returncode}" if out.returncode < 0
               else f"exit status {out.returncode}")
        log.append(f"({cmd[0]}: {why})")
    return out


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
