"""Forms cannot be posted from another site (ui/csrf.py), each as the attack: a forged
login (the login swap: the victim's browser signed in as the attacker) and a forged
logout are refused with a 403 and change nothing. The same attacks from a real browser
are in test_ui_browser.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from mallard_api.ui import csrf, login

from ui.test_ui_access import form_token, fresh

EVIL = "https://evil.example"


def _signed_in(app: Any, pages_data: dict[str, Any]) -> tuple[TestClient, str]:
    """A victim's browser: signed in through the form; its form token."""
    c = fresh(app)
    token = form_token(c)
    r = c.post("/ui/login", data={"token": pages_data["user_token"], "csrf": token})
    assert r.status_code == 303
    return c, token


WHY = {"origin": ("another site", "opaque origin"), "csrf": ("token is missing or stale",)}


def _refused(r: Any, why: str) -> None:
    """A 403 page saying why, and no session cookie set or cleared."""
    assert r.status_code == 403 and r.headers["content-type"].startswith("text/html")
    assert "set-cookie" not in r.headers or login.COOKIE not in r.headers["set-cookie"]
    assert any(text in r.text for text in WHY[why]), r.text


@pytest.mark.parametrize("headers", [{"Origin": EVIL}, {"Origin": "null"},
                                     {"Referer": f"{EVIL}/prize.html"},
                                     {"Origin": "http://testserver.evil.example"}])
def test_a_cross_site_login_is_refused_even_with_a_valid_token(app, pages_data, make_token,
                                                               headers):
    """The attacker's page posts its own token to the victim's browser's /ui/login."""
    victim, form = _signed_in(app, pages_data)
    attacker_token = make_token("user")
    r = victim.post("/ui/login", data={"token": attacker_token, "csrf": form}, headers=headers)
    _refused(r, "origin")
    assert victim.get(f"/ui/alerts/{pages_data['alert']}").status_code == 200  # still theirs


def test_a_login_without_the_form_token_is_refused(app, pages_data, make_token):
    """No Origin (not a browser, or one that hides it): the token alone decides. A
    cross-site form cannot read the cookie, nor have it sent (SameSite=Strict)."""
    attacker = make_token("user")
    for data, cookie in (({"token": attacker}, None),  # no field, no cookie
                         ({"token": attacker, "csrf": "a" * 43}, None),  # a guessed field
                         ({"token": attacker, "csrf": "a" * 43}, "b" * 43),  # not the cookie
                         ({"token": attacker}, "b" * 43)):  # a cookie, no field
        c = fresh(app)
        if cookie is not None:
            c.cookies.set(csrf.COOKIE, cookie)
        r = c.post("/ui/login", data=data)
        _refused(r, "csrf")


def test_a_cross_site_logout_is_refused(app, pages_data):
    victim, form = _signed_in(app, pages_data)
    for data, headers in (({"csrf": form}, {"Origin": EVIL}), ({}, {}),
                          ({"csrf": "x" * 43}, {})):
        r = victim.post("/ui/logout", data=data, headers=headers)
        _refused(r, "origin" if headers else "csrf")
    assert victim.get(f"/ui/alerts/{pages_data['alert']}").status_code == 200
    r = victim.post("/ui/logout", data={"csrf": form}, headers={"Origin": "http://testserver"})
    assert r.status_code == 303 and "Max-Age=0" in r.headers["set-cookie"]


def test_a_same_origin_post_passes(app, pages_data):
    c = fresh(app)
    token = form_token(c)
    for headers in ({"Origin": "http://testserver"}, {"Referer": "http://testserver/ui/login"},
                    {}):
        r = c.post("/ui/login", data={"token": pages_data["user_token"], "csrf": token},
                   headers=headers)
        assert r.status_code == 303, headers


def test_with_a_public_url_the_origin_is_the_public_one(app, pages_data, public_url):
    before = app.state.settings
    c = fresh(app)
    token = form_token(c)
    app.state.settings = before.model_copy(update={"public_url": public_url})
    try:
        data = {"token": pages_data["user_token"], "csrf": token}
        assert c.post("/ui/login", data=data, headers={"Origin": public_url}
                      ).status_code == 303
        # the Host the request names does not make an origin ours
        r = c.post("/ui/login", data=data, headers={"Origin": "http://testserver"})
        assert r.status_code == 403
        r = c.post("/ui/login", data=data, headers={"Origin": EVIL, "Host": "evil.example"})
        assert r.status_code == 403
    finally:
        app.state.settings = before


def test_the_form_token_cookie(app):
    c = fresh(app)
    r = c.get("/ui/login")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{csrf.COOKIE}=")
    for attr in ("HttpOnly", "Path=/ui", "SameSite=strict"):
        assert attr.lower() in cookie.lower()
    again = c.get("/ui/login")  # kept: one per browser, not one per page
    assert "set-cookie" not in again.headers
    assert form_token(c) == c.cookies.get(csrf.COOKIE)
