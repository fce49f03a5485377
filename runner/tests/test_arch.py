"""The emulated target (arch.py): architecture names, ELF machines, the qemu command line,
and one real run: mallard and the workloads cross-built for aarch64 and run under
qemu-aarch64, giving a valid result with `emulated: true`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mallard_runner.arch import Platform, elf_machine, host_arch, normalize_arch, resolve_platform
from mallard_runner.build import Builder
from mallard_runner.cells import Cell, Target
from mallard_runner.cmake import cross_workloads
from mallard_runner.commands import ENV_BLOCK
from mallard_runner.executor import Executor
from mallard_runner.peers import find_peers
from mallard_runner.settings import REPO_ROOT, RUNNER_DIR, RunnerSettings
from mallard_runner.suites import Suite, expand
from mallard_runner.testbed import collect
from mallard_wire.results import AllocatorIn

from .conftest import MALLARD_RECIPE, first_cpu, git, reachable

CROSS_TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64", "cmake")
needs_cross = pytest.mark.skipif(
    host_arch() != "x86_64" or any(shutil.which(t) is None for t in CROSS_TOOLS)
    or not Path("/usr/aarch64-linux-gnu").is_dir(),
    reason="needs an x86-64 host with gcc-aarch64-linux-gnu, qemu-user and the arm64 sysroot "
           "(scripts/install-deps.sh)")


@pytest.mark.parametrize(("given", "name"), [("arm64", "aarch64"), ("ARM64", "aarch64"),
                                             ("aarch64", "aarch64"), ("amd64", "x86_64"),
                                             ("x64", "x86_64"), (" x86_64 ", "x86_64")])
def test_arch_aliases(given: str, name: str) -> None:
    assert normalize_arch(given) == name
    assert RunnerSettings(arch=given).arch == name


@pytest.mark.parametrize("bad", ["", "arm64;rm -rf /", "../x", "a" * 21])
def test_arch_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        normalize_arch(bad)


def test_native_target_runs_programs_directly(make_settings) -> None:
    settings = make_settings()
    assert settings.platform().emulated is False
    assert settings.platform().guest_prefix(["LD_PRELOAD=/x.so"]) == []
    assert settings.workloads_dir.name != f"workloads-{settings.arch}"


def test_elf_machine(tmp_path: Path) -> None:
    assert elf_machine(Path("/bin/sh")) == host_arch()
    (tmp_path / "text").write_text("#!/bin/sh\n")
    assert elf_machine(tmp_path / "text") is None
    assert elf_machine(tmp_path / "missing") is None


def test_guest_prefix_keeps_the_preload_for_the_guest() -> None:
    p = Platform("aarch64", "x86_64", "/usr/bin/qemu-aarch64", Path("/sysroot"))
    assert p.emulated and p.triplet == "aarch64-linux-gnu"
    assert p.guest_prefix(["LD_PRELOAD=/lib/a.so"]) == [
        "/usr/bin/qemu-aarch64", "-L", "/sysroot", "-E", "LD_PRELOAD=/lib/a.so"]
    with pytest.raises(ValueError, match="comma"):
        p.guest_prefix(["LD_PRELOAD=/lib/a,b.so"])


def test_missing_emulator_is_named() -> None:
    with pytest.raises(ValueError, match="qemu-nosuch"):
        resolve_platform("aarch64" if host_arch() != "aarch64" else "x86_64",
                         emulator="qemu-nosuch")


def test_emulated_suite_params() -> None:
    suite = Suite(name="s", threads=[1], workloads={
        "larson": {"params": {"ops": 1000000, "seed": 1}, "emulated": {"ops": 20000}}})
    assert expand(suite)[0].params == {"threads": 1, "ops": 1000000, "seed": 1}
    assert expand(suite, emulated=True)[0].params == {"threads": 1, "ops": 20000, "seed": 1}


@needs_cross
def test_emulated_command_line(make_settings, tmp_path: Path) -> None:
    settings = make_settings(arch="arm64")
    target = settings.platform()
    assert target.emulated and target.toolchain is not None
    ex = Executor(settings, [first_cpu()], tmp_path)
    assert ex.use_perf is False and ex.valgrind is False  # they would measure qemu
    info = AllocatorIn(name="mallard", commit="a" * 40, variant="transfer=ring")
    lib = Target("head", info, Path("/lib/libmallard.so"), MALLARD_RECIPE)
    plain = Target("peer", AllocatorIn(name="glibc"), None)
    sizes = []
    for t in (lib, plain):
        cmd = ex.commands.trial(Cell(t, "larson", {"threads": 1}, tmp_path / "larson"), tmp_path)
        qemu = cmd.index(target.emulator)
        env = cmd[cmd.index("-i") + 1:qemu]
        assert not any(a.startswith("LD_PRELOAD=") for a in env)  # never qemu's own
        guest = cmd[qemu:cmd.index(str(tmp_path / "larson"))]
        assert guest[:3] == [target.emulator, "-L", str(target.sysroot)]
        preload = [guest[i + 1] for i, a in enumerate(guest) if a == "-E"]
        assert preload == (["LD_PRELOAD=/lib/libmallard.so"] if t is lib else [])
        sizes.append(sum(len(a.encode()) + 1 for a in env + preload))
    assert sizes[0] % ENV_BLOCK == 0 and sizes[0] == sizes[1]  # the guest's env: one size


@pytest.fixture(scope="session")
def arm64_build(tmp_path_factory: pytest.TempPathFactory):
    """mallard at this checkout's HEAD and the workloads, cross-built for aarch64."""
    settings = RunnerSettings(arch="aarch64")
    target = settings.platform()
    cache = reachable(tmp_path_factory.mktemp("arm64"))  # the work user builds there
    workloads = cross_workloads(target, RUNNER_DIR / "workloads", cache / "workloads")
    sha = git(REPO_ROOT, "rev-parse", "HEAD")
    built = Builder(cache / "cache", platform=target).build(str(REPO_ROOT), sha)
    return target, workloads, built


