"""hyperfine's JSON export (`hyperfine --export-json FILE`).

Each `results[]` entry is a cell; each of its `times[]` (one per timed run, in seconds)
is a Sample with `run_seconds` (lower is better, a primary measure: docs/allocators.md).
hyperfine also writes `user` and `system`, but as means over the runs: Mallard keeps raw
runs, so they are stored only when a run's own value is there (a list as long as
`times`; likewise `memory_usage_byte`, newer hyperfine's peak RSS per run, as
`max_rss_bytes`).

The workload name: `command` is what `--command-name` named it, or else the command line
itself, which is no name: a command that is not a workload name already (letters, digits,
`_`, `.`, `-`) becomes one by replacing each run of other characters with `-`
(`sleep 0.1` -> `sleep-0.1`). Its `parameters` (`-P`/`-L`) are the cell's params. Two
commands that make the same name and params are refused: name them with
`--command-name`.
"""

from __future__ import annotations

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

MEASURE = "run_seconds"
PER_RUN = {"user": "user_seconds", "system": "sys_seconds", "memory_usage_byte": "max_rss_bytes"}


def _params(result: dict[str, Any], where: str) -> dict[str, Scalar]:
    raw = result.get("parameters")
    if raw is None:
        return {}
    return {key: param_value(value, f"{where}.parameters.{key}")
            for key, value in obj(raw, f"{where}.parameters").items()}


def _per_run(result: dict[str, Any], runs: int, where: str) -> dict[str, list[float]]:
    """The measures hyperfine gives per run besides the time (module doc)."""
    out: dict[str, list[float]] = {}
    for key, measure in PER_RUN.items():
        values = result.get(key)
        if isinstance(values, list):
            if len(values) != runs:
                raise FormatError(f"{where}.{key}", f"has {len(values)} values for "
                                  f"{runs} runs")
            out[measure] = [number(v, f"{where}.{key}[{i}]") for i, v in enumerate(values)]
        elif values is not None and not isinstance(values, (int, float)):
            raise FormatError(f"{where}.{key}", "must be a number or a list of numbers")
    return out


def _samples(result: Any, where: str, cells: dict[tuple[str, str], str]) -> list[Sample]:
    result = obj(result, where)
    command = string(result.get("command"), f"{where}.command")
    workload = workload_name(command, f"{where}.command")
    params = _params(result, where)
    unique_cells(cells, workload, params, command, f"{where}.command")
    times = array(result.get("times"), f"{where}.times")
    seconds = [number(t, f"{where}.times[{i}]") for i, t in enumerate(times)]
    for i, t in enumerate(seconds):
        if t < 0:
            raise FormatError(f"{where}.times[{i}]", "must not be negative")
    extra = _per_run(result, len(seconds), where)
    return [check(Sample(workload, params,
                         {MEASURE: t, **{m: values[i] for m, values in extra.items()}}, i),
                  f"{where}.times[{i}]") for i, t in enumerate(seconds)]


def read(text: str) -> list[Sample]:
    """Every timed run of every command of a hyperfine JSON export."""
    doc = load_json(text)
    if not isinstance(doc, dict) or "results" not in doc:
        raise FormatError("results", "a hyperfine JSON export has a `results` list "
                          "(run with --export-json FILE)")
    results = array(doc["results"], "results")
    cells: dict[tuple[str, str], str] = {}
    return Samples(s for i, r in enumerate(results) for s in _samples(r, f"results[{i}]", cells))
