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
  ``DIAGNOSTIC`` and its p-value is left out of the correction;
* on an **emulated testbed** (another architecture under qemu-user, testbed field
  ``emulated``) the timing measures (``ops_per_sec``, the ``*_seconds``, ``ns_per_op``,
  ``hw_*``) are diagnostics too: emulation slows each instruction by its own factor, so a
  timing there says nothing about the real machine. The cell says why
  (``unjudged_reason``: ``emulated testbed``); counters, instruction counts and RSS are
  judged as anywhere else.
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
    # raw allocator counts (diagnostics: what explains a moved hit ratio)
    **{name: ("count", False) for name in (
        "transfer_insert_inflight_misses", "transfer_remove_inflight_misses",
        "transfer_waits", "central_refills", "pages_reclaimed")},
}

# Counted by simulation (valgrind cachegrind): the same on every run (docs/statistics.md).
DETERMINISTIC_MEASURES = frozenset({"instructions", "d1_misses", "llc_misses"})
# Get a verdict; every other measure is a diagnostic (module doc, docs/statistics.md).
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


EMULATED_REASON = "emulated testbed"
TIMING_SUFFIXES = ("_seconds", "_per_sec", "_per_op")


def is_timing(measure: str) -> bool:
    """A measure of time or speed (also perf's hardware counts, as noisy as a timing)."""
    return measure.endswith(TIMING_SUFFIXES) or measure.startswith("hw_")


def unjudged_reason(measure: str, emulated: bool) -> str | None:
    """Why a measure gets no verdict on this testbed whatever the request asks (module
    doc): ``emulated testbed`` for a timing measured under emulation, else None."""
    return EMULATED_REASON if emulated and is_timing(measure) else None


def measure_role(measure: str, requested: Iterable[str] = ()) -> str:
    """``primary`` (gets a verdict) or ``diagnostic`` (shown, never judged)."""
    return "primary" if is_primary(measure, requested) else "diagnostic"
