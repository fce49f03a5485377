"""Comparisons through the API end to end (real PostgreSQL); the report format's own
tests are in analysis/test_report.py."""

import itertools
import re

import numpy as np
from comparison_data import (
    SHA_BASE,
    SHA_HEAD,
    comparison_trials,
    larson_comparison,
    post_results,
    steady,
    trial,
)
from helpers import claim_job as claim
from helpers import run_analysis
from mallard_stats import stats


def test_comparison_end_to_end(client, user_headers, make_project, make_runner, fast_analysis):
    project = make_project()
    runner, rheaders = make_runner()
    body = {"project": project["name"],
            "base": {"commit": SHA_BASE, "variant": "transfer=mutex"},
            "head": {"commit": SHA_HEAD, "variant": "transfer=ring"},
            "workloads": ["larson"], "threads": [1, 2], "trials": 12, "arch": runner["arch"],
            "hypothesis": "expected +15%", "peers": ["glibc", "jemalloc"]}
    r = client.post("/api/v1/comparisons", headers=user_headers, json=body)
    assert r.status_code == 201, r.text
    comp = r.json()
    name = project["name"]  # the project's own allocator is named after it
    assert comp["state"] == "queued" and comp["base_label"] == f"{name}@1111111 transfer=mutex"
    assert len(comp["jobs"]) == 1 and comp["jobs"][0]["state"] == "queued"

    job = claim(client, rheaders, runner)
    assert job["id"] == comp["jobs"][0]["job_id"] and job["kind"] == "comparison"
    spec = job["spec"]
    assert [(a["label"], a["name"]) for a in spec["allocators"]] == [
        ("base", name), ("head", name), ("peer", "glibc"), ("peer", "jemalloc")]
    assert spec["allocators"][1] == {"label": "head", "name": name, "commit": SHA_HEAD,
                                     "variant": "transfer=ring", "build": {
                                         "repo_url": project["repo_url"],
                                         "recipe": project["recipe"]}}
    assert (spec["workloads"], spec["threads"], spec["trials"]) == (["larson"], [1, 2], 12)

    trials = comparison_trials(12, seed=7, shifts={1: 1.0, 2: 0.95},
                               peers=(("glibc", 0.8), ("jemalloc", 1.056)))
    out = post_results(client, rheaders, runner, project["name"], job["id"], trials)
    assert out["stored"] == len(trials)

    r = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user_headers)
    assert r.status_code == 200, r.text
    detail = r.json()
    assert detail["state"] == "done", detail["report"]
    verdicts = {(c["threads"], c["measure"]): c["verdict"] for c in detail["cells"]}
    assert verdicts == {
        (1, "ops_per_sec"): "same", (2, "ops_per_sec"): "regressed",
        (1, "max_rss_bytes"): "same", (2, "max_rss_bytes"): "same",
        (1, "transfer_insert_hit_ratio"): "diagnostic",  # allocator counters get no verdict
        (2, "transfer_insert_hit_ratio"): "diagnostic",
    }
    cell = next(c for c in detail["cells"] if c["threads"] == 2 and c["measure"] == "ops_per_sec")
    assert cell["n_base"] == cell["n_head"] == 12  # warm-ups left out
    assert cell["ci_low_pct"] < cell["diff_pct"] < cell["ci_high_pct"] < 0
    assert cell["p_adjusted"] >= cell["p_value"]
    assert 1.0 < cell["mde_pct"] < 3.0  # 12 trials at 1% noise
    assert detail["counts"] == {"improved": 0, "regressed": 1, "same": 3, "unknown": 0,
                                "diagnostic": 2}
    assert {p["allocator"] for p in detail["peer_medians"]} == {"glibc", "jemalloc"}
    assert [(c["threads"], c["measure"]) for c in detail["counters"]] == [
        (1, "transfer_insert_hit_ratio"), (2, "transfer_insert_hit_ratio")]
    assert sorted((h["threads"], h["outcome"]) for h in detail["hypothesis_checks"]) == [
        (1, "not held (no change)"), (2, "not held (wrong direction)")]
    # speed x memory, counters that moved, the thread-scaling curve (testbed cpus "1")
    assert [(j["threads"], j["label"], j["kind"]) for j in detail["joint"]] == [
        (1, "same", "same"), (2, "slower", "worse")]
    assert [(m["threads"], m["name"], m["text"]) for m in detail["counters_moved"]] == [
        (1, "insert hit ratio", "insert hit ratio 0.900 -> 0.600"),
        (2, "insert hit ratio", "insert hit ratio 0.900 -> 0.600")]
    [curve] = detail["curves"]
    assert (curve["workload"], curve["measure"], curve["verdict"], curve["moved"],
            curve["cpus"]) == ("larson", "ops_per_sec", "regressed", [2], 1)
    assert [(p["threads"], p["oversubscribed"]) for p in curve["points"]] == [
        (1, False), (2, True)]
    assert -4.0 < curve["area_pct"] < -1.0  # -5% at 2 threads only: half of it

    r = client.get(f"/api/v1/comparisons/{comp['id']}/report", headers=user_headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    lines = text.splitlines()
    assert lines[0] == (f"Comparison #{comp['id']} ({project['name']}, {runner['arch']}): "
                        f"base {name}@1111111 transfer=mutex vs head {name}@2222222 "
                        "transfer=ring")
    assert lines[1].startswith("testbed: Test CPU (")
    assert "hypothesis: expected +15% ops_per_sec" in lines
    reg = [ln for ln in lines if ln.startswith("larson threads=2 ops_per_sec: ")]
    assert len(reg) == 1 and reg[0].endswith(
        f"(p=0.000 at alpha 0.0126, 12 trials, 12 robust, mde {cell['mde_pct']:.1f}%, "
        "band ±1.0%) REGRESSED")
    assert ("state: done; 4 primary cells: 0 improved, 1 regressed, 3 same, 0 unknown; "
            "follow-ups: 0") in lines
    assert any(ln.startswith("larson threads=1 ops_per_sec: ") and ln.endswith(" SAME")
               for ln in lines)
    assert "  counters: transfer_insert_hit_ratio 0.900 -> 0.600 (-33.3%)" in lines
    assert "    jemalloc: 1.32x glibc" in lines
    assert "  counters moved most: insert hit ratio 0.900 -> 0.600" in lines
    assert any(ln.startswith("  speed x memory: slower (worse): ops_per_sec -5.") for ln in lines)
    assert "scaling curves (b base, h head, * both):" in lines
    assert any(ln.startswith("scaling larson ops_per_sec: REGRESSED; moved at threads 2; ")
               for ln in lines)
    assert any(ln.startswith("     2 |") and ln.endswith("REGRESSED oversubscribed")
               for ln in lines)
    assert lines[-1] == "hypothesis (expected +15% ops_per_sec): held in 0 of 2 cells"
    print(text)

    # the views the dashboards read
    from sqlalchemy import text as sql_text
    with analysis_session(client) as s:
        row = s.execute(sql_text("SELECT cells, improved, regressed, same, unknown, state, "
                                 "base_label FROM v_comparisons WHERE comparison_id = :i"),
                        {"i": comp["id"]}).one()
        assert tuple(row) == (6, 0, 1, 3, 0, "done", f"{name}@1111111 transfer=mutex")
        line, mde = s.execute(sql_text(
            "SELECT line, mde_pct FROM v_comparison_cells WHERE comparison_id = :i "
            "AND threads = 2 AND measure = 'ops_per_sec'"), {"i": comp["id"]}).one()
        assert line == reg[0] and mde == cell["mde_pct"]

    listed = client.get("/api/v1/comparisons", headers=user_headers,
                        params={"project": project["name"]}).json()
    assert [c["id"] for c in listed] == [comp["id"]]


def analysis_session(client):
    return client.app.state.sessionmaker()


def first_round_leaves_an_unknown(client, user_headers, make_project, make_runner):
    """A comparison (one follow-up at most) whose first round reports: threads=2 a clear
    20% regression (decided), threads=1 no shift in 5 trials (unknown); paired by round,
    as a runner's are (5 trials a side as two samples cannot reach the first look's alpha
    after the adjustment)."""
    project = make_project()
    runner, rheaders = make_runner()
    cid = larson_comparison(client, user_headers, project, runner, threads=[1, 2],
                            max_follow_ups=1)
    job = claim(client, rheaders, runner)
    post_results(client, rheaders, runner, project["name"], job["id"],
                 comparison_trials(5, seed=5, shifts={1: 1.0, 2: 0.8}, drift=steady))
    return project, runner, rheaders, cid


def test_unknown_asks_for_a_follow_up(client, user_headers, make_project, make_runner,
                                      fast_analysis):
    project, runner, rheaders, cid = first_round_leaves_an_unknown(
        client, user_headers, make_project, make_runner)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert d["state"] == "running" and d["follow_ups"] == 1, d["report"]
    v = {(c["threads"], c["measure"]): c["verdict"] for c in d["cells"]}
    assert v[(1, "ops_per_sec")] == "unknown" and v[(2, "ops_per_sec")] == "regressed"
    assert [(j["round"], j["trials"]) for j in d["jobs"]] == [(0, 5), (1, 5)]

    follow = claim(client, rheaders, runner)
    assert follow["id"] == d["jobs"][1]["job_id"]
    assert (follow["spec"]["workloads"], follow["spec"]["threads"]) == (["larson"], [1])
    assert [a["label"] for a in follow["spec"]["allocators"]] == ["base", "head"]
    # a quieter follow-up: rule 4 asks for an MDE of at most 2%, which 10 trials at 1% noise
    # reach only by luck
    post_results(client, rheaders, runner, project["name"], follow["id"],
                 comparison_trials(5, seed=4, shifts={1: 1.0}, noise=0.005, drift=steady))
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert d["state"] == "done", d["report"]
    cell = next(c for c in d["cells"] if c["threads"] == 1 and c["measure"] == "ops_per_sec")
    assert cell["n_base"] == 10 and cell["verdict"] == "same", cell["line"]
    assert "follow-ups: 1" in d["report"]
    # two looks planned: the follow-up's cell is judged at the second look's level, the
    # regressed one, which it did not grow, still at the first's (mallard_stats.spending)
    lines = {(c["threads"], c["measure"]): c["line"] for c in d["cells"]}
    assert "at alpha 0.0190" in lines[(1, "ops_per_sec")], lines
    assert "at alpha 0.0310" in lines[(2, "ops_per_sec")], lines


def test_deterministic_counts_decide_with_two_runs_a_side(client, user_headers, make_project,
                                                          make_runner, fast_analysis):
    """Two cachegrind runs a side that agree: +0.5% instructions is REGRESSED, d1_misses is
    a diagnostic, a 0.05% wobble in llc_misses is SAME."""
    project = make_project()
    runner, rheaders = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": SHA_BASE}, "head": {"commit": SHA_HEAD},
        "workloads": ["larson"], "threads": [1], "trials": 5, "arch": runner["arch"]})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    job = claim(client, rheaders, runner)
    trials = comparison_trials(12, seed=5, shifts={1: 1.0})
    for (label, commit, scale), seq in itertools.product(
            (("base", SHA_BASE, 1.0), ("head", SHA_HEAD, 1.005)), (0, 1)):
        t = trial(label, "mallard", commit, None, 1,
                  {"instructions": 8_680_858.0 * scale, "d1_misses": 115_299.0 * scale,
                   "llc_misses": 10_341.0 * (1.0005 if label == "head" else 1.0)}, seq)
        t["workload"]["params"] = {"threads": 1, "ops": 20000, "seed": 42}
        trials.append(t)
    post_results(client, rheaders, runner, project["name"], job["id"], trials)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    v = {c["measure"]: c for c in d["cells"] if c["params"].get("ops") == 20000}
    assert v["instructions"]["verdict"] == "regressed", v["instructions"]["line"]
    assert v["instructions"]["line"] == (
        "larson threads=1 ops=20000 instructions: +0.5% ±0.0% (p=n/a, 2 trials, 2 robust, "
        "mde 0.25%, band ±0.25%) REGRESSED")
    assert v["llc_misses"]["verdict"] == "same"
    assert v["d1_misses"]["verdict"] == "diagnostic"
    assert d["state"] == "done", d["report"]
    assert "  " + v["d1_misses"]["line"] in d["report"].splitlines()


