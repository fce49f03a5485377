"""What a trial left behind, read into measures: hyperfine's export (time, exit status),
the workload's JSON result line, `perf stat` and cachegrind output (the allocator's
counters: counters.py). Pure readers: no process is started here except `perf_works`' probe."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallard_wire.fields import JsonDict
from pydantic import BaseModel, Field

from .programs import Program, ProgramError, read_gbench, read_regex

MEASURE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def tail(path: Path, chars: int) -> str:
    """The last `chars` characters of a file ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars * 4))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return text[-chars:]


def last_json_line(text: str) -> JsonDict | None:
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


def read_output(program: Program | None, stdout: str, ok: bool, note: str,
                measures: dict[str, float]) -> tuple[bool, str]:
    """A trial's stdout into `measures` by its workload's reader: (ok, note). A built-in
    workload's is its JSON result line (`read_result`); a program's, its `reader`
    (programs.py): what cannot be read fails the trial, the note saying why."""
    if program is None:
        return read_result(last_json_line(stdout), ok, note, measures)
    if not ok:
        return ok, note  # a program that failed: its output is not a measurement
    try:
        if program.reader == "regex":
            measures.update(read_regex(program.measures, stdout, program.scale))
        elif program.reader == "gbench":
            measures.update(read_gbench(stdout))
        elif program.reader == "time":
            measures["run_seconds"] = measures["wall_seconds"]
        else:
            ok, note = read_numbers(last_json_line(stdout), measures)
    except ProgramError as e:
        return False, str(e)
    if ok and "cpu_seconds" not in measures and "user_seconds" in measures:
        measures["cpu_seconds"] = measures["user_seconds"] + measures.get("sys_seconds", 0.0)
    return ok, note


def read_peak_rss(path: Path) -> float | None:
    """GNU time's `-f %M` file (its last line: the peak RSS in KiB) in bytes; None when
    there is none (it also writes "Command exited with non-zero status N" first)."""
    try:
        last = path.read_text(errors="replace").strip().splitlines()[-1]
        kib = int(last.strip())
    except (OSError, IndexError, ValueError):
        return None
    return float(kib) * 1024 if kib > 0 else None


def read_numbers(result: JsonDict | None, measures: dict[str, float]) -> tuple[bool, str]:
    """A program's JSON line (reader jsonline): `operations`/`seconds` -> ops_per_sec as
    for the built-ins, and every number a measure of its name; at least one number."""
    if result is None:
        return False, "the program printed no JSON object as its last line"
    found: dict[str, float] = {}
    read_result(result, False, "", found)
    found = {k: v for k, v in found.items() if MEASURE_NAME.match(k)}
    if not found:
        return False, "the program's JSON line has no number to measure"
    measures.update(found)
    return True, ""


# Raw counts that become diagnostic measures as they are (contracts §2): what explains a
# hit ratio that moved (the API ranks them under each cell).
# Few, because a trial carries at most 32 measures (the API's MAX_MEASURES).
COUNT_MEASURES = ("transfer_insert_inflight_misses", "transfer_remove_inflight_misses",
                  "transfer_waits", "central_refills", "pages_reclaimed")


def derive_ratios(counters: JsonDict) -> dict[str, float]:
    """contracts §2: transfer_{insert,remove}_hit_ratio = hits / (hits + misses), and the
    raw counts of COUNT_MEASURES that the stats file has."""
    out: dict[str, float] = {k: float(v) for k in COUNT_MEASURES
                             if isinstance(v := counters.get(k), int | float)
                             and not isinstance(v, bool)}
    for kind in ("insert", "remove"):
        hits = counters.get(f"transfer_{kind}_hits")
        misses = counters.get(f"transfer_{kind}_misses")
        if isinstance(hits, int | float) and isinstance(misses, int | float) and hits + misses:
            out[f"transfer_{kind}_hit_ratio"] = float(hits) / float(hits + misses)
    return out


# perf's generic events -> our measure names (never `instructions`: that name is valgrind's)
PERF_EVENTS = {"instructions": "hw_instructions", "cycles": "hw_cycles",
               "cache-misses": "hw_llc_misses"}


def perf_works(perf: str = "perf", env: Mapping[str, str] | None = None,
               identity: Mapping[str, Any] | None = None) -> bool:
    """True when `perf stat` really counts here (not '<not supported>', as in VMs), for
    the user `identity` names (the work user the trials run as: sandbox.Sandbox)."""
    if not shutil.which(perf):
        return False
    try:
        out = subprocess.run([perf, "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "true"],
                             capture_output=True, text=True, timeout=20, env=env,
                             stdin=subprocess.DEVNULL, **(identity or {}))
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


class HyperfineRun(BaseModel):
    """The fields of hyperfine's `--export-json` result that become measures."""

    times: list[float] = Field(min_length=1)
    user: float
    system: float
    exit_codes: list[int | None] = []


class HyperfineExport(BaseModel):
    results: list[HyperfineRun] = Field(min_length=1)


@dataclass
class Timed:
    """hyperfine's account of one trial: its export, the workload's exit code or signal,
    the time measures, and what went wrong ("" when nothing did)."""

    export: JsonDict | None = None
    exit_code: int | None = None
    signal: int | None = None
    measures: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def clean(self) -> bool:
        return self.exit_code == 0 and self.signal is None and not self.note


def read_hyperfine(trial_dir: Path, note: str) -> Timed:
    """hyperfine's export of a trial run (`note`: what went wrong running it)."""
    out = Timed(note=note, signal=signal.SIGKILL if note.startswith("timed out") else None)
    hf_json = trial_dir / "hyperfine.json"
    if hf_json.exists() and not note:
        try:
            export = json.loads(hf_json.read_text())
            res = HyperfineExport.model_validate(export).results[0]
        except ValueError as e:  # pydantic's ValidationError is a ValueError
            out.note = f"unreadable hyperfine JSON: {e}"
        else:
            out.export = export
            out.measures["wall_seconds"] = res.times[0]
            out.measures["user_seconds"] = res.user
            out.measures["sys_seconds"] = res.system
            code = (res.exit_codes or [None])[0]
            if code is None:
                out.note = out.note or "hyperfine recorded no exit code"
            elif code > 128 and code - 128 < 65:
                out.signal = code - 128  # hyperfine reports a signal as 128+N
            else:
                out.exit_code = code
    return out


def read_result(result: JsonDict | None, ok: bool, note: str,
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


def with_note(text: str, note: str, limit: int) -> str:
    """A stderr tail with the runner's note appended (`[runner] ...`), cut to `limit`."""
    if not note:
        return text
    return (text + ("\n" if text else "") + f"[runner] {note}")[-limit:]
