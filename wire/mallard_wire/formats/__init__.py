"""Readers of other harnesses' output (docs/allocators.md, "Uploading results"): each turns
one file into `Sample`s, one per run of one case, raw (never averaged here, but where a
reader says so in its notes). A file that is not what its format says raises
`FormatError` naming the place and the problem, so an upload stores all of a file or
none of it.

- `gbench`: Google Benchmark's `--benchmark_format=json` (also a program workload's
  reader, runner/mallard_runner/programs.py);
- `hyperfine`: `hyperfine --export-json`;
- `bmf`: the Bencher Metric Format;
- `pytest-benchmark`: `pytest --benchmark-json` (raw rounds with `--benchmark-save-data`).

`READERS` maps a format's name to its reader, `read(text) -> list[Sample]` (a `Samples`).
"""

from __future__ import annotations

from collections.abc import Callable

from mallard_wire.formats import bmf, gbench, hyperfine, pytest_benchmark
from mallard_wire.formats.base import FormatError, Sample, Samples, Scalar

Reader = Callable[[str], list[Sample]]

READERS: dict[str, Reader] = {
    "gbench": gbench.read,
    "hyperfine": hyperfine.read,
    "bmf": bmf.read,
    "pytest-benchmark": pytest_benchmark.read,
}

__all__ = ["READERS", "FormatError", "Reader", "Sample", "Samples", "Scalar"]
