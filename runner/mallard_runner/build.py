"""Builds libmallard.so at a commit: a clean tree per sha, a cached build per sha.

Source (git URL or local path) -> a bare mirror under <cache>/repos -> the ref
resolved to its full sha -> `git archive` of that sha into <cache>/trees/<sha>
(a clean tree: no stray files, no local changes) -> cmake + ninja into
<cache>/builds/<sha>-<dir> -> libmallard.so with its sha256, the compiler and
the flags it was built with. A failed build raises BuildError carrying the log.

Refs and folders come from jobs, so they pass guard.py's checks here too (the agent
checks them first): a ref is a full sha or a valid ref name and reaches git after
`--end-of-options`; the allocator folder is proven inside the tree; git may use only
the source's own protocol and follows no redirects.

On an emulated testbed (arch.py) the allocator is cross-built with the runner's own CMake
toolchain file (not one from the commit's tree: an older commit may have none), cached
under its own key, and the library must be an ELF file of the target's machine; the
workloads are cross-built from the runner's checkout the same way (`cross_workloads`).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from .arch import Platform, elf_machine
from .guard import GIT_SAFE_CONFIG, Refused, check_ref, git_env, inside
from .peers import sha256_file
from .settings import child_env

TARGET = "mallard"
LIBRARY = "libmallard.so"


class BuildError(RuntimeError):
    """A checkout or build that failed; `log` holds what the tools printed."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log

    def __str__(self) -> str:
        return f"{self.args[0]}\n--- log ---\n{self.log[-8000:]}"


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


def _run(cmd: list[str], log: list[str], cwd: Path | None = None, timeout: float = 1800,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    log.append("$ " + " ".join(cmd))
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                             env={**child_env(), "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
                                  **(env or {})})
    except subprocess.TimeoutExpired as e:
        log.append(f"timed out after {timeout}s")
        raise BuildError(f"{cmd[0]} timed out", "\n".join(log)) from e
    except OSError as e:
        log.append(str(e))
        raise BuildError(f"cannot run {cmd[0]}: {e}", "\n".join(log)) from e
    if out.stdout.strip():
        log.append(out.stdout.rstrip())
    if out.stderr.strip():
        log.append(out.stderr.rstrip())
    if out.returncode != 0:
        why = (f"killed by signal {-out.returncode}" if out.returncode < 0
               else f"exit status {out.returncode}")
        log.append(f"({cmd[0]}: {why})")
    return out


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _source_key(source: str) -> str:
    p = Path(source)
    canonical = str(p.resolve()) if p.exists() else source
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _generator() -> list[str]:
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def _check_machine(path: Path, platform: Platform | None, log: list[str], what: str) -> None:
    """A cross build must make programs of the target's machine, never the host's."""
    if platform is None or not platform.emulated:
        return
    machine = elf_machine(path)
    if machine != platform.arch:
        raise BuildError(f"{what} {path.name} is built for {machine or 'no ELF machine'}, "
                         f"not {platform.arch}", "\n".join(log))


