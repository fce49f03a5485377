"""Differential profiles from real callgrind runs: two builds of a fixture allocator that
differ in one function (`fix_free_work` does 40 more loop turns a call in the head), run
by the `tiny` workload through the executor's callgrind command; and a stripped build,
whose profile says its symbols are missing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from mallard_runner import callgrind as cg
from mallard_runner.cells import Cell, Target
from mallard_runner.executor import Executor
from mallard_runner.profiles import diff, frames, has_symtab
from mallard_wire.profiles import ProfileCase
from mallard_wire.results import AllocatorIn

from .conftest import first_cpu, reachable

FIX_C = """\
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
__attribute__((noinline)) static void fix_free_work(void *p) {{
    for (volatile int i = 0; i < {spins}; i++) {{}}
    __libc_free(p);
}}
__attribute__((visibility("default"))) void *malloc(size_t n) {{ return __libc_malloc(n); }}
__attribute__((visibility("default"))) void free(void *p) {{ if (p) fix_free_work(p); }}
"""
OPS = 2000
PARAMS: dict[str, Any] = {"ops": OPS, "threads": 1}


def build(d: Path, name: str, spins: int, strip: bool = False) -> Path:
    """lib<...>/libfix.so: every build has the library name its recipe gives it."""
    (d / name).mkdir()
    src, lib = d / name / "fix.c", d / name / "libfix.so"
    src.write_text(FIX_C.format(spins=spins))
    subprocess.run(["cc", "-O2", "-g", "-fPIC", "-shared", "-o", str(lib), str(src)],
                   check=True)
    if strip:
        subprocess.run(["strip", "--strip-all", str(lib)], check=True)
    return lib


def run(executor: Executor, tiny: Path, lib: Path, label: str) -> cg.Callgrind:
    cell = Cell(target=Target(label=label, info=AllocatorIn(name="fix"), preload=lib),
                workload="tiny", params=PARAMS, binary=tiny)
    text, why = executor.run_callgrind(cell, PARAMS, "callgrind")
    assert text is not None, why
    return cg.parse(text)


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = reachable(tmp_path_factory.mktemp("fixalloc"))
    return {"base": build(d, "base", 10), "head": build(d, "head", 50),
            "stripped": build(d, "stripped", 50, strip=True)}


@pytest.fixture
def executor(make_settings: Any, tmp_path: Path) -> Executor:
    raw = tmp_path / "raw"
    raw.mkdir()
    e = Executor(make_settings(), [first_cpu()], reachable(raw))
    if not e.valgrind:
        pytest.skip("valgrind is not installed")
    return e


def test_the_function_that_changed_tops_the_list(executor, libs, tiny_dir):
    base = run(executor, tiny_dir / "tiny", libs["base"], "base")
    head = run(executor, tiny_dir / "tiny", libs["head"], "head")
    p = diff(ProfileCase(workload="tiny", threads=1), PARAMS, base, head, "libfix.so", 1.0)
    top = p.functions[0]
    assert (top.name, top.object) == ("fix_free_work", "libfix.so")
    # `tiny` frees about OPS blocks; 40 more turns of a volatile loop, ~5 instructions each
    calls = top.head.calls
    assert OPS <= calls <= OPS + 200 and top.base.calls == calls
    per_call = (top.head.exclusive - top.base.exclusive) / calls
    assert 150 <= per_call <= 300, per_call
    assert top.head.exclusive > 3 * top.base.exclusive  # the right sign and size
    assert all(abs(f.head.exclusive - f.base.exclusive) < 0.05 * (top.head.exclusive
               - top.base.exclusive) for f in p.functions[1:])  # nothing else moved much
    assert p.head_total - p.base_total == pytest.approx(
        sum(f.head.exclusive - f.base.exclusive for f in p.functions), rel=0.01)
    assert not p.notes  # a build with symbols


def test_call_tree_frames_sum_to_the_totals(executor, libs, tiny_dir):
    base = run(executor, tiny_dir / "tiny", libs["base"], "base")
    head = run(executor, tiny_dir / "tiny", libs["head"], "head")
    fs = frames(base, head)
    assert fs[0].name == "all" and fs[0].parent == -1
    assert (fs[0].base, fs[0].head) == (base.total, head.total)
    for side in ("base", "head"):
        for i, f in enumerate(fs):
            kids = sum(getattr(c, side) for c in fs if c.parent == i)
            assert kids <= getattr(f, side)
    names = {f.name for f in fs}
    assert {"work", "free", "fix_free_work"} <= names  # the thread's work under its clone


def test_a_stripped_build_says_its_symbols_are_missing(executor, libs, tiny_dir):
    base = run(executor, tiny_dir / "tiny", libs["base"], "base")
    head = run(executor, tiny_dir / "tiny", libs["stripped"], "head")
    symtab = (has_symtab(libs["base"]), has_symtab(libs["stripped"]))
    assert symtab == (True, False)
    p = diff(ProfileCase(workload="tiny"), PARAMS, base, head, "libfix.so", 1.0, symtab)
    assert any(n.startswith("head: libfix.so has no symbol table (a stripped build?)")
               for n in p.notes), p.notes
    assert not any(n.startswith("base:") for n in p.notes)
    # fix_free_work has no name left: its instructions go to the exported `free`
    assert "fix_free_work" not in {f.name for f in p.functions if f.head.exclusive}
