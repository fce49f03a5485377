"""The command lines a trial runs: pinned (`taskset`), in a fixed minimal environment
padded to a fixed size (`env -i ... _PAD=`), preloaded, under `perf stat` when it counts,
and under qemu-user on an emulated testbed (the preload is the guest's). The executor's
module docstring shows a whole command.

The process layout (setting `layouts`): `sampled` (the default) draws one per timed trial,
ASLR on and `_PAD` longer by a random multiple of 16 bytes below `LAYOUT_PAD_SPAN`, so the
stack starts at another address and offset within its cache lines and pages in every
trial, and the trial records it (`TrialLayout`); `fixed` runs every trial under
`setarch -R` (ASLR off) with the fixed-size environment: one layout for all. Cachegrind
runs always take the fixed layout: their counts must repeat."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from mallard_wire.results import TrialLayout

from .arch import Platform
from .cells import Cell, Params
from .measures import PERF_EVENTS
from .settings import RunnerSettings
from .testbed import kernel_aslr, setarch_prefix
from .timelines import LATENCY_FILE

# Fixed simulated caches, so the counts do not depend on the host's cache sizes.
CACHEGRIND_CACHES = {"I1": "32768,8,64", "D1": "32768,8,64", "LL": "8388608,16,64"}
MINIMAL_ENV = ("PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C")
PEAK_RSS_FILE = "peak-rss.txt"  # GNU time's -o file in a program workload's trial folder
ENV_BLOCK = 512  # the workload's environment is padded to a multiple of this many bytes
# a sampled layout's extra padding: 0..4080 bytes in 16-byte steps (the stack's alignment),
# every offset within a page and so within every cache line and set
LAYOUT_PAD_SPAN = 4096
LAYOUT_PAD_STEP = 16


def padded_env(pairs: list[str], block: int = ENV_BLOCK, extra: int = 0) -> list[str]:
    """`pairs` plus `_PAD=xxx` so that the environment block (each string and its NUL) is a
    multiple of `block` bytes, the same size for every allocator and variant, plus
    `extra` bytes (a sampled layout's stack offset)."""
    size = sum(len(p.encode()) + 1 for p in pairs) + len("_PAD=") + 1
    return [*pairs, "_PAD=" + "x" * (-size % block + extra)]


def draw_layout(rng: random.Random) -> TrialLayout:
    """One sampled layout: ASLR as the kernel allows, a random stack offset."""
    return TrialLayout(aslr=kernel_aslr(),
                       env_pad=rng.randrange(0, LAYOUT_PAD_SPAN, LAYOUT_PAD_STEP))


class Commands:
    """Builds the trial and cachegrind command lines for one node's CPUs and target."""

    def __init__(self, settings: RunnerSettings, cpus: list[int], target: Platform,
                 use_perf: bool, latency_shim: Path | None = None):
        self.settings = settings
        self.latency_shim = latency_shim  # preloaded first in timed trials (timelines.py)
        self.cpus = cpus
        self.target = target
        self.use_perf = use_perf
        self.noise_control = settings.noise_control
        self.setarch = list(setarch_prefix() or ())
        # a program workload's peak RSS: GNU time around it (the built-ins report their own)
        self.gnu_time = shutil.which(settings.gnu_time)
        # layouts are drawn per trial from the system's randomness, never from the run's
        # seed: a follow-up job of the same seed meets new layouts, and each is recorded
        self.sampled = settings.sampled_layouts
        self._rng = random.Random()

    def _cpu_list(self) -> str:
        return ",".join(str(c) for c in self.cpus)

    @staticmethod
    def workload_env(cell: Cell, stats_file: bool = True) -> list[str]:
        """The variables the workload runs with: the preload, the variant and (`stats_file`)
        the recipe's stats hook (cells.Target.environment)."""
        pairs: list[str] = []
        if cell.target.preload is not None:
            pairs.append(f"LD_PRELOAD={cell.target.preload}")
        for k, v in cell.target.environment(counters=stats_file).items():
            pairs.append(f"{k}={v}")
        return pairs

    def layout(self) -> TrialLayout | None:
        """The next timed trial's layout: a new one when layouts are sampled, else None."""
        return draw_layout(self._rng) if self.sampled else None

    def pinned(self, minimal: bool, pairs: list[str],
               layout: TrialLayout | None = None) -> tuple[list[str], list[str]]:
        """(taskset [setarch -R], env [-i MINIMAL...] PAIRS [_PAD] [qemu -L root -E PRELOAD]):
        what runs the workload; with a `layout`, ASLR on and its stack offset."""
        pin = [self.settings.taskset, "-c", self._cpu_list()]
        extra = layout.env_pad if layout is not None else 0
        env = padded_env([*MINIMAL_ENV, *pairs], extra=extra) if minimal else pairs
        if self.target.emulated:  # the preload is the guest's: qemu's -E, never qemu's own
            preload = [p for p in env if p.startswith("LD_PRELOAD=")]
            env = [p for p in env if not p.startswith("LD_PRELOAD=")]
            guest = self.target.guest_prefix(preload)
        else:
            guest = []
        if minimal:
            aslr_off = self.setarch if layout is None else []
            return [*pin, *aslr_off], ["env", "-i", *env, *guest]
        return pin, ["env", *env, *guest]

    def latency_env(self, pairs: list[str], trial_dir: Path) -> list[str]:
        """`pairs` with the latency shim preloaded before the allocator (its first
        definition of malloc and free wins) and told where to write and how often to time."""
        if self.latency_shim is None:
            return pairs
        preload = [p.removeprefix("LD_PRELOAD=") for p in pairs if p.startswith("LD_PRELOAD=")]
        rest = [p for p in pairs if not p.startswith("LD_PRELOAD=")]
        return [f"LD_PRELOAD={' '.join([str(self.latency_shim), *preload])}", *rest,
                f"MALLARD_LATENCY_FILE={trial_dir / LATENCY_FILE}",
                f"MALLARD_LATENCY_EVERY={self.settings.latency_every}"]

    def trial(self, cell: Cell, trial_dir: Path,
              layout: TrialLayout | None = None) -> list[str]:
        """The command hyperfine times for one trial (stderr kept, pinned, preloaded), in
        `layout` (None: the fixed one)."""
        pairs = self.latency_env(self.workload_env(cell), trial_dir)
        pin, env = self.pinned(self.noise_control, pairs, layout)
        perf: list[str] = []
        if self.use_perf:
            perf = [self.settings.perf, "stat", "-x", ",", "-e", ",".join(PERF_EVENTS),
                    "-o", str(trial_dir / "perf.txt"), "--"]
        if cell.program is None:
            return ["sh", "-c", 'f=$1; shift; exec "$@" 2>"$f"', "sh",
                    str(trial_dir / "stderr"), *pin, *perf, *env, *cell.argv()]
        assert cell.bin_dir is not None
        stdin = cell.program.stdin_path(cell.bin_dir) or Path(os.devnull)
        rss = ([self.gnu_time, "-f", "%M", "-o", str(trial_dir / PEAK_RSS_FILE)]
               if self.gnu_time and not self.target.emulated else [])
        return ["sh", "-c", 'f=$1; i=$2; shift 2; exec "$@" 2>"$f" <"$i"', "sh",
                str(trial_dir / "stderr"), str(stdin), *pin, *rss, *perf, *env, *cell.argv()]

    def deterministic(self, cell: Cell) -> list[str]:
        """cachegrind at the cell's small params, always in the fixed environment."""
        assert cell.deterministic_params is not None
        caches = [f"--{k}={v}" for k, v in CACHEGRIND_CACHES.items()]
        pin, env = self.pinned(True, self.workload_env(cell, stats_file=False))
        return [*pin, *env, self.settings.valgrind, "--tool=cachegrind", "--cache-sim=yes",
                *caches, "--cachegrind-out-file=cachegrind.out",
                *cell.argv(cell.deterministic_params)]

    def callgrind(self, cell: Cell, params: Params) -> list[str]:
        """callgrind at `params` (a profile job's), in the same fixed environment."""
        pin, env = self.pinned(True, self.workload_env(cell, stats_file=False))
        return [*pin, *env, self.settings.valgrind, "--tool=callgrind", "--dump-instr=no",
                "--callgrind-out-file=callgrind.out", *cell.argv(params)]
