"""The suites a job may name, and their workloads (a variant's keys are its recipe's
options, `mallard_wire.recipes`; a peer is a catalogue name or a project at a ref,
`peers.py`; the runner's catalogue decides which system allocators a node has).

Whatever a request names here ends up on a runner (a suite file to read), so it is
checked against these sets at the API, and a request naming anything else is a 422
naming the field.

- Suites: the runner's suite files, `<suites_dir>/<name>.yaml` (`MALLARD_SUITES_DIR`, by
  default the repository's `runner/suites`), read when the app starts and again when a
  request names a suite not seen yet (a file added since); a job's suite is one of
  their names and its workloads are among that suite's workloads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class CatalogError(ValueError):
    """The suites folder cannot be read; the message says why (start-up stops)."""


@dataclass(frozen=True)
class Shape:
    """What a suite runs where a job names nothing more: its trials per cell and, per
    workload, its param combinations (a list value is a cross product) and thread counts
    (the workload's own list, else the suite's)."""

    trials: int
    combinations: dict[str, int]
    thread_counts: dict[str, int]


@dataclass
class Catalog:
    """Suite name -> the workloads it runs (and the shape of each suite)."""

    suites: dict[str, frozenset[str]]
    folder: Path | None = None
    shapes: dict[str, Shape] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path) -> Catalog:
        suites, shapes = cls._read(Path(folder))
        return cls(suites, Path(folder), shapes)

    def _reload(self) -> None:
        if self.folder is not None:
            try:
                self.suites, self.shapes = self._read(self.folder)
            except CatalogError:
                pass  # keep what was read at start

    @staticmethod
    def _read(folder: Path) -> tuple[dict[str, frozenset[str]], dict[str, Shape]]:
        if not folder.is_dir():
            raise CatalogError(f"MALLARD_SUITES_DIR: {folder} is not a folder of suite files")
        suites: dict[str, frozenset[str]] = {}
        shapes: dict[str, Shape] = {}
        for path in sorted(folder.glob("*.yaml")):
            try:
                data = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise CatalogError(f"MALLARD_SUITES_DIR: cannot read {path}: {exc}") from exc
            workloads = data.get("workloads") if isinstance(data, dict) else None
            if not isinstance(workloads, dict) or not workloads:
                raise CatalogError(f"MALLARD_SUITES_DIR: {path} names no workloads")
            suites[path.stem] = frozenset(str(w) for w in workloads)
            shapes[path.stem] = _shape(data, workloads)
        if not suites:
            raise CatalogError(f"MALLARD_SUITES_DIR: no *.yaml suite in {folder}")
        return suites, shapes

    def trials_requested(self, suite: str, workloads: list[str] | None,
                         threads: list[int] | None, trials: int | None,
                         allocators: int) -> int:
        """The timed trials a job of `suite` asks for: trials per cell x cells x allocators,
        the suite's own values where the job names none (a thread list the job names
        counts in full: an upper bound where a workload runs fewer)."""
        shape = self.shapes.get(suite, Shape(5, {}, {}))
        names = workloads or sorted(self.suites.get(suite, ()))
        cells = sum(shape.combinations.get(w, 1)
                    * (len(threads) if threads else shape.thread_counts.get(w, 1))
                    for w in names)
        return (shape.trials if trials is None else trials) * cells * allocators

    def check_suite(self, name: str) -> str | None:
        """None when the suite is known (read again once if not), else the reason."""
        if name not in self.suites:
            self._reload()
        if name in self.suites:
            return None
        return f"unknown suite {name!r}; known: {', '.join(sorted(self.suites))}"

    def check_workloads(self, suite: str, workloads: list[str] | None) -> str | None:
        """None when every workload is in the suite, else the reason."""
        if suite not in self.suites:
            self._reload()
        unknown = sorted(set(workloads or ()) - self.suites.get(suite, frozenset()))
        if not unknown:
            return None
        return (f"workload(s) {', '.join(unknown)} not in suite {suite!r}; it runs "
                f"{', '.join(sorted(self.suites.get(suite, ())))}")


def _count(value: object) -> int | None:
    return len(value) if isinstance(value, list) and value else None


def _combinations(spec: object) -> int:
    """The param combinations of one workload (a list value is a cross product)."""
    params = spec.get("params") if isinstance(spec, dict) else None
    return math.prod(_count(v) or 1 for v in params.values()) if isinstance(params, dict) else 1


def _shape(data: dict[str, object], workloads: dict[str, object]) -> Shape:
    trials = data.get("trials")
    default = _count(data.get("threads")) or 1
    specs = {str(w): spec if isinstance(spec, dict) else {} for w, spec in workloads.items()}
    return Shape(trials if isinstance(trials, int) and trials > 0 else 5,
                 {w: _combinations(spec) for w, spec in specs.items()},
                 {w: _count(spec.get("threads")) or default for w, spec in specs.items()})
