"""Exporters of the one result type (ResultsIn): JSON, markdown, CSV, and a Rich table."""

from __future__ import annotations

import csv
import io
import os
from datetime import datetime
from pathlib import Path

from mallard_wire.results import ResultsIn
from rich.console import Console
from rich.table import Table

from .summary import CellSummary, allocator_display, summarize


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3f}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.{digits}g}"


def timestamp(t: datetime | None) -> str:
    """`2026-11-24T01:05:00.123456Z` (a trial's start, as the CSV has it)."""
    return "" if t is None else t.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:.1f} MiB"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_block(readme: Path, markers: tuple[str, str], block: str, section: str) -> None:
    """Put `block` between the README's markers: replaced where they are; else added at the
    end of its `## {section}` section, or in a new such section at the end of the file. The
    one way every bench writes its current table."""
    begin, end = markers
    text = readme.read_text() if readme.exists() else ""
    heading = f"## {section}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + block + "\n" + end + rest.split(end, 1)[1]
    elif heading in text:
        head, rest = text.split(heading, 1)
        first, nl, after = rest.partition("\n")
        nxt = after.find("\n## ")
        body, tail = (after, "") if nxt < 0 else (after[:nxt + 1], after[nxt + 1:])
        text = (head + heading + first + nl + body.rstrip("\n") + "\n\n" + begin + "\n" + block
                + "\n" + end + "\n" + ("\n" + tail if tail else ""))
    else:
        text = text.rstrip("\n") + f"\n\n{heading}\n\n{begin}\n{block}\n{end}\n"
    write_atomic(readme, text)


def to_json(results: ResultsIn) -> str:
    return results.model_dump_json(indent=2)


def rows(results: ResultsIn, baseline: str | None) -> list[CellSummary]:
    return summarize(results.trials, baseline)


def to_markdown(results: ResultsIn, baseline: str | None = "glibc") -> str:
    tb = results.testbed
    out = [f"Testbed: {tb.arch}, {tb.cpu_model}, CPUs {tb.cpus}, kernel {tb.kernel}, "
           f"{tb.compiler}, {tb.libc}, governor {tb.governor}, THP {tb.thp}", "",
           f"| workload | allocator | label | ops/s (items/s) median | IQR | CV | max RSS median | "
           f"n ok / n | vs {baseline or '-'} |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in rows(results, baseline):
        out.append(f"| {s.case} | {s.allocator} | {s.label} | {_fmt(s.median(s.speed))} | "
                   f"{_fmt(s.iqr(s.speed))} | {_pct(s.cv(s.speed))} | "
                   f"{_mib(s.median('max_rss_bytes'))} | {s.n_ok} / {s.n} | "
                   f"{'-' if s.ratio is None else f'{s.ratio:.3f}'} |")
    det = deterministic_rows(results)
    if det:
        out += ["", "| workload (cachegrind) | allocator | instructions | D1 misses | LLC misses |",
                "|---|---|---:|---:|---:|"]
        for s in det:
            out.append(f"| {s.case} | {s.allocator} | {_count(s.median('instructions'))} | "
                       f"{_count(s.median('d1_misses'))} | {_count(s.median('llc_misses'))} |")
    return "\n".join(out) + "\n"


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def deterministic_rows(results: ResultsIn) -> list[CellSummary]:
    """The cachegrind cells (their own small params, no timing)."""
    return [s for s in rows(results, None) if s.median("instructions") is not None
            and s.median("ops_per_sec") is None]


def to_csv(results: ResultsIn) -> str:
    """One row per trial (raw samples), one column per measure."""
    measures = sorted({m for t in results.trials for m in t.measures})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["uid", "label", "allocator", "commit", "variant", "workload", "params", "seq",
                "warmup", "started_at", "ok", "exit_code", "signal", *measures])
    for t in results.trials:
        params = " ".join(f"{k}={v}" for k, v in t.workload.params.items())
        w.writerow([t.uid, t.label, t.allocator.name, t.allocator.commit or "",
                    t.allocator.variant or "", t.workload.name, params, t.seq, t.warmup,
                    timestamp(t.started_at), t.ok, "" if t.exit_code is None else t.exit_code,
                    "" if t.signal is None else t.signal,
                    *[t.measures.get(m, "") for m in measures]])
    return buf.getvalue()


def print_tables(results: ResultsIn, console: Console, baseline: str | None = "glibc") -> None:
    by_workload: dict[str, list[CellSummary]] = {}
    for s in rows(results, baseline):
        by_workload.setdefault(s.workload, []).append(s)
    for workload, cells in by_workload.items():
        unit = "items/s" if cells[0].speed == "items_per_second" else "ops/s"
        table = Table(title=f"{workload}  ({unit}; ratio = median / {baseline or '-'} median)")
        for col, justify in (("params", "left"), ("allocator", "left"), ("median", "right"),
                             ("IQR", "right"), ("CV", "right"), ("max RSS", "right"),
                             ("ok / n", "right"), ("ratio", "right")):
            table.add_column(col, justify=justify,  # type: ignore[arg-type]
                             overflow="fold", no_wrap=col != "params")
        for s in cells:
            params = s.case.removeprefix(workload).strip()
            if s.median(s.speed) is None and s.median("instructions") is not None:
                table.add_row(params, s.allocator, f"{_count(s.median('instructions'))} instr",
                              f"{_count(s.median('llc_misses'))} LLC miss", "", "",
                              f"{s.n_ok} / {s.n}", "", style="dim")
                continue
            ratio = "-" if s.ratio is None else f"{s.ratio:.3f}"
            style = "red" if s.n_ok < s.n else None
            table.add_row(params, s.allocator, _fmt(s.median(s.speed)),
                          _fmt(s.iqr(s.speed)), _pct(s.cv(s.speed)),
                          _mib(s.median("max_rss_bytes")), f"{s.n_ok} / {s.n}", ratio,
                          style=style)
        console.print(table)
    failed = [t for t in results.trials if not t.ok]
    for t in failed[:10]:
        why = f"signal {t.signal}" if t.signal else f"exit {t.exit_code}"
        console.print(f"[red]failed trial[/] {allocator_display(t)} {t.workload.name} seq "
                      f"{t.seq}: {why}; stderr tail: {(t.stderr_tail or '').strip()[-300:]!r}")
    if len(failed) > 10:
        console.print(f"[red]... and {len(failed) - 10} more failed trials[/]")
