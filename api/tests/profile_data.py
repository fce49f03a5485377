"""A comparison whose head regresses larson at 1 thread, settled, its profile job claimed
and answered with a differential profile in which `mld_free` grew (+312 instructions per
call, +540%): the profile a runner posts (mallard_wire.profiles), made by hand here; the
runner's tests make real ones with callgrind."""

from typing import Any

from comparison_data import comparison_trials, larson_comparison, post_results
from helpers import claim_job, run_analysis

CALLS = 1000


def frames() -> list[dict[str, Any]]:
    """all (base 1,000,000; head 1,312,000) -> main -> {malloc, mld_free}."""
    return [
        {"name": "all", "parent": -1, "base": 1_000_000, "head": 1_312_000},
        {"name": "main", "parent": 0, "base": 990_000, "head": 1_302_000},
        {"name": "malloc", "parent": 1, "base": 400_000, "head": 400_000},
        {"name": "mld_free", "parent": 1, "base": 57_778, "head": 369_778},
        {"name": "gone", "parent": 1, "base": 5_000, "head": 0},
    ]


def profile_body(workload: str = "larson", threads: int | None = 1) -> dict[str, Any]:
    per_base, per_head = 57.778, 369.778  # +312 a call, +540%
    return {
        "case": {"workload": workload, "threads": threads, "params": {}},
        "params": {"threads": 1, "ops": 20000},
        "base_total": 1_000_000, "head_total": 1_312_000,
        "functions": [
            {"name": "mld_free", "object": "libmallard.so",
             "base": {"exclusive": round(per_base * CALLS), "inclusive": round(per_base * CALLS),
                      "calls": CALLS},
             "head": {"exclusive": round(per_head * CALLS), "inclusive": round(per_head * CALLS),
                      "calls": CALLS}},
            {"name": "malloc", "object": "libmallard.so",
             "base": {"exclusive": 400_000, "inclusive": 400_000, "calls": CALLS},
             "head": {"exclusive": 400_000, "inclusive": 400_000, "calls": CALLS}},
        ],
        "frames": frames(), "notes": [], "seconds": 2.5, "library": "libmallard.so"}


def profiled_comparison(client: Any, headers: dict[str, str], rheaders: dict[str, str],
                        project: dict[str, Any], runner: dict[str, Any]) -> dict[str, Any]:
    """The settled comparison and its stored profile: {comparison, profile_job, profile}."""
    cid = larson_comparison(client, headers, project, runner, threads=[1])
    job = claim_job(client, rheaders, runner)
    post_results(client, rheaders, runner, project["name"], job["id"],
                 comparison_trials(12, seed=7, shifts={1: 0.7}))
    run_analysis(client.app)
    pjob = claim_job(client, rheaders, runner)
    body = {"job_id": pjob["id"], "attempt": pjob["attempt"], "runner_id": runner["id"],
            "project": project["name"],
            "testbed": {"arch": runner["arch"], "cpu_model": "Test CPU", "cpus": "1"},
            "trials": [], "profiles": [profile_body()]}
    r = client.post("/api/v1/results", headers=rheaders, json=body)
    assert r.status_code == 201, r.text
    return {"comparison": cid, "profile_job": pjob, "post": r.json()}
