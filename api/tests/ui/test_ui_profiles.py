"""The differential-profile section in headless Chromium: the comparison page of a
profiled comparison shows the `why:`, the moved-most table and the flame graph (an SVG
with its frames: the head's graph, the base's with the frame the head no longer runs, the
legend), with no console errors."""

from __future__ import annotations

from typing import Any

from profile_data import profiled_comparison


def test_the_profile_section_renders_in_chromium(browser: Any, live_server: str,
                                                 pages_data: dict[str, Any], client,
                                                 user_headers, make_project, make_runner,
                                                 fast_analysis) -> None:
    project = make_project()
    runner, rheaders = make_runner()
    cid = profiled_comparison(client, user_headers, rheaders, project, runner)["comparison"]
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.goto(f"{live_server}/ui/comparisons/{cid}")
    if "/ui/login" in page.url:
        page.fill("input[name=token]", pages_data["user_token"])
        page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    text = page.inner_text("main") if page.query_selector("main") else page.content()
    assert "Differential profiles" in text
    assert "why: mld_free +312 instructions per call (+540%)" in text
    assert page.locator('svg.flame g.frame[data-side="head"]').count() == 4  # not `gone`
    assert page.locator('svg.flame g.frame[data-side="base"]').count() == 5
    assert page.locator("svg.flame g.frame.gone").count() == 1  # only in the base's graph
    assert page.locator("svg.flame g.legend").count() == 5
    assert "head no longer runs" in (page.text_content("svg.flame") or "")
    box = page.locator("svg.flame").bounding_box()
    assert box is not None and box["width"] > 0 and box["height"] > 0
    assert errors == []
    page.close()