def test_a_failed_follow_up_settles_the_comparison_with_what_it_has(
        client, user_headers, make_project, make_runner, fast_analysis):
    """A follow-up job that fails for good counts against the cap: at the cap the
    comparison does not stay `running`; it is `done` with the cells of the rounds that
    reported, the unknowns as they are."""
    project, runner, rheaders, cid = first_round_leaves_an_unknown(
        client, user_headers, make_project, make_runner)
    follow = claim(client, rheaders, runner)
    r = client.post(f"/api/v1/jobs/{follow['id']}/fail", headers=rheaders,
                    json={"runner_id": runner["id"], "attempt": follow["attempt"],
                          "log": "node lost", "retryable": False})
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text
    assert client.get(f"/api/v1/comparisons/{cid}",
                      headers=user_headers).json()["state"] == "running"  # not yet analysed
    run_analysis(client.app)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert d["state"] == "done" and d["finished_at"] is not None, d["report"]
    v = {(c["threads"], c["measure"]): c["verdict"] for c in d["cells"]}
    assert v[(1, "ops_per_sec")] == "unknown" and v[(2, "ops_per_sec")] == "regressed"
    assert [j["state"] for j in d["jobs"]] == ["done", "failed"]
    nxt = client.post("/api/v1/jobs/claim", headers=rheaders, json={
        "runner_id": runner["id"], "lease_seconds": 60})  # no new round: only the moved
    assert nxt.status_code == 200 and nxt.json()["kind"] == "profile", nxt.text  # cell's profile


