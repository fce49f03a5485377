"""Program workloads (issue 28.3): a suite's workload may be any program, given as data.

    workloads:
      draining:
        program:
          argv: ["{bin}/bench_draining", "--iterations={iterations}", "--benchmark_format=json",
                 "--benchmark_filter=BM_Draining/{batch}/threads:{threads}"]
          from: node          # node | measured | project
          reader: gbench      # jsonline | regex | gbench
          work: {iterations: 20000}
        params: {batch: [8, 64]}

- `argv` is a template: `{name}` is replaced, per item and never through a shell, by the
  cell's param `name` (`threads`, a `params` key or a `work` key); `{bin}` by the folder the
  program comes from, only at the start of an item or after `=`, `,` or `:`, and followed
  by `/` or the end. Each rendered item must pass `mallard_wire.recipes.check_arg` with
  `{bin}` counted as a relative folder (no shell syntax, no `..`, no other absolute path),
  so a rendered path can only name a file inside `{bin}`. `argv[0]` is `{bin}/<path>`.
- `from`: `node`, a program installed in the runner's programs folder (setting
  `programs_dir`, default its workloads folder); `measured`, built by `build` from the
  measured repository's tree at the job's commit; `project`, built by `build` from `repo`
  at `ref` (a benchmark project's repository). Builds run as the work user (sandbox.py).
- `reader`: `jsonline`, the last line of stdout is a JSON object (the built-in workloads'
  `operations`/`seconds` -> `ops_per_sec`, every other number a measure); `regex`, each
  measure of `measures` is the one group of its regex's first match on stdout (no match: a
  failed trial naming the measure); `gbench`, Google Benchmark's JSON
  (`mallard_wire.formats.gbench`): one trial must print exactly ONE benchmark run (filter
  with `--benchmark_filter` built from the cell's params, one cell per benchmark), its
  `items_per_second`, `real_time_ns`, `cpu_time_ns` and counters are the measures; an
  errored benchmark is a failed trial.
  `time`, the program prints no measure of its own (many standard benchmarks print only
  what they computed): its cost is the run, `run_seconds` (the timed run's wall time).
  Every program's trial also has `cpu_seconds` (user + system of the process) and
  `max_rss_bytes` (its peak RSS, by GNU time) unless it prints them. `scale` multiplies a
  regex measure (a program printing millions per second, or a count over a fixed time).
- `stdin`: a file inside `{bin}` fed to the program's standard input (default none).
- `work`: the program's fixed work, added to every cell's params (so a cell says how much
  work it did) and usable in `argv`.

On an emulated testbed a program workload is skipped (a note says so): its program is a
native binary of the node, and there is no cross build of it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from mallard_wire.fields import InModel, RelativePath
from mallard_wire.formats import FormatError, gbench
from mallard_wire.recipes import Arg, Argv, check_arg
from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

Scalar = int | float | str | bool
ParamValues = dict[str, Scalar]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
BIN = "bin"  # the placeholder of the program's folder
# where `{bin}` may stand in an item: at its start or after = , : ; then / or the end
_BIN_USE = re.compile(r"(?:^|(?<=[=,:]))\{bin\}(?=/|$|[=,:])")
MeasureName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
Template = Annotated[str, StringConstraints(min_length=1, max_length=500)]
TargetName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}$")]


class ProgramError(ValueError):
    """A program workload that cannot be rendered, built or read."""


def show(value: Scalar) -> str:
    """A param as an argv item shows it (booleans in lower case, as the workloads read)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def render_item(template: str, values: ParamValues, bin_dir: Path | None) -> str:
    """One argv item: placeholders replaced, checked with `check_arg` ({bin} as a relative
    folder), then `{bin}` replaced by `bin_dir` (a rendered path stays inside it)."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == BIN:
            return m.group(0)
        if name not in values:
            raise ProgramError(f"argv item {template[:60]!r}: unknown placeholder {{{name}}} "
                               f"(known: {', '.join(sorted([BIN, *values]))})")
        return show(values[name])

    text = _PLACEHOLDER.sub(sub, template)
    relative = _BIN_USE.sub(BIN, text)
    try:
        check_arg(relative)
    except ValueError as e:
        raise ProgramError(f"argv item {template[:60]!r} renders to {relative[:80]!r}, which "
                           f"{e}") from e
    if bin_dir is None:
        return relative
    return _BIN_USE.sub(lambda _m: str(bin_dir), text)


class ProgramBuild(InModel):
    """How a program is built in a tree (as the work user, in a fresh folder):

    - `cmake`: configure `source` into the build folder with `configure`, build `targets`
      (all when empty); `{bin}` is `bin` inside the build folder (default its top);
    - `command`: copy `source` into the build folder, run each argv of `commands` there;
      `{bin}` is `bin` inside it."""

    kind: Literal["cmake", "command"]
    source: RelativePath | None = None
    configure: Annotated[list[Arg], Field(max_length=100)] = []
    targets: Annotated[list[TargetName], Field(max_length=20)] = []
    commands: Annotated[list[Argv], Field(max_length=20)] = []
    bin: RelativePath | None = None
    timeout_seconds: Annotated[int, Field(ge=10, le=3 * 3600)] = 1800

    @model_validator(mode="after")
    def _kind_fields(self) -> ProgramBuild:
        if self.kind == "command":
            if not self.commands:
                raise ValueError("a command build needs commands (argv lists)")
            for argv in self.commands:
                if not re.fullmatch(r"(\./)?[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,199}", argv[0]) or \
                        argv[0].rsplit("/", 1)[-1] in {"sh", "bash", "dash", "zsh", "env",
                                                       "eval", "xargs"}:
                    raise ValueError(f"commands: {argv[0][:60]!r} must be a program name or "
                                     f"a path inside the tree, never a shell")
        elif self.commands:
            raise ValueError("commands are for kind=command, not cmake")
        return self


class Program(InModel):
    """A program workload (module doc)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    argv: Annotated[list[Template], Field(min_length=1, max_length=100)]
    origin: Literal["node", "measured", "project"] = Field(default="node", alias="from")
    repo: Annotated[str, StringConstraints(min_length=1, max_length=2000)] | None = None
    ref: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    build: ProgramBuild | None = None
    reader: Literal["jsonline", "regex", "gbench", "time"] = "jsonline"
    measures: Annotated[dict[MeasureName, str], Field(max_length=24)] = {}
    scale: Annotated[dict[MeasureName, Annotated[float, Field(gt=0, allow_inf_nan=False)]],
                     Field(max_length=24)] = {}
    stdin: Template | None = None
    work: dict[str, Scalar] = {}

    @field_validator("argv")
    @classmethod
    def _templates(cls, v: list[str]) -> list[str]:
        if not re.fullmatch(r"\{bin\}/[A-Za-z0-9_][A-Za-z0-9_.+/-]*", v[0]):
            raise ValueError("argv[0] must be {bin}/<program path>: the program comes from "
                             "its folder, never from elsewhere on the node")
        for item in v:
            shape = _PLACEHOLDER.sub(lambda m: m.group(0) if m.group(1) == BIN else "x", item)
            if "{bin}" in _BIN_USE.sub("", shape):
                raise ValueError(f"argv item {item[:60]!r}: {{bin}} only at the start of an "
                                 f"item or after = , : and followed by / or the end")
            render_item(shape, {}, None)  # the shape: no shell syntax, no .., no /abs
        return v

    @field_validator("stdin")
    @classmethod
    def _stdin_in_bin(cls, v: str | None) -> str | None:
        if v is not None:
            if not re.fullmatch(r"\{bin\}/[A-Za-z0-9_][A-Za-z0-9_.+/-]*", v):
                raise ValueError("stdin must be {bin}/<file>: a file of the program's folder")
            render_item(v, {}, None)
        return v

    @field_validator("measures")
    @classmethod
    def _one_group(cls, v: dict[str, str]) -> dict[str, str]:
        for name, pattern in v.items():
            try:
                groups = re.compile(pattern).groups
            except re.error as e:
                raise ValueError(f"measures.{name}: not a regular expression ({e})") from e
            if groups != 1:
                raise ValueError(f"measures.{name}: the regex must have exactly one group "
                                 f"(the number), it has {groups}")
        return v

    @model_validator(mode="after")
    def _fields_of_source(self) -> Program:
        if self.reader == "regex" and not self.measures:
            raise ValueError("reader regex needs measures (measure -> regex with one group)")
        if self.reader != "regex" and self.measures:
            raise ValueError(f"measures (regexes) are for reader regex, not {self.reader}")
        unscaled = sorted(set(self.scale) - set(self.measures))
        if unscaled:
            raise ValueError(f"scale names {unscaled}, which are not measures of the regex "
                             f"reader")
        if self.origin == "node" and (self.build or self.repo or self.ref):
            raise ValueError("a program from the node has no build, repo or ref")
        if self.origin != "node" and self.build is None:
            raise ValueError(f"a program from {self.origin} needs a build")
        if self.origin == "project" and not (self.repo and self.ref):
            raise ValueError("a program from a project needs its repo and ref")
        if self.origin == "measured" and (self.repo or self.ref):
            raise ValueError("a program from the measured repository takes the job's "
                             "repository and commit: no repo or ref")
        for key in self.work:
            if key == BIN:
                raise ValueError("work: 'bin' is the program folder's placeholder")
        return self

    def placeholders(self) -> set[str]:
        return {m.group(1) for item in self.argv for m in _PLACEHOLDER.finditer(item)} - {BIN}

    def render(self, values: ParamValues, bin_dir: Path) -> list[str]:
        return [render_item(t, values, bin_dir) for t in self.argv]

    def stdin_path(self, bin_dir: Path) -> Path | None:
        return None if self.stdin is None else Path(render_item(self.stdin, {}, bin_dir))

    def binary(self, bin_dir: Path) -> Path:
        return bin_dir / self.argv[0].removeprefix("{bin}/")


