"""Fixtures for the runner's tests: real programs built from runner/tests/c/.

- `tiny_dir`: a workloads directory holding `tiny` (a small fixed-work C
  program that follows the workload contract and prints its allowed CPUs);
- `crash_lib`: a preload library that raises SIGSEGV on the Nth malloc;
- `toy_repo`: a throwaway git repo whose allocator/ builds a toy
  libmallard.so (counts calls, writes MALLARD_STATS_FILE) on branch `main`,
  and does not compile on branch `broken`;
- `make_settings`: RunnerSettings pointing at those, with state in tmp_path.

Run as root, the runner drops builds and workloads to its work user (sandbox.py), which
must reach what the tests make under pytest's 0700 folders: every temporary folder here
is made searchable by others (`reachable`), never readable.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from mallard_runner.build import Builder, BuiltAllocator
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_wire.recipes import Recipe, read_recipe_file

C_DIR = Path(__file__).resolve().parent / "c"
# mallard's own recipe (the repository's .mallard.toml), for targets made by hand
_MALLARD_RECIPE = read_recipe_file((REPO_ROOT / ".mallard.toml").read_text())
assert _MALLARD_RECIPE is not None
MALLARD_RECIPE: Recipe = _MALLARD_RECIPE
# the toy allocator's recipe (the toy repository carries it as its .mallard.toml)
TOY_RECIPE = """[allocator]
kind = "cmake"
source = "allocator"
target = "mallard"
library = "**/libmallard.so"

[allocator.options]
prefix = "MALLARD_"

[allocator.stats]
parser = "mallard"
file_env = "MALLARD_STATS_FILE"
"""
TOY_RECIPE_TABLE: dict[str, Any] = tomllib.loads(TOY_RECIPE)["allocator"]  # a job's recipe
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


TEMP_ROOT = Path(tempfile.gettempdir()) / f"mallard-runner-tests-{os.geteuid()}"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """As root, a temporary root of these tests' own (one folder per session): pytest sets
    its shared /tmp/pytest-of-<user> back to 0700 whenever any session starts, another
    person's too, which would shut the work user out in the middle of a run."""
    if config.option.basetemp or os.geteuid() != 0:
        return
    TEMP_ROOT.mkdir(mode=0o711, exist_ok=True)
    st = TEMP_ROOT.lstat()
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        return  # not ours: pytest's own default
    TEMP_ROOT.chmod(0o711)
    for old in TEMP_ROOT.glob("run-*"):  # sessions that ended
        pid = old.name.removeprefix("run-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    config.option.basetemp = str(TEMP_ROOT / f"run-{os.getpid()}")


def reachable(path: Path) -> Path:
    """`path` and the folders above it that this user owns: searchable by others (o+x),
    so the runner's work user reaches what a test made (nothing becomes listable)."""
    for d in [path, *path.parents]:
        st = d.stat()
        if st.st_uid == os.geteuid() and not st.st_mode & stat.S_IXOTH:
            d.chmod(stat.S_IMODE(st.st_mode) | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture(autouse=True)
def _reachable_tmp_path(tmp_path: Path) -> None:
    reachable(tmp_path)


def _cc(*args: str) -> None:
    subprocess.run(["cc", *args], check=True)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = reachable(tmp_path_factory.mktemp("workloads"))
    _cc("-O2", "-pthread", "-o", str(d / "tiny"), str(C_DIR / "tiny_workload.c"))
    return d


@pytest.fixture(scope="session")
def crash_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = reachable(tmp_path_factory.mktemp("crash"))
    _cc("-O2", "-shared", "-fPIC", "-o", str(d / "crash_lib.so"), str(C_DIR / "crash_lib.c"))
    return d / "crash_lib.so"


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                         text=True, env={**os.environ, **GIT_ENV})
    return out.stdout.strip()


@pytest.fixture(scope="session")
def toy_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("toyrepo")
    git(repo, "init", "-q", "-b", "main")
    shutil.copytree(C_DIR / "toy_allocator", repo / "allocator")
    (repo / ".mallard.toml").write_text(TOY_RECIPE)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "toy allocator")
    git(repo, "checkout", "-q", "-b", "broken")
    (repo / "allocator" / "toy.c").write_text("this is not C;\n")
    git(repo, "commit", "-qam", "break the build")
    git(repo, "checkout", "-q", "main")
    return repo


@pytest.fixture
def make_settings(tmp_path: Path, tiny_dir: Path) -> Callable[..., RunnerSettings]:
    def make(**kw: Any) -> RunnerSettings:
        suites = tmp_path / "suites"
        suites.mkdir(exist_ok=True)
        base: dict[str, Any] = {"workloads_dir": tiny_dir, "suites_dir": suites,
                                "state_dir": tmp_path / "state", "cpus": str(first_cpu())}
        base.update(kw)
        return RunnerSettings(**base)

    return make


def write_suite(settings: RunnerSettings, name: str, data: dict[str, Any]) -> Path:
    path = settings.suites_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **data}))
    return path


def first_cpu() -> int:
    return sorted(os.sched_getaffinity(0))[0]


def last_cpu() -> int:
    return sorted(os.sched_getaffinity(0))[-1]


def allocator_at_head() -> bool:
    out = subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e",
                          "HEAD:allocator/CMakeLists.txt"], capture_output=True)
    return out.returncode == 0


@pytest.fixture(scope="session")
def real_mallard(tmp_path_factory: pytest.TempPathFactory) -> BuiltAllocator:
    """libmallard.so built from this checkout's HEAD (the real allocator), once."""
    if not allocator_at_head():
        pytest.skip("allocator/ not committed at HEAD yet")
    # the sha, not HEAD: seven other people commit to this checkout while the tests run
    sha = git(REPO_ROOT, "rev-parse", "HEAD")
    return Builder(reachable(tmp_path_factory.mktemp("cache"))).build(str(REPO_ROOT), sha)


def gate_workload(directory: Path, gate: Path, started: Path) -> Path:
    """A workload program that says it started and then waits for `gate` to exist.

    It lets a test act at a known point inside a job (the API goes down, SIGTERM, a
    lease renewal) instead of guessing how long a run takes: events, not timings.
    """
    directory.mkdir(parents=True, exist_ok=True)
    # the workload runs as the runner's work user: it may write only where all may
    started.parent.mkdir(parents=True, exist_ok=True)
    started.parent.chmod(0o1777)
    prog = directory / "gate"
    prog.write_text(f"""#!/bin/sh
touch '{started}'
while [ ! -e '{gate}' ]; do sleep 0.02; done
echo '{{"workload": "gate", "params": {{}}, "operations": 1, "seconds": 0.001, "max_rss_bytes": 0}}'
""")
    prog.chmod(0o755)
    return prog
