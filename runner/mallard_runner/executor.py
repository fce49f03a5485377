"""The executor: runs cells (allocator x variant x workload x params) pinned, interleaved.

hyperfine is the timing engine. One trial is one hyperfine run of one command, started
in the trial's directory:

    hyperfine -N --runs 1 -i --style none --output <trial>/stdout \
        --export-json <trial>/hyperfine.json \
        'sh -c "f=$1; shift; exec \"$@\" 2>\"$f\"" sh <trial>/stderr \
         taskset -c 1 setarch x86_64 -R env -i PATH=/usr/bin:/bin LC_ALL=C \
         LD_PRELOAD=libmallard.so MALLARD_TRANSFER=ring MALLARD_STATS_FILE=stats-%p.json \
         _PAD=... <workload> --threads 2 ...'

`sh` only redirects stderr and execs, so the workload is hyperfine's direct
child's image: its exit status or signal (hyperfine reports 128+N) is the
workload's. The preload is set by `env` after `taskset`, so only the workload
runs with the allocator under test. Every file of every trial is kept under the
raw directory; the per-trial record is a `Trial` (contracts §5).

Noise control (setting `noise_control`, on by default): `setarch -R` turns address-space
randomisation off for the workload, and `env -i` gives it a fixed minimal environment
padded to a fixed size (`_PAD`), so its stack starts at the same address in every trial
of every allocator (argv and environment sit at the top of the stack).

Cells run INTERLEAVED: round i runs trial i of every cell, in an order shuffled
by a seeded RNG, before round i+1 starts. Warm-up rounds come first and are
recorded with warmup=true. Before them, every cell with deterministic params (and
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

from .arch import Platform
from .models import AllocatorInfo, Trial, WorkloadRef
from .settings import RunnerSettings, child_env
from .testbed import setarch_prefix
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
    deterministic_params: dict[str, Any] | None = None  # one cachegrind run at these

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


# Raw counts that become diagnostic measures as they are (contracts §2): what explains a
# hit ratio that moved (the API ranks them under each cell).
# Few, because a trial carries at most 24 measures (the API's MAX_MEASURES).
COUNT_MEASURES = ("transfer_insert_inflight_misses", "transfer_remove_inflight_misses",
                  "transfer_waits", "central_refills", "pages_reclaimed")


def derive_ratios(counters: dict[str, Any]) -> dict[str, float]:
    """contracts §2: transfer_{insert,remove}_hit_ratio = hits / (hits + misses), and the
    raw counts of COUNT_MEASURES that the stats file has."""
    out: dict[str, float] = {k: float(counters[k]) for k in COUNT_MEASURES
                             if isinstance(counters.get(k), int | float)
                             and not isinstance(counters.get(k), bool)}
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


# perf's generic events -> our measure names (never `instructions`: that name is valgrind's)
PERF_EVENTS = {"instructions": "hw_instructions", "cycles": "hw_cycles",
               "cache-misses": "hw_llc_misses"}
# Fixed simulated caches, so the counts do not depend on the host's cache sizes.
CACHEGRIND_CACHES = {"I1": "32768,8,64", "D1": "32768,8,64", "LL": "8388608,16,64"}
MINIMAL_ENV = ("PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C")
ENV_BLOCK = 512  # the workload's environment is padded to a multiple of this many bytes


def perf_works(perf: str = "perf") -> bool:
    """True when `perf stat` really counts here (not '<not supported>', as in VMs)."""
    if not shutil.which(perf):
        return False
    try:
        out = subprocess.run([perf, "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "true"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and bool(parse_perf_stat(out.stderr))


def parse_perf_stat(text: str) -> dict[str, float]:
    """`perf stat -x,` output -> {hw_instructions, hw_cycles, hw_llc_misses} for the events
    that were counted. Lines are `value,unit,event,run time,percent,...`; an event may carry
    a modifier (`instructions:u`) or a PMU (`cpu_core/instructions/`: hybrid CPUs, summed)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or line.startswith("#"):
            continue
        event = fields[2].strip()
        m = re.fullmatch(r"(?:[\w.-]+/)?([\w-]+)(?:/[a-zA-Z]*)?(?::[a-zA-Z]+)?", event)
        name = PERF_EVENTS.get(m.group(1)) if m else None
        if name is None:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue  # <not counted> / <not supported>
        out[name] = out.get(name, 0.0) + value
    return out


