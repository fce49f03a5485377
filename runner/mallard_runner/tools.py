"""Running the build's tools: a command whose output goes into the build log, a file lock
(several runners may share one cache), and `BuildError`, the failure that carries that log.

A recipe's steps run under `Caps` (`run_capped`): one deadline for the whole build (the
recipe's `timeout_seconds`) and one budget of output bytes (setting `build_log_max_bytes`);
a step past either is killed with its whole process group, and only a bounded tail of
its output is kept in the log."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_TAIL_BYTES = 256 * 1024  # of one step's output, kept in the build log
LOG_KEEP_CHARS = 400_000  # of a failed build's whole log (a job's failure log is <= 1 MB)


class BuildError(RuntimeError):
    """A checkout or build that failed; `log` holds what the tools printed."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log if len(log) <= LOG_KEEP_CHARS else "[...]\n" + log[-LOG_KEEP_CHARS:]

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


@dataclass
class Caps:
    """What a whole build may take: seconds (from its start) and bytes of output."""

    seconds: float
    max_bytes: int
    started: float = field(default_factory=time.monotonic)
    printed: int = 0

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)


def _kill_group(pid: int) -> None:
    """Everything a step started (its own session: one process group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(proc: subprocess.Popen[bytes], caps: Caps, keep: bytearray) -> tuple[str | None, int]:
    """Read the step's output until it closes, keeping a bounded tail in `keep`: (why it
    was stopped, None when it ran to its end; how many bytes it printed)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    printed = 0
    while True:
        left = caps.left()
        if left <= 0:
            return f"build timed out after {caps.seconds:g} s", printed
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, printed
        printed += len(chunk)
        caps.printed += len(chunk)
        keep += chunk
        del keep[:-LOG_TAIL_BYTES]
        if caps.printed > caps.max_bytes:
            return f"build printed more than {caps.max_bytes} bytes", printed


def run_capped(cmd: list[str], log: list[str], caps: Caps, *, env: Mapping[str, str],
               cwd: Path | None = None, identity: Mapping[str, Any] | None = None) -> int:
    """Run one build step (argv, never a shell) with stdout and stderr into the log, in its
    own session; past the deadline or the output budget the group is killed and
    BuildError raised. Returns the exit status (negative: a signal)."""
    log.append("$ " + " ".join(cmd))
    keep = bytearray()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(env),
                                start_new_session=True, **(identity or {}))
    except OSError as e:
        log.append(str(e))
        raise BuildError(f"cannot run {cmd[0]}: {e.strerror or e}", "\n".join(log)) from e
    try:
        why, printed = _drain(proc, caps, keep)
        if why is None:
            try:
                proc.wait(timeout=max(caps.left(), 0.1))
            except subprocess.TimeoutExpired:
                why = f"build timed out after {caps.seconds:g} s"
    finally:
        _kill_group(proc.pid)  # the step past a cap, or what it left running
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    text = keep.decode(errors="replace").rstrip()
    if printed > len(keep) and text:
        text = f"[... {printed - len(keep)} bytes before this cut ...]\n" + text
    if text:
        log.append(text)
    if why is not None:
        log.append(f"({cmd[0]}: killed: {why})")
        raise BuildError(why, "\n".join(log))
    code = proc.returncode
    if code != 0:
        log.append(f"({cmd[0]}: " + (f"killed by signal {-code})" if code < 0
                                      else f"exit status {code})"))
    return code
