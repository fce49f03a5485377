"""A testbed whose CPUs are not isolated (the runner's results say
``noise_control.isolated: false``): wall-clock throughput is shown, never judged; throughput
per CPU-second is judged. An isolated testbed judges both."""

import numpy as np
import pytest
from comparison_data import SHA_BASE, SHA_HEAD, trial
from helpers import claim_job as claim
from helpers import run_analysis
from mallard_stats.measures import (
    NOT_ISOLATED_REASON,
    is_primary,
    unjudged_reason,
)


def shared_cpu_trials(n: int, seed: int) -> list[dict]:
    """Head 4% slower per CPU-second (noise 1%); the wall clock adds 0-40% of neighbours'
    time to every trial, so wall-clock ops/s swings by far more than 4%."""
    rng = np.random.default_rng(seed)
    out = []
    for seq in range(n):
        for label, commit, speed in (("base", SHA_BASE, 1.0), ("head", SHA_HEAD, 0.96)):
            cpu_rate = 1e6 * speed * (1 + 0.01 * rng.standard_normal())
            stolen = 1 + 0.4 * rng.random()
            out.append(trial(label, "mallard", commit, None, 1,
                             {"ops_per_cpu_sec": cpu_rate, "ops_per_sec": cpu_rate / stolen,
                              "max_rss_bytes": 1e7}, seq))
    return out


@pytest.mark.parametrize("isolated", [False, True])
def test_wall_clock_throughput_is_judged_only_on_isolated_cpus(
        client, user_headers, make_project, make_runner, fast_analysis, isolated):
    project = make_project()
    runner, rheaders = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": SHA_BASE}, "head": {"commit": SHA_HEAD},
        "workloads": ["larson"], "threads": [1], "trials": 12, "arch": runner["arch"]})
    assert r.status_code == 201, r.text
    comp = r.json()
    job = claim(client, rheaders, runner)
    r = client.post("/api/v1/results", headers=rheaders, json={
        "job_id": job["id"], "attempt": 1, "runner_id": runner["id"],
        "project": project["name"],
        "testbed": {"arch": runner["arch"], "cpu_model": "Test CPU", "cpus": "1"},
        "artifacts": {"noise_control": {"isolated": isolated}},
        "trials": shared_cpu_trials(12, seed=5)})
    assert r.status_code == 201, r.text
    run_analysis(client.app)
    detail = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user_headers).json()
    cells = {c["measure"]: c for c in detail["cells"]}
    assert cells["ops_per_cpu_sec"]["verdict"] == "regressed", cells["ops_per_cpu_sec"]
    assert cells["ops_per_cpu_sec"]["unjudged_reason"] is None
    wall = cells["ops_per_sec"]
    if isolated:
        assert wall["unjudged_reason"] is None and wall["verdict"] != "diagnostic"
        assert NOT_ISOLATED_REASON not in (detail["note"] or "")
    else:
        assert wall["verdict"] == "diagnostic" and wall["unjudged_reason"] == NOT_ISOLATED_REASON
        assert wall["line"].endswith("(not judged: CPUs not isolated)")
        assert wall["diff_pct"] is not None  # shown: the difference is computed
        assert "CPUs not isolated" in detail["note"]
    # speed x memory pairs the judged throughput with RSS
    [joint] = detail["joint"]
    assert (joint["speed_measure"], joint["label"]) == (
        "ops_per_sec" if isolated else "ops_per_cpu_sec", "slower" if not isolated
        else joint["label"])


def test_only_wall_clock_throughput_depends_on_isolation():
    assert unjudged_reason("ops_per_sec", emulated=False, isolated=False) == NOT_ISOLATED_REASON
    assert unjudged_reason("ops_per_sec", emulated=False, isolated=True) is None
    for m in ("ops_per_cpu_sec", "max_rss_bytes", "instructions", "llc_misses"):
        assert unjudged_reason(m, emulated=False, isolated=False) is None
        assert is_primary(m)
    assert unjudged_reason("ops_per_cpu_sec", emulated=True) == "emulated testbed"
