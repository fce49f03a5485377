"""`make bench-repeats`: the demo's comparison run again and again against one API: do its
decided cells flip?

Starts the demo's stack once (the API with an embedded PostgreSQL in .mallard/bench-repeats,
one runner agent pinned to the last CPU), then posts the demo's comparison (mallard at
HEAD, transfer=mutex against transfer=ring, the quick suite, the demo's trials and peers)
`--repeats` (5) times, one after another, each followed to its end. Per run: the report's
summary line, the unknown share of the primary cells, the MDE of every 1-thread timed
cell, the minutes; over the runs: each primary cell's verdicts, and the **flips**: a cell
REGRESSED (IMPROVED) in one run and SAME or IMPROVED (REGRESSED) in another. UNKNOWN is no
flip (it decides nothing) and is counted apart. The runs' cells and reports stay in
`repeats.json` there. `--no-peers`: without the peers (a shorter run; the cells judged are
the same). Run it under `flock /tmp/mallard-bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import demo  # noqa: E402  - the demo's stack: one way to start it
from mallard_api.analysis.report import is_counter  # noqa: E402

Cell = dict[str, object]
DECIDED = ("regressed", "improved")


def primary(cells: list[Cell]) -> list[Cell]:
    """The primary cells (what the report's summary line counts)."""
    return [c for c in cells if c["verdict"] != "diagnostic" and not is_counter(str(c["measure"]))]


def key(c: Cell) -> str:
    given: dict[str, object] = c["params"]  # type: ignore[assignment]
    params = " ".join(f"{k}={v}" for k, v in sorted(given.items()))
    return f"{c['workload']} {params} {c['measure']}"


def run_once(st: demo.Stack, body: dict[str, object]) -> dict[str, object]:
    """One comparison, followed to its end: its summary line and primary cells."""
    assert st.client is not None and st.runner_proc is not None
    started = time.monotonic()
    comp = st.client.post("/api/v1/comparisons", json=body).raise_for_status().json()
    final = demo.follow(st.client, comp["id"], st.runner_proc)
    report = st.client.get(f"/api/v1/comparisons/{comp['id']}/report").raise_for_status().text
    summary = next((ln for ln in report.splitlines() if ln.startswith("state:")), "")
    return {"id": comp["id"], "state": final["state"], "summary": summary,
            "minutes": (time.monotonic() - started) / 60, "cells": primary(final["cells"]),
            "report": report}


def run_line(i: int, r: dict[str, object]) -> str:
    cells: list[Cell] = r["cells"]  # type: ignore[assignment]
    unknown = sum(c["verdict"] == "unknown" for c in cells)
    timed = sorted((str(c["workload"]), c["mde_pct"]) for c in cells
                   if c["threads"] == 1 and str(c["measure"]).startswith("ops_per"))
    mdes = ", ".join(f"{w} {m:.1f}%" if m is not None else f"{w} n/a" for w, m in timed)
    return (f"| {i + 1} | {str(r['summary']).removeprefix('state: ')} | "
            f"{100 * unknown / max(len(cells), 1):.0f}% | {mdes} | {r['minutes']:.1f} |")


def flips(runs: list[dict[str, object]]) -> tuple[list[str], list[str]]:
    """Lines naming the cells that flipped, and those decided in one run, unknown in
    another."""
    seen: dict[str, list[str]] = defaultdict(list)
    for r in runs:
        for c in r["cells"]:  # type: ignore[attr-defined]
            seen[key(c)].append(str(c["verdict"]))
    flipped, wavered = [], []
    for k, vs in sorted(seen.items()):
        decided = {v for v in vs if v in DECIDED}
        if len(decided) > 1 or (decided and "same" in vs):
            flipped.append(f"{k}: {', '.join(vs)}")
        elif decided and "unknown" in vs:
            wavered.append(f"{k}: {', '.join(vs)}")
    return flipped, wavered


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--trials", type=int, default=5, help="the demo's trials a side")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--port", type=int, default=8341)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    state = ROOT / ".mallard" / "bench-repeats"
    shutil.rmtree(state, ignore_errors=True)  # a fresh database: the first run is the demo's
    demo.STATE = state
    load = os.getloadavg()
    runs: list[dict[str, object]] = []
    with demo.up(args.port, keep=False) as (st, _client, _runner):
        body = {"project": "mallard", "arch": platform.machine(), "suite": "quick",
                "trials": args.trials, "peers": [] if args.no_peers else demo.PEERS,
                "base": {"commit": st.commit, "variant": "transfer=mutex"},
                "head": {"commit": st.commit, "variant": "transfer=ring"}}
        for i in range(args.repeats):
            runs.append(run_once(st, body))
            (state / "repeats.json").write_text(json.dumps(runs, indent=1))
            print(run_line(i, runs[-1]), flush=True)
            if runs[-1]["state"] == "failed":  # the rest would fail alike: say why and stop
                print(f"comparison {runs[-1]['id']} failed; its jobs' logs: "
                      f"{state / 'runner.log'}, GET /api/v1/comparisons/{runs[-1]['id']}",
                      file=sys.stderr)
                return 1
    flipped, wavered = flips(runs)
    print(f"\nmallard@{st.commit[:7]}, {len(runs)} runs of the demo's comparison, load "
          f"{load[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print("| run | summary | unknown | 1-thread timed MDE | minutes |\n|---|---|---:|---|---:|")
    for i, r in enumerate(runs):
        print(run_line(i, r))
    print(f"\nflips (decided in one run, the opposite or SAME in another): {len(flipped)}")
    print("\n".join(flipped))
    print(f"decided in one run, UNKNOWN in another: {len(wavered)}")
    print("\n".join(wavered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
