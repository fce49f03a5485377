"""Turns allocator selectors into runnable targets: builds mallard, finds the peers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mallard_wire.results import AllocatorIn

from .arch import Platform
from .build import Builder, BuiltAllocator
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


def resolve_targets(selectors: list[AllocatorSelector], builder: Builder, source: str | None,
                    default_ref: str | None, allocator_dir: str = "allocator",
                    target: Platform | None = None) -> Resolved:
    """Build each mallard commit once (BuildError propagates), find the peers (missing: noted)."""
    out = Resolved()
    peer_names = sorted({s.name for s in selectors if not s.is_mallard})
    peers, out.missing = find_peers(peer_names, target) if peer_names else ({}, {})
    for sel in selectors:
        if sel.is_mallard:
            ref = sel.commit or default_ref or "HEAD"
            if source is None:
                raise ValueError("mallard needs an allocator source (--allocator-source)")
            key = f"{source}@{ref}"
            if key not in out.builds:
                out.builds[key] = builder.build(source, ref, allocator_dir)
            b = out.builds[key]
            info = AllocatorIn(name="mallard", commit=b.commit, variant=sel.variant,
                                 build_flags=b.build_flags, compiler=b.compiler,
                                 library_sha256=b.library_sha256)
            out.targets.append(Target(sel.default_label(), info, b.library_path))
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
