"""Sharing, against a real API and PostgreSQL: an admin makes a project public (REST and
CLI); its project, branch, commit and alert pages, badges and series images are then
served without a token, with no token, forge setting, runner, comparison or form in them;
a private project's are a 404 without one. Badges and images are parsed as XML, the PNG
decoded by its header; the static export's pages exist and link relatively. The trend
plots grey a broken range and mark a baseline."""

from __future__ import annotations

import json
import re
import struct
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import unquote, urlsplit

from mallard_api.cli import app as cli
from typer.testing import CliRunner

from ui.test_ui_access import fresh

SVG = "{http://www.w3.org/2000/svg}"
PARAMS = json.dumps({"threads": 2, "seed": 42})


def set_public(client: Any, headers: dict[str, str], project: str, public: bool) -> None:
    r = client.put(f"/api/v1/projects/{project}/public", headers=headers,
                   json={"public": public})
    assert r.status_code == 200, r.text
    assert r.json()["public"] is public


def project_paths(d: dict[str, Any]) -> list[str]:
    p = d["project"]
    return [f"/ui/projects/{p}", f"/ui/projects/{p}/branches/main",
            f"/ui/commits/{d['commits'][20]}", f"/ui/alerts/{d['alert']}"]


def image_paths(d: dict[str, Any]) -> list[str]:
    b = f"/ui/projects/{d['project']}/branches/main"
    q = f"workload=larson&measure=ops_per_sec&params={PARAMS}"
    return [f"/ui/projects/{d['project']}/badge.svg", f"{b}/badge.svg?{q}",
            f"{b}/series.svg?{q}", f"{b}/series.png?{q}"]


def test_a_private_projects_pages_and_images_are_404_without_a_token(
        app, client, pages_data, admin_headers, make_token):
    set_public(client, admin_headers, pages_data["project"], False)
    c = fresh(app)
    for path in project_paths(pages_data) + image_paths(pages_data):
        r = c.get(path)
        assert r.status_code == 404, path
        assert "larson" not in r.text and "tune the transfer cache" not in r.text, path
    assert "Sign in" in c.get(project_paths(pages_data)[0]).text
    reader = {"Authorization": f"Bearer {make_token('reader')}"}
    for path in project_paths(pages_data) + image_paths(pages_data):
        assert c.get(path, headers=reader).status_code == 200, path


def test_only_an_admin_makes_a_project_public(client, pages_data, user_headers):
    r = client.put(f"/api/v1/projects/{pages_data['project']}/public", headers=user_headers,
                   json={"public": True})
    assert r.status_code == 403
    r = client.put(f"/api/v1/projects/{pages_data['project']}/public",
                   headers={"Authorization": "Bearer mlrd_nope"}, json={"public": True})
    assert r.status_code == 401
    r = client.put("/api/v1/projects/no-such-project/public",
                   headers={"Authorization": f"Bearer {pages_data['user_token']}"},
                   json={"public": "yes please"})
    assert r.status_code in (403, 422)


def test_a_public_projects_pages_read_without_a_token(app, client, pages_data, admin_headers,
                                                      settings):
    set_public(client, admin_headers, pages_data["project"], True)
    try:
        c = fresh(app)
        for path in project_paths(pages_data):
            r = c.get(path)
            assert r.status_code == 200, path
            html = r.text
            assert "<form" not in html, path  # no triage, baseline or sign-out form
            assert pages_data["user_token"] not in html
            assert pages_data["runner"]["name"] not in html, path
            assert "/ui/comparisons/" not in html and "/ui/bisections/" not in html, path
            for s in (settings.github_webhook_secret, settings.gitlab_webhook_token,
                      settings.gitea_webhook_secret):
                assert s not in html
        assert "larson" in c.get(project_paths(pages_data)[1]).text
        assert "commit 20" in c.get(project_paths(pages_data)[2]).text
        # the overview and the comparisons still need a token
        assert c.get("/ui/").status_code == 303
        assert c.get(f"/ui/comparisons/{pages_data['comparison']}").status_code == 303
    finally:
        set_public(client, admin_headers, pages_data["project"], False)


def _svg(r: Any) -> ET.Element:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(r.content)  # well-formed, or this raises
    assert root.tag == f"{SVG}svg"
    return root


