"""pytest-benchmark's JSON (`pytest --benchmark-json FILE`, or a file `--benchmark-save`
wrote).

Each `benchmarks[]` entry is a cell: its workload is the test's `fullname` without the
parametrization (`tests/test_x.py::TestA::test_sum[10]` -> `tests.test_x.TestA.test_sum`),
its params the test's `params`. `stats.data` (always in `--benchmark-json`'s file; in a
saved one with `--benchmark-save-data`) holds each round's time per iteration, in
seconds: each round is a Sample with `round_seconds`
(lower is better, a primary measure: docs/allocators.md). A benchmark of more than
`MAX_ROUNDS` rounds (pytest-benchmark calibrates thousands of rounds for a fast
function) is kept as `MAX_ROUNDS` samples, each the median of consecutive rounds. A
file without `stats.data` has only summaries: each benchmark is then one Sample, its
`stats.median`, and the reader says so in its notes (a commit's trials are then one per
benchmark, and a change can be told only across commits).
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from mallard_wire.formats.base import (
    FormatError,
    Sample,
    Samples,
    Scalar,
    array,
    check,
    load_json,
    number,
    obj,
    param_value,
    string,
    unique_cells,
    workload_name,
)

MEASURE = "round_seconds"
MAX_ROUNDS = 100
SUMMARY_NOTE = ("pytest-benchmark: no raw rounds in the file (write it with "
                "--benchmark-json, or save with --benchmark-save-data); each benchmark "
                "without them is one sample, its stats.median")

BATCH_NOTE = (f"pytest-benchmark: a benchmark of more than {MAX_ROUNDS} rounds is kept as "
              f"{MAX_ROUNDS} samples, each the median of consecutive rounds")


def workload_of(fullname: str) -> str:
    """`tests/test_x.py::TestA::test_sum[10]` -> `tests.test_x.TestA.test_sum`."""
    base = re.sub(r"\[.*\]$", "", fullname, flags=re.DOTALL)
    base = base.replace(".py::", "::").replace("::", ".").replace("/", ".")
    return base.strip(".") or fullname


def batches(values: list[float], n: int) -> list[float]:
    """`values` as at most `n` medians of consecutive, near-equal runs of them."""
    if len(values) <= n:
        return values
    edges = [len(values) * i // n for i in range(n + 1)]
    return [statistics.median(values[a:b]) for a, b in zip(edges, edges[1:], strict=False)]


def _params(bench: dict[str, Any], where: str) -> dict[str, Scalar]:
    raw = bench.get("params")
    if raw is None:
        return {}
    return {key: param_value(value, f"{where}.params.{key}")
            for key, value in obj(raw, f"{where}.params").items()}


def _rounds(stats: dict[str, Any], where: str) -> list[float] | None:
    if stats.get("data") is None:
        return None
    data = array(stats["data"], f"{where}.stats.data")
    rounds = [number(v, f"{where}.stats.data[{i}]") for i, v in enumerate(data)]
    for i, v in enumerate(rounds):
        if v < 0:
            raise FormatError(f"{where}.stats.data[{i}]", "must not be negative")
    return rounds


def _samples(bench: Any, where: str, cells: dict[tuple[str, str], str],
             notes: list[str]) -> list[Sample]:
    """The benchmark's samples; what a reader of them should know, added to `notes`."""
    bench = obj(bench, where)
    fullname = bench.get("fullname", bench.get("name"))
    name = string(fullname, f"{where}.fullname")
    workload = workload_name(workload_of(name), f"{where}.fullname")
    params = _params(bench, where)
    unique_cells(cells, workload, params, name, f"{where}.fullname")
    stats = obj(bench.get("stats"), f"{where}.stats")
    rounds = _rounds(stats, where)
    if rounds is None:
        median = number(stats.get("median"), f"{where}.stats.median")
        if median < 0:
            raise FormatError(f"{where}.stats.median", "must not be negative")
        rounds = [median]
        if SUMMARY_NOTE not in notes:
            notes.append(SUMMARY_NOTE)
    elif len(rounds) > MAX_ROUNDS:
        if BATCH_NOTE not in notes:
            notes.append(BATCH_NOTE)
        rounds = batches(rounds, MAX_ROUNDS)
    return [check(Sample(workload, params, {MEASURE: v}, i), where)
            for i, v in enumerate(rounds)]


def read(text: str) -> list[Sample]:
    """Every round (or, without raw data, every benchmark) of a pytest-benchmark file."""
    doc = load_json(text)
    if not isinstance(doc, dict) or "benchmarks" not in doc:
        raise FormatError("benchmarks", "a pytest-benchmark JSON file has a `benchmarks` "
                          "list (run with --benchmark-json FILE)")
    benchmarks = array(doc["benchmarks"], "benchmarks")
    cells: dict[tuple[str, str], str] = {}
    samples = Samples()
    for i, bench in enumerate(benchmarks):
        samples.extend(_samples(bench, f"benchmarks[{i}]", cells, samples.notes))
    return samples
