"""`make demo SCENARIO=allocators`: Mallard measuring allocators nobody here wrote.

Registers mimalloc (CMake) and jemalloc (autoconf) as projects with the recipes in
docs/recipes/ (nothing added to their repositories), then:

1. compares two releases of each on the quick suite through the REST API (mimalloc
   v2.0.9 vs v2.1.7, jemalloc 5.2.1 vs 5.3.0), prints each report and ends each with
   `allocators: <project> <base> -> <head>: <n> primary cells: <i> improved, ...`;
2. pushes 8 consecutive real mimalloc commits at once to a bare repository with Mallard's
   post-receive hook and waits for a commit verdict for each (the push suite), printing
   `verdict <sha7> <verdict>` per commit.

The repositories are URLs or paths (`--mimalloc`, `--jemalloc`); by default the git
bundles in ../shared/allocators/, cloned into .mallard/allocators/ as bare repositories.
Prints `first verdict: <s> s after registering mimalloc` (the README's table).
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo import ROOT, STATE, follow, register, step, up  # noqa: E402
from demo_push import git, install_hook, wait_jobs_idle  # noqa: E402

WORK = STATE / "allocators"
BUNDLES = ROOT.parent / "shared" / "allocators"
RECIPES = ROOT / "docs" / "recipes"
PAIRS = {"mimalloc": ("v2.0.9", "v2.1.7"), "jemalloc": ("5.2.1", "5.3.0")}
PUSHED = 8  # consecutive mimalloc commits pushed at once
SUMMARY = re.compile(r"(\d+) primary cells: (\d+) improved, (\d+) regressed, (\d+) same, "
                     r"(\d+) unknown")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--port", type=int, default=8341)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=3600)
    for name in PAIRS:
        parser.add_argument(f"--{name}", default=str(BUNDLES / f"{name}.bundle"),
                            help=f"{name}'s repository (URL or path; default: its bundle)")
    parser.add_argument("--skip-push", action="store_true", help="only the release pairs")
    return parser.parse_args()


def bare_clone(source: str, name: str) -> Path:
    """A bare repository of `source` (a URL, a path or a bundle) under .mallard/allocators:
    what the runner fetches from, and what the push part pushes to."""
    bare = WORK / f"{name}.git"
    WORK.mkdir(parents=True, exist_ok=True)
    step(f"cloning {name} from {source} into {bare.relative_to(ROOT)}")
    git(WORK, "clone", "-q", "--bare", source, str(bare))
    return bare


def compare(client: httpx.Client, runner: Any, name: str, trials: int) -> str:
    """One release pair on the quick suite, no peers; returns the summary line."""
    base, head = PAIRS[name]
    step(f"posting a comparison: {name} {base} vs {head}, quick suite")
    comp = client.post("/api/v1/comparisons", json={
        "project": name, "arch": platform.machine(), "suite": "quick", "trials": trials,
        "peers": [], "base": {"commit": base}, "head": {"commit": head},
    }).raise_for_status().json()
    final = follow(client, comp["id"], runner)
    report = client.get(f"/api/v1/comparisons/{comp['id']}/report").raise_for_status().text
    print(report, flush=True)
    m = SUMMARY.search(report)
    if final["state"] != "done" or m is None:
        return f"allocators: {name} {base} -> {head}: comparison {final['state']}"
    n, i, r, s, u = m.groups()
    return (f"allocators: {name} {base} -> {head}: {n} primary cells: {i} improved, "
            f"{r} regressed, {s} same, {u} unknown")


def push_commits(client: httpx.Client, bare: Path, deadline: float) -> list[str]:
    """The branch `demo` starts at one mimalloc commit (measured alone), then the next
    PUSHED first-parent commits of dev (a linear stretch: each the parent of the next)
    are pushed at once; returns their shas."""
    chain = git(bare, "rev-list", "--first-parent", "--reverse", f"-{PUSHED + 1}",
                "dev").split()
    work = WORK / "mimalloc-work"
    if work.exists():
        shutil.rmtree(work)
    git(WORK, "clone", "-q", str(bare), str(work))
    step(f"pushing mimalloc {chain[0][:7]}: the start of branch demo")
    git(work, "push", "-q", "origin", f"{chain[0]}:refs/heads/demo")
    wait_jobs_idle(client, deadline, "the first commit was not measured")
    step(f"pushing {PUSHED} consecutive mimalloc commits at once "
         f"({chain[1][:7]}..{chain[-1][:7]})")
    git(work, "push", "-q", "origin", f"{chain[-1]}:refs/heads/demo")
    return chain[1:]


def verdicts(client: httpx.Client, shas: list[str], deadline: float) -> dict[str, str]:
    """Until every pushed commit has a settled verdict: sha -> verdict."""
    out: dict[str, str] = {}
    while time.monotonic() < deadline and len(out) < len(shas):
        for sha in shas:
            if sha in out:
                continue
            detail = client.get(f"/api/v1/projects/mimalloc/commits/{sha}")
            settled = [v for v in (detail.json().get("verdicts") or [])
                       if detail.status_code == 200 and v["state"] in ("done", "failed")]
            if settled:
                out[sha] = settled[0]["verdict"] or settled[0]["state"]
                print(f"verdict {sha[:7]} {out[sha]}", flush=True)
        time.sleep(2)
    return out


def main() -> int:
    args = parse_args()
    deadline = time.monotonic() + args.timeout
    if WORK.exists():
        shutil.rmtree(WORK)  # a fresh database and repositories, as on a fresh clone
    repos = {name: bare_clone(getattr(args, name), name) for name in PAIRS}
    push_env = {"MALLARD_DATA_DIR": str(WORK / "pgdata"), "MALLARD_SUITE": "push",
                "MALLARD_PUSH_MAX_QUEUED": str(PUSHED), "MALLARD_PUSH_BACKFILL": "false",
                "MALLARD_PEERS": ""}
    with up(args.port, args.keep, env=push_env) as (st, client, runner):
        assert st.api_server is not None
        admin = st.api_server.token("admin")
        t0 = time.monotonic()
        # the push part pushes to mimalloc's branch `demo`: the branch Mallard follows
        for name, branch in (("mimalloc", "demo"), ("jemalloc", "dev")):
            register(st.api, admin, name, f"file://{repos[name]}", RECIPES / f"{name}.toml",
                     branch)
            step(f"registered {name} with docs/recipes/{name}.toml")
        lines = [compare(client, runner, "mimalloc", args.trials)]
        first = time.monotonic() - t0
        lines.append(compare(client, runner, "jemalloc", args.trials))
        pushed: dict[str, str] = {}
        if not args.skip_push:
            install_hook(repos["mimalloc"], st.api, st.user_token, "mimalloc")
            shas = push_commits(client, repos["mimalloc"], deadline)
            pushed = verdicts(client, shas, deadline)
            lines.append(f"allocators: mimalloc push of {PUSHED} commits: "
                         f"{len(pushed)} verdicts")
        print(f"first verdict: {first:.0f} s after registering mimalloc", flush=True)
        for line in lines:
            print(line, flush=True)
        ok = all("primary cells" in line for line in lines[:2])
        return 0 if ok and (args.skip_push or len(pushed) == PUSHED) else 1


if __name__ == "__main__":
    sys.exit(main())