class Builder:
    def __init__(self, cache_dir: Path, build_type: str = "Release",
                 platform: Platform | None = None):
        self.cache = Path(cache_dir)
        self.build_type = build_type
        self.platform = platform if platform is not None and platform.emulated else None

    def _cross(self) -> list[str]:
        """The configure options of a cross build (none when native)."""
        if self.platform is None:
            return []
        return [f"-DCMAKE_TOOLCHAIN_FILE={self.platform.toolchain}"]

    # -- checkout -----------------------------------------------------------------
    def _fetch(self, bare: Path, src: str, refspecs: list[str], log: list[str],
               *extra: str) -> subprocess.CompletedProcess[str]:
        """`git fetch` of `src` into the mirror; src and refspecs are data, never options."""
        return _run(["git", *GIT_SAFE_CONFIG, "-C", str(bare), "fetch", "--quiet", *extra,
                     "--end-of-options", src, *refspecs], log, env=git_env(src))

    def _fetch_all(self, bare: Path, src: str, log: list[str]) -> None:
        if not (bare / "HEAD").exists():
            bare.parent.mkdir(parents=True, exist_ok=True)
            out = _run(["git", "init", "--quiet", "--bare", "--", str(bare)], log)
            if out.returncode != 0:
                raise BuildError(f"cannot create a mirror of {src}", "\n".join(log))
        out = self._fetch(bare, src, ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                          log, "--force", "--prune")
        if out.returncode != 0:
            raise BuildError(f"cannot fetch {src}", "\n".join(log))

    def _verify(self, repo: Path, rev: str, log: list[str]) -> str | None:
        out = _run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                    "--end-of-options", f"{rev}^{{commit}}"], log)
        return out.stdout.strip() if out.returncode == 0 else None

    def resolve(self, source: str, ref: str, log: list[str] | None = None) -> tuple[Path, str]:
        """(mirror, full sha) of `ref` as the source sees it (HEAD is the source's HEAD)."""
        log = [] if log is None else log
        try:
            check_ref(ref)
            git_env(source)  # refuses what git must never be given (ext::, options)
        except Refused as e:
            log.append(str(e))
            raise BuildError(str(e), "\n".join(log)) from e
        local = Path(source).exists()
        src = str(Path(source).resolve()) if local else source
        bare = self.cache / "repos" / f"{_source_key(source)}.git"
        with _locked(bare.with_suffix(".lock")):
            self._fetch_all(bare, src, log)
            sha: str | None = None
            if local:
                sha = self._verify(Path(src), ref, log)
            elif re.fullmatch(r"[0-9a-fA-F]{7,40}", ref):
                sha = self._verify(bare, ref, log)
            if sha is None and not local:
                out = self._fetch(bare, src, [ref], log)
                if out.returncode == 0:
                    sha = self._verify(bare, "FETCH_HEAD", log)
            if sha is None:
                raise BuildError(f"cannot resolve {ref!r} in {source}", "\n".join(log))
            if self._verify(bare, sha, log) is None:  # e.g. a detached HEAD on no branch
                self._fetch(bare, src, [sha], log)
                if self._verify(bare, sha, log) is None:
                    raise BuildError(f"cannot fetch {sha} from {source}", "\n".join(log))
        return bare, sha

    def checkout(self, bare: Path, sha: str, log: list[str]) -> Path:
        """A clean tree of `sha` (git archive, extracted once, atomically)."""
        tree = self.cache / "trees" / sha
        if tree.is_dir():
            return tree
        tree.parent.mkdir(parents=True, exist_ok=True)
        log.append(f"$ git -C {bare} archive {sha} | tar -x -C {tree}")
        out = subprocess.run(["git", "-C", str(bare), "archive", "--format=tar",
                              "--end-of-options", sha], capture_output=True)
        if out.returncode != 0:
            log.append(out.stderr.decode(errors="replace"))
            raise BuildError(f"cannot check out {sha}", "\n".join(log))
        tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=tree.parent))
        try:
            with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
                # filter= exists from 3.11.4; Debian bookworm's python3 (the images) is 3.11.2
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, filter="data")
                else:  # the pushed tree is not trusted: nothing may land outside tmp
                    tar.extractall(tmp, members=_members_inside(tar, sha, log))
        except (tarfile.TarError, OSError) as e:  # e.g. a symlink pointing out of the tree
            shutil.rmtree(tmp, ignore_errors=True)
            log.append(f"{type(e).__name__}: {e}")
            raise BuildError(f"cannot check out {sha[:12]}: {e}", "\n".join(log)) from e
        except BuildError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            tmp.rename(tree)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        return tree

    # -- build --------------------------------------------------------------------
    def build(self, source: str, ref: str, allocator_dir: str = "allocator") -> BuiltAllocator:
        log: list[str] = []
        bare, sha = self.resolve(source, ref, log)
        key = f"{sha}-{re.sub(r'[^A-Za-z0-9_.-]', '_', allocator_dir)}-{self.build_type}"
        if self.platform is not None:
            key += f"-{self.platform.arch}"
        build = self.cache / "builds" / key
        info_file = build / "mallard-build.json"
        with _locked(self.cache / "builds" / f"{key}.lock"):
            if info_file.exists():
                info = json.loads(info_file.read_text())
                if Path(info["library"]).exists() and \
                        sha256_file(Path(info["library"])) == info["library_sha256"]:
                    return BuiltAllocator(**{**info, "cached": True})
            tree = self.checkout(bare, sha, log)
            try:
                src = inside(tree, allocator_dir)
            except Refused as e:
                raise BuildError(f"{e} at {sha[:12]}", "\n".join(log)) from e
            if not (src / "CMakeLists.txt").exists():
                raise BuildError(f"{allocator_dir}/CMakeLists.txt not found at {sha[:12]}",
                                 "\n".join(log))
            configure = ["cmake", "-S", str(src), "-B", str(build), *_generator(),
                         f"-DCMAKE_BUILD_TYPE={self.build_type}", "-DBUILD_TESTING=OFF",
                         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *self._cross()]
            out = _run(configure, log)
            if out.returncode != 0 and build.exists():
                # a build dir left by an interrupted run: start it afresh, once
                log.append(f"removing {build} and configuring again")
                shutil.rmtree(build, ignore_errors=True)
                out = _run(configure, log)
            if out.returncode != 0:
                raise BuildError(f"cmake configure failed at {sha[:12]}", "\n".join(log))
            out = _run(["cmake", "--build", str(build), "--target", TARGET], log)
            if out.returncode != 0:
                raise BuildError(f"build of {TARGET} failed at {sha[:12]}", "\n".join(log))
            libs = sorted(build.rglob(LIBRARY))
            if not libs:
                raise BuildError(f"the build made no {LIBRARY} at {sha[:12]}", "\n".join(log))
            lib = libs[0].resolve()
            _check_machine(lib, self.platform, log, "the library")
            built = BuiltAllocator(commit=sha, library=str(lib), library_sha256=sha256_file(lib),
                                   compiler=cmake_compiler(build), build_flags=cmake_flags(
                                       build, self.build_type), build_dir=str(build))
            tmp = info_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(asdict(built), indent=2))
            os.replace(tmp, info_file)
            return built


