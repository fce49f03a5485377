"""Shared code of the macro workloads (real programs under the allocator under test).

The macro workloads are Python scripts run by Debian's /usr/bin/python3 (standard
library only: they run on the host and in the runner image, never in the project's
virtualenv). They keep the workload contract of the C workloads (docs/contracts.md
§1): `--key value` params, `--help`, one JSON result line last on stdout, exit 0 only
for a valid run, exit 2 for a bad param. Here: params, the result line, failing,
peak RSS from /proc, CPU lists, children that die with the workload, and the re-exec
that keeps the allocator under test out of the driver.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

NAME = os.path.basename(sys.argv[0])

# Where the trial's allocator settings wait while the driver runs without them.
STASH = "MACRO_WORKLOAD_ALLOCATOR_ENV"


class Interrupted(Exception):
    """A signal asked the workload to stop; cleanup runs, then the signal is re-raised."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def fail(message: str) -> NoReturn:
    """An invalid run: the reason on stderr, exit 1 (contracts §1)."""
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def exit_text(code: int) -> str:
    """A Popen return code in words: 'exited with 3', 'died by SIGSEGV'."""
    if code < 0:
        try:
            return f"died by {signal.Signals(-code).name}"
        except ValueError:
            return f"died by signal {-code}"
    return f"exited with {code}"


# -- params ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    default: int | str
    help: str
    minimum: int = 0
    maximum: int | None = None
    check: Callable[[str], str | None] | None = None  # string params: None = valid, else why not


def usage(about: str, params: Sequence[Param]) -> str:
    lines = [f"usage: {NAME} [--key value ...]", about, "", "parameters:"]
    for p in params:
        lines.append(f"  --{p.name:<12} {p.help} (default {p.default})")
    lines += ["  --help         this text", "",
              "Prints one JSON line (docs/contracts.md §1); exit 0 means the run was valid."]
    return "\n".join(lines)


def parse_params(about: str, params: Sequence[Param], argv: Sequence[str]) -> dict[str, Any]:
    """`--key value` pairs into typed params (every param, defaults filled in); exit 2 if bad."""
    by_name = {p.name: p for p in params}
    values: dict[str, Any] = {p.name: p.default for p in params}

    def bad(msg: str, show_usage: bool = False) -> NoReturn:
        print(f"{NAME}: {msg}", file=sys.stderr)
        if show_usage:
            print(usage(about, params), file=sys.stderr)
        sys.exit(2)

    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--help", "-h"):
            print(usage(about, params))
            sys.exit(0)
        if not arg.startswith("--") or len(arg) == 2:
            bad(f"unexpected argument '{arg}'", True)
        key, eq, val = arg[2:].partition("=")
        p = by_name.get(key)
        if p is None:
            bad(f"unknown parameter '--{key}'", True)
        if not eq:
            if i + 1 >= len(argv):
                bad(f"--{key} needs a value")
            i += 1
            val = argv[i]
        if isinstance(p.default, int):
            try:
                n = int(val, 10)
            except ValueError:
                bad(f"--{key}: '{val}' is not an integer")
            if n < p.minimum:
                bad(f"--{key} must be >= {p.minimum} (got {n})")
            if p.maximum is not None and n > p.maximum:
                bad(f"--{key} must be <= {p.maximum} (got {n})")
            values[key] = n
        else:
            why = p.check(val) if p.check else None
            if why:
                bad(f"--{key}: '{val}' {why}")
            values[key] = val
        i += 1
    return values


def print_result(workload: str, params: dict[str, Any], operations: int, seconds: float,
                 max_rss_bytes: int, **extra: Any) -> None:
    """The contract's last stdout line: numeric extras become measures, strings do not."""
    line = {"workload": workload, "params": params, "operations": operations,
            "seconds": round(seconds, 9), "max_rss_bytes": max_rss_bytes, **extra}
    print(json.dumps(line), flush=True)


# -- memory and CPUs ---------------------------------------------------------------------


