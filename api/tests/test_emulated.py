"""An emulated testbed (arm64 under qemu-user on an x86-64 host): its timing cells are
shown but never judged, its RSS and counters are; architecture aliases; the fingerprint
of an emulated testbed differs from a native one with the same fields, and native
fingerprints stay as they were."""

import numpy as np
import pytest
from comparison_data import SHA_BASE, SHA_HEAD, trial
from helpers import claim_job as claim
from helpers import run_analysis
from mallard_api.sql.runners import fingerprint as fingerprint_of
from mallard_stats.measures import EMULATED_REASON, is_timing, unjudged_reason
from mallard_wire import results, runners

EMULATED = {"arch": "aarch64", "cpu_model": "Test CPU", "cpus": "1", "emulated": True,
            "emulator": "qemu-aarch64 7.2.22"}


def emulated_trials(n: int, seed: int) -> list[dict]:
    """Head 30% slower (ops/s and wall time) and 20% larger (RSS) than base."""
    rng = np.random.default_rng(seed)
    out = []
    for seq in range(n):
        for label, commit, speed, rss in (("base", SHA_BASE, 1.0, 1.0),
                                          ("head", SHA_HEAD, 0.7, 1.2)):
            noise = 1 + 0.01 * rng.standard_normal()
            out.append(trial(label, "mallard", commit, None, 1,
                             {"ops_per_sec": 1e5 * speed * noise,
                              "wall_seconds": 1.0 / speed * noise,
                              "max_rss_bytes": 2.0e7 * rss * (1 + 0.001 * rng.standard_normal())},
                             seq))
    return out


def test_emulated_timing_cells_are_never_judged(client, user_headers, make_project, make_runner,
                                                fast_analysis):
    project = make_project()
    runner, rheaders = make_runner(arch="arm64")
    assert runner["arch"] == "aarch64"  # the alias is stored under the kernel's name
    body = {"project": project["name"], "base": {"commit": SHA_BASE},
            "head": {"commit": SHA_HEAD}, "workloads": ["larson"], "threads": [1],
            "trials": 12, "arch": "arm64"}
    r = client.post("/api/v1/comparisons", headers=user_headers, json=body)
    assert r.status_code == 201, r.text
    comp = r.json()
    assert comp["arch"] == "aarch64"
    job = claim(client, rheaders, runner)
    assert job["id"] == comp["jobs"][0]["job_id"]
    results = {"job_id": job["id"], "attempt": 1, "runner_id": runner["id"],
               "project": project["name"], "testbed": EMULATED,
               "trials": emulated_trials(12, seed=3)}
    r = client.post("/api/v1/results", headers=rheaders, json=results)
    assert r.status_code == 201, r.text
    run_analysis(client.app)

    detail = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user_headers).json()
    cells = {c["measure"]: c for c in detail["cells"]}
    # a 30% slowdown, far outside the noise: still no verdict, and the cell says why
    for measure in ("ops_per_sec", "wall_seconds"):
        assert cells[measure]["verdict"] == "diagnostic", cells[measure]
        assert cells[measure]["unjudged_reason"] == EMULATED_REASON
        assert cells[measure]["line"].endswith("(not judged: emulated testbed)")
        assert cells[measure]["diff_pct"] is not None  # shown: the difference is computed
    assert cells["max_rss_bytes"]["verdict"] == "regressed"  # RSS is judged under emulation
    assert cells["max_rss_bytes"]["unjudged_reason"] is None
    assert "emulated testbed" in (detail["note"] or "")
    assert detail["state"] == "done"  # unjudged cells ask for no follow-up


def test_native_timing_cells_have_no_unjudged_reason():
    assert unjudged_reason("ops_per_sec", emulated=False) is None
    assert unjudged_reason("max_rss_bytes", emulated=True) is None
    assert unjudged_reason("instructions", emulated=True) is None
    assert unjudged_reason("transfer_remove_hit_ratio", emulated=True) is None
    assert all(is_timing(m) for m in ("ops_per_sec", "wall_seconds", "ns_per_op", "hw_cycles"))


@pytest.mark.parametrize(("given", "stored"), [("arm64", "aarch64"), ("ARM64", "aarch64"),
                                               ("amd64", "x86_64"), ("aarch64", "aarch64"),
                                               ("x86_64", "x86_64"), ("riscv64", "riscv64")])
def test_arch_aliases(given, stored):
    assert results.TestbedIn.model_validate({"arch": given}).arch == stored
    assert runners.RunnerRegister.model_validate({"name": "n1", "arch": given}).arch == stored


def fingerprint(testbed: dict) -> tuple[str, dict]:
    return fingerprint_of(results.TestbedIn.model_validate(testbed))


def test_emulated_fingerprint_differs_and_native_stays():
    native = {k: v for k, v in EMULATED.items() if k not in ("emulated", "emulator")}
    fp_native, fields = fingerprint(native)
    assert "emulated" not in fields  # a native testbed's fingerprint is what it always was
    assert fingerprint({**native, "emulated": False})[0] == fp_native
    fp_emulated, fields = fingerprint(EMULATED)
    assert fp_emulated != fp_native and fields["emulated"] is True
    assert fingerprint({**EMULATED, "emulator": "qemu-aarch64 8.0"})[0] != fp_emulated
