"""Turns allocator selectors into runnable targets: builds each built side by its recipe,
finds the catalogue's (peers.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mallard_wire.results import AllocatorIn

from .arch import Platform
from .build import Builder, BuiltAllocator, recipe_hash
from .cells import Cell, Target
from .peers import find_peers
from .programs import ProgramError
from .suites import Case, SuiteError
from .variants import AllocatorSelector


@dataclass
class Resolved:
    targets: list[Target] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    builds: dict[str, BuiltAllocator] = field(default_factory=dict)


def _built(sel: AllocatorSelector, builder: Builder, source: str | None,
           default_ref: str | None, out: Resolved) -> Target:
    """The target of a built side: its source at its commit, built once per recipe."""
    src = sel.source or source
    if src is None:
        raise ValueError(f"{sel.name} is built from source: it needs an allocator source "
                         f"(--allocator-source)")
    ref = sel.commit or default_ref or "HEAD"
    key = f"{src}@{ref}#{recipe_hash(sel.recipe) if sel.recipe is not None else '-'}"
    if key not in out.builds:
        out.builds[key] = builder.build(src, ref, sel.recipe)
    b = out.builds[key]
    info = AllocatorIn(name=sel.name, commit=b.commit, variant=sel.variant,
                       build_flags=b.build_flags, compiler=b.compiler,
                       library_sha256=b.library_sha256)
    t = Target(sel.default_label(), info, b.library_path, b.recipe)
    try:
        t.environment(counters=True)  # the variant's keys are the recipe's
    except ValueError as e:
        raise ValueError(f"{sel.name}: variant {sel.variant!r}: {e}") from e
    return t


def resolve_targets(selectors: list[AllocatorSelector], builder: Builder, source: str | None,
                    default_ref: str | None, target: Platform | None = None,
                    catalogue: Mapping[str, Path] | None = None) -> Resolved:
    """Build each built side once per source, commit and recipe (BuildError propagates),
    find the catalogue's (`catalogue`: the operator's entries; missing ones: noted)."""
    out = Resolved()
    names = sorted({s.name for s in selectors if not s.built})
    peers, out.missing = find_peers(names, target, catalogue) if names else ({}, {})
    for sel in selectors:
        if sel.built:
            out.targets.append(_built(sel, builder, source, default_ref, out))
        elif sel.name in peers:
            p = peers[sel.name]
            info = AllocatorIn(name=p.name, library_sha256=p.sha256)
            out.targets.append(Target(sel.default_label(), info, p.library))
    return out


def make_cells(targets: list[Target], cases: list[Case], workloads_dir: Path,
               bins: dict[str, Path] | None = None) -> list[Cell]:
    """One cell per case and target. A built-in workload is `workloads_dir/<name>`; a
    program workload's `{bin}` is `bins[<name>]` (program_builds.py), and each cell's argv
    is rendered here once, so a template that cannot render fails before any trial."""
    bins = bins or {}
    cells: list[Cell] = []
    missing = sorted({c.workload for c in cases if c.program is None and
                      not (workloads_dir / c.workload).exists()} |
                     {c.workload for c in cases if c.program is not None and
                      c.workload not in bins})
    if missing:
        raise FileNotFoundError(
            f"workload programs {missing} not found in {workloads_dir} (run `make workloads`, "
            f"or set MALLARD_RUNNER_WORKLOADS_DIR)")
    for case in cases:
        bin_dir = bins.get(case.workload) if case.program is not None else None
        binary = (case.program.binary(bin_dir) if case.program is not None and bin_dir
                  else workloads_dir / case.workload)
        for target in targets:
            cell = Cell(target=target, workload=case.workload, params=dict(case.params),
                        binary=binary, deterministic_params=case.deterministic_params,
                        program=case.program, bin_dir=bin_dir)
            try:
                cell.argv()
                if cell.deterministic_params is not None:
                    cell.argv(cell.deterministic_params)
            except ProgramError as e:
                raise SuiteError(f"workload {case.workload}: {e}") from e
            cells.append(cell)
    return cells
