"""Allocator counters: what an allocator reports at exit, read into a trial's `counters`.

A recipe's stats hook (mallard_wire.recipes.StatsHook) names the reader (`parser`) and
where the report is: the files the allocator writes when `file_env` names a variable
(the runner sets it to `stats-%p.json` in the trial folder: cells.STATS_FILE), else the
workload's stderr (the trial's `stderr` file: the workload's own JSON result line is on
stdout, so a report on stderr never mixes with it). Several processes (a workload that
forks) leave several reports: the largest is kept.

- `mallard`: the JSON object of MALLARD_STATS_FILE (allocator/README.md), as it is;
- `mimalloc`: the `heap stats:` table of MIMALLOC_SHOW_STATS=1 (v2.0 and v2.1 layouts):
  each row `name: peak total freed current ...` -> `name` (the peak), `name_peak`,
  `name_total`, `name_freed`, `name_current`; a one-value row -> `name`; a `-sub` row
  belongs to the row above (`segments_abandoned`); amounts in bytes (KiB = 1024, K =
  1000 for counts as mimalloc prints them, Ki = 1024); `elapsed` and the `process:` line;
- `jemalloc`: the `Allocated: ..., active: ..., metadata: ... (n_thp ...), resident: ...,
  mapped: ..., retained: ...` line of MALLOC_CONF=stats_print:true.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from mallard_wire.fields import JsonDict
from mallard_wire.recipes import StatsHook

MAX_REPORT_BYTES = 8 * 1024 * 1024  # of a report read (a jemalloc one is ~25 KB)
MAX_KEYS = 200  # a trial carries at most 256 counters (mallard_wire.results)
Reader = Callable[[str], list[JsonDict]]


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_REPORT_BYTES).decode(errors="replace")
    except OSError:
        return ""


# -- mallard -------------------------------------------------------------------------------
def read_mallard(text: str) -> list[JsonDict]:
    try:
        obj = json.loads(text)
    except ValueError:
        return []
    return [obj] if isinstance(obj, dict) else []


# -- mimalloc ------------------------------------------------------------------------------
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "Ki": 1024, "Mi": 1024**2,
          "Gi": 1024**3, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1000,
          "MB": 1000**2, "GB": 1000**3}
_AMOUNT = re.compile(r"(-?\d+(?:\.\d+)?)(?:\s?([KMG]i?B?|B)(?![A-Za-z]))?")
_ROW = re.compile(r"^\s*(-?)([a-z][a-z0-9 ]*[a-z0-9]|[a-z]):\s*(.*)$")
_COLUMNS = ("peak", "total", "freed", "current")


def _amounts(text: str) -> list[float]:
    return [float(v) * _UNITS[u or ""] for v, u in _AMOUNT.findall(text)]


def _process_line(rest: str, out: JsonDict) -> None:
    """`user: 0.000 s, system: 0.004 s, faults: 1, rss: 4.7 MiB, commit: 32.0 MiB`."""
    for part in rest.split(","):
        key, _, value = part.partition(":")
        amounts = _amounts(value)
        if amounts and re.fullmatch(r"[a-z_ ]+", key.strip()):
            suffix = "_seconds" if value.strip().endswith(" s") else ""
            out[f"process_{key.strip().replace(' ', '_')}{suffix}"] = amounts[0]


def _mimalloc_row(sub: str, name: str, rest: str, parent: str, table: JsonDict) -> str:
    """One row of the table into `table`; returns the row a `-sub` row would belong to."""
    key = name.replace(" ", "_")
    if sub:
        key = f"{parent}_{key}" if parent else key
    if key == "process":
        _process_line(rest, table)
        return parent
    values = _amounts(rest)
    if not values:
        return parent if sub else key
    if key == "elapsed":
        table["elapsed_seconds"] = values[0]
    elif len(values) == 1 or key in ("searches",):
        table[key] = values[0]
    else:
        table[key] = values[0]
        table.update({f"{key}_{c}": v for c, v in zip(_COLUMNS, values, strict=False)})
    return parent if sub else key


def read_mimalloc(text: str) -> list[JsonDict]:
    """Every `heap stats:` table of MIMALLOC_SHOW_STATS output."""
    tables: list[JsonDict] = []
    table: JsonDict | None = None
    parent = ""
    for line in text.splitlines():
        if line.startswith("heap stats:"):
            table, parent = {}, ""
            tables.append(table)
            continue
        if table is None:
            continue
        m = _ROW.match(line)
        if m is None or len(table) >= MAX_KEYS:
            continue
        parent = _mimalloc_row(m.group(1), m.group(2), m.group(3), parent, table)
        if m.group(2) == "process":  # the table's last row
            table = None
    return [t for t in tables if t]


# -- jemalloc ------------------------------------------------------------------------------
_PAIR = re.compile(r"([A-Za-z_]+)[: ]\s*(\d+)")


def read_jemalloc(text: str) -> list[JsonDict]:
    """Each `Allocated: N, active: N, metadata: N (n_thp N), resident: N, mapped: N,
    retained: N` line (one per process) of `stats_print:true` output."""
    out: list[JsonDict] = []
    for line in text.splitlines():
        if line.startswith("Allocated:"):
            pairs: JsonDict = {k.lower(): int(v) for k, v in _PAIR.findall(line)}
            if "allocated" in pairs:
                out.append(pairs)
    return out


READERS: dict[str, tuple[Reader, str]] = {  # parser -> (reader, the key "largest" means)
    "mallard": (read_mallard, "allocs"),
    "mimalloc": (read_mimalloc, "reserved_peak"),
    "jemalloc": (read_jemalloc, "allocated"),
}


def _size(report: JsonDict, key: str) -> float:
    v = report.get(key, 0)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def read_counters(hook: StatsHook, trial_dir: Path) -> JsonDict | None:
    """The counters a trial's allocator reported (the largest report), None when none."""
    reader, key = READERS[hook.parser]
    if hook.file_env is not None:
        texts = [_read(f) for f in sorted(trial_dir.glob("stats-*"))]
    else:
        texts = [_read(trial_dir / "stderr")]
    reports = [r for text in texts if text for r in reader(text)]
    if not reports:
        return None
    return max(reports, key=lambda r: _size(r, key))
