"""Every page loaded from a real API (uvicorn, real PostgreSQL, data stored through the
REST API) by headless Chromium: signed in through the login form, screenshotted, and
checked for HTTP 200, no console errors, the page's verdict or state text, and SVG plots.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ui.bisect_data import CULPRIT


def _visit(browser: Any, url: str, shot: Any) -> tuple[Any, Any, list[str]]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    resp = page.goto(url, wait_until="networkidle")
    if shot is not None:
        page.screenshot(path=str(shot), full_page=True)
    return page, resp, errors


@pytest.fixture(scope="module")
def signed_in(browser, live_server, pages_data):
    """Sign in through the form, as a person would; the cookie is kept by the context."""
    page = browser.new_page()
    resp = page.goto(f"{live_server}/ui/comparisons/{pages_data['comparison']}")
    assert "/ui/login?next=" in page.url  # no session yet: sent to the login form
    assert resp is not None and resp.status == 200
    page.fill("input[name=token]", pages_data["user_token"])
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert page.url == f"{live_server}/ui/comparisons/{pages_data['comparison']}"
    cookie = next(c for c in browser.cookies() if c["name"] == "mallard_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert pages_data["user_token"] not in cookie["value"]
    page.close()
    return browser


def _pages(d: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(name, path, texts the page must show)."""
    return [
        ("comparison", f"/ui/comparisons/{d['comparison']}",
         ["REGRESSED", "SAME", "Decided changes", "transfer_insert_hit_ratio",
          "relative to glibc", "held in 0 of 2 cells", "RSS over time", "malloc latency"]),
        ("project", f"/ui/projects/{d['project']}", ["History of main", "ops_per_sec",
                                                    "Open alerts"]),
        ("branch", f"/ui/projects/{d['project']}/branches/main",
         ["larson threads=2", "rpc threads=2", "Alerts on this branch", "open"]),
        ("commit", f"/ui/commits/{d['commits'][20]}",
         ["Alerts at this commit", "REGRESSED", "first bad commit", "Measured now",
          "commit 20: tune the transfer cache"]),
        ("alert", f"/ui/alerts/{d['alert']}", ["REGRESSED", "open", "first bad commit",
                                               "Change points of this series"]),
        ("index", "/ui/", ["Projects", d["project"], "Recent comparisons"]),
    ]