def test_reads_never_write(client, app, user_headers, make_project, make_runner,
                           fast_analysis):
    """GET of a comparison (JSON, report, list) and its page send no INSERT, UPDATE or
    DELETE to the database, even while the comparison's jobs have ended unanalysed."""
    from sqlalchemy import event

    project = make_project()
    runner, rheaders = make_runner()
    cid = larson_comparison(client, user_headers, project, runner, threads=[2])
    job = claim(client, rheaders, runner)
    client.post(f"/api/v1/jobs/{job['id']}/fail", headers=rheaders,
                json={"runner_id": runner["id"], "attempt": job["attempt"], "log": "x",
                      "retryable": False})
    writes: list[str] = []

    def record(conn, cursor, statement, *args):
        if statement.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            writes.append(statement)

    event.listen(app.state.engine, "before_cursor_execute", record)
    try:
        for path in (f"/api/v1/comparisons/{cid}", f"/api/v1/comparisons/{cid}/report",
                     f"/api/v1/comparisons?project={project['name']}",
                     f"/ui/comparisons/{cid}"):
            r = client.get(path, headers=user_headers)
            assert r.status_code == 200, (path, r.text)
    finally:
        event.remove(app.state.engine, "before_cursor_execute", record)
    assert writes == []
    assert client.get(f"/api/v1/comparisons/{cid}",
                      headers=user_headers).json()["state"] == "running"  # the worker settles


