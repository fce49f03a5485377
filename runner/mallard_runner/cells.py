"""The units a run is made of: a `Target` (an allocator ready to preload) and a `Cell`
(a target x workload x params), with the names and argv the executor uses for them."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from mallard_wire.results import AllocatorIn

from .programs import Program, Scalar
from .variants import show_variant, variant_env

# A workload's parameters, as the suite gives them and the workload's options take them.
Params = dict[str, Scalar]


@dataclass(frozen=True)
class Target:
    """An allocator ready to run: what to preload, with which environment."""

    label: str
    info: AllocatorIn
    preload: Path | None = None

    @property
    def is_mallard(self) -> bool:
        return self.info.name == "mallard"

    @property
    def env(self) -> dict[str, str]:
        return variant_env(self.info.variant) if self.is_mallard else {}

    @property
    def display(self) -> str:
        if not self.is_mallard:
            return self.info.name
        commit = f"@{self.info.commit[:7]}" if self.info.commit else ""
        return f"mallard{commit} {show_variant(self.info.variant)}"


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
