"""Finds the peer allocators installed on the node (glibc, jemalloc, mimalloc, tcmalloc).

glibc is "no preload". The others are shared libraries found through the
dynamic linker's cache (`ldconfig -p`, native ABI entries only) and then the
usual library directories for this machine's multiarch triplet. A missing
peer is reported, never an error.
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

# name -> sonames, in order of preference
PEER_LIBRARIES: dict[str, tuple[str, ...]] = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"),
}

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


def library_dirs() -> list[Path]:
    triplet = multiarch_triplet()
    dirs = [f"/usr/lib/{triplet}", f"/lib/{triplet}", "/usr/local/lib", f"/usr/local/lib/{triplet}",
            "/usr/lib64", "/lib64", "/usr/lib", "/lib"]
    return [Path(d) for d in dirs]


def ldconfig_cache() -> dict[str, Path]:
    """soname -> path, for the native ABI only."""
    abi = _LDCONFIG_ABI.get(platform.machine())
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


def find_library(sonames: tuple[str, ...], cache: dict[str, Path] | None = None) -> Path | None:
    cache = ldconfig_cache() if cache is None else cache
    for soname in sonames:
        if soname in cache and cache[soname].exists():
            return cache[soname]
    for d in library_dirs():
        for soname in sonames:
            p = d / soname
            if p.exists():
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


def find_peers(names: list[str] | None = None) -> tuple[dict[str, Peer], dict[str, str]]:
    """Return (found peers by name, missing peers with the reason)."""
    wanted = names or ["glibc", *PEER_LIBRARIES]
    cache = ldconfig_cache()
    found: dict[str, Peer] = {}
    missing: dict[str, str] = {}
    for name in wanted:
        if name == "glibc":
            libc = find_library(("libc.so.6",), cache)
            found[name] = Peer("glibc", None, sha256_file(libc) if libc else None,
                               libc_version().removeprefix("glibc "))
            continue
        sonames = PEER_LIBRARIES.get(name)
        if sonames is None:
            missing[name] = "not a known peer"
            continue
        lib = find_library(sonames, cache)
        if lib is None:
            missing[name] = f"none of {', '.join(sonames)} found (ldconfig -p, " \
                            f"{', '.join(str(d) for d in library_dirs()[:2])}, ...)"
            continue
        found[name] = Peer(name, lib, sha256_file(lib))
    return found, missing
