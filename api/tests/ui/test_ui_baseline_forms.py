"""Baselines on the pages, in headless Chromium against a real API (uvicorn, PostgreSQL): a
user accepts a commit as the new baseline from its page and marks a range broken from the
branch page (the same CSRF-checked forms and the same REST logic as the alert's), and the
REST list, the marks table and the plot say so; a reader sees neither form, and a post
without its session's form token changes nothing."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from mallard_api.ui import csrf, login

from ui.test_ui_access import form_token, fresh
from ui.test_ui_triage import chromium, sign_in


def _marks(client: TestClient, d: dict[str, Any]) -> list[dict[str, Any]]:
    r = client.get(f"/api/v1/projects/{d['project']}/branches/main/baselines",
                   headers=d["user"])
    assert r.status_code == 200, r.text
    return list(r.json())


def test_a_user_accepts_a_baseline_and_marks_a_range_broken(live_server, pages_data, client,
                                                            make_token):
    d = pages_data
    sha, first, last = d["commits"][24], d["commits"][10], d["commits"][12]
    with chromium() as ctx:
        page = sign_in(ctx, live_server, make_token("user"), f"/ui/commits/{sha}")
        form = page.locator("form.accept-commit")
        assert form.count() == 1
        form.locator("input[name=note]").fill("the ring buffer, on purpose")
        form.locator("button[type=submit]").click()
        page.wait_for_load_state("networkidle")
        assert page.url == f"{live_server}/ui/commits/{sha}"
        branch = f"{live_server}/ui/projects/{d['project']}/branches/main"
        page.goto(branch)
        assert "the ring buffer, on purpose" in page.inner_text("table.marks")
        page.fill("form.broken input[name=first]", first[:10])
        page.fill("form.broken input[name=last]", last[:10])
        page.fill("form.broken input[name=reason]", "the runner was throttled")
        page.click("form.broken button[type=submit]")
        page.wait_for_load_state("networkidle")
        assert page.url == branch
        assert "the runner was throttled" in page.inner_text("tr.mark-broken")
        assert page.locator("svg rect.broken").count() >= 1
        assert page.locator("svg line.baseline").count() >= 1
    marks = {(m["kind"], m["first_sha"], m["last_sha"], m["note"]) for m in _marks(client, d)}
    assert ("baseline", sha, sha, "the ring buffer, on purpose") in marks
    assert ("broken", first, last, "the runner was throttled") in marks


def test_a_reader_sees_no_baseline_forms_and_a_tokenless_post_is_refused(
        live_server, pages_data, client, make_token, app):
    d = pages_data
    with chromium() as ctx:
        page = sign_in(ctx, live_server, make_token("reader"), f"/ui/commits/{d['commits'][3]}")
        assert page.locator("form.accept-commit").count() == 0
        page.goto(f"{live_server}/ui/projects/{d['project']}/branches/main")
        assert page.locator("form.broken").count() == 0
        assert page.locator("table.marks, p.muted").count() >= 1
    before = _marks(client, d)
    c = fresh(app)
    assert c.post("/ui/login", data={"token": make_token("user"),
                                     "csrf": form_token(c)}).status_code == 303
    path = f"/ui/projects/{d['project']}/branches/main/broken"
    data = {"first": d["commits"][1], "last": d["commits"][2]}
    assert c.post(path, data=data).status_code == 403  # no form token
    assert c.post(path, data=data | {"csrf": "0" * 64}).status_code == 403
    bad = c.post(path, data={"first": "zz", "last": d["commits"][2],
                             "csrf": csrf.session_token(app.state.settings,
                                                        c.cookies.get(login.COOKIE))})
    assert bad.status_code == 422 and "first" in bad.text
    assert _marks(client, d) == before
