"""The architecture a runner measures: the host's own (native), or another one run under
qemu's user-mode emulator (emulated).

A runner whose target (setting `arch`, default the host's `platform.machine()`) differs
from the host is an *emulated testbed*: it cross-builds the allocator and the workloads
with a CMake toolchain file and runs each workload as

    qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_PRELOAD=<lib> <workload> --threads 2 ...

`-L` makes the cross sysroot the guest's root for the dynamic linker and libc. The
preload goes through `-E`, never through qemu's own environment: qemu is a host program,
and a host LD_PRELOAD would be offered to it (an aarch64 library in an x86-64 process:
an error line on every trial). Every other variable of the workload's environment
(MALLARD_*, the stats file) reaches the guest unchanged, since qemu hands its environment
on. `-E` splits its value at commas, so a preload path with a comma is refused.

Nothing here is used on a native node: an arm64 node runs the same agent with
`arch == host`, natively.
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# what people and tools also call these architectures -> the kernel's name (uname -m),
# the API's table (`mallard_wire.fields`)
from mallard_wire.fields import ARCH_ALIASES as ALIASES

# ELF e_machine -> architecture (the libraries a runner preloads must match its target)
ELF_MACHINES = {62: "x86_64", 183: "aarch64", 3: "i386", 40: "arm", 243: "riscv64"}


def normalize_arch(name: str) -> str:
    """`arm64` -> `aarch64`; `x86_64` stays; anything but a plain name is refused."""
    arch = ALIASES.get(name.strip().lower(), name.strip().lower())
    if not re.fullmatch(r"[a-z0-9_]{1,20}", arch):
        raise ValueError(f"not an architecture name: {name!r}")
    return arch


def host_arch() -> str:
    return normalize_arch(platform.machine())


def elf_machine(path: Path) -> str | None:
    """The architecture an ELF file is built for (`aarch64`), None if it is not ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return ELF_MACHINES.get(machine, f"elf-machine-{machine}")


@dataclass(frozen=True)
class Platform:
    """The target a runner measures and, when it is emulated, how it runs programs."""

    arch: str
    host: str
    emulator: str | None = None  # path of qemu-<arch>, when emulated
    sysroot: Path | None = None  # the guest's root for the dynamic linker (-L)
    toolchain: Path | None = None  # the runner's own CMake toolchain file for `arch`
    peers_dir: Path | None = None  # the target's peer libraries (scripts/arm64-peers.sh)

    @property
    def emulated(self) -> bool:
        return self.arch != self.host

    @property
    def triplet(self) -> str:
        return f"{self.arch}-linux-gnu"

    def guest_prefix(self, preload: list[str]) -> list[str]:
        """`qemu-<arch> -L <sysroot> [-E LD_PRELOAD=...]`: what runs a workload on an
        emulated testbed (empty when native). `preload` holds `LD_PRELOAD=` entries."""
        if not self.emulated:
            return []
        assert self.emulator is not None and self.sysroot is not None
        out = [self.emulator, "-L", str(self.sysroot)]
        for entry in preload:
            if "," in entry:  # qemu's -E reads a comma as the start of another variable
                raise ValueError(f"a preload path with a comma cannot reach the guest: {entry!r}")
            out += ["-E", entry]
        return out

    @property
    def emulator_version(self) -> str | None:
        """`qemu-aarch64 7.2.22` (None when native)."""
        return _version(self.emulator) if self.emulated and self.emulator else None

    @property
    def libc(self) -> str | None:
        """`glibc 2.36` of the sysroot's libc, asked by running it in the guest (None when
        native or unknown)."""
        if not self.emulated or self.emulator is None or self.sysroot is None:
            return None
        return _guest_libc(self.emulator, str(self.sysroot))

    @property
    def compiler(self) -> str:
        """The C cross compiler of the toolchain files (`aarch64-linux-gnu-gcc`), or `cc`."""
        return f"{self.triplet}-gcc" if self.emulated else "cc"


@functools.cache
def _version(emulator: str) -> str:
    try:
        out = subprocess.run([emulator, "--version"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return Path(emulator).name
    m = re.search(r"version (\S+)", out)
    return f"{Path(emulator).name} {m.group(1)}" if m else Path(emulator).name


@functools.cache
def _guest_libc(emulator: str, sysroot: str) -> str | None:
    for lib in (Path(sysroot) / "lib" / "libc.so.6", Path(sysroot) / "lib64" / "libc.so.6"):
        if not lib.exists():
            continue
        try:  # glibc's libc.so.6 is also a program that prints its version
            out = subprocess.run([emulator, "-L", sysroot, str(lib)], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        m = re.search(r"release version (\d+\.\d+(?:\.\d+)?)", out)
        return f"glibc {m.group(1)}" if m else None
    return None


def resolve_platform(arch: str, emulator: str | None = None, sysroot: Path | None = None,
                     toolchain: Path | None = None, repo_root: Path | None = None,
                     peers_dir: Path | None = None) -> Platform:
    """The runner's Platform from its settings; ValueError saying what is missing."""
    arch = normalize_arch(arch)
    host = host_arch()
    if arch == host:
        return Platform(arch, host)
    triplet = f"{arch}-linux-gnu"
    name = emulator or f"qemu-{arch}"
    path = shutil.which(name)
    if path is None:
        raise ValueError(f"an {arch} runner on this {host} host runs workloads under {name}, "
                         "which is not installed (Debian: qemu-user; scripts/install-deps.sh)")
    root = sysroot or Path("/usr") / triplet
    if not root.is_dir():
        raise ValueError(f"the {arch} sysroot {root} is missing (Debian: "
                         f"libc6-dev-{'arm64' if arch == 'aarch64' else arch}-cross)")
    tc = toolchain or (repo_root / "allocator" / "cmake" / f"{triplet}.cmake"
                       if repo_root else None)
    if tc is None or not tc.is_file():
        raise ValueError(f"no CMake toolchain file for {arch} ({tc}); set "
                         "MALLARD_RUNNER_TOOLCHAIN_FILE")
    return Platform(arch, host, path, root, tc.resolve(), peers_dir)
