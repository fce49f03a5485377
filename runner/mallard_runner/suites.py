"""Suites are data: YAML files in runner/suites/ naming workloads, params, threads,
allocators, trials and warm-up. A param given as a list expands into one case per
value (a cross product); `threads` is a param like the others.

    name: quick
    trials: 3
    warmup: 1
    threads: [1, 2]
    allocators: [mallard:transfer=mutex, mallard:transfer=ring, glibc, jemalloc]
    baseline: glibc
    workloads:
      larson:
        params: {min: 8, max: 1000, ops: 200000, seed: 42}
        deterministic: {params: {ops: 20000, blocks: 500}, threads: [1]}
      fastpath: {params: {ops: 1000000}, threads: [1]}

`deterministic` asks for one valgrind (cachegrind) run per cell at small params (the
workload's params with these overrides): `instructions`, `d1_misses`, `llc_misses`. Only
at the listed thread counts, those whose counts were measured to repeat (runner/README.md);
a workload without the block, or a thread count not listed, gets no deterministic measures.

`emulated` overrides params on an emulated testbed (another architecture under qemu-user,
20-100x slower than native): the same workloads at sizes that keep a trial near a second.
The cells differ from the native ones, as the testbed does anyway.

`program` makes a workload any program, given as data (programs.py): an argv template,
where it comes from (the node, the measured repository, a benchmark project), how its
output is read (jsonline, regex, gbench) and its fixed `work`, which joins every cell's
params. Without it a workload is the built-in program of that name (runner/workloads/),
run as `<name> --threads N --<param> <value> ...`. Program workloads are skipped on an
emulated testbed (`skipped`): they have no cross build.

`record: [memory, latency]` makes every timed trial record its RSS over time and its
sampled malloc/free latency histograms (timelines.py); a job's `record` overrides it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import yaml
from mallard_wire.recipes import check_arg
from mallard_wire.timelines import Record
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .programs import Program
from .programs import Scalar as Scalar


class SuiteError(ValueError):
    pass


class Deterministic(BaseModel):
    """One cachegrind run per cell at small params: counts that repeat run to run."""

    model_config = ConfigDict(extra="forbid")
    params: dict[str, Scalar] = Field(default_factory=dict)  # overrides of the size params
    threads: list[int] | None = None  # thread counts whose counts repeat; None: every one
    note: str = ""  # why some thread counts are left out (measured spread)


class SuiteWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)
    threads: list[int] | None = None
    deterministic: Deterministic | None = None
    emulated: dict[str, Scalar] = Field(default_factory=dict)  # param overrides under qemu
    program: Program | None = None  # None: the built-in workload of this name

    @model_validator(mode="after")
    def _program_fits(self) -> SuiteWorkload:
        """A program's placeholders are its params (threads, params, work), and each of
        their values may stand in an argv item."""
        if self.program is None:
            return self
        known = {"threads", *self.params, *self.program.work, *self.emulated}
        unknown = sorted(self.program.placeholders() - known)
        if unknown:
            raise ValueError(f"program.argv: unknown placeholder(s) {unknown} (known: "
                             f"{sorted(known)})")
        overlap = sorted(set(self.params) & set(self.program.work))
        if overlap:
            raise ValueError(f"program.work and params both set {overlap}")
        values = [*self.program.work.items(), *self.emulated.items(), *(
            (k, x) for k, v in self.params.items() for x in (v if isinstance(v, list) else [v]))]
        for key, value in values:
            try:
                check_arg(str(value))
            except ValueError as e:
                raise ValueError(f"the value of {key} cannot stand in an argv item: {e}") from e
        return self


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    trials: int = Field(default=5, ge=1)
    warmup: int = Field(default=1, ge=0)
    seed: int = 42
    threads: list[int] = Field(default_factory=lambda: [1])
    allocators: list[str] = Field(default_factory=lambda: ["mallard", "glibc"])
    baseline: str | None = "glibc"
    record: Record = []  # what trials record besides measures (timelines.py); a job may say
    workloads: dict[str, SuiteWorkload]

    @field_validator("workloads")
    @classmethod
    def _not_empty(cls, v: dict[str, SuiteWorkload]) -> dict[str, SuiteWorkload]:
        if not v:
            raise ValueError("a suite needs at least one workload")
        return v


class Case(BaseModel):
    """One workload with concrete params (threads included)."""

    workload: str
    params: dict[str, Scalar]
    deterministic_params: dict[str, Scalar] | None = None  # the cachegrind run's, or none
    program: Program | None = None  # a program workload's (programs.py), or the built-in


SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def load_suite(name_or_path: str, suites_dir: Path, *, allow_path: bool = False) -> Suite:
    """A suite by name from `suites_dir`; a file path only with `allow_path` (local runs).

    A job names its suite, and a job is not trusted: without `allow_path` the name must be
    a plain name of a file in `suites_dir`, and an error never quotes a file's content.
    """
    if not allow_path:
        if not isinstance(name_or_path, str) or not SUITE_NAME.fullmatch(name_or_path) or \
                name_or_path.endswith((".yaml", ".yml")):
            raise SuiteError(f"suite {str(name_or_path)[:80]!r} refused: a suite is a name "
                             f"(letters, digits, _ . -) of a file in the runner's suites "
                             f"folder, never a path ({_known(suites_dir)})")
        path = suites_dir / f"{name_or_path}.yaml"
    else:
        path = Path(name_or_path)
        if not path.suffix:
            path = suites_dir / f"{name_or_path}.yaml"
    if not path.is_file():
        raise SuiteError(f"suite {name_or_path!r} not found ({_known(suites_dir)})")
    try:
        data: Any = yaml.safe_load(path.read_text())
        return Suite.model_validate(data)
    except (yaml.YAMLError, ValueError) as e:
        if not allow_path:  # the runner's own file: its errors, without the input values
            raise SuiteError(f"bad suite {path.name}: {_errors(e)}") from e
        raise SuiteError(f"bad suite {path}: {e}") from e


def _known(suites_dir: Path) -> str:
    known = ", ".join(sorted(p.stem for p in suites_dir.glob("*.yaml")))
    return f"known: {known or 'none'}"


def _errors(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
                         for err in e.errors(include_input=False))
    mark = getattr(e, "problem_mark", None)
    return f"{type(e).__name__}" + (f" at line {mark.line + 1}" if mark is not None else "")


def expand(suite: Suite, workloads: list[str] | None = None,
           threads: list[int] | None = None, emulated: bool = False) -> list[Case]:
    """The suite's cases, filtered by workload names and thread counts (`emulated`: with
    each workload's `emulated` overrides)."""
    if workloads:
        unknown = [w for w in workloads if w not in suite.workloads]
        if unknown:
            raise SuiteError(f"workloads {unknown} are not in suite {suite.name!r} "
                             f"({', '.join(suite.workloads)})")
    cases: list[Case] = []
    for name, wl in suite.workloads.items():
        if workloads and name not in workloads or emulated and wl.program is not None:
            continue  # a program workload is a native binary: none on an emulated testbed
        thread_list = wl.threads or suite.threads
        if threads:
            thread_list = [t for t in thread_list if t in threads] if wl.threads else threads
        sized = {**wl.params, **wl.emulated} if emulated else wl.params
        work = wl.program.work if wl.program is not None else {}
        keys = list(sized)
        values = [v if isinstance(v, list) else [v] for v in sized.values()]
        for t in thread_list:
            for combo in itertools.product(*values):
                params: dict[str, Scalar] = {"threads": t, **dict(zip(keys, combo, strict=True)),
                                             **work}
                det = wl.deterministic
                small = ({**params, **det.params} if det is not None and (
                    det.threads is None or t in det.threads) else None)
                cases.append(Case(workload=name, params=params, deterministic_params=small,
                                  program=wl.program))
    return cases


def skipped(suite: Suite, workloads: list[str] | None = None,
            emulated: bool = False, arch: str = "") -> list[str]:
    """The notes of the workloads `expand` leaves out on an emulated testbed."""
    if not emulated:
        return []
    return [f"workload {name} skipped: a program workload ({wl.program.origin}) is a native "
            f"binary with no cross build for {arch or 'the emulated target'}"
            for name, wl in suite.workloads.items()
            if wl.program is not None and (not workloads or name in workloads)]
