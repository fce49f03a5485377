"""The bisection page and the commit page's verdicts, and the links to the bisection from
the alert page, the alert's webhook message, the culprit's forge status and the verdict's
report: real API, real PostgreSQL, a bisection run through the job queue (bisect_data.py).
"""

from __future__ import annotations

import re
from typing import Any

from helpers import run_analysis
from mallard_api.models.outbox import OutboxMessage
from sqlalchemy import select

from ui.bisect_data import BUILD_ERROR, CULPRIT, FORGE_TOKEN, SKIPPED, claim, fail_job
from ui.test_ui_access import fresh


def test_bisection_page_is_only_for_readers_of_its_projects_jobs(app, bisect_data,
                                                                 make_token):
    """Its steps show a line of a failed build's log: a user token of another project
    finds no such bisection."""
    b = bisect_data["bisection"]
    outsider = {"Authorization": f"Bearer {make_token('user', projects=['another'])}"}
    r = fresh(app).get(f"/ui/bisections/{b['id']}", headers=outsider)
    assert r.status_code == 404 and BUILD_ERROR not in r.text
    member = {"Authorization": f"Bearer {make_token('user', projects=[bisect_data['project']])}"}
    r = fresh(app).get(f"/ui/bisections/{b['id']}", headers=member)
    assert r.status_code == 200 and BUILD_ERROR in r.text


def test_bisection_page_shows_request_culprit_and_steps(app, bisect_data, user_headers):
    d, b = bisect_data, bisect_data["bisection"]
    r = fresh(app).get(f"/ui/bisections/{b['id']}", headers=user_headers)
    assert r.status_code == 200, r.text
    html = r.text
    culprit = d["commits"][CULPRIT]
    assert f"Bisection #{b['id']}" in html and "larson threads=1 ops_per_sec" in html
    assert f"<b>Culprit:</b> <a class=\"mono\" href=\"/ui/commits/{culprit}\">" \
           f"{culprit[:7]}</a> change {CULPRIT}: tune the transfer cache" in html
    # the effect with its interval
    assert re.search(r"tune the transfer cache: ops_per_sec -1\d\.\d% \[-\d+\.\d%, -\d+\.\d%\] "
                     r'<span class="v v-regressed">REGRESSED</span>', html)
    assert b["culprit_line"] in html
    # every step: round 0 (the verdict), the skipped probe with the build's error, the rest
    assert html.count('<td rowspan="') >= 5 * len(b["steps"]) - 5
    assert re.search(r"skipped: job #\d+ failed: " + re.escape(BUILD_ERROR), html)
    assert "SKIPPED" in html and "GOOD" in html and "BAD" in html
    for st in b["steps"]:
        for cid in st["comparisons"]:
            assert f'href="/ui/comparisons/{cid}"' in html
    # the verdict's p and MDE columns are filled for measured steps
    assert html.count('<span class="v v-regressed">REGRESSED</span>') >= 2
    # the plot: a series per step that measured something, the culprit marked
    assert html.count("<svg") == 1 and 'class="changepoint"' in html
    assert f"culprit {culprit[:7]}" in html
    assert d["commits"][SKIPPED][:7] in html
    assert f'href="/ui/alerts/{d["alert"]}"' in html


def test_commit_page_shows_verdicts_and_the_bisection_naming_it(app, bisect_data,
                                                                user_headers):
    d = bisect_data
    c = fresh(app)
    head = c.get(f"/ui/commits/{d['commits'][7]}", headers=user_headers).text
    v = d["verdict"]
    assert "<h2>Verdicts</h2>" in head and "REGRESSED" in head
    assert f'href="/ui/comparisons/{v["comparison_id"]}">report (comparison' in head
    assert f'href="/ui/bisections/{v["bisection_id"]}">bisection #' in head
    assert f'href="/ui/alerts/{v["alert_id"]}">alert #' in head
    assert re.search(r"ops_per_sec -\d+\.\d% \[-\d+\.\d%, -\d+\.\d%\]", head)
    assert "reachable" in head
    culprit = c.get(f"/ui/commits/{d['commits'][CULPRIT]}", headers=user_headers).text
    assert "Bisections naming this commit" in culprit
    assert f'href="/ui/bisections/{v["bisection_id"]}">bisection #' in culprit
    assert '<b class="outcome-bad">culprit</b>' in culprit


