"""The Bencher Metric Format (BMF JSON): `{benchmark: {measure: {value, lower_value,
upper_value}}}`, as Bencher's adapters and any harness that speaks it write.

Each benchmark is a cell (its name made a workload name as hyperfine's are: each run of
characters other than letters, digits, `_`, `.` and `-` becomes `-`) and one Sample holding
its measures' `value`s. Bencher's built-in measures get Mallard names that say their unit
and so their direction: `latency` (nanoseconds) -> `latency_ns` (lower is better, a primary
measure), `throughput` (operations per second) -> `throughput` (higher is better, primary),
`file-size` -> `file_size_bytes`, `build-time` -> `build_time_seconds`; any other measure
keeps its name with `-` and other characters made `_` (`l1-hits` -> `l1_hits`). A name
ending in `_seconds`, `_bytes`, `_ns` (and the other suffixes of
stats/mallard_stats/measures.py) is lower-is-better, any other higher-is-better: name a
custom measure accordingly. `lower_value` and `upper_value` (a range Bencher draws) are
checked, not stored: a BMF file is one run, its value the sample.
"""

from __future__ import annotations

import json

from mallard_wire.formats.base import (
    FormatError,
    Sample,
    Samples,
    check,
    load_json,
    measure_name,
    number,
    obj,
    unique_cells,
    workload_name,
)

MEASURES = {"latency": "latency_ns", "throughput": "throughput",
            "file-size": "file_size_bytes", "build-time": "build_time_seconds"}


def _measures(benchmark: str, raw: object, where: str) -> dict[str, float]:
    measures = obj(raw, where)
    if not measures:
        raise FormatError(where, f"benchmark {benchmark[:60]!r} has no measure")
    out: dict[str, float] = {}
    names: dict[str, str] = {}
    for slug, metric in measures.items():
        at = f"{where}.{slug}"
        name = MEASURES.get(slug) or measure_name(slug, at)
        if names.setdefault(name, slug) != slug:
            raise FormatError(at, f"{slug!r} and {names[name]!r} both make measure {name!r}")
        metric = obj(metric, at)
        if "value" not in metric:
            raise FormatError(f"{at}.value", "missing: a metric has a `value`")
        out[name] = number(metric["value"], f"{at}.value")
        for bound in ("lower_value", "upper_value"):
            if metric.get(bound) is not None:
                number(metric[bound], f"{at}.{bound}")
    return out


def read(text: str) -> list[Sample]:
    """One Sample per benchmark of a BMF document."""
    doc = load_json(text)
    if not isinstance(doc, dict):
        raise FormatError("document", "a BMF document is an object of benchmarks "
                          "({\"name\": {\"latency\": {\"value\": ...}}})")
    if not doc:
        raise FormatError("document", "has no benchmark")
    cells: dict[tuple[str, str], str] = {}
    samples = Samples()
    for benchmark, raw in doc.items():
        where = json.dumps(benchmark if len(benchmark) <= 60 else benchmark[:57] + "...")
        workload = workload_name(benchmark, where)
        unique_cells(cells, workload, {}, benchmark, where)
        samples.append(check(Sample(workload, {}, _measures(benchmark, raw, where)), where))
    return samples
