"""Runner settings: one class, read from the environment (prefix MALLARD_RUNNER_).

CLI options override these per invocation; everything else (cache and spool
locations, timeouts, intervals) is configured here and documented in
runner/README.md.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Literal

from mallard_wire.repo_urls import Prefix
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .arch import Platform, host_arch, normalize_arch, resolve_platform
from .build import LOG_MAX_BYTES
from .guard import parse_rules
from .peers import parse_catalogue
from .sandbox import DEFAULT_WORK_USER, Sandbox

PACKAGE_DIR = Path(__file__).resolve().parent
RUNNER_DIR = PACKAGE_DIR.parent
REPO_ROOT = RUNNER_DIR.parent


def _default_workloads_dir(arch: str | None = None) -> Path:
    """`build/workloads` for the host's own architecture, `build/workloads-<arch>` for a
    cross-built (emulated) one."""
    if arch is None or arch == host_arch():
        return REPO_ROOT / "build" / "workloads"
    return REPO_ROOT / "build" / f"workloads-{arch}"


def _default_state_dir() -> Path:
    return REPO_ROOT / ".mallard" / "runner"


SECRET_MIN_BYTES = 16
PLACEHOLDERS = ("CHANGE-ME", "CHANGEME")


def secret_problem(value: str) -> str | None:
    """Why `value` cannot be a real secret: a placeholder from an example file, or short."""
    if any(p in value.upper() for p in PLACEHOLDERS):
        return "is the CHANGE-ME placeholder of an example file: set a real secret"
    if len(value.encode()) < SECRET_MIN_BYTES:
        return f"is shorter than {SECRET_MIN_BYTES} bytes"
    return None


def read_token_file(path: Path) -> str:
    """The runner's token from `path`, a file only the agent may read (no permission for
    group or others); ValueError saying what is wrong."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"the runner token file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise ValueError(f"the runner token file {path} is mode "
                             f"{stat.S_IMODE(st.st_mode):04o}: it must be readable by the "
                             "agent's user only (chmod 600)")
        token = path.read_text().strip()
    except OSError as e:
        raise ValueError(f"cannot read the runner token file {path}: {e.strerror}") from e
    if not token:
        raise ValueError(f"the runner token file {path} is empty")
    why = secret_problem(token)
    if why:
        raise ValueError(f"the runner token in {path} {why}")
    return token


class RunnerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MALLARD_RUNNER_", extra="ignore")

    # where things live
    workloads_dir: Path = Field(default_factory=_default_workloads_dir)
    # the node's program workloads (`from: node`, programs.py); default: workloads_dir
    programs_dir: Path | None = None
    suites_dir: Path = RUNNER_DIR / "suites"
    state_dir: Path = Field(default_factory=_default_state_dir)
    cache_dir: Path | None = None  # default: <state_dir>/cache (git mirrors, trees, builds)
    spool_dir: Path | None = None  # default: <state_dir>/spool
    raw_dir: Path | None = None  # default: <state_dir>/raw (hyperfine JSON, stdout, stderr)

    # the architecture measured: the host's (native) or another run under qemu-user
    # (emulated: timings shown, never judged); arch.py
    arch: str = Field(default_factory=host_arch)
    emulator: str | None = None  # default qemu-<arch>
    sysroot: Path | None = None  # default /usr/<arch>-linux-gnu
    toolchain_file: Path | None = None  # default allocator/cmake/<arch>-linux-gnu.cmake
    peers_dir: Path | None = None  # default <repo>/build/peers-<arch> (make peers-arm64)

    # how trials run
    cpus: str = "0"
    hyperfine: str = "hyperfine"
    taskset: str = "taskset"
    valgrind: str = "valgrind"
    perf: str = "perf"
    # GNU time: a program workload's peak RSS (its %M), the one figure hyperfine does not give
    gnu_time: str = "/usr/bin/time"
    trial_timeout_seconds: float = 600.0
    # cachegrind runs per cell with deterministic params: the second shows whether the
    # counts repeat for this allocator (mimalloc's time-based purging makes its cache
    # misses move run to run); a verdict needs two that agree (docs/statistics.md, D2)
    deterministic_runs: int = Field(default=2, ge=1, le=10)
    noise_control: bool = True  # a fixed minimal environment; ASLR off when layouts=fixed
    # each timed trial's process layout (commands.py): `sampled` draws one per trial (ASLR
    # on, a random stack offset), so both sides of a comparison meet the same spread of
    # layouts; `fixed` runs every trial in one (ASLR off, the environment of a fixed size)
    layouts: Literal["sampled", "fixed"] = "sampled"
    tune_cpus: bool = True  # set the pinned CPUs' governor to performance, turbo off
    stderr_tail_chars: int = 2000
    seed: int = 42
    # what a job may ask to record (timelines.py): the RSS of its workload every this many
    # milliseconds (at most MAX_TIMELINE_POINTS kept: a longer trial's are halved), and one
    # malloc/free in this many timed by the latency shim (a power of two; default: the
    # shim's libmallard_latency.so next to the workloads)
    memory_interval_ms: float = Field(default=10.0, ge=1.0, le=60_000.0)
    latency_every: int = Field(default=64, ge=1, le=1 << 20)
    latency_shim: Path | None = None

    # the agent
    api: str | None = None
    # the runner's token: a file readable by the agent's user only (never an environment
    # variable: a process's environment is readable by its children; MALLARD_RUNNER_TOKEN
    # is refused)
    token_file: Path | None = None
    name: str | None = None
    lease_seconds: int = 900
    heartbeat_seconds: float = 30.0
    poll_seconds: float = 5.0
    http_timeout_seconds: float = 30.0
    retry_max_seconds: float = 60.0
    flush_timeout_seconds: float = 600.0
    # a post answered with a server error (5xx other than 503) this many times is given up:
    # moved to <spool>/rejected/ and its job reported failed (unreachable API, 408, 429 and
    # 503 never count: those posts wait in the spool until delivered)
    post_max_attempts: int = Field(default=10, ge=1)

    # who builds and workloads run as when the agent is root (sandbox.py): a user name
    # (created when missing) or uid:gid
    work_user: str = DEFAULT_WORK_USER

    # builds (build.py): what a build may print before it is killed (a recipe's own
    # timeout_seconds caps its time)
    build_log_max_bytes: int = Field(default=LOG_MAX_BYTES, ge=4096)
    # the node operator's system allocators, on top of glibc and the Debian peers:
    # `name=/abs/path/lib.so,...` (peers.parse_catalogue)
    catalogue: str = ""

    # what a job may name: repositories (comma list of scheme://host[:port] and
    # file:///folder entries; empty: none, only the runner's own checkout)
    repo_allow: str = ""

    @field_validator("latency_every")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError("must be a power of two (1, 2, 4, ... 1048576)")
        return v

    @field_validator("arch")
    @classmethod
    def _arch_name(cls, v: str) -> str:
        return normalize_arch(v)

    @model_validator(mode="after")
    def _cross_workloads(self) -> RunnerSettings:
        if "workloads_dir" not in self.model_fields_set:
            self.workloads_dir = _default_workloads_dir(self.arch)
        return self

    @property
    def sampled_layouts(self) -> bool:
        """Each timed trial draws its layout (commands.py): `layouts=sampled` in the minimal
        environment (an inherited one is whatever the agent's is)."""
        return self.noise_control and self.layouts == "sampled"

    @property
    def emulated(self) -> bool:
        return self.arch != host_arch()

    def platform(self) -> Platform:
        """The target and how programs run on it; ValueError naming what is missing."""
        return resolve_platform(self.arch, self.emulator, self.sysroot, self.toolchain_file,
                                REPO_ROOT, self.peers_dir or REPO_ROOT / "build" /
                                f"peers-{self.arch}")

    @field_validator("repo_allow")
    @classmethod
    def _rules_parse(cls, v: str) -> str:
        parse_rules(v)
        return v

    @field_validator("catalogue")
    @classmethod
    def _catalogue_parses(cls, v: str) -> str:
        parse_catalogue(v)
        return v

    def catalogue_entries(self) -> dict[str, Path]:
        return parse_catalogue(self.catalogue)

    def repo_rules(self) -> tuple[Prefix, ...]:
        return parse_rules(self.repo_allow)

    def shim(self) -> Path:
        return self.latency_shim or self.workloads_dir / "libmallard_latency.so"

    def cache(self) -> Path:
        return self.cache_dir or self.state_dir / "cache"

    def spool(self) -> Path:
        return self.spool_dir or self.state_dir / "spool"

    def raw(self) -> Path:
        return self.raw_dir or self.state_dir / "raw"

    def sandbox(self) -> Sandbox:
        """Where this runner's builds and workloads run (<state_dir>/work); the state,
        cache and raw folders kept the agent's (Sandbox.guard)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        box = Sandbox.create(self.state_dir / "work", self.work_user)
        box.guard(self.state_dir, self.cache(), self.raw())
        return box
