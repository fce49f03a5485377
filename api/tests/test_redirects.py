"""Redirects never point at the host a request named (redirects.py): the review's
`GET /api/v1/projects/` with `Host: evil.example` was sent to http://evil.example/..."""

from __future__ import annotations

import raw_http
from fastapi.testclient import TestClient
from mallard_api.main import create_app
from mallard_api.redirects import public_location


def test_the_trailing_slash_redirect_ignores_the_host_header(client, user_headers):
    for host in ("evil.example", "evil.example:8443", "127.0.0.1@evil.example"):
        r = client.get("/api/v1/projects/?limit=5", headers={**user_headers, "Host": host},
                       follow_redirects=False)
        assert r.status_code in (307, 308)
        assert r.headers["location"] == "/api/v1/projects?limit=5", host


def test_with_a_public_url_redirects_go_there(settings, user_headers):
    app = create_app(settings.model_copy(update={"public_url": "https://mallard.example.org/m"}))
    try:
        c = TestClient(app, follow_redirects=False)  # no lifespan: no background loops
        r = c.get("/api/v1/projects/", headers={**user_headers, "Host": "evil.example"})
        assert r.headers["location"] == "https://mallard.example.org/m/api/v1/projects"
    finally:
        app.state.engine.dispose()


def test_over_a_real_socket(live_server, user_headers):
    sock = raw_http.start(live_server, "GET", "/api/v1/projects/",
                          {**user_headers, "Host": "evil.example", "Connection": "close"})
    try:
        answer = raw_http.read_answer(sock)
        assert answer.status in (307, 308) and answer.headers["location"] == "/api/v1/projects"
    finally:
        sock.close()


def test_public_location():
    assert public_location("/ui/x?a=1", None) == "/ui/x?a=1"  # a path stays
    assert public_location("http://evil.example/a/b?q=1", None) == "/a/b?q=1"
    assert public_location("//evil.example/a", None) == "/a"
    assert public_location("https://evil.example", "https://m.example") == "https://m.example/"
