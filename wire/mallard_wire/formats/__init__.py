"""Readers of other harnesses' output (docs/allocators.md, "Uploading results"): each turns
one file into `Sample`s, one per run of one case, raw (never averaged here). A file that is
not what its format says raises `FormatError` naming the place and the problem, so an
upload stores all of a file or none of it.

- `gbench`: Google Benchmark's `--benchmark_format=json` (also a program workload's
  reader, runner/mallard_runner/programs.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

Scalar = str | int | float | bool


class FormatError(ValueError):
    """A malformed file: `where` is a JSON path or line (`benchmarks[3].real_time`)."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class Sample:
    """One run of one case: a workload name, its params, and its measures."""

    workload: str
    params: dict[str, Scalar] = field(default_factory=dict)
    measures: dict[str, float] = field(default_factory=dict)
    seq: int = 0  # the run's index within its case (a repetition, a hyperfine run)
