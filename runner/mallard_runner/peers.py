"""The node's catalogue of system allocators: glibc, the Debian peers (jemalloc, mimalloc,
tcmalloc) and any library the node's operator lists (setting `catalogue`,
`MALLARD_RUNNER_CATALOGUE="name=/abs/path/lib.so,..."`: `parse_catalogue`).

glibc is "no preload". The Debian peers are shared libraries found through the
dynamic linker's cache (`ldconfig -p`, native ABI entries only) and then the
usual library directories for this machine's multiarch triplet; an operator's entry is
its path (an ELF shared object, checked when the settings are read), and wins over the
Debian lookup of the same name. A missing entry is reported, never an error.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mallard_wire.fields import AllocatorName
from pydantic import TypeAdapter

from .arch import Platform, elf_machine

# name -> sonames, in order of preference
PEER_LIBRARIES: dict[str, tuple[str, ...]] = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"),
}

# the names the catalogue always has (an operator's entries come on top)
CATALOGUE_NAMES = ("glibc", *PEER_LIBRARIES)
_NAME = TypeAdapter(AllocatorName)
ET_DYN = 3  # ELF e_type of a shared object

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


def is_shared_object(path: Path) -> bool:
    """An ELF file of type ET_DYN (a shared library; a PIE program is one too)."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return False
    if len(head) < 18 or head[:4] != b"\x7fELF":
        return False
    return int.from_bytes(head[16:18], "little" if head[5] == 1 else "big") == ET_DYN


def parse_catalogue(text: str) -> dict[str, Path]:
    """The operator's entries, `name=/abs/path/lib.so,...`: a name of an allocator (not
    glibc, each once), the absolute path of an existing ELF shared object; ValueError
    naming the entry otherwise."""
    out: dict[str, Path] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, path = (s.strip() for s in entry.partition("="))
        if not sep:
            raise ValueError(f"catalogue entry {entry[:80]!r}: expected name=/path/lib.so")
        try:
            _NAME.validate_python(name)
        except ValueError:
            raise ValueError(f"catalogue entry {entry[:80]!r}: {name[:40]!r} is not an "
                             "allocator name (letters, digits, _ . + -)") from None
        if name == "glibc" or name in out:
            raise ValueError(f"catalogue entry {entry[:80]!r}: "
                             + ("glibc is the C library itself" if name == "glibc"
                                else f"{name} is listed twice"))
        lib = Path(path)
        if not lib.is_absolute():
            raise ValueError(f"catalogue entry {entry[:80]!r}: the path must be absolute")
        if not lib.is_file() or not is_shared_object(lib):
            raise ValueError(f"catalogue entry {entry[:80]!r}: {path[:200]} is not an "
                             "existing ELF shared object")
        out[name] = lib
    return out


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


def find_peers(names: list[str] | None = None, target: Platform | None = None,
               operator: Mapping[str, Path] | None = None
               ) -> tuple[dict[str, Peer], dict[str, str]]:
    """Return (found catalogue entries by name, missing ones with the reason); `operator`:
    the node operator's entries (parse_catalogue)."""
    operator = operator or {}
    wanted = names or [*CATALOGUE_NAMES, *(n for n in operator if n not in CATALOGUE_NAMES)]
    emulated = target is not None and target.emulated
    cache = ldconfig_cache(target.arch if target is not None else None)
    found: dict[str, Peer] = {}
    missing: dict[str, str] = {}
    for name in wanted:
        if name in operator:
            listed = operator[name]
            if emulated and target is not None and elf_machine(listed) != target.arch:
                missing[name] = f"{listed} is not a library of {target.arch}"
            elif not listed.is_file():
                missing[name] = f"{listed} is gone"
            else:
                found[name] = Peer(name, listed, sha256_file(listed))
            continue
        if name == "glibc":
            libc = find_library(("libc.so.6",), cache, target)
            version = (target.libc if emulated and target is not None else None) or libc_version()
            found[name] = Peer("glibc", None, sha256_file(libc) if libc else None,
                               version.removeprefix("glibc "))
            continue
        sonames = PEER_LIBRARIES.get(name)
        if sonames is None:
            missing[name] = "not in this node's catalogue"
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