def cross_workloads(platform: Platform, source: Path, out: Path,
                    build_type: str = "Release") -> Path:
    """Cross-build the workload programs of `source` (runner/workloads) for an emulated
    target into `out` (incremental: a no-op when up to date); returns `out`."""
    log: list[str] = []
    with _locked(out.parent / f".{out.name}.lock"):
        if not (out / "CMakeCache.txt").exists():
            res = _run(["cmake", "-S", str(source), "-B", str(out), *_generator(),
                        f"-DCMAKE_BUILD_TYPE={build_type}",
                        f"-DCMAKE_TOOLCHAIN_FILE={platform.toolchain}"], log)
            if res.returncode != 0:
                raise BuildError(f"cmake configure of the {platform.arch} workloads failed",
                                 "\n".join(log))
        if _run(["cmake", "--build", str(out)], log).returncode != 0:
            raise BuildError(f"build of the {platform.arch} workloads failed", "\n".join(log))
    _check_machine(out / "larson", platform, log, "the workload")
    return out


def _members_inside(tar: tarfile.TarFile, sha: str, log: list[str]) -> list[tarfile.TarInfo]:
    """The archive's members, refusing any that could write or point outside the tree.

    Names and link targets must be relative without `..`: a symlink then resolves at or
    below its own folder, even through other symlinks.
    """
    members = tar.getmembers()
    for m in members:
        paths = [PurePosixPath(m.name)]
        if m.issym() or m.islnk():
            paths.append(PurePosixPath(m.linkname))
        bad = any(p.is_absolute() or ".." in p.parts for p in paths)
        if bad or not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            log.append(f"refused archive member {m.name!r} -> {m.linkname!r}")
            raise BuildError(f"the tree at {sha[:12]} has a path that may leave it: "
                             f"{m.name!r}", "\n".join(log))
    return members


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


def cmake_compiler(build: Path) -> str:
    """`gcc 12.2.0` from CMake's own compiler detection."""
    for f in sorted(build.glob("CMakeFiles/*/CMakeCCompiler.cmake")):
        text = f.read_text()
        cid = re.search(r'set\(CMAKE_C_COMPILER_ID "([^"]*)"\)', text)
        ver = re.search(r'set\(CMAKE_C_COMPILER_VERSION "([^"]*)"\)', text)
        if cid and ver:
            name = {"GNU": "gcc", "Clang": "clang", "AppleClang": "clang"}.get(
                cid.group(1), cid.group(1).lower())
            return f"{name} {ver.group(1)}"
    from .testbed import compiler_version

    return compiler_version(_cache_entries(build).get("CMAKE_C_COMPILER"))


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
