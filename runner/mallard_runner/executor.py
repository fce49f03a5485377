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
runs with the allocator under test. Every file of every trial is kept under the
raw directory; the per-trial record is a `TrialIn` (contracts §5).

Noise control (setting `noise_control`, on by default): `env -i` gives the workload a
fixed minimal environment padded to a fixed size (`_PAD`), the same for every allocator.
Its layout (setting `layouts`, commands.py): `sampled` (default) draws one per timed trial,
ASLR on and `_PAD` longer by a random offset (argv and environment sit at the top of the
stack, so the stack moves), recorded as the trial's `layout`; `fixed` adds `setarch -R`
(ASLR off), so the stack starts at the same address in every trial of every allocator.

Cells run INTERLEAVED: round i runs trial i of every cell, in an order shuffled
by a seeded RNG, before round i+1 starts. Warm-up rounds come first and are
recorded with warmup=true. `by_case` (runner/bench/allocators.py) keeps the cells of one
case (workload and params) together within a round, in a shuffled order of cases and a
shuffled order of allocators within each: the trials a paired comparison sets side by
side then run seconds apart rather than anywhere in a long round, so a slow spell of the
machine moves both (`round_order`). Before them, every cell with deterministic params (and
not a `peer`: a comparison judges base against head) gets one run under valgrind's
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
from .commands import Commands
from .counters import read_counters
from .measures import (
    derive_ratios,
    parse_cachegrind,
    parse_perf_stat,
    perf_works,
    read_hyperfine,
    read_output,
    tail,
    with_note,
)
from .sandbox import Sandbox
from .settings import RunnerSettings


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


class Executor:
    def __init__(self, settings: RunnerSettings, cpus: list[int], raw_dir: Path,
                 on_trial: Callable[[TrialIn, Cell], None] | None = None,
                 cancel: threading.Event | None = None, use_perf: bool | None = None,
                 target: Platform | None = None, sandbox: Sandbox | None = None):
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
        self.commands = Commands(settings, cpus, self.target, self.use_perf)
        self.valgrind = not emulated and shutil.which(settings.valgrind) is not None
        for tool in (settings.hyperfine, settings.taskset):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} not found: install it (scripts/install-deps.sh)")

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
        timed = read_hyperfine(trial_dir, self._hyperfine(cell, trial_dir, layout))
        ok, note = read_output(cell.program, _read(trial_dir / "stdout"), timed.clean,
                               timed.note, timed.measures)
        counters = self._counters(cell, trial_dir, timed.measures)
        limit = self.settings.stderr_tail_chars
        trial = self._record(trial_dir, cell, cell.params, seq=seq, warmup=warmup,
                             started_at=started, ok=ok, exit_code=timed.exit_code,
                             signal=timed.signal, measures=timed.measures, counters=counters,
                             stderr_tail=with_note(tail(trial_dir / "stderr", limit), note, limit),
                             layout=layout)
        return trial, timed.export

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

    def _hyperfine(self, cell: Cell, trial_dir: Path, layout: TrialLayout | None) -> str:
        """Run the trial's command once under hyperfine (killed at the trial timeout) in
        `layout`; return what went wrong ("" when hyperfine itself succeeded)."""
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

    def _timed(self, hf_cmd: list[str], trial_dir: Path) -> str:
        """hyperfine as the work user (switched in the child before exec: outside what
        hyperfine times), in its own session, killed whole at the trial timeout."""
        try:
            proc: subprocess.Popen[bytes] = subprocess.Popen(
                hf_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL, env=self.sandbox.env(), cwd=trial_dir,
                start_new_session=True, **self.sandbox.identity())
            try:
                _, hf_err = proc.communicate(timeout=self.settings.trial_timeout_seconds)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return f"timed out after {self.settings.trial_timeout_seconds:g}s (killed)"
            if proc.returncode != 0:
                return f"hyperfine failed ({proc.returncode}): " + hf_err.decode(
                    errors="replace")[-1000:]
        except OSError as e:
            return f"cannot run hyperfine: {e}"
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
        (trial_dir / "command").write_text(shlex.join(cmd) + "\n")
        started = _now()
        note = ""
        # opened before the folder is given: the agent keeps no DAC_OVERRIDE in a container
        with open(trial_dir / "stdout", "wb") as so, open(trial_dir / "stderr", "wb") as se:
            self.sandbox.give(trial_dir)
            try:
                proc = subprocess.run(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                      env=self.sandbox.env(), cwd=trial_dir,
                                      timeout=self.settings.trial_timeout_seconds,
                                      **self.sandbox.identity())
                rc: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                rc, note = None, (f"timed out after "
                                  f"{self.settings.trial_timeout_seconds:g}s (killed)")
            finally:
                self.sandbox.take(trial_dir)
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


def round_order(cells: list[Cell], rng: random.Random, by_case: bool = False) -> list[Cell]:
    """One round's order: every cell once, shuffled; `by_case`: the cases shuffled, and the
    cells of each case (one per allocator) shuffled and run one after another."""
    if not by_case:
        order = list(cells)
        rng.shuffle(order)
        return order
    groups: dict[str, list[Cell]] = {}
    for c in cells:
        groups.setdefault(c.case, []).append(c)
    cases = list(groups.values())
    rng.shuffle(cases)
    for g in cases:
        rng.shuffle(g)
    return [c for g in cases for c in g]
