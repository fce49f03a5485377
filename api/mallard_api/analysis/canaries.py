"""Canary sizing for calibrations: how many nanoseconds of work in every ``free`` inject a
given slowdown into a workload (the nominal size from its CPU time per operation, then the
line through two probe canaries' measured slowdowns; see ``calibrations``' module doc)."""

from __future__ import annotations

from scipy.stats import linregress  # type: ignore[import-untyped]

FREES_PER_OP: dict[str, float] = {"larson": 1.002, "rpc": 2.0}
PROBE_SIZES = (1.0, 20.0)  # nominal sizes of the two probes per workload (percent)


def canary_ns(size_pct: float, ops_per_sec: float, workload: str) -> int:
    """The canary that costs about ``size_pct`` percent of the workload's time, nominally."""
    ns_per_op = 1e9 / ops_per_sec
    return max(1, round(size_pct / 100.0 * ns_per_op / FREES_PER_OP.get(workload, 1.0)))


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """``(a, b)`` of ``slowdown = a + b x ns`` through the probes' (ns, slowdown %) points
    (least squares, scipy); None without two distinct ``ns`` or when the line does not rise."""
    if len({n for n, _ in points}) < 2:
        return None
    line = linregress([float(n) for n, _ in points], [s for _, s in points])
    b = float(line.slope)
    if b <= 0:
        return None
    return float(line.intercept), b


def fitted_ns(size_pct: float, line: tuple[float, float] | None, nominal: int) -> int:
    """The canary that the probes' line says costs ``size_pct`` (at least 1 ns)."""
    if line is None:
        return nominal
    a, b = line
    return max(1, round((size_pct - a) / b))


def head_variant(variant: str, ns: int | None) -> str:
    if ns is None:
        return variant
    return ",".join(p for p in (variant, f"canary_ns={ns}") if p)