@needs_cross
def test_cross_build_is_aarch64(arm64_build) -> None:
    target, workloads, built = arm64_build
    assert elf_machine(built.library_path) == "aarch64"
    assert elf_machine(workloads / "fastpath") == "aarch64"
    assert built.build_dir.endswith("-aarch64")  # cached apart from the native build
    found, _ = find_peers(target=target)
    assert found["glibc"].library is None
    for peer in found.values():  # only libraries the guest can load
        assert peer.library is None or elf_machine(peer.library) == "aarch64"


@needs_cross
def test_emulated_trial_gives_a_valid_result(arm64_build, make_settings, tmp_path: Path) -> None:
    target, workloads, built = arm64_build
    settings = make_settings(arch="aarch64", workloads_dir=workloads)
    ex = Executor(settings, [first_cpu()], tmp_path / "raw", target=target)
    info = AllocatorIn(name="mallard", commit=built.commit, variant="transfer=ring")
    cell = Cell(Target("head", info, built.library_path, built.recipe), "fastpath",
                {"threads": 2, "ops": 2000, "seed": 42}, workloads / "fastpath")
    trial, _ = ex.run_trial(cell, 0, warmup=False)
    assert trial.ok, trial.stderr_tail
    assert trial.measures["ops_per_sec"] > 0 and trial.measures["max_rss_bytes"] > 0
    # the allocator ran inside the guest: its stats file (MALLARD_* reached the guest)
    assert trial.counters and trial.counters["allocs"] > 0
    out = subprocess.run(["readelf", "-h", str(workloads / "fastpath")], capture_output=True,
                         text=True)
    assert "AArch64" in out.stdout
    tb = collect([first_cpu()], target=target)
    assert (tb.arch, tb.emulated) == ("aarch64", True)
    assert tb.emulator and tb.emulator.startswith("qemu-aarch64")
    assert tb.libc.startswith("glibc ")
