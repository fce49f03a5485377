"""Realistic Mallard history, put into a running API the way runners and pushes do.

Twelve commits are pushed one by one to `main` of project `mallard` (the plain push
webhook, as the post-receive hook does); for each, every registered runner (x86_64 and
aarch64) claims its commit job and posts the trials: mallard at that commit beside the
peers glibc and jemalloc, on larson (threads 1, 2), rpc (threads 2) and fragmentation.
From the eighth commit on, larson threads=2 on x86_64 is 17 % slower, so the API's
change detection opens a regression alert. Then an A/B comparison (transfer=mutex vs
transfer=ring) is requested, claimed and answered, with allocator counters; one more
push leaves a job queued. Values are drawn from a seeded generator: same data every run.
"""

from __future__ import annotations

import random
import tomllib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from stack import wait_for

ROOT = Path(__file__).resolve().parents[2]  # the repository: Mallard's own recipe

PROJECT = "mallard"
BRANCH = "main"
COMMITS = 12
BAD_FROM = 7  # index of the first slower commit
TRIALS = 3
RUNNERS = {"x86-1": "x86_64", "arm-1": "aarch64"}
CELLS = [("larson", 1), ("larson", 2), ("rpc", 2), ("fragmentation", 1)]
PEERS = ["glibc", "jemalloc"]
# ops/s per thread; the arm node is a little slower.
SPEED = {"mallard": 1.20e7, "glibc": 0.80e7, "jemalloc": 1.10e7}
FINAL_RSS = {"mallard": 40e6, "glibc": 120e6, "jemalloc": 60e6}
ARCH_FACTOR = {"x86_64": 1.0, "aarch64": 0.7}


def sha(i: int) -> str:
    return f"{i:02x}" + uuid.uuid5(uuid.NAMESPACE_URL, f"mallard-commit-{i}").hex + "abcdef"[:6]


@dataclass
class Seeded:
    """What the seed created, for the tests' assertions."""

    commits: list[str] = field(default_factory=list)
    runner_ids: dict[str, int] = field(default_factory=dict)
    comparison_id: int | None = None
    calibration_id: int | None = None
    queued_jobs: list[int] = field(default_factory=list)
    regressed: tuple[str, str, str] = ("larson", "x86_64", "ops_per_sec")


def testbed(arch: str) -> dict[str, Any]:
    return {
        "arch": arch,
        "cpu_model": "Neoverse-N1" if arch == "aarch64" else "EPYC 7763",
        "cpus": "1",
        "kernel": "6.1.0-27",
        "governor": "performance",
        "smt": False,
        "thp": "madvise",
        "compiler": "gcc 12.2.0",
        "libc": "glibc 2.36",
        "page_size": 4096,
    }


def measures(
    rng: random.Random, allocator: str, arch: str, workload: str, threads: int, slow: float
) -> tuple[dict[str, float], dict[str, Any] | None]:
    ops = 2_000_000
    speed = SPEED[allocator] * ARCH_FACTOR[arch] * threads * slow
    if workload == "rpc":
        speed *= 0.5
    if workload == "fragmentation":
        speed *= 0.2
    ops_per_sec = speed * rng.gauss(1.0, 0.008)
    m: dict[str, float] = {
        "ops_per_sec": ops_per_sec,
        "wall_seconds": ops / ops_per_sec + 0.01,
        "max_rss_bytes": float(int((12e6 + 6e6 * threads) * rng.gauss(1.0, 0.01))),
    }
    if workload == "fragmentation":
        m["peak_rss_bytes"] = float(int(210e6 * rng.gauss(1.0, 0.01)))
        m["final_rss_bytes"] = float(int(FINAL_RSS[allocator] * rng.gauss(1.0, 0.02)))
        m["max_rss_bytes"] = m["peak_rss_bytes"]
    counters = None
    if allocator == "mallard":
        ins_hit = 0.93 - 0.1 * (slow < 1) + rng.gauss(0, 0.003)
        rem_hit = 0.88 - 0.1 * (slow < 1) + rng.gauss(0, 0.003)
        counters = {
            "version": 1,
            "allocator": "mallard",
            "transfer": "ring",
            "transfer_insert_hits": int(ins_hit * 1e6),
            "transfer_insert_misses": int((1 - ins_hit) * 1e6),
            "transfer_remove_hits": int(rem_hit * 1e6),
            "transfer_remove_misses": int((1 - rem_hit) * 1e6),
        }
        m["transfer_insert_hit_ratio"] = counters["transfer_insert_hits"] / 1e6
        m["transfer_remove_hit_ratio"] = counters["transfer_remove_hits"] / 1e6
    return m, counters


