"""Building by recipe (build.py): each kind builds a fixture repository made here with the
machine's own gcc, cmake, make and autoconf; a commit's .mallard.toml wins over the
registered recipe; bad recipes fail cleanly (caps, globs, links); submodule URLs are
checked; a variant's environment reaches a real workload."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from mallard_runner.build import Builder, effective_recipe
from mallard_runner.cells import Cell, Target
from mallard_runner.executor import Executor
from mallard_runner.peers import is_shared_object
from mallard_runner.tools import BuildError
from mallard_wire.recipes import Recipe
from mallard_wire.results import AllocatorIn

from .conftest import first_cpu, git

# a malloc wrapper: the smallest allocator there is
FIXTURE_C = """#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
static unsigned long calls;
void *malloc(size_t n) { calls++; return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
unsigned long fixture_calls(void) { return calls; }
"""
SO = "$(CC) $(CFLAGS) -shared -fPIC -o $@ fixture.c"
FILES: dict[str, dict[str, str]] = {
    "cmake": {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.16)\nproject(fx C)\n"
                                "add_library(fixture SHARED fixture.c)\n"
                                "add_library(other SHARED fixture.c)\n"},
    "autotools": {"configure.ac": "AC_INIT([fixture], [1.0])\nAC_PROG_CC\n"
                                  "AC_CONFIG_FILES([Makefile])\nAC_OUTPUT\n",
                  "Makefile.in": "CC = @CC@\nCFLAGS = @CFLAGS@\n.PHONY: fixture\n"
                                 "fixture: lib/libfixture.so\n"
                                 f"lib/libfixture.so: fixture.c\n"
                                 f"\tmkdir -p lib\n\t{SO}\n",
                  "autogen.sh": "#!/bin/sh\nexec autoconf\n"},
    "make": {"Makefile": "lib/libfixture.so: fixture.c\n\tmkdir -p lib\n\t$(CC) $(EXTRA) "
                         "-shared -fPIC -o $@ fixture.c\n"},
    "command": {},
}
RECIPES = {
    "cmake": {"kind": "cmake", "source": "src", "target": "fixture", "library": "**/libfixture.so",
              "configure": ["-DCMAKE_C_FLAGS=-DFX=1"]},
    "autotools": {"kind": "autotools", "source": "src", "configure": ["CFLAGS=-O1"],
                  "target": "fixture", "library": "lib/libfixture.so"},
    "make": {"kind": "make", "source": "src", "configure": ["EXTRA=-O2"],
             "library": "lib/*.so"},
    "command": {"kind": "command", "source": "src", "library": "libfixture.so",
                "commands": [["cc", "-O2", "-shared", "-fPIC", "-o", "libfixture.so",
                              "fixture.c"]]},
}


def make_repo(root: Path, files: dict[str, str], message: str = "fixture",
              repo: Path | None = None) -> Path:
    """A git repository (made or added to) with `files` committed."""
    if repo is None:
        repo = root / "repo"
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "-q", "-b", "main", str(repo))
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if text.startswith("#!"):
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return repo


def kind_repo(root: Path, kind: str) -> Path:
    return make_repo(root, {"src/fixture.c": FIXTURE_C,
                            **{f"src/{k}": v for k, v in FILES[kind].items()}})


@pytest.mark.parametrize("kind", ["cmake", "autotools", "make", "command"])
def test_each_kind_builds_its_fixture(kind, tmp_path):
    repo = kind_repo(tmp_path, kind)
    built = Builder(tmp_path / "cache").build(str(repo), "main", Recipe.model_validate(
        RECIPES[kind]))
    lib = built.library_path
    assert lib.name == "libfixture.so" and is_shared_object(lib)
    assert lib.is_relative_to(Path(built.build_dir).resolve())
    assert built.recipe_from == "registered" and built.recipe.kind == kind
    assert built.compiler.split()[0] in ("gcc", "clang")
    flags = {"cmake": "-DFX=1", "autotools": "autotools CFLAGS=-O1", "make": "make EXTRA=-O2",
             "command": "command cc -O2"}[kind]
    assert flags in built.build_flags
    again = Builder(tmp_path / "cache").build(str(repo), built.commit, built.recipe)
    assert again.cached and again.library_sha256 == built.library_sha256


def test_the_commits_recipe_file_wins_and_old_commits_use_the_registered_one(tmp_path):
    repo = kind_repo(tmp_path, "make")
    old = git(repo, "rev-parse", "HEAD")
    make_repo(tmp_path, {".mallard.toml": "# ours\n[allocator]\nkind = 'command'\n"
                         "source = 'src'\nlibrary = 'libfromfile.so'\ncommands = [['cc', "
                         "'-shared', '-fPIC', '-o', 'libfromfile.so', 'fixture.c']]\n"},
              "our own recipe", repo)
    registered = Recipe.model_validate(RECIPES["make"])
    b = Builder(tmp_path / "cache")
    new = b.build(str(repo), "main", registered)
    assert new.recipe_from == ".mallard.toml" and new.library_path.name == "libfromfile.so"
    past = b.build(str(repo), old, registered)
    assert past.recipe_from == "registered" and past.library_path.name == "libfixture.so"
    # no registered recipe: the file alone is enough, and the old commit fails clearly
    assert b.build(str(repo), "main").library_sha256 == new.library_sha256
    with pytest.raises(BuildError, match="no recipe"):
        b.build(str(repo), old)


def test_the_build_log_says_which_recipe(tmp_path):
    repo = kind_repo(tmp_path, "make")
    sha = git(repo, "rev-parse", "HEAD")
    tree = tmp_path / "tree"
    tree.mkdir()
    log: list[str] = []
    rec, origin = effective_recipe(tree, sha, Recipe.model_validate(RECIPES["make"]), log)
    assert origin == "registered" and "recipe: the registered one" in log[-1]


@pytest.mark.parametrize("text, why", [
    ("[allocator]\nkind = 'bogus'\nlibrary = 'x.so'\n", "kind"),
    ("[allocator]\nkind = 'make'\nlibrary = '/etc/passwd'\n", "library"),
    ("[allocator\n", "line 1"),
    ("[allocator]\nkind = 'command'\nlibrary = 'x.so'\ncommands = [['sh', '-c', 'id']]\n",
     "shell"),
    ("x" * 70_000, "larger than"),
])
def test_a_malformed_recipe_file_is_a_clean_build_error(tmp_path, text, why):
    repo = make_repo(tmp_path, {"src/fixture.c": FIXTURE_C, ".mallard.toml": text})
    with pytest.raises(BuildError, match=r"\.mallard\.toml at [0-9a-f]{12} is malformed") as e:
        Builder(tmp_path / "cache").build(str(repo), "main",
                                          Recipe.model_validate(RECIPES["command"]))
    assert why in str(e.value.args[0])
    assert "$ cc" not in e.value.log  # nothing ran


def bad(tmp_path: Path, makefile: str, **recipe: object) -> BuildError:
    repo = make_repo(tmp_path, {"src/fixture.c": FIXTURE_C, "src/Makefile": makefile})
    rec = Recipe.model_validate({"kind": "make", "source": "src", "library": "*.so", **recipe})
    with pytest.raises(BuildError) as e:
        Builder(tmp_path / "cache").build(str(repo), "main", rec)
    return e.value


def _running(marker: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                found.append(proc.name)
        except OSError:
            continue
    return found


def test_a_build_that_hangs_is_killed_at_its_cap(tmp_path):
    started = time.monotonic()
    e = bad(tmp_path, "all:\n\tsleep 61.5\n", timeout_seconds=10)
    assert 9 < time.monotonic() - started < 30
    assert str(e.args[0]) == "build timed out after 10 s"
    assert "$ make" in e.log
    assert not _running("61.5")  # the whole process group went


def test_a_build_that_prints_100_mb_is_killed_and_its_log_kept_short(tmp_path):
    e = bad(tmp_path, "all:\n\tyes | head -c 100000000\n")
    assert str(e.args[0]) == f"build printed more than {32 * 1024 * 1024} bytes"
    assert len(e.log) < 500_000 and "y\ny\n" in e.log


def test_a_failing_step_and_a_missing_tool_are_build_errors(tmp_path):
    e = bad(tmp_path / "a", "all:\n\tfalse\n")
    assert "make failed at" in e.args[0] and "exit status 2" in e.log
    repo = make_repo(tmp_path, {"src/fixture.c": FIXTURE_C})  # no configure, no autogen.sh
    rec = Recipe.model_validate({"kind": "autotools", "source": "src", "library": "*.so"})
    with pytest.raises(BuildError, match="cannot run ./configure"):
        Builder(tmp_path / "cache").build(str(repo), "main", rec)


def test_library_globs_that_match_nothing_a_link_outside_or_no_library_fail(tmp_path):
    e = bad(tmp_path / "a", f"libfixture.so: fixture.c\n\t{SO}\n", library="lib/*.so")
    assert "made no library matching 'lib/*.so'" in e.args[0]
    e = bad(tmp_path / "b", "all:\n\tln -s /lib/x86_64-linux-gnu/libc.so.6 libevil.so\n")
    assert "libevil.so refused: it resolves outside the build folder" in e.args[0]
    e = bad(tmp_path / "c", "all:\n\techo not a library > libtext.so\n")
    assert "libtext.so is not an ELF shared object" in e.args[0]


def test_the_recipe_source_is_proven_inside_the_tree(tmp_path):
    repo = make_repo(tmp_path, {"src/fixture.c": FIXTURE_C})
    b = Builder(tmp_path / "cache")
    with pytest.raises(BuildError, match="is not a folder"):
        b.build(str(repo), "main", Recipe.model_validate({**RECIPES["command"],
                                                          "source": "nowhere"}))
    # the wire refuses `..`; the runner checks again (a recipe built without validation)
    evil = Recipe.model_construct(**{**Recipe.model_validate(RECIPES["command"]).__dict__,
                                     "source": "../../../../etc"})
    with pytest.raises(BuildError, match="refused"):
        b.build(str(repo), "main", evil)


# -- submodules ------------------------------------------------------------------------------
def test_submodules_are_checked_out_and_their_urls_checked(tmp_path):
    make_repo(tmp_path / "s", {"fixture.c": FIXTURE_C})
    top = make_repo(tmp_path, {"README": "top\n"})
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", "../s/repo", "vendor")
    git(top, "commit", "-qm", "vendor")
    rec = Recipe.model_validate({**RECIPES["command"], "source": "vendor", "submodules": True})
    built = Builder(tmp_path / "cache").build(str(top), "main", rec)
    assert is_shared_object(built.library_path)
    # an ssh submodule is refused before git fetches anything (a local run: file, https)
    (top / ".gitmodules").write_text('[submodule "vendor"]\n\tpath = vendor\n'
                                     '\turl = ssh://git.example.invalid/x.git\n')
    git(top, "commit", "-qam", "elsewhere")
    with pytest.raises(BuildError, match="submodule 'vendor'.*only file and https"):
        Builder(tmp_path / "cache2").build(str(top), "main", rec)


# -- a variant's environment reaches the workload ------------------------------------------
# the environment but `_PAD`: a sampled layout's pad (up to 4.5 KB) would fill the stderr tail
ENV_WORKLOAD = """#!/bin/sh
env | grep -v '^_PAD=' >&2
echo '{"operations": 1, "seconds": 0.001}'
"""


@pytest.mark.parametrize("options, variant, stats, expect", [
    ({"prefix": "MIMALLOC_"}, "x=1", {"parser": "mimalloc", "options": "show_stats=1"},
     ["MIMALLOC_X=1", "MIMALLOC_SHOW_STATS=1"]),
    ({"variable": "MALLOC_CONF"}, "a=1,b=2", {"parser": "jemalloc", "options": "stats_print=true"},
     ["MALLOC_CONF=a:1,b:2,stats_print:true"]),
])
def test_the_variant_env_of_each_style_reaches_a_real_workload(
        make_settings, tmp_path, options, variant, stats, expect):
    repo = kind_repo(tmp_path, "command")
    rec = Recipe.model_validate({**RECIPES["command"], "options": options, "stats": stats})
    built = Builder(tmp_path / "cache").build(str(repo), "main", rec)
    prog = tmp_path / "bin" / "envdump"
    prog.parent.mkdir()
    prog.write_text(ENV_WORKLOAD)
    prog.chmod(0o755)
    settings = make_settings(workloads_dir=prog.parent)
    target = Target("head", AllocatorIn(name="fixture", commit=built.commit, variant=variant),
                    built.library_path, built.recipe)
    assert target.display == f"fixture@{built.commit[:7]} {variant}"
    cell = Cell(target=target, workload="envdump", params={}, binary=prog)
    ex = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False)
    trial, _ = ex.run_trial(cell, 0, False)
    assert trial.ok, trial.stderr_tail
    for pair in expect:
        assert pair in (trial.stderr_tail or "").splitlines()
    assert f"LD_PRELOAD={built.library_path}" in (trial.stderr_tail or "")
    plain = {"MIMALLOC_X": "1"} if "prefix" in options else {"MALLOC_CONF": "a:1,b:2"}
    assert target.environment(counters=False) == plain
    assert os.environ.get("MIMALLOC_X") is None
