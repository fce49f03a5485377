"""The testbed fingerprint fields (contracts §5 ResultsIn.testbed), CPU-set parsing, and
the node's noise controls: CPU frequency state (read, and written where permitted), ASLR,
and whether other processes may run on the pinned CPUs."""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallard_wire.fields import Aslr, Turbo
from mallard_wire.results import TestbedIn

from .arch import Platform
from .peers import libc_version

SYS_CPU = Path("/sys/devices/system/cpu")


def parse_cpus(text: str) -> list[int]:
    """`"1"`, `"2,3"`, `"0-3,6"` -> sorted unique CPU numbers."""
    cpus: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            a, b = int(lo), int(hi)
            if b < a:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(a, b + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"empty CPU set {text!r}")
    return sorted(cpus)


def format_cpus(cpus: list[int]) -> str:
    """Canonical spelling used in results: "2,3"."""
    return ",".join(str(c) for c in sorted(set(cpus)))


def check_cpus(cpus: list[int]) -> None:
    allowed = os.sched_getaffinity(0)
    bad = [c for c in cpus if c not in allowed]
    if bad:
        raise ValueError(f"CPUs {bad} are not available to this process (allowed: "
                         f"{format_cpus(sorted(allowed))})")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    info = _read(Path("/proc/cpuinfo")) or ""
    for key in ("model name", "Model", "Hardware", "cpu model", "uarch"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", info, re.M)
        if m:
            return m.group(1).strip()
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            return m.group(1).strip()
    return platform.processor() or "unknown"


def governor(cpu: int) -> str:
    g = _read(SYS_CPU / f"cpu{cpu}" / "cpufreq" / "scaling_governor")
    return g or "unknown"


def smt_active() -> bool:
    active = _read(SYS_CPU / "smt" / "active")
    if active is not None:
        return active == "1"
    siblings = _read(SYS_CPU / "cpu0" / "topology" / "thread_siblings_list")
    return bool(siblings) and len(parse_cpus(siblings or "0")) > 1


def thp_mode() -> str:
    text = _read(Path("/sys/kernel/mm/transparent_hugepage/enabled"))
    if not text:
        return "unknown"
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else text


def compiler_version(cc: str | None = None, env: Mapping[str, str] | None = None,
                     identity: Mapping[str, Any] | None = None) -> str:
    """`gcc 12.2.0` / `clang 14.0.6` for the C compiler the builds use (a compiler a build
    named runs as the work user: `env` and `identity` of sandbox.Sandbox)."""
    cc = cc or os.environ.get("CC") or "cc"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=20,
                             env=env, stdin=subprocess.DEVNULL, **(identity or {}))
    except OSError:
        return "unknown"
    first = out.stdout.splitlines()[0] if out.stdout else ""
    text = out.stdout
    kind = ("clang" if "clang" in first else
            "gcc" if ("gcc" in first or "Free Software Foundation" in text) else Path(cc).name)
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", first.split(")")[-1]) or re.search(
        r"(\d+\.\d+(?:\.\d+)?)", first)
    return f"{kind} {m.group(1)}" if m else first or "unknown"


# -- noise controls --------------------------------------------------------------------------
PROC = Path("/proc")
PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (per-CPU ones are harmless)


def turbo(sys_cpu: Path = SYS_CPU) -> Turbo:
    """`on`, `off` or `unknown` (intel_pstate's no_turbo, else cpufreq's boost)."""
    no_turbo = _read(sys_cpu / "intel_pstate" / "no_turbo")
    if no_turbo in ("0", "1"):
        return "off" if no_turbo == "1" else "on"
    boost = _read(sys_cpu / "cpufreq" / "boost")
    if boost in ("0", "1"):
        return "on" if boost == "1" else "off"
    return "unknown"


def _write(path: Path, value: str) -> str | None:
    """Write a sysfs value; the error text when the node does not allow it."""
    try:
        path.write_text(value)
        return None
    except OSError as e:
        return e.strerror or str(e)


def tune_cpus(cpus: list[int], write: bool = True, sys_cpu: Path = SYS_CPU) -> list[str]:
    """Read (and, when `write`, set) the frequency state of the pinned CPUs: the governor to
    `performance`, turbo off. SMT is only read: the runner never takes CPUs offline. Returns
    one line per finding or action, for the run's artifacts."""
    out: list[str] = []
    for cpu in cpus:
        path = sys_cpu / f"cpu{cpu}" / "cpufreq" / "scaling_governor"
        cur = _read(path)
        if cur is None:
            out.append(f"cpu{cpu} governor: none (no cpufreq on this node)")
        elif cur == "performance" or not write:
            out.append(f"cpu{cpu} governor: {cur}")
        else:
            err = _write(path, "performance")
            out.append(f"cpu{cpu} governor: {cur} -> performance" if err is None else
                       f"cpu{cpu} governor: {cur} (cannot set performance: {err})")
    knobs = ((sys_cpu / "intel_pstate" / "no_turbo", "1"),  # the value that turns turbo off
             (sys_cpu / "cpufreq" / "boost", "0"))
    state = turbo(sys_cpu)
    for path, off in knobs:
        if _read(path) not in ("0", "1"):
            continue
        if state == "on" and write:
            err = _write(path, off)
            out.append("turbo: on -> off" if err is None else f"turbo: on (cannot turn off: {err})")
        else:
            out.append(f"turbo: {state}")
        break
    else:
        out.append("turbo: unknown (no intel_pstate or cpufreq boost control)")
    out.append(f"smt: {'active' if smt_active() else 'inactive'} (read only)")
    return out


