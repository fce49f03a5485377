"""CMake for the allocator and the workloads: the generator, a cross build's checks, the
compiler and flags a build used (what a trial records as `compiler` and `build_flags`),
and the cross-built workloads of an emulated target."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from .arch import Platform, elf_machine
from .sandbox import Sandbox, clean_env
from .testbed import compiler_version
from .tools import BuildError, locked, run


def generator() -> list[str]:
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def check_machine(path: Path, platform: Platform | None, log: list[str], what: str) -> None:
    """A cross build must make programs of the target's machine, never the host's."""
    if platform is None or not platform.emulated:
        return
    machine = elf_machine(path)
    if machine != platform.arch:
        raise BuildError(f"{what} {path.name} is built for {machine or 'no ELF machine'}, "
                         f"not {platform.arch}", "\n".join(log))


def cross_workloads(platform: Platform, source: Path, out: Path,
                    build_type: str = "Release", env: Mapping[str, str] | None = None) -> Path:
    """Cross-build the workload programs of `source` (runner/workloads: the runner's own,
    not a commit's) for an emulated target into `out` (incremental: a no-op when up to
    date), in `env` (default: the allow-listed one, sandbox.clean_env); returns `out`."""
    log: list[str] = []
    env = env if env is not None else clean_env(out.parent, out.parent)
    with locked(out.parent / f".{out.name}.lock"):
        if not (out / "CMakeCache.txt").exists():
            res = run(["cmake", "-S", str(source), "-B", str(out), *generator(),
                        f"-DCMAKE_BUILD_TYPE={build_type}",
                        f"-DCMAKE_TOOLCHAIN_FILE={platform.toolchain}"], log, env=env)
            if res.returncode != 0:
                raise BuildError(f"cmake configure of the {platform.arch} workloads failed",
                                 "\n".join(log))
        if run(["cmake", "--build", str(out)], log, env=env).returncode != 0:
            raise BuildError(f"build of the {platform.arch} workloads failed", "\n".join(log))
    check_machine(out / "larson", platform, log, "the workload")
    return out


def _cache_entries(build: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    try:
        text = (build / "CMakeCache.txt").read_text()
    except OSError:
        return entries
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_]+):[A-Z]+=(.*)$", line)
        if m:
            entries[m.group(1)] = m.group(2)
    return entries


def cmake_compiler(build: Path, box: Sandbox | None = None) -> str:
    """`gcc 12.2.0` from CMake's own compiler detection (else the compiler the cache names
    asked, as the work user of `box`: the build chose it)."""
    for f in sorted(build.glob("CMakeFiles/*/CMakeCCompiler.cmake")):
        text = f.read_text()
        cid = re.search(r'set\(CMAKE_C_COMPILER_ID "([^"]*)"\)', text)
        ver = re.search(r'set\(CMAKE_C_COMPILER_VERSION "([^"]*)"\)', text)
        if cid and ver:
            name = {"GNU": "gcc", "Clang": "clang", "AppleClang": "clang"}.get(
                cid.group(1), cid.group(1).lower())
            return f"{name} {ver.group(1)}"
    cc = _cache_entries(build).get("CMAKE_C_COMPILER")
    if box is None:
        return compiler_version(cc)
    return compiler_version(cc, box.env(), box.identity())


def cmake_flags(build: Path, build_type: str) -> str:
    """The flags the C sources were compiled with (compile_commands.json), else CMake's."""
    try:
        commands = json.loads((build / "compile_commands.json").read_text())
    except (OSError, ValueError):
        commands = []
    for entry in commands:
        if not str(entry.get("file", "")).endswith(".c"):
            continue
        tokens = shlex.split(entry.get("command", ""))[1:]
        flags: list[str] = []
        skip = False
        for tok in tokens:
            if skip:
                skip = False
                continue
            if tok in ("-o", "-c", "-MF", "-MT", "-MQ", "-I", "-isystem"):
                skip = True
                continue
            if tok in ("-MD", "-MMD") or tok.startswith(("-I", "-isystem")):
                continue
            if tok == entry.get("file") or tok.endswith(".c"):
                continue
            flags.append(tok)
        if flags:
            return " ".join(flags)
    e = _cache_entries(build)
    parts = [e.get("CMAKE_C_FLAGS", ""), e.get(f"CMAKE_C_FLAGS_{build_type.upper()}", "")]
    return " ".join(p.strip() for p in parts if p.strip())
