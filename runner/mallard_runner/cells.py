"""The units a run is made of: a `Target` (an allocator ready to preload) and a `Cell`
(a target x workload x params), with the names and argv the executor uses for them."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from mallard_wire.recipes import Recipe, StatsHook, show_variant, variant_env
from mallard_wire.results import AllocatorIn

from .programs import Program, Scalar

# A workload's parameters, as the suite gives them and the workload's options take them.
Params = dict[str, Scalar]


# where a stats hook with `file_env` has the allocator write its counters: relative to the
# trial folder (the working directory), so every trial's environment is the same
STATS_FILE = "stats-%p.json"


@dataclass(frozen=True)
class Target:
    """An allocator ready to run: what to preload, with which environment. A built one
    has the recipe it was built by (its options and stats hook); a catalogue one none."""

    label: str
    info: AllocatorIn
    preload: Path | None = None
    recipe: Recipe | None = None

    @property
    def stats(self) -> StatsHook | None:
        return self.recipe.stats if self.recipe is not None else None

    def environment(self, counters: bool = True) -> dict[str, str]:
        """The variant's variables (mallard_wire.recipes.variant_env) and, with `counters`,
        the stats hook's options and its file variable. ValueError for a variant the
        recipe does not take."""
        if self.recipe is None:
            return {}
        hook = self.stats if counters else None
        env = variant_env(self.recipe.options, self.info.variant,
                          hook.options if hook is not None else None)
        if hook is not None and hook.file_env is not None:
            env[hook.file_env] = STATS_FILE
        return env

    @property
    def env(self) -> dict[str, str]:
        """What a timed trial runs with (counters on)."""
        return self.environment(counters=True)

    @property
    def display(self) -> str:
        """`mimalloc@a3ca0e5 arena_eager_commit=1` (built), `jemalloc` (catalogue)."""
        if self.info.commit is None:
            return self.info.name
        return f"{self.info.name}@{self.info.commit[:7]} {show_variant(self.info.variant)}"


@dataclass(frozen=True)
class Cell:
    target: Target
    workload: str
    params: Params
    binary: Path
    deterministic_params: Params | None = None  # one cachegrind run at these
    program: Program | None = None  # a program workload (programs.py); None: a built-in
    bin_dir: Path | None = None  # the program's {bin}

    @property
    def case(self) -> str:
        return f"{self.workload} " + " ".join(f"{k}={v}" for k, v in self.params.items())

    @property
    def key(self) -> str:
        return f"{self.target.label}: {self.target.display} | {self.case}"

    @property
    def slug(self) -> str:
        digest = hashlib.sha1(self.key.encode()).hexdigest()[:8]  # unique even when cut short
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.key).strip("_")[:150] + "-" + digest

    def argv(self, params: Params | None = None) -> list[str]:
        """A built-in: `<binary> --key value ...`; a program: its argv template rendered
        with the params (programs.render_item: per item, never a shell)."""
        if self.program is not None:
            assert self.bin_dir is not None
            return self.program.render(params or self.params, self.bin_dir)
        args = [str(self.binary)]
        for k, v in (params or self.params).items():
            args += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
        return args
