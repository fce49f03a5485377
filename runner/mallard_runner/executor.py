"""The executor: runs cells (allocator x variant x workload x params) pinned, interleaved.

hyperfine is the timing engine. One trial is one hyperfine run of one command:

    hyperfine -N --runs 1 -i --style none --output <trial>/stdout \
        --export-json <trial>/hyperfine.json \
        'sh -c "f=$1; shift; exec \"$@\" 2>\"$f\"" sh <trial>/stderr \
         taskset -c 1 env LD_PRELOAD=libmallard.so MALLARD_TRANSFER=ring \
         MALLARD_STATS_FILE=<trial>/stats-%p.json <workload> --threads 2 ...'

`sh` only redirects stderr and execs, so the workload is hyperfine's direct
child's image: its exit status or signal (hyperfine reports 128+N) is the
workload's. The preload is set by `env` after `taskset`, so only the workload
runs with the allocator under test. Every file of every trial is kept under the
raw directory; the per-trial record is a `Trial` (contracts §5).

Cells run INTERLEAVED: round i runs trial i of every cell, in an order shuffled
by a seeded RNG, before round i+1 starts. Warm-up rounds come first and are
recorded with warmup=true.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
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

from .models import AllocatorInfo, Trial, WorkloadRef
from .settings import RunnerSettings, child_env
from .variants import show_variant, variant_env


class Cancelled(RuntimeError):
    """The run was asked to stop (SIGTERM, or the job's lease was lost)."""


@dataclass(frozen=True)
class Target:
    """An allocator ready to run: what to preload, with which environment."""

    label: str
    info: AllocatorInfo
    preload: Path | None = None

    @property
    def is_mallard(self) -> bool:
        return self.info.name == "mallard"

    @property
    def env(self) -> dict[str, str]:
        return variant_env(self.info.variant) if self.is_mallard else {}

    @property
    def display(self) -> str:
        if not self.is_mallard:
            return self.info.name
        commit = f"@{self.info.commit[:7]}" if self.info.commit else ""
        return f"mallard{commit} {show_variant(self.info.variant)}"


@dataclass(frozen=True)
class Cell:
    target: Target
    workload: str
    params: dict[str, Any]
    binary: Path
    instructions_ops: int | None = None

    @property
    def case(self) -> str:
        return f"{self.workload} " + " ".join(f"{k}={v}" for k, v in self.params.items())

    @property
    def key(self) -> str:
        return f"{self.target.label}: {self.target.display} | {self.case}"

    @property
    def slug(self) -> str:
        digest = hashlib.sha1(self.key.encode()).hexdigest()[:8]  # unique even when cut short
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.key).strip("_")[:150] + "-" + digest

    def argv(self, params: dict[str, Any] | None = None) -> list[str]:
        args = [str(self.binary)]
        for k, v in (params or self.params).items():
            args += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
        return args


@dataclass
class RunOutput:
    trials: list[Trial] = field(default_factory=list)
    hyperfine: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _tail(path: Path, chars: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars * 4))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return text[-chars:]


def last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None
    return None


def derive_ratios(counters: dict[str, Any]) -> dict[str, float]:
    """contracts §2: transfer_{insert,remove}_hit_ratio = hits / (hits + misses)."""
    out: dict[str, float] = {}
    for kind in ("insert", "remove"):
        hits = counters.get(f"transfer_{kind}_hits")
        misses = counters.get(f"transfer_{kind}_misses")
        if isinstance(hits, int | float) and isinstance(misses, int | float) and hits + misses:
            out[f"transfer_{kind}_hit_ratio"] = float(hits) / float(hits + misses)
    return out


def read_stats(trial_dir: Path) -> dict[str, Any] | None:
    """The allocator's counters file (MALLARD_STATS_FILE, %p = pid); the largest if several."""
    best: dict[str, Any] | None = None
    for f in sorted(trial_dir.glob("stats-*.json")):
        try:
            obj = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(obj, dict):
            continue
        if best is None or obj.get("allocs", 0) >= best.get("allocs", 0):
            best = obj
    return best


