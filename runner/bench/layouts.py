"""`make bench-layouts`: how much of a workload's spread is its process layout?

For every case of a suite (default quick; threads 1 and 2), one allocator (default the
mallard build, `--lib`) runs in L (6) fixed layouts, each ASLR off (`setarch -R`) with the
environment padded by a random multiple of 16 bytes below 4096 (the runner's fixed layout
moved by a sampled layout's offset, commands.py), T (5) trials in each, interleaved round by
round in a shuffled order of layouts; and, in the same rounds, L x T trials each in a
freshly sampled layout (ASLR on, a random offset: what `layouts=sampled` runs). Per case:

* `within`: the median over layouts of the robust CV of a layout's trials (the noise one
  layout sees: what every trial of a build met with ASLR off);
* `between`: the robust CV of the layouts' medians (what the layout lottery adds);
* `range`: (slowest - fastest layout median) / the median;
* `excess`: `between` over what the noise alone gives a median of T trials,
  `within / sqrt(T)`: about 1 when the layout adds nothing, well above 1 when it does;
* `sampled`: the robust CV of the sampled trials, and their modes (mallard_stats.modes).

The measure is ops per CPU second (`operations / cpu_seconds` of the workload's result line).
Prints a markdown table (for docs/statistics.md, "Layouts") and writes every reading to
`--json`. Run it under `flock /tmp/mallard-bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
from pathlib import Path

from mallard_runner.cells import Cell, Target
from mallard_runner.commands import LAYOUT_PAD_SPAN, LAYOUT_PAD_STEP, MINIMAL_ENV, padded_env
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import Case, expand, load_suite
from mallard_stats.modes import find_modes
from mallard_stats.stats import robust_cv_pct
from mallard_wire.results import AllocatorIn


def _run(cell: Cell, lib: str, cpus: str, pad: int, aslr_off: bool) -> float | None:
    env = padded_env([*MINIMAL_ENV, f"LD_PRELOAD={lib}"], extra=pad)
    setarch = ["setarch", platform.machine(), "-R"] if aslr_off else []
    proc = subprocess.run(["taskset", "-c", cpus, *setarch, "env", "-i", *env, *cell.argv()],
                          capture_output=True, text=True, timeout=600, check=False)
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        return float(out["operations"]) / float(out["cpu_seconds"])
    except (IndexError, KeyError, ValueError, ZeroDivisionError):
        return None


def measure(case: Case, lib: str, cpus: str, layouts: int, trials: int,
            rng: random.Random, workloads: Path) -> dict[str, object]:
    cell = Cell(target=Target("head", AllocatorIn(name="mallard")), workload=case.workload,
                params=case.params, binary=workloads / case.workload)
    pads = [rng.randrange(0, LAYOUT_PAD_SPAN, LAYOUT_PAD_STEP) for _ in range(layouts)]
    fixed: dict[int, list[float]] = {p: [] for p in pads}
    sampled: list[float] = []
    for _ in range(trials):
        order = list(pads)
        rng.shuffle(order)
        for pad in order:
            for aslr_off in rng.sample([True, False], 2):
                v = _run(cell, lib, cpus, pad if aslr_off else
                         rng.randrange(0, LAYOUT_PAD_SPAN, LAYOUT_PAD_STEP), aslr_off)
                if v is not None:
                    (fixed[pad] if aslr_off else sampled).append(v)
    return {"workload": case.workload, "params": case.params, "fixed": fixed,
            "sampled": sampled}


def summary(r: dict[str, object]) -> str:
    fixed = r["fixed"]
    sampled = r["sampled"]
    assert isinstance(fixed, dict) and isinstance(sampled, list)
    medians = [statistics.median(v) for v in fixed.values() if v]
    within = statistics.median(robust_cv_pct(v) or 0.0 for v in fixed.values() if len(v) > 1)
    between = robust_cv_pct(medians) or 0.0
    spread = (max(medians) - min(medians)) / statistics.median(medians) * 100
    per_layout = statistics.median(len(v) for v in fixed.values())
    excess = between / (within / per_layout ** 0.5) if within > 0 else float("nan")
    modes = find_modes(sampled)
    shown = modes.text() if modes.multimodal else "one"
    params = r["params"]
    assert isinstance(params, dict)
    name = f"{r['workload']} t={params.get('threads')}"
    return (f"| {name} | {statistics.median(medians):.3g} | {within:.1f}% | {between:.1f}% | "
            f"{spread:.1f}% | {excess:.1f} | {robust_cv_pct(sampled) or 0.0:.1f}% | {shown} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--workloads", default="", help="comma list (default: the suite's)")
    ap.add_argument("--layouts", type=int, default=6)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--cpus", default="1")
    ap.add_argument("--lib", default=str(REPO_ROOT / "build" / "allocator" / "libmallard.so"))
    ap.add_argument("--first-params", action="store_true",
                    help="one case per workload x threads (the first value of each list)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--table", type=Path, help="only print the table of a --json file")
    a = ap.parse_args()
    if a.table:
        print("\n".join(summary(r) for r in json.loads(a.table.read_text())))
        return
    settings = RunnerSettings()
    suite = load_suite(a.suite, settings.suites_dir)
    cases = expand(suite, [w for w in a.workloads.split(",") if w] or None,
                   [int(t) for t in a.threads.split(",")])
    cases = [c for c in cases if c.program is None]
    if a.first_params:
        seen: set[tuple[str, object]] = set()
        cases = [c for c in cases if (k := (c.workload, c.params["threads"])) not in seen
                 and not seen.add(k)]
    rng = random.Random(7)
    print("| workload | median ops/CPU-s | within a layout | between layouts | "
          "layout range | excess | sampled CV | sampled modes |\n"
          "|---|---|---|---|---|---|---|---|")
    results = []
    for case in cases:
        r = measure(case, a.lib, a.cpus, a.layouts, a.trials, rng, settings.workloads_dir)
        results.append(r)
        print(summary(r), flush=True)
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
