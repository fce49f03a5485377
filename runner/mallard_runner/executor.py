"""The executor: runs cells (allocator x variant x workload x params) pinned, interleaved.

hyperfine is the timing engine. One trial is one hyperfine run of one command, started
in the trial's directory:

    hyperfine -N --runs 1 -i --style none --output <trial>/stdout \
        --export-json <trial>/hyperfine.json \
        'sh -c "f=$1; shift; exec \"$@\" 2>\"$f\"" sh <trial>/stderr \
         taskset -c 1 env -i PATH=/usr/bin:/bin LC_ALL=C \
         LD_PRELOAD=libmallard.so MALLARD_TRANSFER=ring MALLARD_STATS_FILE=stats-%p.json \
         _PAD=... <workload> --threads 2 ...'

`sh` only redirects stderr and execs, so the workload is hyperfine's direct
child's image: its exit status or signal (hyperfine reports 128+N) is the
workload's. The preload is set by `env` after `taskset`, so only the workload
runs with the allocator under test. A program workload (programs.py) runs as `sh -c
'f=$1; i=$2; shift 2; exec "$@" 2>"$f" <"$i"' sh <stderr> <stdin> taskset ... /usr/bin/time
-f %M -o peak-rss.txt env -i ...`: its stdin file (or /dev/null), and GNU time for its peak
RSS (the built-ins report their own). Every file of every trial is kept under the
raw directory; the per-trial record is a `TrialIn` (contracts §5).

Noise control (setting `noise_control`, on by default): `env -i` gives the workload a
fixed minimal environment padded to a fixed size (`_PAD`), the same for every allocator.
Its layout (setting `layouts`, commands.py): `sampled` (default) draws one per timed trial,
ASLR on and `_PAD` longer by a random offset (argv and environment sit at the top of the
stack, so the stack moves), recorded as the trial's `layout`; `fixed` adds `setarch -R`
(ASLR off), so the stack starts at the same address in every trial of every allocator.

Cells run INTERLEAVED: round i runs trial i of every cell, in an order shuffled
by a seeded RNG, before round i+1 starts. Warm-up rounds come first and are
recorded with warmup=true. `by_case` (every job, and runner/bench/allocators.py) keeps the
cells of one case (workload and params) together within a round, a block, in a shuffled
order of cases and a shuffled order of allocators within each, a comparison's base and head
back to back: the trials a paired comparison sets side by side (same job, same `seq`) run
seconds apart rather than anywhere in a long round, so a slow spell of the machine moves
both (`round_order`). The seed and every round's order go into the artifacts.
Before them, every cell with deterministic params (and not a `peer`: a comparison
judges base against head) gets one run under valgrind's
cachegrind: `instructions`, `d1_misses`, `llc_misses`, the same on every run. When
`perf stat` counts on the node, every timed trial also gets `hw_instructions`,
`hw_cycles` and `hw_llc_misses`: hardware counts, as noisy as a timing.

On an emulated testbed (arch.py) the workload runs as `qemu-<arch> -L <sysroot>
[-E LD_PRELOAD=<lib>] <workload> ...` after `env -i`: the preload goes to the guest only
(never to qemu, a host program), and the environment is padded with the preload counted,
so the guest's environment has the same size for every allocator. There is no cachegrind
(valgrind cannot run another architecture's programs) and no perf (it would count qemu).
"""

from __future__ import annotations

import itertools
import os
import random
import shlex
import shutil
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mallard_wire.fields import JsonDict
from mallard_wire.results import TrialIn, TrialLayout, WorkloadIn

from .arch import Platform
from .cells import Cell, Params
from .commands import PEAK_RSS_FILE, Commands
from .counters import read_counters
from .measures import (
    derive_ratios,
    parse_cachegrind,
    parse_perf_stat,
    perf_works,
    read_hyperfine,
    read_output,
    read_peak_rss,
    tail,
    with_note,
)
from .sandbox import Sandbox
from .settings import RunnerSettings
from .timelines import RssSampler, Timeline, latency_of


class Cancelled(RuntimeError):
    """The run was asked to stop (SIGTERM, or the job's lease was lost)."""


@dataclass
class RunOutput:
    trials: list[TrialIn] = field(default_factory=list)
    hyperfine: JsonDict = field(default_factory=dict)  # cell key -> {"runs": [...]}
    order: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _now() -> datetime:
    return datetime.now(UTC)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def require_tools(settings: RunnerSettings) -> None:
    """Every trial runs under hyperfine and taskset: FileNotFoundError naming the one missing
    (a job then fails at once, not three times, and an agent does not start)."""
    for tool in (settings.hyperfine, settings.taskset):
        if not shutil.which(tool):
            raise FileNotFoundError(f"{tool} not found on this runner: install it "
                                    "(scripts/install-deps.sh, or make deps)")


