"""Builds an allocator at a commit by its recipe: a clean tree per sha, a cached build per
sha and recipe.

A clean tree of the commit (checkout.py: mirror, full sha, `git archive`; a clone with its
submodules when the recipe asks) -> the effective recipe: the tree's own `.mallard.toml`
(`RECIPE_FILE`, its `[allocator]` table) wins over the one the job or the command line
gave (the project's registered recipe), so history builds by the recipe of its day ->
the recipe's steps (mallard_wire.recipes.Recipe: cmake, autotools, make, command) into
<cache>/builds/<sha>-<recipe hash>-<type>, run as the work user in an allow-listed
environment (sandbox.py) under the recipe's time cap and the runner's output cap
(tools.Caps) -> the library: the first match of the recipe's glob, proven inside the
build folder and an ELF shared object, with its sha256, the compiler and the flags. A
failed step, a cap reached, a malformed recipe file or no library raise BuildError
carrying the log's tail (the job fails with it, tools.py).

On an emulated testbed (arch.py) a cmake recipe is cross-built with the runner's own CMake
toolchain file (not one from the commit's tree: an older commit may have none), an
autotools one with `--host=<triplet>`, a make one with `CC=<triplet>-gcc`, cached under
its own key, and the library must be an ELF file of the target's machine; the workloads
are cross-built from the runner's checkout the same way (`cmake.cross_workloads`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from mallard_wire.recipes import MAX_RECIPE_FILE, RECIPE_FILE, Recipe, read_recipe_file
from mallard_wire.repo_urls import Prefix
from pydantic import ValidationError

from .arch import Platform
from .checkout import checkout, checkout_submodules, resolve
from .cmake import check_machine, cmake_compiler, cmake_flags, generator
from .guard import Refused, check_repo, classify, inside
from .peers import is_shared_object, sha256_file
from .sandbox import Sandbox
from .testbed import compiler_version
from .tools import BuildError, Caps, locked, run_capped

LOG_MAX_BYTES = 32 * 1024 * 1024  # what a build may print (setting build_log_max_bytes)
INFO_FILE = "mallard-build.json"
Step = tuple[list[str], Path | None, str]  # argv, working folder, what it is (for errors)


@dataclass(frozen=True)
class BuiltAllocator:
    commit: str
    library: str
    library_sha256: str
    compiler: str
    build_flags: str
    build_dir: str
    recipe: Recipe
    recipe_from: str  # "registered" or RECIPE_FILE (the commit's own)
    cached: bool = False

    @property
    def library_path(self) -> Path:
        return Path(self.library)

    def to_json(self) -> str:
        fields = {k: getattr(self, k) for k in ("commit", "library", "library_sha256",
                                                "compiler", "build_flags", "build_dir",
                                                "recipe_from")}
        return json.dumps({**fields, "recipe": self.recipe.model_dump(mode="json")}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> BuiltAllocator:
        data = json.loads(text)
        return cls(**{**data, "recipe": Recipe.model_validate(data["recipe"]), "cached": True})


def recipe_hash(recipe: Recipe) -> str:
    return hashlib.sha256(recipe.model_dump_json().encode()).hexdigest()[:12]


def _problems(e: ValueError) -> str:
    """A malformed recipe file's errors, without quoting its values."""
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'allocator'}: "
                         f"{err['msg']}" for err in e.errors(include_input=False))[:2000]
    return str(e)[:500]


def effective_recipe(tree: Path, sha: str, given: Recipe | None,
                     log: list[str]) -> tuple[Recipe, str]:
    """The tree's RECIPE_FILE's `[allocator]` table, else `given`: (recipe, where from)."""
    path = tree / RECIPE_FILE
    if path.exists() or path.is_symlink():
        try:
            real = inside(tree, RECIPE_FILE, RECIPE_FILE)
            with open(real, "rb") as f:  # a regular file of the tree, read up to the cap
                text = f.read(MAX_RECIPE_FILE + 1).decode()
            found = read_recipe_file(text)
        except (Refused, OSError, ValueError) as e:
            why = _problems(e) if isinstance(e, ValueError) else str(e)
            log.append(f"{RECIPE_FILE} at {sha[:12]}: {why}")
            raise BuildError(f"{RECIPE_FILE} at {sha[:12]} is malformed: {why}",
                             "\n".join(log)) from e
        if found is not None:
            log.append(f"recipe: {RECIPE_FILE} at {sha[:12]} (it wins over a registered one)")
            return found, RECIPE_FILE
    if given is None:
        raise BuildError(f"no recipe: {sha[:12]} has no {RECIPE_FILE} with an [allocator] "
                         f"table and none was given (a project's recipe, --recipe)",
                         "\n".join(log))
    log.append(f"recipe: the registered one ({sha[:12]} has no {RECIPE_FILE} recipe)")
    return given, "registered"


