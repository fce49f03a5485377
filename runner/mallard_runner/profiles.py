"""A profile job: callgrind of base and head at a case's deterministic params, turned into
one differential profile per case (`ProfileIn`): the totals, per function exclusive and
inclusive instructions and calls on each side (the functions that moved most first), the
merged call tree of the differential flame graph, and a note when the allocator's library
has no symbols. It runs after a comparison settled (the API queues it), never before the
verdict: its cost is two callgrind runs per case, ~50x the program's native time."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from mallard_wire.profiles import (
    MAX_FRAMES,
    MAX_FUNCTIONS,
    Frame,
    FunctionDiff,
    ProfileCase,
    ProfileIn,
    SideCost,
)
from mallard_wire.results import ResultsIn

from . import callgrind as cg
from .cells import Cell, Params
from .executor import Cancelled
from .runs import Prepared
from .suites import SuiteError
from .testbed import collect

SHT_SYMTAB = 2
MISSING_SYMBOLS_SHARE = 0.05  # of the library's own instructions in functions without a name


def functions(base: cg.Callgrind, head: cg.Callgrind) -> list[FunctionDiff]:
    """Every function of either side, by how much its own instructions moved (then its
    inclusive ones), largest first, at most MAX_FUNCTIONS."""
    b_inc, h_inc = base.inclusive_all(), head.inclusive_all()
    keys = set(b_inc) | set(h_inc)

    def side(run: cg.Callgrind, inc: dict[cg.Key, int], k: cg.Key) -> SideCost:
        return SideCost(exclusive=run.exclusive.get(k, 0), inclusive=inc.get(k, 0),
                        calls=run.calls.get(k, 0))

    rows = [FunctionDiff(name=k[0][:200], object=k[1][:200], base=side(base, b_inc, k),
                         head=side(head, h_inc, k)) for k in keys]
    rows.sort(key=lambda r: (-abs(r.head.exclusive - r.base.exclusive),
                             -abs(r.head.inclusive - r.base.inclusive), r.name))
    return rows[:MAX_FUNCTIONS]


def frames(base: cg.Callgrind, head: cg.Callgrind) -> list[Frame]:
    """The two call trees merged by path: a frame per path of either, parents first."""
    b, h = cg.tree(base, max_frames=MAX_FRAMES // 2), cg.tree(head, max_frames=MAX_FRAMES // 2)
    paths = sorted(set(b) | set(h), key=lambda p: (len(p), -h.get(p, 0), -b.get(p, 0), p))
    index: dict[tuple[str, ...], int] = {}
    out: list[Frame] = []
    for p in paths:
        parent = index.get(p[:-1], -1) if len(p) > 1 else -1
        if len(p) > 1 and parent < 0:
            continue  # its parent was cut on both sides
        index[p] = len(out)
        out.append(Frame(name=p[-1][:200], parent=parent, base=b.get(p, 0), head=h.get(p, 0)))
    return out[:MAX_FRAMES]


def has_symtab(path: Path) -> bool:
    """Whether an ELF file keeps its symbol table (`.symtab`, which `strip` removes; the
    dynamic symbols of exported functions stay either way). True when it cannot tell."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return True
            end = "<" if head[5] == 1 else ">"
            wide = head[4] == 2
            shoff = struct.unpack_from(end + ("Q" if wide else "I"), head,
                                       0x28 if wide else 0x20)[0]
            size, count = struct.unpack_from(end + "HH", head, 0x3A if wide else 0x2E)
            for i in range(count):
                f.seek(shoff + i * size + 4)
                if struct.unpack(end + "I", f.read(4))[0] == SHT_SYMTAB:
                    return True
    except (OSError, struct.error):
        return True
    return False


def symbol_notes(label: str, run: cg.Callgrind, library: str, symtab: bool = True
                 ) -> list[str]:
    """A note when the allocator's library has no symbol table or no names for much of its
    own work."""
    own = {k: v for k, v in run.exclusive.items() if k[1] == library}
    total = sum(own.values())
    if not library or total == 0:
        return [f"{label}: no instructions in {library or 'the allocator library'}"]
    if not symtab:
        return [f"{label}: {library} has no symbol table (a stripped build?): its internal "
                "functions are charged to an exported one or show as addresses; build it "
                "with symbols (not stripped) to name them"]
    unnamed = sum(v for k, v in own.items() if cg.UNNAMED.match(k[0]))
    if unnamed > MISSING_SYMBOLS_SHARE * total:
        return [f"{label}: {library} has no symbols for {100 * unnamed / total:.0f}% of its "
                "instructions (a stripped build?): those functions show as addresses; "
                "build it with symbols (not stripped) to name them"]
    return []


def diff(case: ProfileCase, params: Params, base: cg.Callgrind, head: cg.Callgrind,
         library: str, seconds: float, symtab: tuple[bool, bool] = (True, True)) -> ProfileIn:
    """The profile of a case; `symtab`: whether each side's library has its symbol table."""
    notes = symbol_notes("base", base, library, symtab[0]) + \
        symbol_notes("head", head, library, symtab[1])
    return ProfileIn(case=case, params=dict(params), base_total=base.total,
                     head_total=head.total, functions=functions(base, head),
                     frames=frames(base, head), notes=list(dict.fromkeys(notes)),
                     seconds=round(seconds, 3), library=library[:200])


def case_cells(cells: list[Cell], case: ProfileCase) -> tuple[Cell, Cell, Params]:
    """The base and head cells of a case and the params callgrind runs them at."""
    mine = [c for c in cells if c.workload == case.workload and (
        case.threads is None or c.params.get("threads") == case.threads)]
    sides = {c.target.label: c for c in mine}
    if "base" not in sides or "head" not in sides:
        raise SuiteError(f"no base and head cells of {case.workload} threads={case.threads} "
                         "in the job's suite")
    head = sides["head"]
    small = head.deterministic_params
    if small is None and not case.params:
        raise SuiteError(f"{case.workload} has no deterministic params in its suite: a "
                         "profile request must name its params")
    params: Params = {**(small or head.params), **case.params}
    return sides["base"], head, params


def profile(prep: Prepared, case: ProfileCase, seq: int) -> ProfileIn:
    base_cell, head_cell, params = case_cells(prep.cells, case)
    started = time.monotonic()
    runs = []
    for cell in (base_cell, head_cell):
        if prep.executor.cancel.is_set():
            raise Cancelled("cancelled")
        text, why = prep.executor.run_callgrind(cell, params, f"callgrind-{seq}")
        if text is None:
            raise RuntimeError(f"{cell.target.label} {case.workload}: {why}")
        runs.append(cg.parse(text))
    preload = head_cell.target.preload
    library = preload.resolve().name if preload is not None else ""
    symtab = tuple(c.target.preload is None or has_symtab(c.target.preload)
                   for c in (base_cell, head_cell))
    return diff(case, params, runs[0], runs[1], library, time.monotonic() - started,
                (symtab[0], symtab[1]))


def run_profiles(prep: Prepared, cases: list[ProfileCase]) -> ResultsIn:
    """A profile job's results: its profiles, no trials."""
    req = prep.request
    out = [profile(prep, case, i) for i, case in enumerate(cases)]
    compilers = {b.compiler for b in prep.resolved.builds.values()}
    testbed = collect(req.cpus, compilers.pop() if len(compilers) == 1 else None,
                      noise_control=prep.executor.commands.noise_control,
                      target=prep.executor.target)
    return ResultsIn(job_id=req.job_id, attempt=req.attempt, runner_id=req.runner_id,
                     project=req.project, branch=req.branch, testbed=testbed, trials=[],
                     profiles=out)