def trial(
    rng: random.Random,
    *,
    label: str,
    allocator: dict[str, Any],
    arch: str,
    workload: str,
    threads: int,
    seq: int,
    started: datetime,
    slow: float = 1.0,
) -> dict[str, Any]:
    m, counters = measures(rng, allocator["name"], arch, workload, threads, slow)
    return {
        "uid": str(uuid.UUID(int=rng.getrandbits(128))),
        "label": label,
        "allocator": allocator,
        "workload": {
            "name": workload,
            "params": {"threads": threads, "ops": 2_000_000, "seed": 42},
        },
        "seq": seq,
        "warmup": False,
        "started_at": started.isoformat(),
        "ok": True,
        "exit_code": 0,
        "signal": None,
        "stderr_tail": "",
        "measures": m,
        "counters": counters,
    }


class Client:
    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=base_url + "/api/v1", timeout=120, headers={"Authorization": f"Bearer {token}"}
        )

    def call(
        self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)
    ) -> Any:
        res = self.http.request(method, path, json=body)
        assert res.status_code in ok, f"{method} {path}: {res.status_code} {res.text[:2000]}"
        return res.json() if res.status_code != 204 and res.content else None


def run_job(
    c: Client,
    rng: random.Random,
    runner: str,
    runner_id: int,
    job: dict[str, Any],
    started: datetime,
    slow_for: dict[tuple[str, str, int], float] | None = None,
    variants: dict[str, str] | None = None,
) -> int:
    """Answer a claimed job the way the runner does: every label, cell and trial."""
    arch = RUNNERS[runner]
    spec = job["spec"]
    trials = []
    seq = 0
    cells = [
        (w, t)
        for w, t in CELLS
        if (not spec.get("workloads") or w in spec["workloads"])
        and (not spec.get("threads") or t in spec["threads"])
    ]
    for workload, threads in cells:
        for _ in range(spec.get("trials") or TRIALS):
            for a in spec["allocators"]:
                name = a["name"]
                allocator = {
                    "name": name,
                    "commit": a.get("commit"),
                    "variant": a.get("variant") or (variants or {}).get(a["label"]),
                    "build_flags": "-O2 -g" if name == "mallard" else None,
                }
                if name != "mallard":
                    allocator["commit"] = None
                slow = (slow_for or {}).get((a["label"], workload, threads), 1.0)
                trials.append(
                    trial(
                        rng,
                        label=a["label"],
                        allocator=allocator,
                        arch=arch,
                        workload=workload,
                        threads=threads,
                        seq=seq,
                        started=started + timedelta(seconds=seq),
                        slow=slow,
                    )
                )
                seq += 1
    out = c.call(
        "POST",
        "/results",
        {
            "job_id": job["id"],
            "attempt": job["attempt"],
            "runner_id": runner_id,
            "project": PROJECT,
            "branch": spec.get("branch"),
            "testbed": testbed(arch),
            "trials": trials,
        },
        ok=(201,),
    )
    assert out["stored"] == len(trials), out
    return len(trials)


