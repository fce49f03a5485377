"""The comparison page's memory-over-time and latency-tail figures (ui/timelines.py), from
trials that recorded them (pages_data: larson threads=2, base and head)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from fastapi.testclient import TestClient
from mallard_api.ui import timelines
from mallard_wire.timelines import LatencyHistogram, MemoryTimeline, percentile

from ui.conftest import recorded

NS = {"s": "http://www.w3.org/2000/svg"}


def _svgs(html: str, section: str) -> list[ET.Element]:
    start = html.index(f'id="{section}"')
    block = html[start:html.index("</div>", start)]
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", block, re.S)]


def test_the_page_draws_memory_and_latency_of_the_cells_that_recorded_them(app, pages_data):
    r = TestClient(app).get(f"/ui/comparisons/{pages_data['comparison']}",
                            headers=pages_data["user"])
    assert r.status_code == 200
    assert r.text.count("-timelines\"") == 1  # threads=2 only: threads=1 recorded nothing
    anchor = re.search(r'id="(w\d+)-timelines"', r.text)
    assert anchor is not None
    memory, malloc, free = _svgs(r.text, f"{anchor.group(1)}-timelines")
    lines = memory.findall("s:polyline", NS)
    assert [ln.get("data-side") for ln in lines].count("base") == 12
    assert [ln.get("data-side") for ln in lines].count("head") == 12
    assert {ln.get("data-v") for ln in lines} == {str(20 * 512 * 1024)}  # every peak
    assert all(len(ln.get("points", "").split()) == 40 for ln in lines)
    for plot in (malloc, free):
        quantiles = plot.findall("s:line[@class]", NS)
        marks = {(q.get("data-side"), q.findtext("s:title", "", NS).split()[2])
                 for q in quantiles if "quantile" in (q.get("class") or "")}
        assert marks == {("base", "p99:"), ("base", "p99.9:"), ("head", "p99:"),
                         ("head", "p99.9:")}


def test_the_latency_plot_marks_each_sides_percentiles_where_the_histogram_puts_them():
    sides = {side: [LatencyHistogram.model_validate(recorded(side)["latency"])] * 3
             for side in ("base", "head")}
    svg = ET.fromstring(str(timelines.latency_plot(sides, "malloc", "t")))
    marks = {(q.get("data-side"), q.findtext("s:title", "", NS).split()[2]): float(
        q.get("data-v", "nan")) for q in svg.findall("s:line", NS)
        if "quantile" in (q.get("class") or "")}
    for side in ("base", "head"):
        buckets = timelines.summed(sides[side], "malloc")
        assert marks[(side, "p99.9:")] == percentile(buckets, 0.999)
    assert marks[("head", "p99:")] > 100 * marks[("base", "p99:")]  # the heavier tail
    bars = svg.findall("s:rect", NS)
    assert {b.get("class") for b in bars} == {"hist s0", "hist s1"}
    assert sum(int(b.get("data-v", 0)) for b in bars) == 3 * (2 * (5000 + 3000 + 40) + 10 + 100)


def test_the_memory_plot_keeps_a_line_per_trial_and_its_time_axis():
    t = MemoryTimeline(interval_ms=20.0, rss_bytes=[1 << 20, 4 << 20, 1 << 20])
    svg = ET.fromstring(str(timelines.memory_plot({"base": [t], "head": [t, t]}, "m")))
    assert len(svg.findall("s:polyline", NS)) == 3
    ticks = [e.text for e in svg.findall("s:text", NS)]
    assert "seconds since start" in ticks and "4.00 MiB" in ticks and "60 ms" in ticks