def test_badges_and_series_images(app, client, pages_data, admin_headers, bisect_data):
    set_public(client, admin_headers, pages_data["project"], True)
    set_public(client, admin_headers, bisect_data["project"], True)
    try:
        c = fresh(app)
        verdict, series_badge, series_svg, series_png = image_paths(pages_data)
        badge = _svg(c.get(verdict))
        texts = [t.text for t in badge.iter(f"{SVG}text")]
        assert texts == [pages_data["project"], "no verdict"]  # its commits came by upload
        regressed = _svg(c.get(f"/ui/projects/{bisect_data['project']}/badge.svg"))
        assert [t.text for t in regressed.iter(f"{SVG}text")][1] == "regressed"
        html = c.get(f"/ui/commits/{bisect_data['commits'][7]}").text
        assert "REGRESSED" in html  # the verdict, without its comparison or bisection
        assert "/ui/comparisons/" not in html and "/ui/bisections/" not in html
        value = _svg(c.get(series_badge))
        label, message = (t.text or "" for t in value.iter(f"{SVG}text"))
        assert "larson" in label and "ops_per_sec" in label and re.search(r"\d", message)
        r = c.get(series_svg)
        assert r.headers["cache-control"].startswith("public")
        image = _svg(r)
        points = [e for e in image.iter(f"{SVG}circle") if "pt" in e.get("class", "")]
        assert len(points) == 30
        assert image.find(f"{SVG}style") is not None  # styled without the page's CSS
        png = c.get(series_png)
        assert png.status_code == 200 and png.headers["content-type"] == "image/png"
        assert png.content[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", png.content[16:24])
        assert (width, height) == (2 * int(image.get("width")), 2 * int(image.get("height")))
        assert c.get(series_svg.replace("larson", "nosuch")).status_code == 404
        bad = c.get(series_svg.replace(PARAMS, "[1,2]"))
        assert bad.status_code == 422 and "params" in bad.text
    finally:
        set_public(client, admin_headers, pages_data["project"], False)
        set_public(client, admin_headers, bisect_data["project"], False)


def test_trend_plots_grey_a_broken_range_and_mark_a_baseline(app, client, pages_data,
                                                            user_headers):
    d, base = pages_data, f"/api/v1/projects/{pages_data['project']}/branches/main"
    r = client.post(f"{base}/broken", headers=user_headers,
                    json={"first": d["commits"][4], "last": d["commits"][7],
                          "reason": "a noisy neighbour"})
    assert r.status_code == 200, r.text
    r = client.post(f"{base}/baselines", headers=user_headers,
                    json={"commit": d["commits"][25], "note": "the ring, on purpose"})
    assert r.status_code == 200, r.text
    page = fresh(app).get(f"/ui/projects/{d['project']}/branches/main", headers=user_headers)
    assert page.status_code == 200
    html = page.text
    assert re.search(r'class="broken" data-i0="4" data-i1="7"', html)
    assert re.search(r'class="baseline" data-i="25"', html)
    assert "a noisy neighbour" in html and "the ring, on purpose" in html
    assert html.count('class="mark-') >= 2


def _links(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


def test_the_static_export_links_relatively(client, pages_data, database_url, monkeypatch,
                                            tmp_path, admin_headers):
    monkeypatch.setenv("DATABASE_URL", database_url)
    out = tmp_path / "site"
    res = CliRunner().invoke(cli, ["project", "export", pages_data["project"], "--out",
                                   str(out), "--commits", "60"])
    assert res.exit_code == 0, res.output
    index = out / "index.html"
    branch = next((out / "branches").glob("*-main.html"))
    commits = sorted((out / "commits").glob("*.html"))
    assert index.is_file() and len(commits) == 30 and (out / "static/mallard.css").is_file()
    assert {c.stem for c in commits} == set(pages_data["commits"])
    images = sorted((out / "series").glob("*.svg"))
    assert images and all(ET.parse(i).getroot().tag == f"{SVG}svg" for i in images)
    for page in (index, branch, commits[0]):
        html = page.read_text()
        assert "<form" not in html and pages_data["user_token"] not in html
        for link in _links(html):
            assert not link.startswith("/"), (page, link)  # relative, or absolute elsewhere
            path = urlsplit(link).path
            if not urlsplit(link).scheme and path and link != "#":
                assert (page.parent / unquote(path)).resolve().is_file(), (page, link)
    branch_links = _links(branch.read_text())
    assert f"../commits/{pages_data['commits'][20]}.html" in branch_links
    assert any(link.startswith("../series/") for link in branch_links)
    bad = CliRunner().invoke(cli, ["project", "export", "no-such-project", "--out",
                                   str(tmp_path / "x")])
    assert bad.exit_code == 1 and "no project" in bad.output


def test_the_cli_makes_a_project_public(client, app, pages_data, database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    path = f"/ui/projects/{pages_data['project']}"
    res = CliRunner().invoke(cli, ["project", "public", pages_data["project"]])
    assert res.exit_code == 0 and res.output.strip().endswith("public"), res.output
    assert fresh(app).get(path).status_code == 200
    res = CliRunner().invoke(cli, ["project", "public", pages_data["project"], "--off"])
    assert res.exit_code == 0 and res.output.strip().endswith("private"), res.output
    assert fresh(app).get(path).status_code == 404
    assert CliRunner().invoke(cli, ["project", "public", "no-such"]).exit_code == 1
