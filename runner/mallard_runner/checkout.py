"""A clean tree of a commit: source (git URL or local path) -> a bare mirror under
<cache>/repos -> the ref resolved to its full sha -> `git archive` of that sha into
<cache>/trees/<sha> (no stray files, no local changes).

Refs come from jobs, so they pass guard.py's checks here too (the agent checks them first):
a ref is a full sha or a valid ref name and reaches git after `--end-of-options`; git may
use only the source's own protocol and follows no redirects; nothing of the archive may
land outside the tree.

A recipe with `submodules` gets its tree another way (`checkout_submodules`): a clone of
the mirror at the sha, then `git submodule update --init` one level at a time, every
submodule URL (as git resolves it, relative ones against the source) checked first:
against the runner's repo allow-list when it has one (a job's), else (a local run) only
`file` and `https` URLs; git may speak only the protocols so checked.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from .guard import GIT_SAFE_CONFIG, Refused, check_ref, git_env, inside
from .tools import BuildError, locked, run


def _source_key(source: str) -> str:
    p = Path(source)
    canonical = str(p.resolve()) if p.exists() else source
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _fetch(bare: Path, src: str, refspecs: list[str], log: list[str], env: Mapping[str, str],
           *extra: str) -> subprocess.CompletedProcess[str]:
    """`git fetch` of `src` into the mirror; src and refspecs are data, never options."""
    return run(["git", *GIT_SAFE_CONFIG, "-C", str(bare), "fetch", "--quiet", *extra,
                 "--end-of-options", src, *refspecs], log, env={**env, **git_env(src)})

def _fetch_all(bare: Path, src: str, log: list[str], env: Mapping[str, str]) -> None:
    if not (bare / "HEAD").exists():
        bare.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        out = run(["git", "init", "--quiet", "--bare", "--", str(bare)], log, env=env)
        if out.returncode != 0:
            raise BuildError(f"cannot create a mirror of {src}", "\n".join(log))
    out = _fetch(bare, src, ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                      log, env, "--force", "--prune")
    if out.returncode != 0:
        raise BuildError(f"cannot fetch {src}", "\n".join(log))

def _verify(repo: Path, rev: str, log: list[str], env: Mapping[str, str]) -> str | None:
    out = run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                "--end-of-options", f"{rev}^{{commit}}"], log, env=env)
    return out.stdout.strip() if out.returncode == 0 else None

def resolve(cache: Path, source: str, ref: str, log: list[str], env: Mapping[str, str]
            ) -> tuple[Path, str]:
    """(mirror, full sha) of `ref` as the source sees it (HEAD is the source's HEAD); git
    runs with `env` (the agent's allow-listed environment, sandbox.Sandbox.agent_env)."""
    try:
        check_ref(ref)
        git_env(source)  # refuses what git must never be given (ext::, options)
    except Refused as e:
        log.append(str(e))
        raise BuildError(str(e), "\n".join(log)) from e
    local = Path(source).is_dir()  # a repository here (a bundle file is fetched like a URL)
    src = str(Path(source).resolve()) if Path(source).exists() else source
    bare = cache / "repos" / f"{_source_key(source)}.git"
    with locked(bare.with_suffix(".lock")):
        _fetch_all(bare, src, log, env)
        sha: str | None = None
        if local:
            sha = _verify(Path(src), ref, log, env)
        elif re.fullmatch(r"[0-9a-fA-F]{7,40}", ref):
            sha = _verify(bare, ref, log, env)
        if sha is None and not local:
            out = _fetch(bare, src, [ref], log, env)
            if out.returncode == 0:
                sha = _verify(bare, "FETCH_HEAD", log, env)
        if sha is None:
            raise BuildError(f"cannot resolve {ref!r} in {source}", "\n".join(log))
        if _verify(bare, sha, log, env) is None:  # e.g. a detached HEAD on no branch
            _fetch(bare, src, [sha], log, env)
            if _verify(bare, sha, log, env) is None:
                raise BuildError(f"cannot fetch {sha} from {source}", "\n".join(log))
    return bare, sha

def checkout(cache: Path, bare: Path, sha: str, log: list[str], env: Mapping[str, str]) -> Path:
    """A clean tree of `sha` (git archive, extracted once, atomically), the agent's: a build
    (as the work user) may read it, never change it."""
    tree = cache / "trees" / sha
    if tree.is_dir() and not tree.is_symlink() and tree.stat().st_uid == os.geteuid():
        return tree
    if tree.is_symlink() or tree.exists():  # not the agent's: nothing of it is trusted
        log.append(f"removing {tree}: not extracted by this agent")
        if tree.is_dir() and not tree.is_symlink():
            shutil.rmtree(tree)
        else:
            tree.unlink()
    tree.parent.mkdir(parents=True, exist_ok=True)
    log.append(f"$ git -C {bare} archive {sha} | tar -x -C {tree}")
    out = subprocess.run(["git", "-C", str(bare), "archive", "--format=tar",
                          "--end-of-options", sha], capture_output=True, env=env,
                         stdin=subprocess.DEVNULL)
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
        tmp.chmod(0o755)  # mkdtemp's 0700: the work user reads the tree
        tmp.rename(tree)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return tree


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


MAX_SUBMODULE_DEPTH = 4


def _submodule_urls(repo: Path, log: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """name -> url of the submodules of `repo`, as `git submodule init` resolved them
    (relative ones against its origin) into its .git/config."""
    out = run(["git", "-C", str(repo), "config", "--get-regexp",
               r"^submodule\..*\.url$"], log, env=env)
    urls: dict[str, str] = {}
    for line in out.stdout.splitlines():
        key, _, url = line.partition(" ")
        urls[key.removeprefix("submodule.").removesuffix(".url")] = url.strip()
    return urls


def _init_level(repo: Path, origin: str, check_url: Callable[[str], str], log: list[str],
                env: Mapping[str, str], depth: int) -> None:
    """`git submodule update --init` of `repo`'s own submodules (URLs checked), then of
    theirs, down to MAX_SUBMODULE_DEPTH."""
    if not (repo / ".gitmodules").is_file():
        return
    if depth > MAX_SUBMODULE_DEPTH:
        raise BuildError(f"submodules nested deeper than {MAX_SUBMODULE_DEPTH}", "\n".join(log))
    git = ["git", *GIT_SAFE_CONFIG, "-C", str(repo)]
    run([*git, "remote", "set-url", "origin", "--", origin], log, env=env)
    if run([*git, "submodule", "--quiet", "init"], log, env=env).returncode != 0:
        raise BuildError("git submodule init failed", "\n".join(log))
    schemes: set[str] = set()
    for name, url in _submodule_urls(repo, log, env).items():
        try:
            schemes.add(check_url(url))
        except Refused as e:
            log.append(str(e))
            raise BuildError(f"submodule {name[:80]!r}: {e}", "\n".join(log)) from e
    update = {**env, "GIT_ALLOW_PROTOCOL": ":".join(sorted(schemes)) or "file",
              "GIT_TERMINAL_PROMPT": "0", "GIT_PROTOCOL_FROM_USER": "0"}
    if run([*git, "submodule", "--quiet", "update", "--", "."], log,
           env=update).returncode != 0:
        raise BuildError("git submodule update failed", "\n".join(log))
    paths = run(["git", "-C", str(repo), "config", "-f", ".gitmodules", "--get-regexp",
                 r"^submodule\..*\.path$"], log, env=env).stdout.splitlines()
    urls = _submodule_urls(repo, log, env)
    for line in paths:
        key, _, rel = line.partition(" ")
        name = key.removeprefix("submodule.").removesuffix(".path")
        try:
            sub = inside(repo, rel.strip(), "submodule path")
        except Refused as e:
            raise BuildError(str(e), "\n".join(log)) from e
        if name in urls and (sub / ".git").exists():
            _init_level(sub, urls[name], check_url, log, env, depth + 1)


def checkout_submodules(cache: Path, bare: Path, source: str, sha: str, log: list[str],
                        env: Mapping[str, str], check_url: Callable[[str], str]) -> Path:
    """A tree of `sha` with its submodules (a clone of the mirror, the agent's), made once.
    `check_url` returns a submodule URL's scheme or raises Refused."""
    tree = cache / "trees" / f"{sha}-submodules"
    if tree.is_dir() and not tree.is_symlink() and tree.stat().st_uid == os.geteuid():
        return tree
    if tree.is_symlink():
        tree.unlink()
    elif tree.exists():
        shutil.rmtree(tree)
    tree.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-sub-", dir=tree.parent))
    local = {**env, **git_env(str(bare))}
    try:
        if run(["git", *GIT_SAFE_CONFIG, "clone", "--quiet", "--no-checkout", "--",
                str(bare), str(tmp / "t")], log, env=local).returncode != 0 or run(
                ["git", "-C", str(tmp / "t"), "-c", "advice.detachedHead=false", "checkout",
                 "--quiet", "--detach", sha], log, env=local).returncode != 0:
            raise BuildError(f"cannot check out {sha[:12]} with its submodules",
                             "\n".join(log))
        origin = str(Path(source).resolve()) if Path(source).exists() else source
        _init_level(tmp / "t", origin, check_url, log, env, 1)
        (tmp / "t").chmod(0o755)
        try:
            (tmp / "t").rename(tree)
        except OSError:
            if not tree.is_dir():  # else another build of this sha won the race
                raise
    except OSError as e:
        raise BuildError(f"cannot check out {sha[:12]} with its submodules: {e}",
                         "\n".join(log)) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tree