def vm_hwm_bytes(pid: int | str = "self") -> int | None:
    """Peak resident set of a live process (VmHWM). Unlike a child's ru_maxrss it does
    not include the parent's resident set copied at fork, so it is the program's own."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def parse_cpu_list(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]; ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"bad CPU list {text!r}")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a or b > 4095:
            raise ValueError(f"bad CPU list {text!r}")
        cpus.update(range(a, b + 1))
    return sorted(cpus)


def cpu_list_text(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def allowed_cpus() -> list[int]:
    """CPUs this process may move to: its cgroup's cpuset when readable, else online CPUs."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln.strip().split(":", 2)[2] for ln in f if ln.startswith("0::")), None)
        if rel is not None:
            with open(f"/sys/fs/cgroup{rel.rstrip('/')}/cpuset.cpus.effective") as f:
                text = f.read().strip()
            if text:
                return parse_cpu_list(text)
    except (OSError, ValueError, StopIteration):
        pass
    try:
        with open("/sys/devices/system/cpu/online") as f:
            return parse_cpu_list(f.read())
    except (OSError, ValueError):
        return sorted(os.sched_getaffinity(0))


def cpus_usable(cpus: Sequence[int]) -> bool:
    """True when a child could be pinned to `cpus` (tried on this process, then undone)."""
    own = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        return False
    os.sched_setaffinity(0, own)
    return True


# -- the allocator under test stays out of the driver ------------------------------------


def allocator_env_keys(env: dict[str, str]) -> list[str]:
    return [k for k in env if k == "LD_PRELOAD" or k.startswith("MALLARD_")]


def reexec_without_allocator() -> dict[str, str]:
    """Run the driver itself without the trial's allocator; return that allocator's env.

    The trial starts this script with LD_PRELOAD and MALLARD_* set for the program under
    test. The first time through, the script moves them into one private variable and
    execs itself: exec runs no exit handlers, so the driver writes no allocator stats
    file and is not the process measured. The second time through, the variable is read
    back and removed, and the caller gives those settings to the server alone.
    """
    env = dict(os.environ)
    if STASH in env:
        stash = json.loads(env.pop(STASH))
        os.environ.pop(STASH, None)
        return {str(k): str(v) for k, v in stash.items()}
    moved = {k: env.pop(k) for k in allocator_env_keys(env)}
    env[STASH] = json.dumps(moved)
    os.execve(sys.executable, [sys.executable, "-I", os.path.abspath(sys.argv[0]),
                               *sys.argv[1:]], env)


def reexec_with(extra: dict[str, str]) -> None:
    """Exec this script again (same pid, same LD_PRELOAD) once, with `extra` set and every
    other PYTHON* variable removed; the second time through, return."""
    if all(os.environ.get(k) == v for k, v in extra.items()):
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    # not -I/-E: they would ignore PYTHONMALLOC; -s -S keep user and site paths out.
    os.execve(sys.executable, [sys.executable, "-s", "-S", os.path.abspath(sys.argv[0]),
                               *sys.argv[1:]], env)


# -- children that die with the workload -------------------------------------------------

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup(cpus: Sequence[int] | None, parent: int) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the workload died before prctl: do not outlive it
            os._exit(1)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return setup


def spawn(argv: Sequence[str], env: dict[str, str], cpus: Sequence[int] | None,
          stdout: Any, stderr: Any) -> subprocess.Popen[bytes]:
    """Start a child in the workload's process group (a killpg of the trial reaches it),
    killed by the kernel if the workload dies (PR_SET_PDEATHSIG), pinned to `cpus`."""
    return subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, close_fds=True,
                            preexec_fn=_child_setup(cpus, os.getpid()))


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM (a clean exit, so the allocator writes its stats), then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_with_rusage(proc: subprocess.Popen[bytes],
                     timeout: float) -> tuple[int, resource.struct_rusage] | None:
    """Reap `proc` within `timeout` seconds: (exit code, negative for a signal; its rusage)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


_TRAPPED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def trap_signals() -> None:
    """SIGTERM/SIGINT/SIGHUP raise Interrupted, so `finally` blocks stop the children."""
    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)
    for s in _TRAPPED:
        signal.signal(s, handler)


def hold_signals() -> None:
    """Cleanup must finish: the trapped signals wait (a pending one is dropped at exit)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _TRAPPED)


def die_by(signum: int) -> NoReturn:
    """Leave the way the signal would have: the runner records the signal."""
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    sys.exit(128 + signum)