def _bisection_pages(d: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """The bisection and the commit pages of its range (bisect_data.py)."""
    b, culprit = d["bisection"], d["commits"][CULPRIT]
    return [
        ("bisection", f"/ui/bisections/{b['id']}",
         ["Culprit:", f"{culprit[:7]} change {CULPRIT}: tune the transfer cache", "REGRESSED",
          "SKIPPED", "GOOD", "BAD", "Error 1 (build failed)", b["culprit_line"]]),
        ("commit-verdict", f"/ui/commits/{d['commits'][7]}",
         ["Verdicts", "REGRESSED", "report (comparison #", f"bisection #{b['id']}",
          "Alerts at this commit"]),
        ("commit-culprit", f"/ui/commits/{culprit}",
         ["Bisections naming this commit", f"bisection #{b['id']}", "culprit"]),
    ]


@pytest.mark.parametrize("name", ["comparison", "project", "branch", "commit", "alert",
                                  "index"])
def test_page_in_chromium(signed_in, live_server, pages_data, shots, name):
    _, path, texts = next(p for p in _pages(pages_data) if p[0] == name)
    _check(signed_in, live_server, path, texts, shots / f"{name}.png", pages_data, name)


@pytest.mark.parametrize("name", ["bisection", "commit-verdict", "commit-culprit"])
def test_bisection_pages_in_chromium(signed_in, live_server, pages_data, bisect_data, shots,
                                     name):
    _, path, texts = next(p for p in _bisection_pages(bisect_data) if p[0] == name)
    _check(signed_in, live_server, path, texts, shots / f"{name}.png", pages_data, name)
    if name == "bisection":  # the plot: points link to commits, the culprit is marked
        page, _, errors = _visit(signed_in, live_server + path, None)
        try:
            assert page.locator("svg.trend .changepoint").count() == 1
            assert page.locator("svg.trend a circle.pt").count() >= 6
            page.locator("svg.trend a circle.pt").last.click()  # drawn on top: the bad end
            page.wait_for_load_state("networkidle")
            assert page.url.endswith(f"/ui/commits/{bisect_data['commits'][7]}")
            assert errors == []
        finally:
            page.close()


def _check(signed_in: Any, live_server: str, path: str, texts: list[str], shot: Any,
           pages_data: dict[str, Any], name: str) -> None:
    page, resp, errors = _visit(signed_in, live_server + path, shot)
    try:
        assert resp is not None and resp.status == 200, resp and resp.status
        assert errors == []
        body = page.inner_text("main")
        for text in texts:
            assert text in body, f"{name}: {text!r} not on the page"
        plots = page.locator("main svg.plot")
        if name != "index":  # the overview is lists of links
            assert plots.count() >= 1
            box = plots.first.bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 30  # drawn
        assert page.evaluate("document.scripts.length") == 0  # readable without JavaScript
        html = page.content()
        assert pages_data["user_token"] not in html
    finally:
        page.close()


def test_comparison_plots_and_links(signed_in, live_server, pages_data):
    d = pages_data
    page, resp, errors = _visit(signed_in, f"{live_server}/ui/comparisons/{d['comparison']}",
                                None)
    try:
        # one strip plot per primary cell (2 threads x ops_per_sec, max_rss_bytes) + peers
        assert page.locator("svg.strip").count() == 4
        assert page.locator("svg.bars").count() == 2
        # 12 trials a side in each strip plot, one of them an outlier
        first = page.locator("svg.strip").first
        assert first.locator("circle.base").count() == 12
        assert first.locator("circle.head").count() == 12
        assert page.locator("svg.strip circle.outlier").count() >= 1
        page.click("text=Decided changes >> xpath=.. >> a")
        assert re.search(r"#w\d+-ops_per_sec$", page.url)
    finally:
        page.close()


def test_trend_points_link_to_commit_pages(signed_in, live_server, pages_data):
    d = pages_data
    page, _, errors = _visit(signed_in, f"{live_server}/ui/projects/{d['project']}/branches/"
                             "main?measure=ops_per_sec", None)
    try:
        links = page.locator("svg.trend a circle.pt")
        assert links.count() == 60  # 30 commits x (larson, rpc)
        assert page.locator("svg.trend .changepoint").count() >= 1
        alert = page.locator("svg.trend a path.alertmark")
        assert alert.count() == 1
        alert.click()
        page.wait_for_load_state("networkidle")
        assert page.url.endswith(f"/ui/alerts/{d['alert']}")
        page.locator("svg.trend a circle.pt").last.click()
        page.wait_for_load_state("networkidle")
        assert page.url.endswith(f"/ui/commits/{d['commits'][-1]}")
        assert "Measured now" in page.inner_text("main")
        assert errors == []
    finally:
        page.close()


EVIL_PAGE = """<!doctype html><title>prize</title>
<form id="in" method="post" action="{api}/ui/login">
  <input name="token" value="{token}"><input name="next" value="/ui/">
  <button id="login">Win a prize</button></form>
<form id="out" method="post" action="{api}/ui/logout"><button id="logout">Win</button></form>
"""


@pytest.mark.parametrize("button", ["login", "logout"])
def test_a_cross_site_form_changes_nothing(signed_in, live_server, pages_data, make_token,
                                           button):
    """The login swap, in Chromium: a page of another site (http://evil.example, served by
    Playwright) posts the attacker's token to /ui/login, or posts /ui/logout; the API
    refuses (403) and the victim's session is the same after."""
    before = next(c["value"] for c in signed_in.cookies() if c["name"] == "mallard_session")
    page = signed_in.new_page()
    try:
        page.route("http://evil.example/**", lambda route: route.fulfill(
            status=200, content_type="text/html",
            body=EVIL_PAGE.format(api=live_server, token=make_token("user"))))
        page.goto("http://evil.example/prize.html")
        with page.expect_navigation() as nav:
            page.click(f"#{button}")
        resp = nav.value
        assert resp is not None and resp.status == 403
        assert "another site" in page.inner_text("main")
        after = [c["value"] for c in signed_in.cookies() if c["name"] == "mallard_session"]
        assert after == [before]
        mine = signed_in.new_page()
        r = mine.goto(f"{live_server}/ui/alerts/{pages_data['alert']}")
        assert r is not None and r.status == 200 and "/ui/login" not in mine.url
        mine.close()
    finally:
        page.close()