def test_a_drift_the_pairs_cancel_is_judged_paired(client, user_headers, make_project,
                                                  make_runner, fast_analysis):
    """Round i's base and head share their seq (a runner's block): the cell is judged on
    the 12 pairs, its line says so, and a drift of +-15% between rounds, which hides a 3%
    regression from the two-sample form, cancels in the pairs' ratios; the regression's
    interval lies wholly below zero, in the JSON, the report and the page."""
    project = make_project()
    runner, rheaders = make_runner()
    cid = larson_comparison(client, user_headers, project, runner, threads=[1], trials=12,
                            max_follow_ups=0)
    job = claim(client, rheaders, runner)
    trials = comparison_trials(12, seed=5, shifts={1: 0.97}, noise=0.003,
                               drift=lambda i: 1.0 + 0.15 * (-1) ** i * (i % 3))
    post_results(client, rheaders, runner, project["name"], job["id"], trials)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    cell = next(c for c in d["cells"] if c["measure"] == "ops_per_sec")
    assert cell["paired"] is True and cell["n_base"] == cell["n_head"] == 12
    assert cell["verdict"] == "regressed", d["report"]
    assert cell["ci_low_pct"] < -2.0 and cell["ci_high_pct"] < 0  # -3% within its interval
    assert cell["mde_pct"] < 2.0
    assert ", paired, 12 pairs, 12 robust, mde " in cell["line"]
    report = client.get(f"/api/v1/comparisons/{cid}/report", headers=user_headers).text
    assert any(ln.startswith("larson threads=1 ops_per_sec: -3.") and "paired, 12 pairs" in ln
               and ln.endswith("REGRESSED") for ln in report.splitlines()), report
    # the same values as two samples (no shared seq): the drift is noise, nothing decided
    sides = {lb: [t["measures"]["ops_per_sec"] for t in trials if t["label"] == lb]
             for lb in ("base", "head")}
    two = stats.compare_samples(sides["base"], sides["head"])
    assert two.mde_pct is not None and two.mde_pct > 5.0


