"""Who may see the pages, what they never show, and how errors look (real API, real data)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mallard_api import auth, notify
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import tokens as token_sql
from mallard_api.ui import comparison, csrf, login


def fresh(app: Any, session: str | None = None) -> TestClient:
    """A client with its own cookie jar (the session-wide one must stay signed out)."""
    c = TestClient(app, follow_redirects=False)
    if session is not None:
        c.cookies.set(login.COOKIE, session)
    return c


def form_token(c: TestClient) -> str:
    """The form token of the login form (and its cookie, kept in `c`'s jar): csrf.py."""
    form = c.get("/ui/login")
    found = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert found and c.cookies.get(csrf.COOKIE) == found.group(1)
    return found.group(1)


def page_paths(d: dict[str, Any]) -> list[str]:
    return [f"/ui/comparisons/{d['comparison']}", f"/ui/projects/{d['project']}",
            f"/ui/projects/{d['project']}/branches/main", f"/ui/commits/{d['commits'][20]}",
            f"/ui/alerts/{d['alert']}", "/ui/"]


def test_without_a_token_every_page_sends_to_the_login_form(app, pages_data):
    """The overview and comparison pages; a private project's pages are a 404 instead
    (test_ui_sharing.py), as if it did not exist."""
    c = fresh(app)
    for path in (page_paths(pages_data)[0], "/ui/"):
        r = c.get(path)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/ui/login?next=%2Fui%2F")
        assert pages_data["project"] not in r.text
    form = c.get(r.headers["location"])
    assert form.status_code == 200 and 'name="token"' in form.text
    assert 'value="/ui/"' in form.text


def test_a_bad_bearer_token_is_a_401_page(app, pages_data):
    r = fresh(app).get(f"/ui/comparisons/{pages_data['comparison']}",
                       headers={"Authorization": "Bearer mlrd_not-a-token"})
    assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
    assert r.headers["www-authenticate"] == "Bearer"
    assert "unknown or revoked token" in r.text and pages_data["project"] not in r.text


def test_any_role_reads_with_the_bearer_header(app, pages_data, make_token):
    for role, runner in (("user", None), ("runner", "node-x"), ("admin", None)):
        r = fresh(app).get(f"/ui/comparisons/{pages_data['comparison']}",
                           headers={"Authorization": f"Bearer {make_token(role, runner)}"})
        assert r.status_code == 200, role
        assert "REGRESSED" in r.text


@pytest.mark.parametrize("path", ["/ui/comparisons/999999", "/ui/alerts/999999",
                                  "/ui/commits/deadbeef", "/ui/projects/no-such-project",
                                  "/ui/comparisons/abc", "/ui/comparisons/0", "/ui/nothing/here",
                                  "/ui/commits/not-hex"])
def test_unknown_ids_are_404_pages(app, pages_data, path):
    r = fresh(app).get(path, headers=pages_data["user"])
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "<h1>404 · Not found</h1>" in r.text


def test_unknown_branch_is_404(app, pages_data):
    r = fresh(app).get(f"/ui/projects/{pages_data['project']}/branches/nope",
                       headers=pages_data["user"])
    assert r.status_code == 404 and "There is no branch &#39;nope&#39;" in r.text


def test_no_page_contains_a_token_or_a_webhook_secret(app, client, pages_data, settings,
                                                      make_token, admin_headers):
    secret = "project-webhook-secret-f00d"
    r = client.put(f"/api/v1/projects/{pages_data['project']}", headers=admin_headers,
                   json={"repo_url": f"/srv/git/{pages_data['project']}.git",
                         "default_branch": "main",
                         "webhook_secret": secret})
    assert r.status_code == 200, r.text
    token = make_token("user")
    c = fresh(app)
    for path in page_paths(pages_data):
        html = c.get(path, headers={"Authorization": f"Bearer {token}"}).text
        assert token not in html and pages_data["user_token"] not in html
        for s in (secret, settings.github_webhook_secret, settings.gitlab_webhook_token,
                  settings.gitea_webhook_secret):
            assert s not in html, path


def test_login_sets_a_session_cookie_that_is_not_the_token(app, pages_data):
    c = fresh(app)
    token = form_token(c)
    bad = c.post("/ui/login", data={"token": "mlrd_wrong", "next": "/ui/", "csrf": token})
    assert bad.status_code == 401 and "unknown or revoked" in bad.text
    path = f"/ui/alerts/{pages_data['alert']}"
    r = c.post("/ui/login", data={"token": pages_data["user_token"], "next": path,
                                  "csrf": token})
    assert r.status_code == 303 and r.headers["location"] == path
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{login.COOKIE}=v1.") and pages_data["user_token"] not in cookie
    for attr in ("HttpOnly", "Path=/ui", "SameSite=strict", "Max-Age=43200"):
        assert attr.lower() in cookie.lower()
    assert "secure" not in cookie.lower()  # no https public URL here
    page = c.get(path)
    assert page.status_code == 200 and "REGRESSED" in page.text
    out = c.post("/ui/logout", data={"csrf": token})
    assert out.status_code == 303 and 'Max-Age=0' in out.headers["set-cookie"]
    c.cookies.clear()
    assert c.get(path).status_code == 404  # a private project's page, signed out


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/api/v1/jobs",
                                    "/ui/\\evil", None])
