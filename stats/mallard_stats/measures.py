"""The measures: unit and direction of each, which are deterministic counts and which
get a verdict.

Which measures get a verdict
----------------------------
This module is the one place that says it (``measure_role``); the units and
directions are contracts section 4's.

* **primary** measures get a verdict and take part in the multiple-comparison
  correction: ``PRIMARY_MEASURES`` (``ops_per_sec``, ``max_rss_bytes``,
  ``instructions``, ``llc_misses``, and the main measure of each harness whose results
  are uploaded: ``items_per_second`` and ``real_time_ns`` of Google Benchmark,
  hyperfine's ``run_seconds``, pytest-benchmark's ``round_seconds``, Bencher's
  ``latency_ns`` and ``throughput``; what a job asked to record: ``rss_area_byte_seconds``
  of the memory timeline (its ``final_rss_bytes`` is a diagnostic, as the fragmentation
  workload's own), ``malloc_p50_ns`` ... ``free_p999_ns``
  of the latency histograms) plus any measure the request names (a comparison's
  hypothesis names one);
* every other measure is a **diagnostic** (wall/user/sys seconds, ``ns_per_op``, the
  other RSS figures, ``d1_misses``, the ``hw_*`` counters, allocator counters): its
  difference and interval are computed and shown under its cell, its verdict is
  ``DIAGNOSTIC`` and its p-value is left out of the correction;
* on an **emulated testbed** (another architecture under qemu-user, testbed field
  ``emulated``) the timing measures (``ops_per_sec``, the ``*_seconds``, ``ns_per_op``,
  ``hw_*``) are diagnostics too: emulation slows each instruction by its own factor, so a
  timing there says nothing about the real machine. The cell says why
  (``unjudged_reason``: ``emulated testbed``); counters, instruction counts and RSS are
  judged as anywhere else;
* on a testbed whose CPUs are **not isolated** (the runner's isolation check found other
  processes allowed on its pinned CPUs, results artifact ``noise_control.isolated``),
  wall-clock throughput (``ops_per_sec``) is a diagnostic: its clock runs while other
  processes use the CPU, so its noise is theirs (CV 15-26% on a shared 2-core VM, where the
  same trials' ``ops_per_cpu_sec`` had 0.5-3%, runner/README.md). ``ops_per_cpu_sec``
  (operations per CPU-second of the workload's measured phase) is judged everywhere
  (``unjudged_reason``: ``CPUs not isolated``).
"""

from __future__ import annotations

from collections.abc import Iterable

THROUGHPUT = "ops_per_sec"  # the measure a hypothesis names unless it says another
SPEEDS = ("ops_per_sec", "ops_per_cpu_sec")  # throughput, by the wall clock and by CPU time

# contracts.md section 4: measure -> (unit, higher_is_better)
MEASURES: dict[str, tuple[str, bool]] = {
    "ops_per_sec": ("ops/s", True),
    "ops_per_cpu_sec": ("ops/s", True),
    "cpu_seconds": ("s", False),
    "wall_seconds": ("s", False),
    "user_seconds": ("s", False),
    "sys_seconds": ("s", False),
    "max_rss_bytes": ("bytes", False),
    "final_rss_bytes": ("bytes", False),
    "peak_rss_bytes": ("bytes", False),
    # the runner's memory timeline (mallard_wire/timelines.py): the area under the RSS curve
    "rss_area_byte_seconds": ("byte·s", False),
    # the latency shim's sampled histograms (runner/workloads/latency.c)
    **{f"{call}_{q}_ns": ("ns", False) for call in ("malloc", "free")
       for q in ("p50", "p99", "p999")},
    "instructions": ("count", False),
    "d1_misses": ("count", False),
    "llc_misses": ("count", False),
    "hw_instructions": ("count", False),
    "hw_cycles": ("count", False),
    "hw_llc_misses": ("count", False),
    "ns_per_op": ("ns", False),
    # Google Benchmark's (mallard_wire/formats/gbench.py)
    "items_per_second": ("items/s", True),
    "bytes_per_second": ("bytes/s", True),
    "real_time_ns": ("ns", False),
    "cpu_time_ns": ("ns", False),
    # uploaded from other harnesses (mallard_wire/formats, docs/allocators.md): each
    # format's main measure has a name of its own, so a timing of another harness is
    # never mistaken for one of Mallard's runner (`wall_seconds` stays a diagnostic)
    "run_seconds": ("s", False),  # hyperfine: one run of the command
    "round_seconds": ("s", False),  # pytest-benchmark: one round, per iteration
    "latency_ns": ("ns", False),  # Bencher's `latency`
    "throughput": ("ops/s", True),  # Bencher's `throughput`
    "transfer_insert_hit_ratio": ("ratio", True),
    "transfer_remove_hit_ratio": ("ratio", True),
    # raw allocator counts (diagnostics: what explains a moved hit ratio)
    **{name: ("count", False) for name in (
        "transfer_insert_inflight_misses", "transfer_remove_inflight_misses",
        "transfer_waits", "central_refills", "pages_reclaimed")},
}