def test_links_to_the_bisection(app, client, bisect_data, user_headers, public_url):
    d = bisect_data
    bid = d["bisection"]["id"]
    page = f"{public_url}/ui/bisections/{bid}"
    alert = fresh(app).get(f"/ui/alerts/{d['alert']}", headers=user_headers).text
    assert f'href="/ui/bisections/{bid}">bisection #{bid}</a>' in alert
    assert f"culprit <a class=\"mono\" href=\"/ui/commits/{d['commits'][CULPRIT]}\"" in alert
    with app.state.sessionmaker() as s:
        msgs = list(s.scalars(select(OutboxMessage).where(OutboxMessage.project_id.is_(None),
                                                          OutboxMessage.alert_id == d["alert"])))
        (hook,) = [m for m in msgs if m.event == "alert.opened"]
        assert hook.payload["bisection_url"] == page
        assert hook.payload["page_url"] == f"{public_url}/ui/alerts/{d['alert']}"
        statuses = list(s.scalars(select(OutboxMessage).where(
            OutboxMessage.event == "forge.status",
            OutboxMessage.url.endswith(f"/statuses/{d['commits'][CULPRIT]}"))))
        assert [m.payload["target_url"] for m in statuses] == [page]
        assert statuses[0].payload["context"].endswith("/bisection")
        # the regressed head's verdict status links the bisection that looks for its culprit
        head = list(s.scalars(select(OutboxMessage).where(
            OutboxMessage.event == "forge.status",
            OutboxMessage.url.endswith(f"/statuses/{d['commits'][7]}"))))
        arch = d["bisection"]["arch"]  # other tests' live runners get verdicts of their own
        assert {(m.payload["state"], m.payload["target_url"]) for m in head
                if m.payload["context"] == f"mallard/{arch}/verdict"} == {
            ("pending", f"{public_url}/ui/comparisons/{d['verdict']['comparison_id']}"),
            ("failure", page)}
    report = client.get(f"/api/v1/comparisons/{d['verdict']['comparison_id']}/report",
                        headers=user_headers).text.splitlines()
    at = report.index(d["bisection"]["culprit_line"])
    assert report[at + 1] == f"bisection: /ui/bisections/{bid}"  # read without a public URL
    proj = fresh(app).get(f"/ui/projects/{d['project']}", headers=user_headers).text
    assert "Recent bisections" in proj and f'href="/ui/bisections/{bid}">#{bid}</a>' in proj
    comp = fresh(app).get(f"/ui/comparisons/{d['verdict']['comparison_id']}",
                          headers=user_headers).text
    assert f'href="/ui/bisections/{bid}">bisection #{bid}</a>' in comp


def test_bisection_page_access(app, bisect_data, user_headers):
    d: dict[str, Any] = bisect_data
    path = f"/ui/bisections/{d['bisection']['id']}"
    r = fresh(app).get(path)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
    assert d["project"] not in r.text
    r = fresh(app).get(path, headers={"Authorization": "Bearer mlrd_not-a-token"})
    assert r.status_code == 401 and d["project"] not in r.text
    for missing in ("/ui/bisections/999999", "/ui/bisections/0", "/ui/bisections/x"):
        r = fresh(app).get(missing, headers=user_headers)
        assert r.status_code == 404 and "<h1>404 · Not found</h1>" in r.text, missing
    token = user_headers["Authorization"].removeprefix("Bearer ")
    for p in (path, f"/ui/commits/{d['commits'][7]}", f"/ui/commits/{d['commits'][CULPRIT]}",
              f"/ui/alerts/{d['alert']}"):
        html = fresh(app).get(p, headers=user_headers).text
        assert FORGE_TOKEN not in html and token not in html, p


