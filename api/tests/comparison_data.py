"""Comparison trials and posts shared by the comparison tests: interleaved base/head trials
of larson with chosen shifts, posted as a job's results and analysed at once."""

import uuid

import numpy as np
from helpers import run_analysis

SHA_BASE = "1" * 40
SHA_HEAD = "2" * 40
def trial(label, name, commit, variant, threads, measures, seq, counters=None):
    return {
        "uid": str(uuid.uuid4()), "label": label,
        "allocator": {"name": name, "commit": commit, "variant": variant},
        "workload": {"name": "larson", "params": {"threads": threads, "ops": 1000, "seed": 42}},
        "seq": seq, "warmup": False, "ok": True, "exit_code": 0,
        "measures": measures, "counters": counters,
    }


def comparison_trials(n, *, seed, shifts, noise=0.01, peers=(), warmup=True, drift=None):
    """Interleaved base/head trials per threads value; shifts: threads -> head/base ratio.
    Every trial its own seq (two samples), unless ``drift`` (round -> factor on both sides)
    is given: then a round's base and head share their seq, a pair, as a runner's do."""
    rng = np.random.default_rng(seed)
    out = []
    seq = 0
    if drift is not None:
        return paired_trials(n, rng, shifts, noise, drift)
    for threads, shift in shifts.items():
        if warmup:
            for label, commit in (("base", SHA_BASE), ("head", SHA_HEAD)):
                t = trial(label, "mallard", commit, None, threads, {"ops_per_sec": 1.0}, seq)
                t["warmup"] = True
                out.append(t)
                seq += 1
        for _ in range(n):
            for label, commit, level, ratio in (("base", SHA_BASE, 1.0, 0.9),
                                                 ("head", SHA_HEAD, shift, 0.6)):
                ops = 1e6 * level * (1 + noise * rng.standard_normal())
                out.append(trial(label, "mallard", commit,
                                 "transfer=mutex" if label == "base" else "transfer=ring",
                                 threads, {"ops_per_sec": ops, "max_rss_bytes": 10485760.0,
                                           "transfer_insert_hit_ratio": ratio}, seq,
                                 counters={"version": 1}))
                seq += 1
        for peer, level in peers:
            for _ in range(3):
                out.append(trial("peer", peer, None, None, threads,
                                 {"ops_per_sec": 1e6 * level}, seq))
                seq += 1
    return out


def steady(_round):
    """No drift: ``comparison_trials(..., drift=steady)`` pairs the rounds, as a runner's
    blocks are, on a steady machine."""
    return 1.0


def paired_trials(n, rng, shifts, noise, drift):
    """Round i's base and head with seq i and the round's drift on both (a runner's block)."""
    out = []
    for threads, shift in shifts.items():
        for i in range(n):
            for label, commit, level in (("base", SHA_BASE, 1.0), ("head", SHA_HEAD, shift)):
                ops = 1e6 * level * drift(i) * (1 + noise * rng.standard_normal())
                out.append(trial(label, "mallard", commit, None, threads,
                                 {"ops_per_sec": ops}, i))
    return out


def post_results(client, headers, runner, project, job_id, trials, attempt=1):
    body = {"job_id": job_id, "attempt": attempt, "runner_id": runner["id"],
            "project": project,
            "testbed": {"arch": runner["arch"], "cpu_model": "Test CPU", "cpus": "1"},
            "trials": trials}
    r = client.post("/api/v1/results", headers=headers, json=body)
    assert r.status_code == 201, r.text
    run_analysis(client.app)
    return r.json()


def larson_comparison(client, headers, project, runner, **fields) -> int:
    """POST a comparison of SHA_BASE and SHA_HEAD on larson, 5 trials a side; its id."""
    r = client.post("/api/v1/comparisons", headers=headers, json={
        "project": project["name"], "base": {"commit": SHA_BASE}, "head": {"commit": SHA_HEAD},
        "workloads": ["larson"], "trials": 5, "arch": runner["arch"], **fields})
    assert r.status_code == 201, r.text
    return r.json()["id"]

