"""Finds the peer allocators installed on the node (glibc, jemalloc, mimalloc, tcmalloc).

glibc is "no preload". The others are shared libraries found through the
dynamic linker's cache (`ldconfig -p`, native ABI entries only) and then the
usual library directories for this machine's multiarch triplet. A missing
peer is reported, never an error.

On an emulated testbed (arch.py) the peers are the target's: Debian's arm64 packages
(`libjemalloc2:arm64`, ...) extracted into the runner's peers folder (`make peers-arm64`;
never installed: a `libc6:arm64` beside the cross sysroot's older libc makes the guest's
ld.so load a libc of another build, and every threaded program hangs), then the multiarch
and sysroot folders; a library is taken only when its ELF machine is the target's. glibc
is the sysroot's libc.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from .arch import Platform, elf_machine

# name -> sonames, in order of preference
PEER_LIBRARIES: dict[str, tuple[str, ...]] = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"),
}

# the Debian packages of the peers, and Debian's names of the architectures (multiarch)
DEBIAN_PACKAGES = {"jemalloc": "libjemalloc2", "mimalloc": "libmimalloc2.0",
                   "tcmalloc": "libtcmalloc-minimal4"}
DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}

# ldconfig -p prints e.g. "(libc6,x86-64)" or "(libc6,AArch64)" for the native ABI
_LDCONFIG_ABI = {"x86_64": "x86-64", "aarch64": "AArch64"}


@dataclass(frozen=True)
class Peer:
    name: str
    library: Path | None  # None: glibc, no preload
    sha256: str | None
    version: str | None = None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def multiarch_triplet() -> str:
    triplet = sysconfig.get_config_var("MULTIARCH")
    if isinstance(triplet, str) and triplet:
        return triplet
    try:
        out = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except OSError:
        pass
    return f"{platform.machine()}-linux-gnu"


def library_dirs(platform: Platform | None = None) -> list[Path]:
    if platform is not None and platform.emulated:
        assert platform.sysroot is not None
        t = platform.triplet
        own = [platform.peers_dir] if platform.peers_dir is not None else []
        return [*own, Path(f"/usr/lib/{t}"), Path(f"/lib/{t}"), platform.sysroot / "lib",
                Path(f"/usr/local/lib/{t}")]
    triplet = multiarch_triplet()
    dirs = [f"/usr/lib/{triplet}", f"/lib/{triplet}", "/usr/local/lib", f"/usr/local/lib/{triplet}",
            "/usr/lib64", "/lib64", "/usr/lib", "/lib"]
    return [Path(d) for d in dirs]


def ldconfig_cache(arch: str | None = None) -> dict[str, Path]:
    """soname -> path, for the native ABI (or `arch`'s) only."""
    abi = _LDCONFIG_ABI.get(arch or platform.machine())
    found: dict[str, Path] = {}
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10)
        except OSError:
            continue
        for line in out.stdout.splitlines():
            m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
            if not m:
                continue
            soname, tags, path = m.groups()
            if abi is not None and abi not in tags.split(","):
                continue  # a foreign ABI (i386 multilib, x32, cross libraries)
            found.setdefault(soname, Path(path))
        break
    return found


def find_library(sonames: tuple[str, ...], cache: dict[str, Path] | None = None,
                 target: Platform | None = None) -> Path | None:
    cache = ldconfig_cache() if cache is None else cache
    machine = target.arch if target is not None and target.emulated else None

    def fits(p: Path) -> bool:  # an emulated target takes only libraries of its machine
        return p.exists() and (machine is None or elf_machine(p) == machine)

    for soname in sonames:
        if soname in cache and fits(cache[soname]):
            return cache[soname]
    for d in library_dirs(target):
        for soname in sonames:
            p = d / soname
            if fits(p):
                return p
    return None


def libc_version() -> str:
    try:
        v = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (ValueError, OSError):
        v = None
    if v:
        return v
    name, version = platform.libc_ver()
    return f"{name} {version}".strip() or "unknown"


def find_peers(names: list[str] | None = None, target: Platform | None = None
               ) -> tuple[dict[str, Peer], dict[str, str]]:
    """Return (found peers by name, missing peers with the reason)."""
    wanted = names or ["glibc", *PEER_LIBRARIES]
    emulated = target is not None and target.emulated
    cache = ldconfig_cache(target.arch if target is not None else None)
    found: dict[str, Peer] = {}
    missing: dict[str, str] = {}
    for name in wanted:
        if name == "glibc":
            libc = find_library(("libc.so.6",), cache, target)
            version = (target.libc if emulated and target is not None else None) or libc_version()
            found[name] = Peer("glibc", None, sha256_file(libc) if libc else None,
                               version.removeprefix("glibc "))
            continue
        sonames = PEER_LIBRARIES.get(name)
        if sonames is None:
            missing[name] = "not a known peer"
            continue
        lib = find_library(sonames, cache, target)
        if lib is None:
            hint = ""
            if emulated and target is not None:
                deb = DEBIAN_ARCH.get(target.arch, target.arch)
                hint = f" (make peers-{deb} extracts {DEBIAN_PACKAGES.get(name, name)}:{deb})"
            missing[name] = f"none of {', '.join(sonames)} found (ldconfig -p, " \
                            f"{', '.join(str(d) for d in library_dirs(target)[:2])}, ...)" + hint
            continue
        found[name] = Peer(name, lib, sha256_file(lib))
    return found, missing