@functools.cache
def setarch_prefix() -> tuple[str, ...] | None:
    """`setarch <machine> -R` when it works here (a container may forbid personality())."""
    cmd = ("setarch", platform.machine(), "-R")
    if not shutil.which("setarch"):
        return None
    try:
        ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return cmd if ok else None


def kernel_aslr() -> bool:
    """Whether the kernel randomises a new process's addresses (randomize_va_space > 0)."""
    return _read(PROC / "sys" / "kernel" / "randomize_va_space") != "0"


def aslr(noise_control: bool = True, sampled: bool = False) -> Aslr:
    """`off` when workloads run without address-space randomisation (setarch -R in the
    fixed layout, or the kernel's randomize_va_space is 0), else `on`."""
    if not kernel_aslr():
        return "off"
    return "off" if noise_control and not sampled and setarch_prefix() is not None else "on"


@dataclass
class Isolation:
    """Whether any other process may run on the pinned CPUs (kernel threads, this process,
    its ancestors and its children aside)."""

    isolated: bool
    others: list[str] = field(default_factory=list)  # "pid comm" of the processes that may
    isolcpus: list[int] = field(default_factory=list)

    def warning(self, cpus: list[int]) -> str | None:
        if self.isolated:
            return None
        shown = ", ".join(self.others[:5]) + (", ..." if len(self.others) > 5 else "")
        return (f"CPUs {format_cpus(cpus)} are not isolated: {len(self.others)} other processes "
                f"may run there ({shown}); isolate them (isolcpus=, a cpuset, or the kubelet's "
                f"static CPU manager) for steadier numbers")


def _status(pid_dir: Path) -> dict[str, str]:
    text = _read(pid_dir / "status") or ""
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _kernel_thread(pid_dir: Path) -> bool:
    stat = _read(pid_dir / "stat") or ""
    fields = stat.rsplit(")", 1)[-1].split()
    return len(fields) > 6 and int(fields[6]) & PF_KTHREAD != 0


def isolation(cpus: list[int], proc: Path = PROC, me: int | None = None) -> Isolation:
    """Look at every process's allowed CPU list (and the kernel's isolcpus)."""
    me = os.getpid() if me is None else me
    parents: dict[int, int] = {}
    allowed: dict[int, tuple[str, str]] = {}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        st = _status(pid_dir)
        if not st or _kernel_thread(pid_dir):
            continue
        pid = int(pid_dir.name)
        parents[pid] = int(st.get("PPid", "0") or 0)
        allowed[pid] = (st.get("Cpus_allowed_list", ""), st.get("Name", "?").strip())
    ours = {me}
    while True:  # descendants (the workload itself, valgrind, perf)
        kids = {c for c, par in parents.items() if par in ours and c not in ours}
        if not kids:
            break
        ours |= kids
    p = parents.get(me, 0)
    while p > 1 and p not in ours:  # ancestors wait for us (init is not one of ours)
        ours.add(p)
        p = parents.get(p, 0)
    pinned = set(cpus)
    others = []
    for pid, (cpu_list, name) in sorted(allowed.items()):
        if pid in ours or not cpu_list.strip():
            continue
        try:
            if pinned & set(parse_cpus(cpu_list)):
                others.append(f"{pid} {name}")
        except ValueError:
            continue
    iso = _read(SYS_CPU / "isolated") if proc == PROC else None
    return Isolation(not others, others, parse_cpus(iso) if iso else [])


def collect(cpus: list[int], compiler: str | None = None, noise_control: bool = True,
            target: Platform | None = None, sampled: bool = False) -> TestbedIn:
    """The fingerprint fields (`sampled`: trials draw their layouts, ASLR on). On an
    emulated target: its arch, the cross compiler, the sysroot's libc, `emulated` and the
    emulator's version; the rest is the host's."""
    emulated = target is not None and target.emulated
    return TestbedIn(
        arch=target.arch if target is not None else platform.machine(),
        cpu_model=cpu_model(),
        cpus=format_cpus(cpus),
        kernel=platform.release(),
        governor=governor(cpus[0]),
        smt=smt_active(),
        thp=thp_mode(),
        compiler=compiler or compiler_version(target.compiler if emulated and target else None),
        libc=(target.libc if emulated and target else None) or libc_version(),
        page_size=os.sysconf("SC_PAGE_SIZE"),
        turbo=turbo(),
        aslr=aslr(noise_control, sampled),
        workload_env="minimal" if noise_control else "inherited",
        isolated=isolation(cpus).isolated,
        emulated=emulated,
        emulator=target.emulator_version if emulated and target else None,
    )
