"""The SVG writer: well-formed documents whose marks sit where their numbers say."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest
from mallard_api.ui import fmt, svg, trend

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(markup: str) -> ET.Element:
    root = ET.fromstring(str(markup))  # raises on anything not well-formed
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def test_nice_ticks_cover_the_range_with_round_steps():
    assert svg.nice_ticks(0, 1, 5) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.nice_ticks(943_000, 1_012_000, 4) == [960_000, 980_000, 1_000_000]
    assert svg.nice_ticks(3, 3) == [3]


def test_tick_labels_get_digits_until_distinct():
    ticks = [12_582_000.0, 12_584_000.0, 12_586_000.0]
    labels = svg.tick_labels(ticks, lambda t, d: fmt.value(t, "max_rss_bytes", "bytes", d))
    assert len(set(labels)) == 3 and all(lab.endswith("MiB") for lab in labels)


def test_strip_plot_places_every_trial_on_the_scale():
    base = [100.0, 102.0, 98.0, 101.0, 99.0]
    head = [110.0, 111.0, 109.0, 112.0, 108.0]
    band = svg.Band(1, 100.0 * 1.08, 100.0 * 1.12, "interval")
    root = parse(svg.strip_plot(
        [svg.StripRow("base", base, None, 100.0, "base"),
         svg.StripRow("head", head, None, 110.0, "head")],
        measure="ops_per_sec", band=band, reference=100.0, width=400))
    circles = root.findall(".//s:circle", NS)
    assert len(circles) == 10
    xs = {float(c.get("data-v")): float(c.get("cx")) for c in circles}
    # a linear scale: equal steps in value are equal steps in x, and order is kept
    step = xs[99.0] - xs[98.0]
    assert step > 0
    for v, x in xs.items():
        assert x == pytest.approx(xs[98.0] + (v - 98.0) * step, abs=0.1)
    # the rows: base above head
    ys = {c.get("class"): float(c.get("cy")) for c in circles}
    assert ys["dot base"] < ys["dot head"]
    rect = root.find(".//s:rect[@class='band']", NS)
    assert rect is not None
    assert float(rect.get("x")) == pytest.approx(xs[98.0] + (108.0 - 98.0) * step, abs=0.1)
    assert float(rect.get("width")) == pytest.approx(4.0 * step, abs=0.1)
    ref = root.find(".//s:line[@class='ref']", NS)
    assert float(ref.get("x1")) == pytest.approx(xs[100.0], abs=0.1)
    medians = root.findall(".//s:line[@data-v]", NS)
    assert {float(m.get("data-v")) for m in medians} == {100.0, 110.0}


def test_an_outlier_beyond_the_axis_is_drawn_at_the_edge_with_its_value():
    values = [100.0, 101.0, 99.0, 100.5, 99.5, 50.0]
    robust = [True] * 5 + [False]
    root = parse(svg.strip_plot([svg.StripRow("base", values, robust, 100.0, "base")],
                                measure="ops_per_sec", width=400))
    clipped = root.findall(".//s:circle[@class='dot base outlier clipped']", NS)
    assert [float(c.get("data-v")) for c in clipped] == [50.0]
    inside = [float(c.get("cx")) for c in root.findall(".//s:circle", NS)
              if "clipped" not in c.get("class")]
    assert float(clipped[0].get("cx")) < min(inside)
    assert "50.0" in clipped[0].find("s:title", NS).text and "outlier" in \
        clipped[0].find("s:title", NS).text


def test_trend_plot_points_links_and_markers():
    pts = [trend.TrendPoint(i, 10.0 + i, 9.5 + i, 10.5 + i, f"c{i}", f"/ui/commits/c{i}")
           for i in range(5)]
    axis = trend.TrendAxis([f"c{i}" for i in range(5)])
    markers = [trend.Marker(3, "change", "-8.0%"), trend.Marker(3, "alert", href="/ui/alerts/7")]
    root = parse(svg.trend_plot([trend.TrendSeries("default", pts)], axis,
                                measure="ops_per_sec", markers=markers,
                                levels=[trend.Level(0, 2, 11.0)], width=400, height=150))
    dots = root.findall(".//s:a/s:circle", NS)
    assert len(dots) == 5
    links = [a.get("href") for a in root.findall(".//s:a", NS)]
    assert links[:1] == ["/ui/alerts/7"] and links[1:] == [f"/ui/commits/c{i}" for i in range(5)]
    xs = [float(d.get("cx")) for d in dots]
    ys = [float(d.get("cy")) for d in dots]
    assert all(b - a == pytest.approx(xs[1] - xs[0], abs=0.1) for a, b in itertools.pairwise(xs))
    assert all(b < a for a, b in itertools.pairwise(ys))  # higher medians drawn higher up
    dy = (ys[0] - ys[1])  # pixels per unit
    level = root.find(".//s:line[@class='level']", NS)
    assert float(level.get("y1")) == pytest.approx(ys[0] - dy * 1.0, abs=0.1)
    change = root.find(".//s:line[@class='changepoint']", NS)
    assert float(change.get("x1")) == pytest.approx((xs[2] + xs[3]) / 2, abs=0.1)
    assert root.find(".//s:path[@class='alertmark']", NS).get("data-i") == "3"


def test_text_is_escaped():
    root = parse(svg.strip_plot([svg.StripRow("<b>&", [1.0, 2.0])], measure="x",
                                label='a "quoted" <label>'))
    assert root.find("s:title", NS).text == 'a "quoted" <label>'
    assert root.find(".//s:text[@class='rowlabel']", NS).text == "<b>&"


def test_ratio_bars_lengths_follow_the_ratios():
    root = parse(svg.ratio_bars([("jemalloc", 1.3), ("head", 1.0), ("base", 0.5)],
                                reference="glibc"))
    widths = {r.get("data-v"): float(r.get("width")) for r in root.findall(".//s:rect", NS)}
    assert widths["1.3"] == pytest.approx(2.6 * widths["0.5"], abs=0.1)
    assert widths["1.0"] == pytest.approx(2.0 * widths["0.5"], abs=0.1)


@pytest.mark.parametrize("v,measure,unit,text", [
    (1_234_567.0, "ops_per_sec", "ops/s", "1.23M"),
    (10_485_760.0, "max_rss_bytes", "bytes", "10.0 MiB"),
    (0.412, "wall_seconds", "s", "412 ms"),
    (0.9876, "transfer_insert_hit_ratio", "ratio", "0.988"),
    (139_000_000.0, "instructions", "count", "139M"),
    (None, "ops_per_sec", "", "n/a"),
])
def test_values_read_like_an_engineer_writes_them(v, measure, unit, text):
    assert fmt.value(v, measure, unit) == text

