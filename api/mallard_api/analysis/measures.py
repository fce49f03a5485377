"""The measures: unit and direction of each, which are deterministic counts and which
get a verdict.

Which measures get a verdict
----------------------------
This module is the one place that says it (``measure_role``); the units and
directions are contracts section 4's.

* **primary** measures get a verdict and take part in the multiple-comparison
  correction: ``PRIMARY_MEASURES`` (``ops_per_sec``, ``max_rss_bytes``,
  ``instructions``, ``llc_misses``) plus any measure the request names (a comparison's
  hypothesis names one);
* every other measure is a **diagnostic** (wall/user/sys seconds, ``ns_per_op``, the
  other RSS figures, ``d1_misses``, the ``hw_*`` counters, allocator counters): its
  difference and interval are computed and shown under its cell, its verdict is
  ``DIAGNOSTIC`` and its p-value is left out of the correction.
"""

from __future__ import annotations

from collections.abc import Iterable

THROUGHPUT = "ops_per_sec"  # the measure a hypothesis names unless it says another

# contracts.md section 4: measure -> (unit, higher_is_better)
MEASURES: dict[str, tuple[str, bool]] = {
    "ops_per_sec": ("ops/s", True),
    "wall_seconds": ("s", False),
    "user_seconds": ("s", False),
    "sys_seconds": ("s", False),
    "max_rss_bytes": ("bytes", False),
    "final_rss_bytes": ("bytes", False),
    "peak_rss_bytes": ("bytes", False),
    "instructions": ("count", False),
    "d1_misses": ("count", False),
    "llc_misses": ("count", False),
    "hw_instructions": ("count", False),
    "hw_cycles": ("count", False),
    "hw_llc_misses": ("count", False),
    "ns_per_op": ("ns", False),
    "transfer_insert_hit_ratio": ("ratio", True),
    "transfer_remove_hit_ratio": ("ratio", True),
}

# Counted by simulation (valgrind cachegrind): the same on every run (stats module doc).
DETERMINISTIC_MEASURES = frozenset({"instructions", "d1_misses", "llc_misses"})
# Get a verdict; every other measure is a diagnostic (module doc).
PRIMARY_MEASURES = frozenset({"ops_per_sec", "max_rss_bytes", "instructions", "llc_misses"})

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


def measure_role(measure: str, requested: Iterable[str] = ()) -> str:
    """``primary`` (gets a verdict) or ``diagnostic`` (shown, never judged)."""
    return "primary" if is_primary(measure, requested) else "diagnostic"