def parse_cachegrind(text: str) -> dict[str, float] | None:
    """A cachegrind output file -> instructions (Ir), d1_misses (D1mr + D1mw) and llc_misses
    (DLmr + DLmw), from its `events:` and `summary:` lines."""
    events: list[str] = []
    totals: list[int] = []
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            try:
                totals = [int(v) for v in line.split()[1:]]
            except ValueError:
                return None
    count = dict(zip(events, totals, strict=False))
    if "Ir" not in count:
        return None
    out = {"instructions": float(count["Ir"])}
    if {"D1mr", "D1mw", "DLmr", "DLmw"} <= count.keys():
        out["d1_misses"] = float(count["D1mr"] + count["D1mw"])
        out["llc_misses"] = float(count["DLmr"] + count["DLmw"])
    return out


def padded_env(pairs: list[str], block: int = ENV_BLOCK) -> list[str]:
    """`pairs` plus `_PAD=xxx` so that the environment block (each string and its NUL) is a
    multiple of `block` bytes: the same size for every allocator and variant."""
    size = sum(len(p.encode()) + 1 for p in pairs) + len("_PAD=") + 1
    return [*pairs, "_PAD=" + "x" * (-size % block)]


class Executor:
    def __init__(self, settings: RunnerSettings, cpus: list[int], raw_dir: Path,
                 on_trial: Callable[[Trial, Cell], None] | None = None,
                 cancel: threading.Event | None = None, use_perf: bool | None = None,
                 target: Platform | None = None):
        self.settings = settings
        self.target = target if target is not None else settings.platform()
        self.cpus = cpus
        self.raw_dir = Path(raw_dir)
        self.on_trial = on_trial
        self.cancel = cancel or threading.Event()
        emulated = self.target.emulated
        self.use_perf = not emulated and (perf_works(settings.perf) if use_perf is None
                                          else use_perf)
        self.noise_control = settings.noise_control
        self.setarch = list(setarch_prefix() or ())
        self.valgrind = not emulated and shutil.which(settings.valgrind) is not None
        for tool in (settings.hyperfine, settings.taskset):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} not found: install it (scripts/install-deps.sh)")

    # -- commands -------------------------------------------------------------------
    def _cpu_list(self) -> str:
        return ",".join(str(c) for c in self.cpus)

    def _child_env(self) -> dict[str, str]:
        return child_env()

    def _workload_env(self, cell: Cell, stats_file: bool = True) -> list[str]:
        """The variables the workload runs with; the stats file is relative to the trial
        directory (the working directory), so every trial's environment is the same."""
        pairs: list[str] = []
        if cell.target.preload is not None:
            pairs.append(f"LD_PRELOAD={cell.target.preload}")
        for k, v in cell.target.env.items():
            pairs.append(f"{k}={v}")
        if cell.target.is_mallard and stats_file:
            pairs.append("MALLARD_STATS_FILE=stats-%p.json")
        return pairs

    def _pinned(self, minimal: bool, pairs: list[str]) -> tuple[list[str], list[str]]:
        """(taskset [setarch -R], env [-i MINIMAL...] PAIRS [_PAD] [qemu -L root -E PRELOAD]):
        what runs the workload."""
        pin = [self.settings.taskset, "-c", self._cpu_list()]
        env = padded_env([*MINIMAL_ENV, *pairs]) if minimal else pairs
        if self.target.emulated:  # the preload is the guest's: qemu's -E, never qemu's own
            preload = [p for p in env if p.startswith("LD_PRELOAD=")]
            env = [p for p in env if not p.startswith("LD_PRELOAD=")]
            guest = self.target.guest_prefix(preload)
        else:
            guest = []
        if minimal:
            return [*pin, *self.setarch], ["env", "-i", *env, *guest]
        return pin, ["env", *env, *guest]

    def trial_command(self, cell: Cell, trial_dir: Path) -> list[str]:
        """The command hyperfine times for one trial (stderr kept, pinned, preloaded)."""
        pin, env = self._pinned(self.noise_control, self._workload_env(cell))
        perf: list[str] = []
        if self.use_perf:
            perf = [self.settings.perf, "stat", "-x", ",", "-e", ",".join(PERF_EVENTS),
                    "-o", str(trial_dir / "perf.txt"), "--"]
        return ["sh", "-c", 'f=$1; shift; exec "$@" 2>"$f"', "sh", str(trial_dir / "stderr"),
                *pin, *perf, *env, *cell.argv()]

    def deterministic_command(self, cell: Cell) -> list[str]:
        """cachegrind at the cell's small params, always in the fixed environment."""
        assert cell.deterministic_params is not None
        caches = [f"--{k}={v}" for k, v in CACHEGRIND_CACHES.items()]
        pin, env = self._pinned(True, self._workload_env(cell, stats_file=False))
        return [*pin, *env, self.settings.valgrind, "--tool=cachegrind", "--cache-sim=yes", *caches,
                "--cachegrind-out-file=cachegrind.out", *cell.argv(cell.deterministic_params)]

    # -- one trial ------------------------------------------------------------------
    def run_trial(self, cell: Cell, seq: int, warmup: bool) -> tuple[Trial, dict[str, Any] | None]:
        """One trial: run the workload under hyperfine in a fresh folder, then read what
        hyperfine, the workload's result line, the allocator's counters and perf left."""
        trial_dir = self.raw_dir / cell.slug / (f"warmup-{seq}" if warmup else f"trial-{seq}")
        if trial_dir.exists():
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        started = _now()
        note = self._hyperfine(cell, trial_dir)
        hf, exit_code, sig, measures, note = self._read_hyperfine(trial_dir, note)
        stdout = (trial_dir / "stdout").read_text(errors="replace") if (
            trial_dir / "stdout").exists() else ""
        ok, note = self._read_result(last_json_line(stdout), exit_code == 0 and sig is None
                                     and not note, note, measures)
        counters = read_stats(trial_dir) if cell.target.is_mallard else None
        if counters:
            measures.update(derive_ratios(counters))
        if self.use_perf and (trial_dir / "perf.txt").exists():
            measures.update(parse_perf_stat((trial_dir / "perf.txt").read_text()))
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

    def _hyperfine(self, cell: Cell, trial_dir: Path) -> str:
        """Run the trial's command once under hyperfine (killed at the trial timeout);
        return what went wrong ("" when hyperfine itself succeeded)."""
        command = shlex.join(self.trial_command(cell, trial_dir))
        (trial_dir / "command").write_text(command + "\n")
        hf_cmd = [self.settings.hyperfine, "-N", "--runs", "1", "-i", "--style", "none",
                  "--output", str(trial_dir / "stdout"), "--export-json",
                  str(trial_dir / "hyperfine.json"), command]
        try:
            proc = subprocess.Popen(hf_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=self._child_env(), cwd=trial_dir,
                                    start_new_session=True)
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

    @staticmethod
    def _read_hyperfine(trial_dir: Path, note: str) -> tuple[
            dict[str, Any] | None, int | None, int | None, dict[str, float], str]:
        """hyperfine's export: (the export, exit code, signal, time measures, note)."""
        hf: dict[str, Any] | None = None
        exit_code: int | None = None
        sig: int | None = signal.SIGKILL if note.startswith("timed out") else None
        hf_json = trial_dir / "hyperfine.json"
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
        return hf, exit_code, sig, measures, note

    @staticmethod
    def _read_result(result: dict[str, Any] | None, ok: bool, note: str,
                     measures: dict[str, float]) -> tuple[bool, str]:
        """The workload's JSON result line into `measures`: (ok, note)."""
        if ok and result is None:
            return False, "the workload printed no JSON result line"
        if result is not None:
            ops, secs = result.get("operations"), result.get("seconds")
            if isinstance(ops, int | float) and isinstance(secs, int | float) and secs > 0:
                measures["ops_per_sec"] = float(ops) / float(secs)
                cpu = result.get("cpu_seconds")  # the workload's own CPU time over its phase
                if isinstance(cpu, int | float) and not isinstance(cpu, bool) and cpu > 0:
                    measures["ops_per_cpu_sec"] = float(ops) / float(cpu)
            elif ok:
                ok, note = False, "the JSON result line has no operations/seconds"
            for k, v in result.items():
                if k in ("operations", "seconds") or isinstance(v, bool):
                    continue
                if isinstance(v, int | float):
                    measures[k] = float(v)
        return ok, note

    # -- deterministic counts (cachegrind) ------------------------------------------
    def wants_deterministic(self, cell: Cell) -> bool:
        return (cell.deterministic_params is not None and self.valgrind
                and cell.target.label != "peer")

    def run_deterministic(self, cell: Cell) -> Trial | None:
        """One cachegrind run of the cell at its small params: deterministic counts."""
        if not self.wants_deterministic(cell):
            return None
        assert cell.deterministic_params is not None
        params = dict(cell.deterministic_params)
        trial_dir = self.raw_dir / cell.slug / "cachegrind"
        if trial_dir.exists():
            shutil.rmtree(trial_dir)
        trial_dir.mkdir(parents=True)
        cmd = self.deterministic_command(cell)
        (trial_dir / "command").write_text(shlex.join(cmd) + "\n")
        started = _now()
        note = ""
        with open(trial_dir / "stdout", "wb") as so, open(trial_dir / "stderr", "wb") as se:
            try:
                proc = subprocess.run(cmd, stdout=so, stderr=se, env=self._child_env(),
                                      cwd=trial_dir, timeout=self.settings.trial_timeout_seconds)
                rc: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                rc, note = None, (f"timed out after {self.settings.trial_timeout_seconds:g}s "
                                  "(killed)")
        out_file = trial_dir / "cachegrind.out"
        counts = parse_cachegrind(out_file.read_text()) if out_file.exists() else None
        result = last_json_line((trial_dir / "stdout").read_text(errors="replace"))
        ok = rc == 0 and counts is not None and result is not None
        if not ok and not note:
            note = ("no cachegrind summary" if counts is None else
                    "the workload printed no JSON result line" if result is None else "")
        tail = "" if ok else _tail(trial_dir / "stderr", self.settings.stderr_tail_chars)
        if note:
            tail = (tail + ("\n" if tail else "") + f"[runner] {note}")[
                -self.settings.stderr_tail_chars:]
        trial = Trial(uid=str(uuid.uuid4()), label=cell.target.label, allocator=cell.target.info,
                      workload=WorkloadRef(name=cell.workload, params=params), seq=0,
                      warmup=False, started_at=started, ok=ok,
                      exit_code=rc if rc is not None and rc >= 0 else None,
                      signal=-rc if rc is not None and rc < 0 else (
                          signal.SIGKILL if rc is None else None),
                      stderr_tail=tail, measures=counts or {}, counters=None)
        (trial_dir / "trial.json").write_text(trial.model_dump_json(indent=2))
        return trial

    # -- the interleaved run ------------------------------------------------------
    def run(self, cells: list[Cell], trials: int, warmup: int, seed: int = 42) -> RunOutput:
        out = RunOutput()
        rng = random.Random(seed)
        for cell in cells:
            if self.cancel.is_set():
                raise Cancelled("cancelled")
            t = self.run_deterministic(cell)
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
        return len(cells) * (trials + warmup) + sum(map(self.wants_deterministic, cells))