class Executor:
    def __init__(self, settings: RunnerSettings, cpus: list[int], raw_dir: Path,
                 on_trial: Callable[[TrialIn, Cell], None] | None = None,
                 cancel: threading.Event | None = None, use_perf: bool | None = None,
                 target: Platform | None = None, sandbox: Sandbox | None = None,
                 record: frozenset[str] = frozenset()):
        self.settings = settings
        # the workload runs the allocator under test: as the work user (sandbox.py)
        self.sandbox = sandbox if sandbox is not None else settings.sandbox()
        self.sandbox.guard(Path(raw_dir))
        self.sandbox.check_reachable(Path(raw_dir))
        self.target = target if target is not None else settings.platform()
        self.raw_dir = Path(raw_dir)
        self.on_trial = on_trial
        self.cancel = cancel or threading.Event()
        emulated = self.target.emulated
        self.use_perf = not emulated and (
            perf_works(settings.perf, self.sandbox.env(), self.sandbox.identity())
            if use_perf is None else use_perf)
        # what trials record besides measures (timelines.py): never under emulation
        self.record = frozenset() if emulated else record
        shim = settings.shim() if "latency" in self.record else None
        if shim is not None and not shim.is_file():
            raise FileNotFoundError(f"the latency shim {shim} is not built: make workloads")
        self.commands = Commands(settings, cpus, self.target, self.use_perf, shim)
        self.valgrind = not emulated and shutil.which(settings.valgrind) is not None
        require_tools(settings)

    def _fresh_dir(self, cell: Cell, name: str) -> Path:
        trial_dir = self.raw_dir / cell.slug / name
        if trial_dir.exists():
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        return trial_dir

    def _record(self, trial_dir: Path, cell: Cell, params: Params, **fields: Any) -> TrialIn:
        """The trial's record (contracts §5), also kept as trial.json in its folder."""
        trial = TrialIn(uid=str(uuid.uuid4()), label=cell.target.label, allocator=cell.target.info,
                      workload=WorkloadIn(name=cell.workload, params=dict(params)), **fields)
        (trial_dir / "trial.json").write_text(trial.model_dump_json(indent=2))
        return trial

    # -- one trial ------------------------------------------------------------------
    def run_trial(self, cell: Cell, seq: int,
                  warmup: bool) -> tuple[TrialIn, JsonDict | None]:
        """One trial: run the workload under hyperfine in a fresh folder, then read what
        hyperfine, the workload's result line, the allocator's counters and perf left."""
        trial_dir = self._fresh_dir(cell, f"warmup-{seq}" if warmup else f"trial-{seq}")
        started = _now()
        layout = self.commands.layout()
        hf_note, rss = self._hyperfine(cell, trial_dir, layout)
        timed = read_hyperfine(trial_dir, hf_note)
        ok, note = read_output(cell.program, _read(trial_dir / "stdout"), timed.clean,
                               timed.note, timed.measures)
        peak = read_peak_rss(trial_dir / PEAK_RSS_FILE) if cell.program is not None else None
        if ok and peak is not None:
            timed.measures.setdefault("max_rss_bytes", peak)
        counters = self._counters(cell, trial_dir, timed.measures)
        recorded = self._recorded(trial_dir, rss, timed.measures)
        limit = self.settings.stderr_tail_chars
        trial = self._record(trial_dir, cell, cell.params, seq=seq, warmup=warmup,
                             started_at=started, ok=ok, exit_code=timed.exit_code,
                             signal=timed.signal, measures=timed.measures, counters=counters,
                             stderr_tail=with_note(tail(trial_dir / "stderr", limit), note, limit),
                             layout=layout, **recorded)
        return trial, timed.export

    def _recorded(self, trial_dir: Path, rss: Timeline | None,
                  measures: dict[str, float]) -> dict[str, Any]:
        """The memory timeline and latency histogram the job asked for (timelines.py),
        their measures into `measures` (a workload's own final_rss_bytes wins)."""
        out: dict[str, Any] = {}
        if rss is not None:
            out["memory"] = rss.timeline()
            for k, v in rss.measures().items():
                measures.setdefault(k, v)
        if "latency" in self.record:
            out["latency"] = latency_of(trial_dir, self.settings.latency_every, measures)
        return out

    def _counters(self, cell: Cell, trial_dir: Path,
                  measures: dict[str, float]) -> JsonDict | None:
        """The allocator's counters (the reader its recipe's stats hook names) and perf's
        counts, into `measures`."""
        hook = cell.target.stats
        counters = read_counters(hook, trial_dir) if hook is not None else None
        if counters:
            measures.update(derive_ratios(counters))
        if self.use_perf and (trial_dir / "perf.txt").exists():
            measures.update(parse_perf_stat((trial_dir / "perf.txt").read_text()))
        return counters

    def _hyperfine(self, cell: Cell, trial_dir: Path, layout: TrialLayout | None
                   ) -> tuple[str, Timeline | None]:
        """Run the trial's command once under hyperfine (killed at the trial timeout) in
        `layout`; return what went wrong ("" when hyperfine itself succeeded) and, when the
        job asked, the workload's RSS over time."""
        command = shlex.join(self.commands.trial(cell, trial_dir, layout))
        (trial_dir / "command").write_text(command + "\n")
        hf_cmd = [self.settings.hyperfine, "-N", "--runs", "1", "-i", "--style", "none",
                  "--output", str(trial_dir / "stdout"), "--export-json",
                  str(trial_dir / "hyperfine.json"), command]
        self.sandbox.give(trial_dir)
        try:
            return self._timed(hf_cmd, trial_dir)
        finally:
            self.sandbox.take(trial_dir)

    def _timed(self, hf_cmd: list[str], trial_dir: Path) -> tuple[str, Timeline | None]:
        """hyperfine as the work user (switched in the child before exec: outside what
        hyperfine times), in its own session, killed whole at the trial timeout; its
        workload's RSS sampled meanwhile when the job asked (timelines.RssSampler)."""
        try:
            proc: subprocess.Popen[bytes] = subprocess.Popen(
                hf_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL, env=self.sandbox.env(), cwd=trial_dir,
                start_new_session=True, **self.sandbox.identity())
        except OSError as e:
            return f"cannot run hyperfine: {e}", None
        sampler = (RssSampler(proc.pid, self.settings.memory_interval_ms / 1000)
                   if "memory" in self.record else None)
        if sampler is not None:
            with sampler:
                note = self._wait(proc)
            return note, sampler.series
        return self._wait(proc), None

    def _wait(self, proc: subprocess.Popen[bytes]) -> str:
        try:
            _, hf_err = proc.communicate(timeout=self.settings.trial_timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return f"timed out after {self.settings.trial_timeout_seconds:g}s (killed)"
        if proc.returncode != 0:
            return f"hyperfine failed ({proc.returncode}): " + hf_err.decode(
                errors="replace")[-1000:]
        return ""

    # -- deterministic counts (cachegrind) ------------------------------------------
    def wants_deterministic(self, cell: Cell) -> bool:
        return (cell.deterministic_params is not None and self.valgrind
                and cell.target.label != "peer")

    def run_deterministic(self, cell: Cell, seq: int = 0) -> TrialIn | None:
        """Cachegrind run `seq` of the cell at its small params: counts that repeat when the
        allocator is deterministic (a second run is how the verdict finds out: rule D2)."""
        if not self.wants_deterministic(cell):
            return None
        assert cell.deterministic_params is not None
        trial_dir = self._fresh_dir(cell, "cachegrind" if seq == 0 else f"cachegrind-{seq}")
        cmd = self.commands.deterministic(cell)
        started = _now()
        rc, note = self._valgrind(cmd, trial_dir)
        out_file = trial_dir / "cachegrind.out"
        counts = parse_cachegrind(out_file.read_text()) if out_file.exists() else None
        read_ok, read_note = read_output(cell.program, _read(trial_dir / "stdout"), True, "",
                                         {})
        ok = rc == 0 and counts is not None and read_ok
        if not ok and not note:
            note = "no cachegrind summary" if counts is None else read_note
        limit = self.settings.stderr_tail_chars
        text = "" if ok else tail(trial_dir / "stderr", limit)
        return self._record(trial_dir, cell, cell.deterministic_params, seq=seq, warmup=False,
                            started_at=started, ok=ok,
                            exit_code=rc if rc is not None and rc >= 0 else None,
                            signal=-rc if rc is not None and rc < 0 else (
                                signal.SIGKILL if rc is None else None),
                            stderr_tail=with_note(text, note, limit), measures=counts or {},
                            counters=None)

    def _valgrind(self, cmd: list[str], trial_dir: Path) -> tuple[int | None, str]:
        """Run a valgrind command line in `trial_dir` as the work user: (its exit status,
        None when killed at the trial timeout; a note saying so)."""
        (trial_dir / "command").write_text(shlex.join(cmd) + "\n")
        # opened before the folder is given: the agent keeps no DAC_OVERRIDE in a container
        with open(trial_dir / "stdout", "wb") as so, open(trial_dir / "stderr", "wb") as se:
            self.sandbox.give(trial_dir)
            try:
                proc = subprocess.run(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                      env=self.sandbox.env(), cwd=trial_dir,
                                      timeout=self.settings.trial_timeout_seconds,
                                      **self.sandbox.identity())
                return proc.returncode, ""
            except subprocess.TimeoutExpired:
                return None, (f"timed out after "
                              f"{self.settings.trial_timeout_seconds:g}s (killed)")
            finally:
                self.sandbox.take(trial_dir)

    def run_callgrind(self, cell: Cell, params: Params, name: str) -> tuple[str | None, str]:
        """callgrind of the cell at `params` in the fixed environment: (the output file's
        text, None when the run failed; what went wrong)."""
        if self.target.emulated or not self.valgrind:
            return None, "no valgrind on this node (or an emulated testbed): no profile"
        trial_dir = self._fresh_dir(cell, name)
        rc, note = self._valgrind(self.commands.callgrind(cell, params), trial_dir)
        out_file = trial_dir / "callgrind.out"
        if rc != 0 or not out_file.exists():
            why = note or f"callgrind exited {rc}: " + tail(trial_dir / "stderr", 500)
            return None, why
        return out_file.read_text(errors="replace"), ""

    # -- the interleaved run ------------------------------------------------------
    def run(self, cells: list[Cell], trials: int, warmup: int, seed: int = 42,
            by_case: bool = False) -> RunOutput:
        out = RunOutput()
        rng = random.Random(seed)
        for cell, seq in itertools.product(cells, range(self.settings.deterministic_runs)):
            if self.cancel.is_set():
                raise Cancelled("cancelled")
            t = self.run_deterministic(cell, seq)
            if t is not None:
                out.trials.append(t)
                if self.on_trial:
                    self.on_trial(t, cell)
        for rnd in range(warmup + trials):
            order = round_order(cells, rng, by_case)
            is_warmup = rnd < warmup
            seq = rnd if is_warmup else rnd - warmup
            for cell in order:
                if self.cancel.is_set():
                    raise Cancelled("cancelled")
                trial, hf = self.run_trial(cell, seq, is_warmup)
                out.trials.append(trial)
                out.order.append((rnd, cell.key))
                entry = out.hyperfine.setdefault(cell.key, {"runs": []})
                assert isinstance(entry, dict) and isinstance(entry["runs"], list)
                entry["runs"].append({"uid": trial.uid, "seq": seq, "warmup": is_warmup,
                                      "raw_dir": str(self.raw_dir / cell.slug), "json": hf})
                if self.on_trial:
                    self.on_trial(trial, cell)
        return out

    def trial_count(self, cells: list[Cell], trials: int, warmup: int) -> int:
        return len(cells) * (trials + warmup) + \
            self.settings.deterministic_runs * sum(map(self.wants_deterministic, cells))


PAIRED = ("base", "head")  # the labels a comparison sets side by side, round by round


def round_order(cells: list[Cell], rng: random.Random, by_case: bool = False) -> list[Cell]:
    """One round's order: every cell once, shuffled; `by_case`: the cases (blocks) shuffled,
    and the cells of each run one after another in a shuffled order, a case's base and head
    back to back (in a shuffled order of the two, the peers before or after them): the pair
    a comparison judges (`paired.compare_paired`) runs seconds apart."""
    if not by_case:
        order = list(cells)
        rng.shuffle(order)
        return order
    groups: dict[str, list[Cell]] = {}
    for c in cells:
        groups.setdefault(c.case, []).append(c)
    cases = list(groups.values())
    rng.shuffle(cases)
    return [c for g in cases for c in _block_order(g, rng)]


def _block_order(group: list[Cell], rng: random.Random) -> list[Cell]:
    """A case's cells shuffled, its base and head (when it has both) kept together."""
    pair = [c for c in group if c.target.label in PAIRED]
    if len(pair) != len(PAIRED) or {c.target.label for c in pair} != set(PAIRED):
        order = list(group)
        rng.shuffle(order)
        return order
    rng.shuffle(pair)
    units: list[list[Cell]] = [pair] + [[c] for c in group if c.target.label not in PAIRED]
    rng.shuffle(units)
    return [c for u in units for c in u]