def seed(base_url: str, token: str) -> Seeded:
    rng = random.Random(20261121)
    c = Client(base_url, token)
    s = Seeded()
    c.call(
        "PUT",
        f"/projects/{PROJECT}",
        {"repo_url": "/srv/git/mallard.git", "default_branch": BRANCH,
         "recipe": tomllib.loads((ROOT / ".mallard.toml").read_text())["allocator"]},
    )
    for name, arch in RUNNERS.items():
        r = c.call(
            "POST",
            "/runners/register",
            {"name": name, "arch": arch, "cpus": "1", "testbed": testbed(arch)},
        )
        s.runner_ids[name] = r["id"]

    start = datetime.now(UTC) - timedelta(days=COMMITS + 1)
    before = None
    for i in range(COMMITS):
        commit = sha(i)
        when = start + timedelta(days=i)
        push = c.call(
            "POST",
            "/webhooks/push",
            {
                "project": PROJECT,
                "ref": f"refs/heads/{BRANCH}",
                "before": before,
                "after": commit,
                "commits": [
                    {
                        "sha": commit,
                        "parent": before,
                        "message": f"commit {i}",
                        "time": when.isoformat(),
                    }
                ],
            },
        )
        assert len(push["jobs"]) == len(RUNNERS), push
        before = commit
        s.commits.append(commit)
        for runner, arch in RUNNERS.items():
            job = c.call("POST", "/jobs/claim", {"runner_id": s.runner_ids[runner]})
            assert job["arch"] == arch and job["spec"]["allocators"], job
            slow = {}
            if i >= BAD_FROM and arch == "x86_64":
                slow = {("head", "larson", 2): 0.83}
            run_job(c, rng, runner, s.runner_ids[runner], job, when + timedelta(hours=1), slow)

    # Two calibrations on x86_64 (before the comparison, which stays the latest): 2 A/A
    # comparisons each, then a 3 % and a 10 % canary on larson at 1 thread.
    for _ in range(2):
        cal = c.call("POST", "/calibrations", {
            "project": PROJECT, "commit": s.commits[-1], "arch": "x86_64",
            "workloads": ["larson"], "threads": [1], "trials": 6, "aa_comparisons": 2,
            "canary_comparisons": 1, "sizes_pct": [3, 10]}, ok=(201,))
        # the A/A jobs, then the probes and, once they settled, the canaries: run every job
        # handed out until the calibration is done (the worker queues each phase)
        def step(i: int = cal["id"]) -> bool:
            job = c.call("POST", "/jobs/claim", {"runner_id": s.runner_ids["x86-1"]},
                         ok=(200, 204))
            if job is not None:
                ref = next((x for x in c.call("GET", f"/calibrations/{i}")["comparisons"]
                            if job["spec"]["comparison_id"] == x["id"]), {})
                # a canary slows the head by its size; a probe (no size) by 2%
                slow = ref.get("canary_pct") or (2.0 if ref.get("probe") else 0.0)
                run_job(c, rng, "x86-1", s.runner_ids["x86-1"], job, datetime.now(UTC),
                        {("head", "larson", 1): 1 - slow / 100})
            return c.call("GET", f"/calibrations/{i}")["state"] == "done"

        wait_for(f"calibration {cal['id']} to reach done", step, 180)
        s.calibration_id = cal["id"]

    # An A/B comparison on x86_64: the ring transfer cache loses 17 % on larson threads=2
    # (and its hit ratios drop), the same elsewhere.
    base, head = s.commits[-1], s.commits[-1]
    comp = c.call(
        "POST",
        "/comparisons",
        {
            "project": PROJECT,
            "base": {"commit": base, "variant": "transfer=mutex"},
            "head": {"commit": head, "variant": "transfer=ring"},
            "workloads": ["larson", "rpc"],
            "threads": [1, 2],
            "trials": 6,
            "arch": "x86_64",
            "hypothesis": "+15%",
            "peers": ["glibc"],
            "max_follow_ups": 0,
        },
        ok=(201,),
    )
    s.comparison_id = comp["id"]
    job = c.call("POST", "/jobs/claim", {"runner_id": s.runner_ids["x86-1"]})
    assert job["kind"] == "comparison", job
    run_job(
        c,
        rng,
        "x86-1",
        s.runner_ids["x86-1"],
        job,
        datetime.now(UTC),
        {("head", "larson", 2): 0.83},
    )
    # The API's analysis worker settles the comparison (and the history's change
    # points) in the background: wait for it, as a user polling the comparison would.
    wait_for(
        f"comparison {s.comparison_id} to be done",
        lambda: c.call("GET", f"/comparisons/{s.comparison_id}")["state"] == "done",
        180,
    )

    # A last push whose jobs nobody has claimed yet: the queue is not empty.
    last = sha(COMMITS)
    push = c.call(
        "POST",
        "/webhooks/push",
        {
            "project": PROJECT,
            "ref": f"refs/heads/{BRANCH}",
            "before": before,
            "after": last,
            "commits": [
                {
                    "sha": last,
                    "parent": before,
                    "message": "queued",
                    "time": datetime.now(UTC).isoformat(),
                }
            ],
        },
    )
    s.queued_jobs = push["jobs"]
    return s
