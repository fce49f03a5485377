"""How often the verdict rule flips a cell over five runs, by the size of its true change.

A paired cell of ``--pairs`` rounds whose log ratios scatter by ``--sd`` (fragmentation's
at one thread on the 2-vCPU VMs: 6%) is judged ``--runs`` times at each true change by
``compare_paired`` and ``adjust_and_decide`` at a late look's level (``--alpha``), against
the policy's 1% band, with no follow-ups. From the shares of verdicts it prints the chance
that five runs of one comparison hold a decided verdict and the opposite or SAME, as
``make bench-repeats`` counts a flip: ``1 - (1 - r)^5 - (1 - o)^5 + (1 - r - o)^5`` with
``r`` the regressed share and ``o`` the same-or-improved share (docs/statistics.md, "The
demo's comparison, repeated").

    python stats/bench/flips.py [--runs 1000]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
from mallard_stats.paired import compare_paired
from mallard_stats.policy import DEFAULT_POLICY
from mallard_stats.stats import adjust_and_decide

CHANGES = (0.0, -0.3, -0.6, -0.8, -1.0, -1.2, -1.5, -2.0)
VERDICTS = ("same", "regressed", "unknown", "improved")


def shares(true_pct: float, args: argparse.Namespace) -> dict[str, float]:
    policy = replace(DEFAULT_POLICY, alpha=args.alpha, n_resamples=200)
    rng = np.random.default_rng(17)
    counts = dict.fromkeys(VERDICTS, 0)
    base = [1000.0] * args.pairs
    for _ in range(args.runs):
        logs = math.log1p(true_pct / 100.0) + args.sd * rng.standard_normal(args.pairs)
        cell = compare_paired(base, list(1000.0 * np.exp(logs)), policy=policy)
        counts[adjust_and_decide([cell], policy)[0].verdict] += 1
    return {v: n / args.runs for v, n in counts.items()}


def flip_in_five(s: dict[str, float]) -> float:
    r, o = s["regressed"], s["same"] + s["improved"]
    return 1 - (1 - r) ** 5 - (1 - o) ** 5 + max(1 - r - o, 0.0) ** 5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--sd", type=float, default=0.06)
    ap.add_argument("--alpha", type=float, default=0.0072)
    args = ap.parse_args()
    print(f"{args.runs} runs a change, {args.pairs} pairs scattering {args.sd:.0%}, "
          f"alpha {args.alpha}, band +-{DEFAULT_POLICY.min_effect_pct:g}%\n")
    print("| true change | same | regressed | unknown | a flip in 5 runs |")
    print("|---:|---:|---:|---:|---:|")
    for pct in CHANGES:
        s = shares(pct, args)
        print(f"| {pct:+.1f}% | {s['same']:.0%} | {s['regressed']:.0%} | {s['unknown']:.0%} "
              f"| {flip_in_five(s):.0%} |", flush=True)


if __name__ == "__main__":
    main()
