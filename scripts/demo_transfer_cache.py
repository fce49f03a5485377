"""`make demo SCENARIO=transfer-cache`: the lock-free transfer cache story, replayed.

The same stack as `make demo` (the API on a real embedded PostgreSQL, one runner agent
pinned to one core), then two comparisons over the `transfer-cache` suite, both against
mallard's `transfer=mutex` at this checkout's HEAD: `transfer=ring` (waits for a claim in
flight) and `transfer=naive` (the known-bad ring that misses instead). Each covers the
micro tier (the `transfer` workload at 1..64 threads, oversubscribed above the pinned
core) and the macro tier (redis-server and python3 under the allocator). It prints the
micro ratios per thread count, the macro verdicts, each side's hit ratios, the curve
verdicts, and ends with one line, every number measured by this run:

    transfer-cache: naive vs mutex: micro <r>x at <T> threads; <workload> ops_per_sec
    <+/-pct>% <VERDICT>; remove hit ratio <a> -> <b>

(one line). ``<T>`` is the thread count where naive's micro ratio was highest; the macro
workload is the one whose ops_per_sec cell REGRESSED the most for naive, else the one
with the largest loss. Logs go to .mallard/.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

from demo import console, demo_args, follow, step, up

SUITE = "transfer-cache"
MICRO = "transfer"
BASE = "transfer=mutex"
HEADS = ("transfer=ring", "transfer=naive")
SPEED = "ops_per_sec"
SPEEDS = (SPEED, "ops_per_cpu_sec")  # the macro lines show both: which one is judged varies
REMOVE = "transfer_remove_hit_ratio"
INSERT = "transfer_insert_hit_ratio"


def cells_by(detail: dict[str, Any]) -> dict[tuple[str, int | None, str], dict[str, Any]]:
    return {(c["workload"], c["threads"], c["measure"]): c for c in detail["cells"]}


def ratio(c: dict[str, Any] | None) -> float | None:
    if not c or not c["base_median"] or c["head_median"] is None:
        return None
    return float(c["head_median"]) / float(c["base_median"])


def fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def micro_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    """Per thread count: each head's ops/s ratio to mutex with its verdict, and the remove
    hit ratio of mutex and of each head (plain text: it never wraps)."""
    names = [h.split("=")[1] for h in results]
    out = [f"micro tier: {MICRO} ops/s vs mutex, and remove hit ratio "
           f"(mutex / {' / '.join(names)})",
           f"{'threads':>7}  " + "  ".join(f"{n + ' / mutex':>24}" for n in names)
           + "  remove hit"]
    first = next(iter(results.values()))
    threads = sorted({t for (w, t, m) in cells_by(first) if w == MICRO and m == SPEED
                      and t is not None})
    for t in threads:
        cols, hits = [], []
        for detail in results.values():
            cells = cells_by(detail)
            c = cells.get((MICRO, t, SPEED))
            cell = fmt(ratio(c), ".2f") + "x " + (c or {}).get("verdict", "n/a").upper()
            cols.append(f"{cell:>24}")
            hit = cells.get((MICRO, t, REMOVE)) or {}
            if not hits:
                hits.append(fmt(hit.get("base_median"), ".3f"))
            hits.append(fmt(hit.get("head_median"), ".3f"))
        out.append(f"{t:>7}  " + "  ".join(cols) + "  " + " / ".join(hits))
    return out


def macro_lines(head: str, detail: dict[str, Any]) -> list[str]:
    cells = cells_by(detail)
    out = []
    for (w, t, m), c in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0,
                                                               kv[0][2])):
        if w == MICRO or m not in SPEEDS:
            continue
        rem, ins = cells.get((w, t, REMOVE)), cells.get((w, t, INSERT))
        out.append(
            f"{head.split('=')[1]} vs mutex: {w} threads={t} {m} "
            f"{fmt(c['diff_pct'], '+.1f')}% {c['verdict'].upper()}; remove hit ratio "
            f"{fmt((rem or {}).get('base_median'), '.3f')} -> "
            f"{fmt((rem or {}).get('head_median'), '.3f')}, insert hit ratio "
            f"{fmt((ins or {}).get('base_median'), '.3f')} -> "
            f"{fmt((ins or {}).get('head_median'), '.3f')}")
    return out


def summary_line(detail: dict[str, Any]) -> str:
    """The closing line of the scenario (module doc), from naive's comparison."""
    cells = cells_by(detail)
    micro = [(ratio(c), t) for (w, t, m), c in cells.items()
             if w == MICRO and m == SPEED and ratio(c) is not None and t is not None]
    r, t_best = max(micro, key=lambda x: (x[0] or 0.0, -(x[1] or 0))) if micro else (None, 0)
    macro = [c for (w, _, m), c in cells.items() if w != MICRO and m == SPEED
             and c["diff_pct"] is not None]
    macro.sort(key=lambda c: (c["verdict"] != "regressed", c["diff_pct"]))
    if not macro:
        return (f"transfer-cache: naive vs mutex: micro {fmt(r, '.2f')}x at {t_best} threads; "
                "no macro cell measured")
    m = macro[0]
    rem = cells.get((m["workload"], m["threads"], REMOVE)) or {}
    return (f"transfer-cache: naive vs mutex: micro {fmt(r, '.2f')}x at {t_best} threads; "
            f"{m['workload']} {SPEED} {m['diff_pct']:+.1f}% {m['verdict'].upper()}; "
            f"remove hit ratio {fmt(rem.get('base_median'), '.3f')} -> "
            f"{fmt(rem.get('head_median'), '.3f')}")


def main() -> int:
    args = demo_args(__doc__)

    with up(args.port, args.keep) as (st, client, runner):
        ids: dict[str, int] = {}
        for head in HEADS:
            step(f"posting a comparison: mallard@{st.commit[:7]} {BASE} vs {head}, suite "
                 f"{SUITE} ({MICRO} at 1..64 threads; redis, python)")
            ids[head] = client.post("/api/v1/comparisons", json={
                "project": "mallard", "arch": platform.machine(), "suite": SUITE,
                "trials": args.trials, "max_follow_ups": 0,
                "base": {"commit": st.commit, "variant": BASE},
                "head": {"commit": st.commit, "variant": head},
            }).raise_for_status().json()["id"]
        results: dict[str, dict[str, Any]] = {}
        for head, cid in ids.items():
            final = follow(client, cid, runner)
            if final["state"] != "done":
                raise SystemExit(f"demo: comparison {cid} ({head}) ended {final['state']}; "
                                 f"see {st.api}/api/v1/comparisons/{cid}/report")
            results[head] = client.get(f"/api/v1/comparisons/{cid}").raise_for_status().json()
        console.rule("transfer-cache")
        for line in micro_lines(results):
            print(line)
        for head, detail in results.items():
            for line in macro_lines(head, detail):
                print(line)
            for curve in detail["curves"]:
                print(f"{head.split('=')[1]} vs mutex: {curve['summary']}")
            for j in detail["joint"]:
                if j["workload"] != MICRO:
                    print(f"{head.split('=')[1]} vs mutex: {j['workload']} threads="
                          f"{j['threads']} speed x memory: {j['label']} ({j['kind']})")
        for head, cid in ids.items():
            step(f"{head}: report {st.api}/api/v1/comparisons/{cid}/report, page "
                 f"{st.api}/ui/comparisons/{cid}")
        console.rule()
        last = summary_line(results["transfer=naive"])
    print(last)  # after the stack is stopped: the scenario's last line
    return 0


if __name__ == "__main__":
    sys.exit(main())
