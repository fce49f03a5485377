"""Differential profiles through the API (real PostgreSQL): a settled comparison with a
REGRESSED cell queues a `profile` job off the verdict's path; its runner's profile is
stored, answered, drawn as a well-formed flame graph whose frames sum to the totals, and
summarised in the report; bad requests are 4xx naming the field."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from profile_data import profiled_comparison

SVG = "{http://www.w3.org/2000/svg}"


def test_a_moved_cell_is_profiled_after_its_verdict(client, user_headers, make_project,
                                                   make_runner, fast_analysis):
    project = make_project()
    runner, rheaders = make_runner()
    made = profiled_comparison(client, user_headers, rheaders, project, runner)
    cid, pjob = made["comparison"], made["profile_job"]
    assert pjob["kind"] == "profile"
    assert pjob["spec"]["profile"] == [{"workload": "larson", "threads": 1, "params": {}}]
    assert pjob["spec"]["workloads"] == ["larson"] and pjob["spec"]["threads"] == [1]
    assert [a["label"] for a in pjob["spec"]["allocators"]] == ["base", "head"]
    comp = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert comp["state"] == "done"  # the verdict did not wait for the profile
    assert pjob["id"] not in [j["job_id"] for j in comp["jobs"]]
    rows = client.get(f"/api/v1/comparisons/{cid}/profiles", headers=user_headers).json()
    assert len(rows) == 1 and rows[0]["state"] == "done" and not rows[0]["requested"]
    assert rows[0]["why"] == "mld_free +312 instructions per call (+540%)"
    assert "profile larson threads=1: 1,000,000 -> 1,312,000 instructions (+31.2%); why: " \
           "mld_free +312 instructions per call (+540%)" in comp["report"]


def test_the_flame_graph_is_well_formed_and_its_frames_sum_to_the_totals(
        client, user_headers, make_project, make_runner, fast_analysis):
    project = make_project()
    runner, rheaders = make_runner()
    cid = profiled_comparison(client, user_headers, rheaders, project, runner)["comparison"]
    pid = client.get(f"/api/v1/comparisons/{cid}/profiles", headers=user_headers).json()[0]["id"]
    r = client.get(f"/api/v1/comparisons/{cid}/profiles/{pid}/flame.svg", headers=user_headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(r.text)  # well-formed XML
    assert root.tag == f"{SVG}svg"
    totals = {"head": 1_312_000, "base": 1_000_000}
    for side, total in totals.items():  # one graph per side, each titled with its numbers
        frames = {int(g.get("data-i")): g for g in root.iter(f"{SVG}g")
                  if g.get("data-side") == side}
        wide = {i: int(g.get(f"data-{side}")) for i, g in frames.items()}
        parent = {i: int(g.get("data-parent")) for i, g in frames.items()}
        assert wide[0] == total and parent[0] == -1
        own = {i: wide[i] - sum(wide[c] for c in wide if parent[c] == i) for i in wide}
        assert all(v >= 0 for v in own.values())
        assert sum(own.values()) == total  # every instruction of the side in one frame
        width = {i: float(g.find(f"{SVG}rect").get("width")) for i, g in frames.items()}
        assert abs(width[0] - 960) < 1e-6
        for i in wide:  # children never overflow their parent
            kids = [c for c in wide if parent[c] == i]
            assert sum(width[c] for c in kids) <= width[i] + 1e-6
        assert 4 in frames if side == "base" else 4 not in frames
    gone = [g for g in root.iter(f"{SVG}g") if "gone" in (g.get("class") or "").split()]
    assert [(g.get("data-side"), g.get("data-i")) for g in gone] == [("base", "4")]
    assert "gone: head 0, base 5,000 instructions, -5,000 (-100.0%)" in r.text
    colours = {g.get("data-i"): g.find(f"{SVG}rect").get("fill")
               for g in root.iter(f"{SVG}g") if g.get("data-side") == "base"}
    assert colours["3"].startswith("rgb(230,") and colours["4"] == "rgb(30,30,230)"
    assert colours["2"] == "rgb(200,200,200)"  # malloc did not move: grey
    titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "side-title"]
    assert titles == [
        "head: 1,312,000 instructions, +312,000 vs base (+31.2%); width: the head's "
        "instructions",
        "base: 1,000,000 instructions; width: the base's instructions; 1 frame(s) the head "
        "no longer runs, dashed"]
    legend = " ".join(t.text for g in root.iter(f"{SVG}g") if g.get("class") == "legend"
                      for t in g.iter(f"{SVG}text"))
    assert "slower" in legend and "faster" in legend and "no longer runs" in legend
    assert "mld_free: head 369,778, base 57,778 instructions, +312,000 (+540.0%)" in r.text


def test_bad_profile_requests_name_the_field(client, user_headers, make_project, make_runner,
                                            fast_analysis):
    project = make_project()
    runner, rheaders = make_runner()
    cid = profiled_comparison(client, user_headers, rheaders, project, runner)["comparison"]
    url = f"/api/v1/comparisons/{cid}/profiles"

    def refused(body, status, loc):
        r = client.post(url, headers=user_headers, json=body)
        assert r.status_code == status, r.text
        assert loc in [e["loc"] for e in r.json()["detail"]], r.text

    refused({"workload": "xmalloc"}, 404, ["body", "workload"])
    refused({"workload": "larson", "threads": 64}, 404, ["body", "threads"])
    refused({"workload": "larson", "params": {"ops": 10**12}}, 422, ["body", "params", "ops"])
    refused({"workload": "larson", "threads": 10**6}, 422, ["body", "threads"])
    refused({"workload": "larson; rm -rf /"}, 422, ["body", "workload"])
    refused({"workload": "larson", "params": {f"k{i}": 1 for i in range(17)}}, 422,
            ["body", "params"])
    r = client.post("/api/v1/comparisons/999999/profiles", headers=user_headers,
                    json={"workload": "larson"})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["path", "comparison_id"]
    r = client.get(f"{url}/999999", headers=user_headers)
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["path", "profile_id"]
    # any cell on request: queued once, asking again answers the same row
    first = client.post(url, headers=user_headers, json={"workload": "larson", "threads": 1,
                                                         "params": {"ops": 5000}})
    again = client.post(url, headers=user_headers, json={"workload": "larson", "threads": 1,
                                                         "params": {"ops": 5000}})
    assert first.status_code == again.status_code == 202, first.text
    assert first.json()["id"] == again.json()["id"] and first.json()["state"] == "queued"
    assert first.json()["requested"]
