"""Turns allocator selectors into runnable targets: builds mallard, finds the peers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mallard_wire.results import AllocatorIn

from .arch import Platform
from .build import Builder, BuiltAllocator
from .cells import Cell, Target
from .peers import find_peers
from .suites import Case
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


def make_cells(targets: list[Target], cases: list[Case], workloads_dir: Path) -> list[Cell]:
    cells: list[Cell] = []
    missing = sorted({c.workload for c in cases if not (workloads_dir / c.workload).exists()})
    if missing:
        raise FileNotFoundError(
            f"workload programs {missing} not found in {workloads_dir} (run `make workloads`, "
            f"or set MALLARD_RUNNER_WORKLOADS_DIR)")
    for case in cases:
        for target in targets:
            cells.append(Cell(target=target, workload=case.workload, params=dict(case.params),
                              binary=workloads_dir / case.workload,
                              deterministic_params=case.deterministic_params))
    return cells
