"""What `make bench-api` reads from /proc and getrusage: the machine's CPU ticks and the
cores they kept busy, a process tree's CPU time, this process's CPU time, the CPU model."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def machine_ticks() -> list[int]:
    """The whole machine's CPU ticks (/proc/stat: user nice system idle iowait irq
    softirq steal)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def cores_used(before: list[int], after: list[int], seconds: float) -> dict[str, float]:
    """Mean cores busy (everything but idle, iowait and steal), idle, in iowait, stolen."""
    d = [b - a for a, b in zip(before, after, strict=True)]
    tick = os.sysconf("SC_CLK_TCK") * max(seconds, 1e-9)
    return {"busy": (sum(d) - d[3] - d[4] - d[7]) / tick, "idle": d[3] / tick,
            "iowait": d[4] / tick, "steal": d[7] / tick}


def self_cpu() -> float:
    """CPU seconds (user + system) of this process so far (getrusage)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    wanted, total = {root}, 0.0
    changed = True
    while changed:  # descendants: children of anything already wanted
        changed = False
        for pid, (ppid, _) in stats.items():
            if ppid in wanted and pid not in wanted:
                wanted.add(pid)
                changed = True
    for pid in wanted:
        total += stats.get(pid, (0, 0.0))[1]
    return total


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
