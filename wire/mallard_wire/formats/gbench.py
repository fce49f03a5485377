"""Google Benchmark's JSON output (`--benchmark_format=json` or `--benchmark_out=FILE`).

Each benchmark is a cell: `BM_Draining/64/threads:2` is workload `BM_Draining` with params
`arg0=64, threads=2` (named args, `batch:64`, keep their name). Each iteration run (one per
repetition) is a Sample with `real_time_ns`, `cpu_time_ns` (converted from `time_unit`),
`items_per_second` and `bytes_per_second` when reported, and the user counters of a
number value. Aggregate rows (mean, median, stddev, cv: `run_type: aggregate`) are left
out: Mallard keeps the raw runs and computes its own statistics. Errored runs
(`error_occurred`) raise FormatError: a benchmark that failed is not a measurement.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mallard_wire.formats.base import (
    FormatError,
    Sample,
    Samples,
    Scalar,
    check,
    load_json,
    number,
)

_TIME_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
# fields of a benchmark row that are not counters
_FIELDS = {"name", "family_index", "per_family_instance_index", "run_name", "run_type",
           "repetitions", "repetition_index", "threads", "iterations", "real_time",
           "cpu_time", "time_unit", "aggregate_name", "aggregate_unit", "label",
           "error_occurred", "error_message", "items_per_second", "bytes_per_second",
           "big_o", "rms", "complexity_n"}
_COUNTER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
_WORKLOAD = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def split_name(name: str) -> tuple[str, dict[str, Scalar]]:
    """`BM_X/64/batch:8/threads:2/real_time` -> ("BM_X", {"arg0": 64, "batch": 8,
    "threads": 2}); flags without a value (`real_time`, `process_time`) are dropped."""
    base, *parts = name.split("/")
    params: dict[str, Scalar] = {}
    positional = 0
    for part in parts:
        key, sep, value = part.partition(":")
        if not sep:
            if re.fullmatch(r"-?\d+", part):
                params[f"arg{positional}"] = int(part)
                positional += 1
            continue  # a flag such as real_time or manual_time
        params[key] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return base, params


def _number(row: dict[str, Any], key: str, where: str) -> float:
    return number(row.get(key), f"{where}.{key}")


def _sample(row: Any, where: str) -> Sample | None:
    if not isinstance(row, dict):
        raise FormatError(where, "must be an object")
    if row.get("run_type", "iteration") != "iteration":
        return None  # mean/median/stddev rows: Mallard computes its own
    name = row.get("run_name") or row.get("name")
    if not isinstance(name, str) or not name:
        raise FormatError(f"{where}.name", "must be the benchmark's name")
    if row.get("error_occurred"):
        raise FormatError(where, f"{name} failed: {str(row.get('error_message', ''))[:200]}")
    workload, params = split_name(name)
    if not _WORKLOAD.match(workload):
        raise FormatError(f"{where}.name", f"{workload[:60]!r} is not a usable name")
    unit = row.get("time_unit", "ns")
    if unit not in _TIME_UNITS:
        raise FormatError(f"{where}.time_unit", f"must be one of {', '.join(_TIME_UNITS)}")
    scale = _TIME_UNITS[unit]
    measures = {"real_time_ns": _number(row, "real_time", where) * scale,
                "cpu_time_ns": _number(row, "cpu_time", where) * scale}
    for key in ("items_per_second", "bytes_per_second"):
        if key in row:
            measures[key] = _number(row, key, where)
    for key, value in row.items():
        if key not in _FIELDS and _COUNTER.match(key) and isinstance(value, (int, float)) \
                and not isinstance(value, bool) and math.isfinite(value):
            measures[key] = float(value)
    seq = row.get("repetition_index", 0)
    seq = seq if isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq < 2**31 else 0
    return check(Sample(workload, params, measures, seq), where)


def read(text: str) -> list[Sample]:
    """Every iteration run of a Google Benchmark JSON document."""
    doc = load_json(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise FormatError("benchmarks", "a Google Benchmark JSON document has a "
                          "`benchmarks` list (run with --benchmark_format=json)")
    samples = [s for i, row in enumerate(doc["benchmarks"])
               if (s := _sample(row, f"benchmarks[{i}]")) is not None]
    if not samples:
        raise FormatError("benchmarks", "has no iteration runs")
    return Samples(samples)
