"""Triage on the alert page, in headless Chromium against a real API (uvicorn, PostgreSQL):
a user triages an alert through its form and the page and the REST audit say so; a reader
sees no form and its post is refused; a forged post from another site (a page served on
another origin, submitting to the alert) is refused and changes nothing. The token tied to
the session is checked without a browser too (a stale session's token, none at all)."""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi.testclient import TestClient
from mallard_api.ui import csrf, login

from ui.conftest import CHROMIUM, CHROMIUM_FLAGS
from ui.test_ui_access import form_token, fresh


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    profile = Path(tempfile.mkdtemp(prefix="mallard-ui-triage-"))
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def sign_in(ctx: Any, live_server: str, token: str, path: str) -> Any:
    """Through the login form, then on to `path` (a private project's page is a 404
    without a session, not a redirect: public.py)."""
    page = ctx.new_page()
    page.goto(f"{live_server}/ui/login?next={quote(path, safe='')}")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert page.url == f"{live_server}{path}"
    return page


def _triage(client: TestClient, alert: int, headers: dict[str, str]) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/alerts/{alert}/triage", headers=headers).json())


def test_a_user_triages_an_alert_on_its_page(live_server, pages_data, client, make_token):
    token = make_token("user")
    alert, path = pages_data["alert"], f"/ui/alerts/{pages_data['alert']}"
    with chromium() as ctx:
        page = sign_in(ctx, live_server, token, path)
        page.select_option("select[name=triage]", "investigating")
        page.fill("input[name=assignee]", "ada")
        page.fill("input[name=bug_url]", "https://bugs.example.test/42")
        page.select_option("select[name=label]", "true_positive")
        page.fill("textarea[name=note]", "the transfer cache's ring again")
        page.click("button[value=triage]")
        page.wait_for_load_state("networkidle")
        assert page.url == f"{live_server}{path}"
        assert page.inner_text(".triage-state") == "investigating"
        assert page.inner_text(".assignee") == "ada"
        assert page.get_attribute("a.bug", "href") == "https://bugs.example.test/42"
        notes = page.inner_text("ul.notes")
        assert "the transfer cache's ring again" in notes and "user #" in notes
        page.select_option("select[name=triage]", "acknowledged")
        page.click("button[value=triage]")
        page.wait_for_load_state("networkidle")
        assert "acknowledged" in page.inner_text("h1")
    t = _triage(client, alert, pages_data["user"])
    assert (t["state"], t["triage"], t["assignee"], t["label"]) == (
        "acknowledged", "acknowledged", "ada", "true_positive")
    assert {"triage", "assignee", "bug_url", "label", "note", "state"} <= {
        a["field"] for a in t["audit"]}


def test_a_reader_cannot_triage(live_server, pages_data, client, make_token, app):
    token = make_token("reader")
    alert, path = pages_data["alert"], f"/ui/alerts/{pages_data['alert']}"
    before = _triage(client, alert, pages_data["user"])
    with chromium() as ctx:
        page = sign_in(ctx, live_server, token, path)
        assert page.locator("form.triage").count() == 0
        assert "This token reads only" in page.inner_text("main")
    # the reader's own session posts the form by hand, with its session's token: the role
    # refuses it, not the forgery check
    c = fresh(app)
    r = c.post("/ui/login", data={"token": token, "csrf": form_token(c)})
    assert r.status_code == 303
    signed = csrf.session_token(app.state.settings, c.cookies.get(login.COOKIE))
    r = c.post(f"{path}/triage", data={"triage": "invalid", "csrf": signed})
    assert r.status_code == 403 and "cannot triage" in r.text
    assert _triage(client, alert, pages_data["user"]) == before


class _Evil(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:  # noqa: N802
        body = (f'<form id="f" method="post" action="{self.target}">'
                '<input name="triage" value="invalid"><input name="csrf" value="x"></form>'
                '<script>document.getElementById("f").submit()</script>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_forged_cross_site_post_is_refused(live_server, pages_data, client, make_token):
    token = make_token("user")
    alert, path = pages_data["alert"], f"/ui/alerts/{pages_data['alert']}"
    before = _triage(client, alert, pages_data["user"])
    _Evil.target = f"{live_server}{path}/triage"
    evil = ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with chromium() as ctx:
            sign_in(ctx, live_server, token, path)
            page = ctx.new_page()
            with page.expect_navigation(url=re.compile(re.escape(live_server))):
                page.goto(f"http://localhost:{evil.server_address[1]}/prize.html")
            page.wait_for_load_state("networkidle")
            # refused: SameSite=Strict keeps the session cookie home (a login page), and
            # were it sent, the Origin and the token would refuse it (a 403 page)
            assert "/ui/login" in page.url or "Not allowed" in page.content()
    finally:
        evil.shutdown()
    assert _triage(client, alert, pages_data["user"]) == before


def test_the_form_token_is_tied_to_the_session(app, pages_data, client, make_token):
    path = f"/ui/alerts/{pages_data['alert']}"
    before = _triage(client, pages_data["alert"], pages_data["user"])
    sessions = []
    for _ in range(2):
        c = fresh(app)
        assert c.post("/ui/login", data={"token": make_token("user"),
                                         "csrf": form_token(c)}).status_code == 303
        found = re.search(r'name="csrf" value="([0-9a-f]{64})"', c.get(path).text)
        assert found is not None
        sessions.append((c, found.group(1)))
    (mine, _), (_, theirs) = sessions
    for data, headers in (({"triage": "invalid", "csrf": theirs}, {}),  # another session's
                          ({"triage": "invalid"}, {}),  # none
                          ({"triage": "invalid", "csrf": sessions[0][1]},  # another site
                           {"Origin": "https://evil.example"})):
        r = mine.post(f"{path}/triage", data=data, headers=headers)
        assert r.status_code == 403, r.text
        assert login.COOKIE in mine.cookies
    assert _triage(client, pages_data["alert"], pages_data["user"]) == before
    r = mine.post(f"{path}/triage", data={"assignee": "bo", "csrf": sessions[0][1]})
    assert r.status_code == 303
    assert _triage(client, pages_data["alert"], pages_data["user"])["assignee"] == "bo"
