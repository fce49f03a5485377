"""What a trial records besides its measures when its job asks (`record`, suites.py):

* ``memory``: the RSS of the workload every `memory_interval_ms` (a setting), read from
  ``/proc/<pid>/status`` (``VmRSS``) of the processes hyperfine started: the leaves of its
  process tree (the workload, not `perf stat` around it; a program's workers summed). At
  most MAX_TIMELINE_POINTS points are kept: when full, neighbours are averaged and the
  interval doubles. Measures: ``final_rss_bytes`` (the last sample; a workload's own value
  of that name wins) and ``rss_area_byte_seconds`` (every sample times its interval: a
  late purge or a steady growth raises it even when the peak stays);
* ``latency``: the latency shim (runner/workloads/latency.c) preloaded before the
  allocator, one malloc/free in `latency_every` timed; its files (one per process) summed
  into one histogram; measures ``malloc_p50_ns`` ... ``free_p999_ns``
  (mallard_wire/timelines.py).

Neither runs on an emulated testbed (qemu's RSS is not the guest's; the shim is the
host's), nor in the cachegrind runs: their counts stay those of the workload alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

from mallard_wire.timelines import (
    LATENCY_CALLS,
    MAX_TIMELINE_POINTS,
    LatencyHistogram,
    MemoryTimeline,
    latency_measures,
)

LATENCY_FILE = "latency-%p.json"  # in the trial's folder: one per process (%p its pid)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return out
    return out


def leaves(root: int) -> list[int]:
    """The processes below `root` that have no children of their own."""
    found, todo = [], _children(root)
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        if kids:
            todo += kids
        else:
            found.append(pid)
    return found


def rss_bytes(pid: int) -> int | None:
    """VmRSS of a process (None once it is gone or has none: a zombie)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Timeline:
    """Samples kept under the cap: `per_point` raw samples averaged into each point."""

    def __init__(self, interval_s: float, cap: int = MAX_TIMELINE_POINTS):
        self.interval_s = interval_s
        self.cap = cap
        self.points: list[float] = []
        self.per_point = 1
        self._sum = 0.0
        self._n = 0
        self.raw = 0
        self.last: int | None = None
        self.total = 0.0  # sum of every raw sample

    def add(self, value: int) -> None:
        self.raw += 1
        self.last = value
        self.total += value
        self._sum += value
        self._n += 1
        if self._n == self.per_point:
            self._push()

    def _push(self) -> None:
        self.points.append(self._sum / self._n)
        self._sum, self._n = 0.0, 0
        if len(self.points) >= self.cap:
            pairs = zip(self.points[::2], self.points[1::2], strict=False)
            self.points = [(a + b) / 2 for a, b in pairs]
            self.per_point *= 2

    def timeline(self) -> MemoryTimeline | None:
        if self._n:
            self._push()
        if not self.points:
            return None
        return MemoryTimeline(interval_ms=self.interval_s * 1000 * self.per_point,
                              rss_bytes=[round(p) for p in self.points])

    def measures(self) -> dict[str, float]:
        if self.last is None:
            return {}
        return {"final_rss_bytes": float(self.last),
                "rss_area_byte_seconds": self.total * self.interval_s}


class RssSampler:
    """A thread that samples the RSS of the leaves below `root` until they are gone."""

    def __init__(self, root: int, interval_s: float):
        self.root = root
        self.series = Timeline(interval_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{root}", daemon=True)

    def _run(self) -> None:
        seen = False
        next_at = time.monotonic()
        while not self._stop.is_set():
            values = [v for pid in leaves(self.root) if (v := rss_bytes(pid)) is not None]
            if values:
                seen = True
                self.series.add(sum(values))
            elif seen:
                return  # the workload exited
            next_at += self.series.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def read_latency(trial_dir: Path, sample_every: int) -> LatencyHistogram | None:
    """The shim's files of one trial summed into one histogram (None: none written)."""
    counts: dict[str, Counter[int]] = {call: Counter() for call in LATENCY_CALLS}
    found = False
    for path in sorted(trial_dir.glob(LATENCY_FILE.replace("%p", "*"))):
        try:
            data = json.loads(path.read_text())
            for call in LATENCY_CALLS:
                for bucket, n in data.get(call, []):
                    counts[call][int(bucket)] += int(n)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        found = True
    if not found:
        return None
    return LatencyHistogram(sample_every=sample_every,
                            **{call: sorted(c.items()) for call, c in counts.items()})


def latency_of(trial_dir: Path, sample_every: int,
               measures: dict[str, float]) -> LatencyHistogram | None:
    """The trial's histogram, its percentiles into `measures`."""
    hist = read_latency(trial_dir, sample_every)
    if hist is not None:
        measures.update(latency_measures(hist))
    return hist
