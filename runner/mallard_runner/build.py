"""Builds libmallard.so at a commit: a clean tree per sha, a cached build per sha.

A clean tree of the commit (checkout.py: mirror, full sha, `git archive`) -> cmake + ninja
into <cache>/builds/<sha>-<dir> (cmake.py), run as the work user in an allow-listed
environment (sandbox.py) -> libmallard.so with its sha256, the compiler and the flags it
was built with. A failed build raises BuildError carrying the log
(tools.py). The allocator folder comes from the job: it is proven inside the tree.

On an emulated testbed (arch.py) the allocator is cross-built with the runner's own CMake
toolchain file (not one from the commit's tree: an older commit may have none), cached
under its own key, and the library must be an ELF file of the target's machine; the
workloads are cross-built from the runner's checkout the same way (`cross_workloads`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from .arch import Platform
from .checkout import checkout, resolve
from .cmake import check_machine, cmake_compiler, cmake_flags, generator
from .guard import Refused, inside
from .peers import sha256_file
from .sandbox import Sandbox
from .tools import BuildError, locked, run

TARGET = "mallard"
LIBRARY = "libmallard.so"

@dataclass(frozen=True)
class BuiltAllocator:
    commit: str
    library: str
    library_sha256: str
    compiler: str
    build_flags: str
    build_dir: str
    cached: bool = False

    @property
    def library_path(self) -> Path:
        return Path(self.library)


class Builder:
    def __init__(self, cache_dir: Path, build_type: str = "Release",
                 platform: Platform | None = None, sandbox: Sandbox | None = None):
        self.cache = Path(cache_dir)
        self.build_type = build_type
        self.platform = platform if platform is not None and platform.emulated else None
        # cmake runs the commit's CMakeLists.txt: as the work user (sandbox.py)
        self.sandbox = sandbox if sandbox is not None else Sandbox.create(self.cache / "work")
        self.sandbox.guard(self.cache, *(self.cache / d for d in ("repos", "trees", "builds")))

    def _cross(self) -> list[str]:
        """The configure options of a cross build (none when native)."""
        if self.platform is None:
            return []
        return [f"-DCMAKE_TOOLCHAIN_FILE={self.platform.toolchain}"]

    def build(self, source: str, ref: str, allocator_dir: str = "allocator") -> BuiltAllocator:
        log: list[str] = []
        git = self.sandbox.agent_env()
        bare, sha = resolve(self.cache, source, ref, log, git)
        key = f"{sha}-{re.sub(r'[^A-Za-z0-9_.-]', '_', allocator_dir)}-{self.build_type}"
        if self.platform is not None:
            key += f"-{self.platform.arch}"
        build = self.cache / "builds" / key
        info_file = build / "mallard-build.json"
        with locked(self.cache / "builds" / f"{key}.lock"):
            if info_file.exists():
                info = json.loads(info_file.read_text())
                if Path(info["library"]).exists() and \
                        sha256_file(Path(info["library"])) == info["library_sha256"]:
                    return BuiltAllocator(**{**info, "cached": True})
            tree = checkout(self.cache, bare, sha, log, git)
            try:
                src = inside(tree, allocator_dir)
            except Refused as e:
                raise BuildError(f"{e} at {sha[:12]}", "\n".join(log)) from e
            if not (src / "CMakeLists.txt").exists():
                raise BuildError(f"{allocator_dir}/CMakeLists.txt not found at {sha[:12]}",
                                 "\n".join(log))
            self._untrusted_build(src, build, sha, log)
            libs = sorted(build.rglob(LIBRARY))
            if not libs:
                raise BuildError(f"the build made no {LIBRARY} at {sha[:12]}", "\n".join(log))
            lib = libs[0].resolve()
            check_machine(lib, self.platform, log, "the library")
            built = BuiltAllocator(commit=sha, library=str(lib), library_sha256=sha256_file(lib),
                                   compiler=cmake_compiler(build, self.sandbox),
                                   build_flags=cmake_flags(build, self.build_type),
                                   build_dir=str(build))
            tmp = info_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(asdict(built), indent=2))
            os.replace(tmp, info_file)
            return built

    def _untrusted_build(self, src: Path, build: Path, sha: str, log: list[str]) -> None:
        """cmake configure and build of the commit's tree into a fresh `build` folder, as
        the work user; the folder is the agent's again afterwards (sandbox.take), so no
        later build can change this one's library."""
        box = self.sandbox
        box.take(build)  # a folder left by an interrupted run: started afresh
        shutil.rmtree(build, ignore_errors=True)
        box.check_reachable(build.parent)
        box.give(build)
        box.fresh()
        configure = ["cmake", "-S", str(src), "-B", str(build), *generator(),
                     f"-DCMAKE_BUILD_TYPE={self.build_type}", "-DBUILD_TESTING=OFF",
                     "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *self._cross()]
        try:
            if run(configure, log, env=box.env(), identity=box.identity()).returncode != 0:
                raise BuildError(f"cmake configure failed at {sha[:12]}", "\n".join(log))
            out = run(["cmake", "--build", str(build), "--target", TARGET], log,
                      env=box.env(), identity=box.identity())
            if out.returncode != 0:
                raise BuildError(f"build of {TARGET} failed at {sha[:12]}", "\n".join(log))
        finally:
            box.take(build)