def perf_instructions_work(perf: str = "perf") -> bool:
    """True when `perf stat -e instructions true` really counts (not '<not supported>')."""
    if not shutil.which(perf):
        return False
    try:
        out = subprocess.run([perf, "stat", "-x", ",", "-e", "instructions", "true"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and parse_perf_instructions(out.stderr) is not None


def parse_perf_instructions(text: str) -> float | None:
    """The count from `perf stat -x,` output (`12345,,instructions,...`)."""
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) >= 3 and fields[2].startswith("instructions"):
            try:
                return float(fields[0])
            except ValueError:
                return None
    return None


def parse_callgrind_totals(text: str) -> int | None:
    """The event total of a callgrind output file (`totals:` or `summary:` line)."""
    for key in ("totals:", "summary:"):
        for line in text.splitlines():
            if line.startswith(key):
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    return int(parts[1])
    return None


class Executor:
    def __init__(self, settings: RunnerSettings, cpus: list[int], raw_dir: Path,
                 on_trial: Callable[[Trial, Cell], None] | None = None,
                 cancel: threading.Event | None = None, use_perf: bool | None = None):
        self.settings = settings
        self.cpus = cpus
        self.raw_dir = Path(raw_dir)
        self.on_trial = on_trial
        self.cancel = cancel or threading.Event()
        self.use_perf = perf_instructions_work(settings.perf) if use_perf is None else use_perf
        for tool in (settings.hyperfine, settings.taskset):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} not found: install it (scripts/install-deps.sh)")

    # -- commands -------------------------------------------------------------------
    def _cpu_list(self) -> str:
        return ",".join(str(c) for c in self.cpus)

    def _child_env(self) -> dict[str, str]:
        return child_env()

    def _workload_env(self, cell: Cell, trial_dir: Path) -> list[str]:
        pairs: list[str] = []
        if cell.target.preload is not None:
            pairs.append(f"LD_PRELOAD={cell.target.preload}")
        for k, v in cell.target.env.items():
            pairs.append(f"{k}={v}")
        if cell.target.is_mallard:
            pairs.append(f"MALLARD_STATS_FILE={trial_dir / 'stats-%p.json'}")
        return pairs

    def trial_command(self, cell: Cell, trial_dir: Path) -> list[str]:
        """The command hyperfine times for one trial (stderr kept, pinned, preloaded)."""
        inner = [self.settings.taskset, "-c", self._cpu_list()]
        if self.use_perf:
            inner += [self.settings.perf, "stat", "-x", ",", "-e", "instructions",
                      "-o", str(trial_dir / "perf.txt"), "--"]
        inner += ["env", *self._workload_env(cell, trial_dir), *cell.argv()]
        return ["sh", "-c", 'f=$1; shift; exec "$@" 2>"$f"', "sh", str(trial_dir / "stderr"),
                *inner]

    # -- one trial ------------------------------------------------------------------
    def run_trial(self, cell: Cell, seq: int, warmup: bool) -> tuple[Trial, dict[str, Any] | None]:
        trial_dir = self.raw_dir / cell.slug / (f"warmup-{seq}" if warmup else f"trial-{seq}")
        if trial_dir.exists():
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        command = shlex.join(self.trial_command(cell, trial_dir))
        (trial_dir / "command").write_text(command + "\n")
        hf_json = trial_dir / "hyperfine.json"
        hf_cmd = [self.settings.hyperfine, "-N", "--runs", "1", "-i", "--style", "none",
                  "--output", str(trial_dir / "stdout"), "--export-json", str(hf_json), command]
        started = _now()
        exit_code: int | None = None
        sig: int | None = None
        note = ""
        hf: dict[str, Any] | None = None
        try:
            proc = subprocess.Popen(hf_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=self._child_env(), start_new_session=True)
            try:
                _, hf_err = proc.communicate(timeout=self.settings.trial_timeout_seconds)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                _, hf_err = proc.communicate()
                note = f"timed out after {self.settings.trial_timeout_seconds:g}s (killed)"
                sig = signal.SIGKILL
            if not note and proc.returncode != 0:
                note = f"hyperfine failed ({proc.returncode}): " + hf_err.decode(
                    errors="replace")[-1000:]
        except OSError as e:
            note = f"cannot run hyperfine: {e}"
        if hf_json.exists() and not note:
            try:
                hf = json.loads(hf_json.read_text())
            except ValueError as e:
                note = f"unreadable hyperfine JSON: {e}"
        measures: dict[str, float] = {}
        if hf is not None:
            res = hf["results"][0]
            measures["wall_seconds"] = float(res["times"][0])
            measures["user_seconds"] = float(res["user"])
            measures["sys_seconds"] = float(res["system"])
            code = (res.get("exit_codes") or [None])[0]
            if code is None:
                note = note or "hyperfine recorded no exit code"
            elif code > 128 and code - 128 < 65:
                sig = code - 128  # hyperfine reports a signal as 128+N
            else:
                exit_code = int(code)
        stdout = (trial_dir / "stdout").read_text(errors="replace") if (
            trial_dir / "stdout").exists() else ""
        result = last_json_line(stdout)
        ok = exit_code == 0 and sig is None and not note
        if ok and result is None:
            ok, note = False, "the workload printed no JSON result line"
        if result is not None:
            ops, secs = result.get("operations"), result.get("seconds")
            if isinstance(ops, int | float) and isinstance(secs, int | float) and secs > 0:
                measures["ops_per_sec"] = float(ops) / float(secs)
            elif ok:
                ok, note = False, "the JSON result line has no operations/seconds"
            for k, v in result.items():
                if k in ("operations", "seconds") or isinstance(v, bool):
                    continue
                if isinstance(v, int | float):
                    measures[k] = float(v)
        counters = read_stats(trial_dir) if cell.target.is_mallard else None
        if counters:
            measures.update(derive_ratios(counters))
        if self.use_perf and (trial_dir / "perf.txt").exists():
            n = parse_perf_instructions((trial_dir / "perf.txt").read_text())
            if n is not None:
                measures["instructions"] = n
        stderr_tail = _tail(trial_dir / "stderr", self.settings.stderr_tail_chars)
        if note:
            stderr_tail = (stderr_tail + ("\n" if stderr_tail else "") + f"[runner] {note}")[
                -self.settings.stderr_tail_chars:]
        trial = Trial(uid=str(uuid.uuid4()), label=cell.target.label, allocator=cell.target.info,
                      workload=WorkloadRef(name=cell.workload, params=dict(cell.params)),
                      seq=seq, warmup=warmup, started_at=started, ok=ok, exit_code=exit_code,
                      signal=sig, stderr_tail=stderr_tail, measures=measures, counters=counters)
        (trial_dir / "trial.json").write_text(trial.model_dump_json(indent=2))
        return trial, hf

    # -- instructions (callgrind) ---------------------------------------------------
    def run_instructions(self, cell: Cell) -> Trial | None:
        """One callgrind run of the cell at its small ops count: a deterministic count."""
        if cell.instructions_ops is None:
            return None
        if not shutil.which(self.settings.valgrind):
            return None
        params = {**cell.params, "ops": cell.instructions_ops}
        trial_dir = self.raw_dir / cell.slug / "callgrind"
        if trial_dir.exists():
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        env = self._child_env()
        env.update(cell.target.env)
        if cell.target.preload is not None:
            env["LD_PRELOAD"] = str(cell.target.preload)
        out_file = trial_dir / "callgrind.out"
        cmd = [self.settings.taskset, "-c", self._cpu_list(), self.settings.valgrind,
               "--tool=callgrind", f"--callgrind-out-file={out_file}", *cell.argv(params)]
        (trial_dir / "command").write_text(shlex.join(cmd) + "\n")
        started = _now()
        with open(trial_dir / "stdout", "wb") as so, open(trial_dir / "stderr", "wb") as se:
            try:
                proc = subprocess.run(cmd, stdout=so, stderr=se, env=env,
                                      timeout=self.settings.trial_timeout_seconds)
                rc: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                rc = None
        total = parse_callgrind_totals(out_file.read_text()) if out_file.exists() else None
        ok = rc == 0 and total is not None
        sig = -rc if rc is not None and rc < 0 else None
        return Trial(uid=str(uuid.uuid4()), label=cell.target.label, allocator=cell.target.info,
                     workload=WorkloadRef(name=cell.workload, params=params), seq=0,
                     warmup=False, started_at=started, ok=ok,
                     exit_code=rc if rc is not None and rc >= 0 else None, signal=sig,
                     stderr_tail="" if ok else _tail(trial_dir / "stderr",
                                                     self.settings.stderr_tail_chars),
                     measures={"instructions": float(total)} if total is not None else {},
                     counters=None)

    # -- the interleaved run ------------------------------------------------------
    def run(self, cells: list[Cell], trials: int, warmup: int, seed: int = 42) -> RunOutput:
        out = RunOutput()
        rng = random.Random(seed)
        for cell in cells:
            if self.cancel.is_set():
                raise Cancelled("cancelled")
            t = self.run_instructions(cell)
            if t is not None:
                out.trials.append(t)
                if self.on_trial:
                    self.on_trial(t, cell)
        for rnd in range(warmup + trials):
            order = list(cells)
            rng.shuffle(order)
            is_warmup = rnd < warmup
            seq = rnd if is_warmup else rnd - warmup
            for cell in order:
                if self.cancel.is_set():
                    raise Cancelled("cancelled")
                trial, hf = self.run_trial(cell, seq, is_warmup)
                out.trials.append(trial)
                out.order.append((rnd, cell.key))
                entry = out.hyperfine.setdefault(cell.key, {"runs": []})
                entry["runs"].append({"uid": trial.uid, "seq": seq, "warmup": is_warmup,
                                      "raw_dir": str(self.raw_dir / cell.slug), "json": hf})
                if self.on_trial:
                    self.on_trial(trial, cell)
        return out

    def trial_count(self, cells: list[Cell], trials: int, warmup: int) -> int:
        return len(cells) * (trials + warmup) + sum(
            1 for c in cells if c.instructions_ops is not None and shutil.which(
                self.settings.valgrind))