def test_a_cell_whose_modes_moved_is_unknown_and_the_report_says_so(
        client, user_headers, make_project, make_runner, fast_analysis):
    """Base's trials 70% at the fast mode, head's 20%: the medians differ by ~25%, but the
    modes moved, so the cell is UNKNOWN and the report shows both sides' modes."""
    project = make_project()
    runner, rheaders = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": SHA_BASE}, "head": {"commit": SHA_HEAD},
        "workloads": ["larson"], "threads": [1], "trials": 30, "arch": runner["arch"]})
    assert r.status_code == 201, r.text
    comp = r.json()
    job = claim(client, rheaders, runner)
    rng = np.random.default_rng(11)
    trials = []
    for seq in range(30):
        for label, commit, fast_share in (("base", SHA_BASE, 0.7), ("head", SHA_HEAD, 0.2)):
            level = 28.1e6 if (seq * 7919 % 30) / 30 < fast_share else 21.4e6
            ops = level * float(np.exp(rng.normal(0, 0.01)))
            trials.append(trial(label, project["name"], commit, None, 1,
                                {"ops_per_sec": ops}, seq))
    post_results(client, rheaders, runner, project["name"], job["id"], trials)
    detail = client.get(f"/api/v1/comparisons/{comp['id']}", headers=user_headers).json()
    cell = next(c for c in detail["cells"] if c["measure"] == "ops_per_sec")
    assert cell["verdict"] == "unknown" and cell["diff_pct"] < -10
    report = client.get(f"/api/v1/comparisons/{comp['id']}/report", headers=user_headers).text
    line = next(ln for ln in report.splitlines() if "modes moved" in ln)
    assert "larson threads=1 ops_per_sec modes moved (upper-mode share 70% -> 20%" in line
    assert re.search(r"modes: base 70% at 28\.\dM, 30% at 21\.\dM; head 80% at 21\.\dM, "
                     r"20% at 28\.\dM(;|$)", line), line