def test_commit_page_marks_a_force_pushed_commit_unreachable(app, settings, make_project,
                                                             user_headers, unique):
    from mallard_api import pushes
    from mallard_api.sql import projects as project_sql
    from mallard_api.sql.projects import CommitInfo

    from ui.bisect_data import hexsha

    name = make_project()["name"]
    old = [hexsha(f"{unique}old{i}") for i in range(3)]
    new = hexsha(f"{unique}new")
    conf = settings.model_copy(update={"push_max_queued": 0})
    with app.state.sessionmaker() as s:
        p = project_sql.get(s, name)
        pushes.handle_push(s, conf, p, ref="refs/heads/main", after=old[2], commits=[
            CommitInfo(sha=c, parent=old[i - 1] if i else None, message=f"old {i}")
            for i, c in enumerate(old)])
        out = pushes.handle_push(s, conf, p, ref="refs/heads/main", after=new, commits=[
            CommitInfo(sha=new, parent=old[0], message="rewritten")])
        assert out.unreachable == 2
    gone = fresh(app).get(f"/ui/commits/{old[2]}", headers=user_headers).text
    assert '<b class="unreachable">unreachable</b>' in gone
    assert "A force-push took this commit off main" in gone
    kept = fresh(app).get(f"/ui/commits/{old[0]}", headers=user_headers).text
    assert "unreachable" not in kept and '<span class="muted">reachable</span>' in kept


def test_a_requested_bisection_that_is_still_running(app, client, bisect_data, user_headers):
    d = bisect_data
    r = client.post("/api/v1/bisections", headers=user_headers, json={
        "project": d["project"], "good": d["commits"][0], "bad": d["commits"][7],
        "workload": "larson", "measure": "ops_per_sec", "threads": 1,
        "arch": d["bisection"]["arch"]})
    assert r.status_code == 201, r.text
    b = r.json()
    html = fresh(app).get(f"/ui/bisections/{b['id']}", headers=user_headers).text
    assert "Still bisecting: round 1 is being measured." in html
    assert "started by</dt><dd>a request" in html
    assert html.count("measuring (comparison queued)") == 2
    assert "<svg" not in html  # nothing measured yet: no plot


def test_a_bisection_whose_builds_failed_names_the_candidates(app, client, bisect_data,
                                                              user_headers):
    d = bisect_data
    c = d["commits"]
    r = client.post("/api/v1/bisections", headers=user_headers, json={
        "project": d["project"], "good": c[4], "bad": c[6], "workload": "larson",
        "measure": "ops_per_sec", "threads": 1, "arch": d["bisection"]["arch"]})
    assert r.status_code == 201, r.text
    bid = r.json()["id"]
    for _ in range(30):  # every build fails (a running bisection's jobs too)
        job = claim(client, d["runner_headers"], d["runner"])
        if job is None:
            break
        fail_job(client, d["runner_headers"], d["runner"], job)
        run_analysis(app, d["conf"])
    b = client.get(f"/api/v1/bisections/{bid}", headers=user_headers).json()
    assert b["state"] == "done" and b["culprit"] is None, b
    assert b["culprit_candidates"] == [c[5], c[6]]
    html = fresh(app).get(f"/ui/bisections/{bid}", headers=user_headers).text
    assert "<b>No single culprit:</b>" in html
    for sha in (c[5], c[6]):
        assert f'href="/ui/commits/{sha}">{sha[:7]}</a>' in html
    assert "SKIPPED" in html and "<svg" not in html  # nothing measured: no plot
    page = fresh(app).get(f"/ui/commits/{c[6]}", headers=user_headers).text
    assert f'href="/ui/bisections/{bid}">bisection #{bid}</a>' in page
    assert "one of 2 candidates" in page