def find_built_library(build: Path, pattern: str, sha: str, log: list[str]) -> Path:
    """The first match (sorted) of the recipe's glob, resolved and proven inside `build`,
    an ELF shared object."""
    matches = sorted(build.glob(pattern))
    if not matches:
        raise BuildError(f"the build made no library matching {pattern!r} at {sha[:12]}",
                         "\n".join(log))
    root = build.resolve()
    lib = matches[0].resolve()
    if not lib.is_relative_to(root):
        raise BuildError(f"library {matches[0].relative_to(build)} refused: it resolves "
                         f"outside the build folder (a symlink)", "\n".join(log))
    if not is_shared_object(lib):
        raise BuildError(f"library {matches[0].relative_to(build)} is not an ELF shared "
                         f"object", "\n".join(log))
    return lib


def _parallel() -> str:
    return str(max(1, len(os.sched_getaffinity(0))))


class Builder:
    def __init__(self, cache_dir: Path, build_type: str = "Release",
                 platform: Platform | None = None, sandbox: Sandbox | None = None,
                 log_max_bytes: int = LOG_MAX_BYTES,
                 repo_rules: tuple[Prefix, ...] | None = None):
        self.cache = Path(cache_dir)
        self.build_type = build_type
        self.platform = platform if platform is not None and platform.emulated else None
        self.log_max_bytes = log_max_bytes
        # submodule URLs: on this allow-list (a job's), or (None: a local run) file/https
        self.repo_rules = repo_rules
        # a recipe runs the commit's own build: as the work user (sandbox.py)
        self.sandbox = sandbox if sandbox is not None else Sandbox.create(self.cache / "work")
        self.sandbox.guard(self.cache, *(self.cache / d for d in ("repos", "trees", "builds")))

    def _cross(self, recipe: Recipe) -> list[str]:
        """The configure options of a cross build (none when native)."""
        if self.platform is None:
            return []
        if recipe.kind == "cmake":
            return [f"-DCMAKE_TOOLCHAIN_FILE={self.platform.toolchain}"]
        if recipe.kind == "autotools":
            return [f"--host={self.platform.triplet}"]
        return [f"CC={self.platform.compiler}"] if recipe.kind == "make" else []

    def check_submodule_url(self, url: str) -> str:
        """A submodule URL's scheme, when this runner may fetch it (Refused otherwise)."""
        if self.repo_rules is not None:
            return check_repo(url, self.repo_rules).scheme
        scheme = classify(url).scheme
        if scheme not in ("file", "https"):
            raise Refused(f"submodule URL {url[:120]!r} refused: a local run takes only "
                          f"file and https submodules (a runner's allow-list decides for jobs)")
        return scheme

    def build(self, source: str, ref: str, recipe: Recipe | None = None) -> BuiltAllocator:
        """Build `ref` of `source` by its effective recipe (the commit's RECIPE_FILE, else
        `recipe`); a cached build of the same sha and recipe is taken as it is."""
        log: list[str] = []
        git = self.sandbox.agent_env()
        bare, sha = resolve(self.cache, source, ref, log, git)
        tree = checkout(self.cache, bare, sha, log, git)
        rec, origin = effective_recipe(tree, sha, recipe, log)
        key = f"{sha}-{recipe_hash(rec)}-{self.build_type}"
        if self.platform is not None:
            key += f"-{self.platform.arch}"
        build = self.cache / "builds" / key
        info_file = build / INFO_FILE
        with locked(self.cache / "builds" / f"{key}.lock"):
            if info_file.exists():
                info = BuiltAllocator.from_json(info_file.read_text())
                if info.library_path.exists() and \
                        sha256_file(info.library_path) == info.library_sha256:
                    return info
            if rec.submodules:
                tree = checkout_submodules(self.cache, bare, source, sha, log, git,
                                           self.check_submodule_url)
            try:
                src = inside(tree, rec.source or ".", "the recipe's source")
            except Refused as e:
                raise BuildError(f"{e} at {sha[:12]}", "\n".join(log)) from e
            if not src.is_dir():
                raise BuildError(f"the recipe's source {rec.source!r} is not a folder at "
                                 f"{sha[:12]}", "\n".join(log))
            self._untrusted_build(rec, src, build, sha, log)
            lib = find_built_library(build, rec.library, sha, log)
            check_machine(lib, self.platform, log, "the library")
            compiler, flags = self._compiler_flags(rec, build)
            built = BuiltAllocator(commit=sha, library=str(lib), library_sha256=sha256_file(lib),
                                   compiler=compiler, build_flags=flags, build_dir=str(build),
                                   recipe=rec, recipe_from=origin)
            tmp = info_file.with_suffix(".tmp")
            tmp.write_text(built.to_json())
            os.replace(tmp, info_file)
            return built

    def _compiler_flags(self, recipe: Recipe, build: Path) -> tuple[str, str]:
        """(compiler, build flags) a trial records: CMake's own for cmake; else the
        compiler's version (CC of the configure options, or cc) and the recipe's words."""
        box = self.sandbox
        if recipe.kind == "cmake":
            return cmake_compiler(build, box), cmake_flags(build, self.build_type)[:1000]
        cc = next((a.split("=", 1)[1] for a in reversed(recipe.configure)
                   if a.startswith("CC=")), None)
        if cc is None:
            cc = self.platform.compiler if self.platform is not None else "cc"
        words = (" ".join(shlex.join(c) for c in recipe.commands) if recipe.kind == "command"
                 else shlex.join(recipe.configure))
        return compiler_version(cc, box.env(), box.identity())[:500], \
            f"{recipe.kind} {words}".strip()[:1000]

    def steps(self, recipe: Recipe, src: Path, build: Path) -> list[Step]:
        """The argv lists a recipe runs (recipes.Recipe's docstring), none via a shell."""
        n = _parallel()
        target = [recipe.target] if recipe.target else []
        if recipe.kind == "cmake":
            configure = ["cmake", "-S", str(src), "-B", str(build), *generator(),
                         f"-DCMAKE_BUILD_TYPE={self.build_type}",
                         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *self._cross(recipe),
                         *recipe.configure]
            make = ["cmake", "--build", str(build), "--parallel", n,
                    *(["--target", recipe.target] if recipe.target else [])]
            return [(configure, None, "cmake configure"),
                    (make, None, f"build of {recipe.target or 'all'}")]
        out: list[Step] = [(["cp", "-R", "-P", "--", f"{src}/.", str(build)], None,
                            "copy of the source")]
        if recipe.kind == "autotools":
            if not (src / "configure").exists() and (src / "autogen.sh").exists():
                out.append((["./autogen.sh"], build, "autogen.sh"))
            out.append((["./configure", *self._cross(recipe), *recipe.configure], build,
                        "configure"))
            out.append((["make", f"-j{n}", *target], build, "make"))
        elif recipe.kind == "make":
            out.append((["make", f"-j{n}", *target, *self._cross(recipe), *recipe.configure],
                        build, "make"))
        else:
            out += [(list(argv), build, f"command {argv[0]}") for argv in recipe.commands]
        return out

    def _untrusted_build(self, recipe: Recipe, src: Path, build: Path, sha: str,
                         log: list[str]) -> None:
        """The recipe's steps into a fresh `build` folder, as the work user, under the
        caps; the folder is the agent's again afterwards (sandbox.take), so no later
        build can change this one's library."""
        box = self.sandbox
        box.take(build)  # a folder left by an interrupted run: started afresh
        shutil.rmtree(build, ignore_errors=True)
        box.check_reachable(build.parent)
        box.give(build)
        box.fresh()
        caps = Caps(recipe.timeout_seconds, self.log_max_bytes)
        try:
            for argv, cwd, what in self.steps(recipe, src, build):
                code = run_capped(argv, log, caps, env=box.env(), cwd=cwd,
                                  identity=box.identity())
                if code != 0:
                    raise BuildError(f"{what} failed at {sha[:12]} (recipe {recipe.kind})",
                                     "\n".join(log))
        finally:
            box.take(build)