# Counted by simulation (valgrind cachegrind): the same on every run (docs/statistics.md).
DETERMINISTIC_MEASURES = frozenset({"instructions", "d1_misses", "llc_misses"})
# Get a verdict; every other measure is a diagnostic (module doc, docs/statistics.md).
PRIMARY_MEASURES = frozenset({"ops_per_sec", "ops_per_cpu_sec", "max_rss_bytes", "instructions",
                              "llc_misses", "items_per_second",
                              # the main measure of each upload format (MEASURES above)
                              "real_time_ns", "run_seconds", "round_seconds", "latency_ns",
                              "throughput",
                              # what a job asked to record (mallard_wire/timelines.py)
                              "rss_area_byte_seconds",
                              *(f"{call}_{q}_ns" for call in ("malloc", "free")
                                for q in ("p50", "p99", "p999"))})

LOWER_IS_BETTER_SUFFIXES = ("_seconds", "_bytes", "_ns", "_per_op", "_misses", "_instructions",
                            "_cycles")


def higher_is_better(measure: str, default: bool = True) -> bool:
    """Direction of a measure per contracts section 4. A name not in the table is judged by
    its unit-like suffix (times, sizes, costs per operation and misses are lower-is-better),
    else ``default``. The measures table of the database, when it says, comes first."""
    entry = MEASURES.get(measure)
    if entry:
        return entry[1]
    if measure.endswith(LOWER_IS_BETTER_SUFFIXES):
        return False
    return default


def is_deterministic(measure: str) -> bool:
    """True for valgrind's counts; never for perf's ``hw_*`` counters."""
    return measure in DETERMINISTIC_MEASURES


def is_primary(measure: str, requested: Iterable[str] = ()) -> bool:
    return measure in PRIMARY_MEASURES or measure in set(requested)


EMULATED_REASON = "emulated testbed"
NOT_ISOLATED_REASON = "CPUs not isolated"
WALL_THROUGHPUT = frozenset({THROUGHPUT})  # timed by a wall clock that others' work runs on
TIMING_SUFFIXES = ("_seconds", "_per_sec", "_per_second", "_per_cpu_sec", "_per_op",
                   "_time_ns", "_ns")
TIMINGS = frozenset({"throughput"})  # Bencher's operations per second


def is_timing(measure: str) -> bool:
    """A measure of time or speed (also perf's hardware counts, as noisy as a timing)."""
    return measure.endswith(TIMING_SUFFIXES) or measure.startswith("hw_") or measure in TIMINGS


def unjudged_reason(measure: str, emulated: bool, isolated: bool = True) -> str | None:
    """Why a measure gets no verdict on this testbed whatever the request asks (module
    doc): ``emulated testbed`` for a timing measured under emulation, ``CPUs not
    isolated`` for wall-clock throughput on CPUs others may use, else None."""
    if emulated and is_timing(measure):
        return EMULATED_REASON
    if not isolated and measure in WALL_THROUGHPUT:
        return NOT_ISOLATED_REASON
    return None


# The smallest change in peak RSS that counts (docs/statistics.md, "A floor for byte
# measures"): a byte measure's SAME band is at least this in percent of its base median.
def min_effect_abs(measure: str, min_effect_bytes: float) -> float | None:
    return min_effect_bytes if measure.endswith("_bytes") and min_effect_bytes > 0 else None


def floor_pct(min_effect_abs: float | None, base_median: float | None) -> float:
    """An absolute minimum effect in percent of the base median (0 when there is none)."""
    if not min_effect_abs or not base_median:
        return 0.0
    return 100.0 * min_effect_abs / abs(base_median)


def measure_role(measure: str, requested: Iterable[str] = ()) -> str:
    """``primary`` (gets a verdict) or ``diagnostic`` (shown, never judged)."""
    return "primary" if is_primary(measure, requested) else "diagnostic"
