"""Runner settings: one class, read from the environment (prefix MALLARD_RUNNER_).

CLI options override these per invocation; everything else (cache and spool
locations, timeouts, intervals) is configured here and documented in
runner/README.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PACKAGE_DIR = Path(__file__).resolve().parent
RUNNER_DIR = PACKAGE_DIR.parent
REPO_ROOT = RUNNER_DIR.parent


def _default_workloads_dir() -> Path:
    return REPO_ROOT / "build" / "workloads"


def _default_state_dir() -> Path:
    return REPO_ROOT / ".mallard" / "runner"


def child_env() -> dict[str, str]:
    """The environment for builds and workloads: the runner's, without its secrets.

    The code built and run comes from the commits under test, so it never sees the
    runner's token (or any MALLARD_* variable: variants are set per trial) or a preload.
    """
    return {k: v for k, v in os.environ.items()
            if not k.startswith("MALLARD_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}


class RunnerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MALLARD_RUNNER_", extra="ignore")

    # where things live
    workloads_dir: Path = Field(default_factory=_default_workloads_dir)
    suites_dir: Path = RUNNER_DIR / "suites"
    state_dir: Path = Field(default_factory=_default_state_dir)
    cache_dir: Path | None = None  # default: <state_dir>/cache (git mirrors, trees, builds)
    spool_dir: Path | None = None  # default: <state_dir>/spool
    raw_dir: Path | None = None  # default: <state_dir>/raw (hyperfine JSON, stdout, stderr)

    # how trials run
    cpus: str = "0"
    hyperfine: str = "hyperfine"
    taskset: str = "taskset"
    valgrind: str = "valgrind"
    perf: str = "perf"
    trial_timeout_seconds: float = 600.0
    noise_control: bool = True  # ASLR off (setarch -R) and a fixed minimal environment
    tune_cpus: bool = True  # set the pinned CPUs' governor to performance, turbo off
    stderr_tail_chars: int = 2000
    seed: int = 42

    # the agent
    api: str | None = None
    token: str | None = None
    name: str | None = None
    lease_seconds: int = 900
    heartbeat_seconds: float = 30.0
    poll_seconds: float = 5.0
    http_timeout_seconds: float = 30.0
    retry_max_seconds: float = 60.0
    flush_timeout_seconds: float = 600.0

    def cache(self) -> Path:
        return self.cache_dir or self.state_dir / "cache"

    def spool(self) -> Path:
        return self.spool_dir or self.state_dir / "spool"

    def raw(self) -> Path:
        return self.raw_dir or self.state_dir / "raw"