# -- readers ------------------------------------------------------------------------------
def read_regex(measures: dict[str, str], stdout: str,
               scale: dict[str, float] | None = None) -> dict[str, float]:
    """Each measure from its regex's one group on stdout (times its `scale`); ProgramError
    names a missing one."""
    out: dict[str, float] = {}
    for name, pattern in measures.items():
        m = re.search(pattern, stdout, re.MULTILINE)
        if m is None:
            raise ProgramError(f"measure {name}: its regex {pattern[:80]!r} matched nothing "
                               f"on stdout")
        try:
            out[name] = float(m.group(1)) * (scale or {}).get(name, 1.0)
        except (TypeError, ValueError) as e:
            raise ProgramError(f"measure {name}: matched {str(m.group(1))[:40]!r}, not a "
                               f"number") from e
    return out


def read_gbench(stdout: str) -> dict[str, float]:
    """The one benchmark run of a trial's Google Benchmark JSON; ProgramError otherwise."""
    try:
        samples = gbench.read(stdout)
    except FormatError as e:
        raise ProgramError(f"Google Benchmark output: {e}") from e
    if len(samples) != 1:
        names = sorted({f"{s.workload} {s.params}" for s in samples})
        raise ProgramError(f"the program printed {len(samples)} benchmark runs "
                           f"({'; '.join(names)[:300]}): filter to one per cell "
                           f"(--benchmark_filter from the cell's params, "
                           f"--benchmark_repetitions=1)")
    return dict(samples[0].measures)