def test_login_only_returns_to_our_pages(app, pages_data, target):
    c = fresh(app)
    data = {"token": pages_data["user_token"], "csrf": form_token(c)}
    if target is not None:
        data["next"] = target
    r = c.post("/ui/login", data=data)
    assert r.status_code == 303 and r.headers["location"] == "/ui/"


def test_secure_cookie_when_the_public_url_is_https(app, pages_data, public_url):
    before = app.state.settings
    c = fresh(app)
    token = form_token(c)
    app.state.settings = before.model_copy(update={"public_url": public_url})
    try:
        r = c.post("/ui/login", data={"token": pages_data["user_token"], "csrf": token})
        assert "secure" in r.headers["set-cookie"].lower()
    finally:
        app.state.settings = before


def test_tampered_expired_and_revoked_sessions_are_refused(app, pages_data, make_token):
    settings = app.state.settings
    token = make_token("user")
    path = f"/ui/comparisons/{pages_data['comparison']}"
    digest = auth.hash_token(token)
    with app.state.sessionmaker() as s:
        row = token_sql.lookup(s, digest)
        assert row is not None
        good, _ = login.make_cookie(settings, row.id, digest)
        old, _ = login.make_cookie(settings, row.id, digest, now=time.time() - 2 * 86400)
    head, tid, exp, sig = good.split(".")
    forged = f"{head}.{tid}.{int(exp) + 86400 * 365}.{sig}"
    other = f"{head}.{int(tid) - 1}.{exp}.{sig}"
    assert fresh(app, good).get(path).status_code == 200
    for value in (old, forged, other, "v1.x.y.z", "garbage", "v1." + "9" * 300):
        assert fresh(app, value).get(path).status_code == 303, value
    with app.state.sessionmaker() as s:
        assert token_sql.revoke(s, row.id)
        s.commit()
    assert fresh(app, good).get(path).status_code == 303


def test_a_session_secret_changes_every_signature(app, pages_data):
    settings = app.state.settings
    salted = settings.model_copy(update={"ui_session_secret": "s3cret"})
    a, _ = login.make_cookie(settings, 5, "ab" * 32, now=1000.0)
    b, _ = login.make_cookie(salted, 5, "ab" * 32, now=1000.0)
    assert a.rsplit(".", 1)[0] == b.rsplit(".", 1)[0] and a != b


def test_oversized_login_form_is_refused(app):
    r = fresh(app).post("/ui/login", content=b"token=" + b"a" * 10000,
                        headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413 and "too large" in r.text


def test_a_failing_page_is_a_plain_500(app, pages_data, monkeypatch):
    def boom(*_: Any, **__: Any) -> None:
        raise RuntimeError("internal detail 12345")

    monkeypatch.setattr(comparison, "build", boom)
    r = fresh(app).get(f"/ui/comparisons/{pages_data['comparison']}",
                       headers=pages_data["user"])
    assert r.status_code == 500 and r.headers["content-type"].startswith("text/html")
    assert "Traceback" not in r.text and "12345" not in r.text and "RuntimeError" not in r.text
    assert "<h1>500 · Server error</h1>" in r.text


def test_pages_carry_security_headers_and_static_files_are_served(app, pages_data):
    c = fresh(app)
    r = c.get(f"/ui/comparisons/{pages_data['comparison']}", headers=pages_data["user"])
    assert "script-src" not in r.headers["content-security-policy"]
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert r.headers["cache-control"] == "no-store"
    css = c.get("/ui/static/mallard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert c.get("/ui/static/../../config.py").status_code == 404
    assert c.get("/ui/static/nothing.js").status_code == 404


def test_report_and_webhook_link_to_the_pages(app, pages_data, settings, monkeypatch,
                                              public_url):
    d = pages_data
    assert f"page: {public_url}/ui/comparisons/{d['comparison']}" in \
        d["detail"]["report"].splitlines()
    with app.state.sessionmaker() as s:
        alert = alert_sql.get(s, d["alert"])
        assert alert is not None
        monkeypatch.setattr(notify, "get_settings",
                            lambda: settings.model_copy(update={"public_url": public_url}))
        body = notify.payload(alert, "alert.opened", "generic")
        assert body["page_url"] == f"{public_url}/ui/alerts/{d['alert']}"
        slack = notify.payload(alert, "alert.opened", "slack")
        assert f"<{public_url}/ui/alerts/{d['alert']}|alert #{d['alert']}>" in str(slack)
        monkeypatch.setattr(notify, "get_settings", lambda: settings)
        assert notify.payload(alert, "alert.opened", "generic")["page_url"] == \
            f"/ui/alerts/{d['alert']}"
