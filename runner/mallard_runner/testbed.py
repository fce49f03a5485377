"""The testbed fingerprint fields (contracts §5 ResultsIn.testbed) and CPU-set parsing."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from .models import Testbed
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


def compiler_version(cc: str | None = None) -> str:
    """`gcc 12.2.0` / `clang 14.0.6` for the C compiler the builds use."""
    cc = cc or os.environ.get("CC") or "cc"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=20)
    except OSError:
        return "unknown"
    first = out.stdout.splitlines()[0] if out.stdout else ""
    text = out.stdout
    kind = ("clang" if "clang" in first else
            "gcc" if ("gcc" in first or "Free Software Foundation" in text) else Path(cc).name)
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", first.split(")")[-1]) or re.search(
        r"(\d+\.\d+(?:\.\d+)?)", first)
    return f"{kind} {m.group(1)}" if m else first or "unknown"


def collect(cpus: list[int], compiler: str | None = None) -> Testbed:
    return Testbed(
        arch=platform.machine(),
        cpu_model=cpu_model(),
        cpus=format_cpus(cpus),
        kernel=platform.release(),
        governor=governor(cpus[0]),
        smt=smt_active(),
        thp=thp_mode(),
        compiler=compiler or compiler_version(),
        libc=libc_version(),
        page_size=os.sysconf("SC_PAGE_SIZE"),
    )
